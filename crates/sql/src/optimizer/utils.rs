//! What several of Floe's rules share: walking and rewriting physical plans, finding file
//! scans and their dynamic filters, evaluating filter conditions on the rows still selected,
//! a logical scan's statistics, and a plan node over a stream already started
//! ([`StreamSource`]).

use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::buffer::{BooleanBuffer, MutableBuffer};
use datafusion::arrow::datatypes::Schema;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue, Statistics, internal_err};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{ColumnarValue, TableScan};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{Column, DynamicFilterPhysicalExpr};
use datafusion::physical_expr::utils::{collect_columns, split_conjunction};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;

/// `plan` with `f` applied to each of its children (by position); `plan` itself when no child
/// changed.
pub(crate) fn map_children(
    plan: Arc<dyn ExecutionPlan>,
    mut f: impl FnMut(usize, Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let children: Vec<Arc<dyn ExecutionPlan>> = plan.children().into_iter().cloned().collect();
    let mut changed = false;
    let mut rewritten = Vec::with_capacity(children.len());
    for (i, child) in children.into_iter().enumerate() {
        let new = f(i, child.clone())?;
        changed |= !Arc::ptr_eq(&new, &child);
        rewritten.push(new);
    }
    if changed {
        plan.with_new_children(rewritten)
    } else {
        Ok(plan)
    }
}

/// A filter predicate's replacement, if any, given the predicate and the filter's input
/// schema.
pub(crate) type PredicateRewrite =
    dyn Fn(&Arc<dyn PhysicalExpr>, &Schema) -> Result<Option<Arc<dyn PhysicalExpr>>>;

/// `plan` with each filter's predicate replaced by what `replace` makes of it, where it makes
/// something.
pub(crate) fn map_filter_predicates(
    plan: Arc<dyn ExecutionPlan>,
    replace: &PredicateRewrite,
) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = map_children(plan, |_, child| map_filter_predicates(child, replace))?;
    let Some(filter) = plan.downcast_ref::<FilterExec>() else {
        return Ok(plan);
    };
    match replace(filter.predicate(), &filter.input().schema())? {
        Some(predicate) => Ok(Arc::new(
            FilterExecBuilder::from(filter)
                .with_predicate(predicate)
                .build()?,
        )),
        None => Ok(plan),
    }
}

/// `rewritten` when every node of it still gets from its children the orderings and the
/// distribution it requires, `original` otherwise. DataFusion derives constants, equalities and
/// orderings from filter predicates and projection expressions; an opaque replacement hides
/// them, and a plan built on them (a sort key fixed by `k = 1`, merged by the next key; an order
/// carried through `price + 1`) would no longer hold — DataFusion's own `SanityCheckPlan` says
/// whether it does.
pub(crate) fn still_valid(
    original: Arc<dyn ExecutionPlan>,
    rewritten: Arc<dyn ExecutionPlan>,
    config: &datafusion::common::config::ConfigOptions,
) -> Arc<dyn ExecutionPlan> {
    use datafusion::physical_optimizer::PhysicalOptimizerRule;
    use datafusion::physical_optimizer::sanity_checker::SanityCheckPlan;
    match SanityCheckPlan::new().optimize(rewritten.clone(), config) {
        Ok(_) => rewritten,
        Err(e) => {
            tracing::debug!(error = %e, "a rewrite that would lose an ordering is not taken");
            original
        }
    }
}

/// The file scan configuration of a `DataSourceExec` over files.
pub(crate) fn file_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    plan.downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref::<FileScanConfig>()
}

/// The dynamic filters among a scan predicate's conjuncts.
pub(crate) fn dynamic_filters(
    predicate: &Arc<dyn PhysicalExpr>,
) -> impl Iterator<Item = (&Arc<dyn PhysicalExpr>, &DynamicFilterPhysicalExpr)> {
    split_conjunction(predicate)
        .into_iter()
        .filter_map(|e| Some((e, e.downcast_ref::<DynamicFilterPhysicalExpr>()?)))
}

/// `exprs` re-addressed to a batch of only the columns they read, and those columns'
/// positions (ascending) in the batch the expressions were planned over.
pub(crate) fn compacted(
    exprs: &[&Arc<dyn PhysicalExpr>],
) -> (Vec<Arc<dyn PhysicalExpr>>, Vec<usize>) {
    let mut columns: Vec<usize> = exprs
        .iter()
        .flat_map(|expr| collect_columns(expr))
        .map(|column| column.index())
        .collect();
    columns.sort_unstable();
    columns.dedup();
    let compact = exprs
        .iter()
        .map(|expr| {
            (*expr)
                .clone()
                .transform_up(|e| {
                    let Some(column) = e.downcast_ref::<Column>() else {
                        return Ok(Transformed::no(e));
                    };
                    let at = columns
                        .binary_search(&column.index())
                        .expect("every column was collected");
                    Ok(Transformed::yes(
                        Arc::new(Column::new(column.name(), at)) as Arc<dyn PhysicalExpr>
                    ))
                })
                .expect("re-addressing columns cannot fail")
                .data
        })
        .collect();
    (compact, columns)
}

/// A filter condition's answer as the rows it keeps (null counts as not kept).
pub(crate) fn kept(value: ColumnarValue, rows: usize) -> Result<Kept> {
    Ok(match value {
        ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))) => Kept::All,
        ColumnarValue::Scalar(ScalarValue::Boolean(_)) => Kept::None,
        ColumnarValue::Scalar(other) => {
            return internal_err!("a filter condition gave {other:?}, not a boolean");
        }
        ColumnarValue::Array(array) => {
            if array.len() != rows {
                return internal_err!("a filter condition gave {} rows for {rows}", array.len());
            }
            let booleans = array.as_boolean();
            match booleans.nulls() {
                Some(nulls) => Kept::Some(booleans.values() & nulls.inner()),
                None => Kept::Some(booleans.values().clone()),
            }
        }
    })
}

pub(crate) enum Kept {
    All,
    None,
    Some(BooleanBuffer),
}

impl Kept {
    /// Whether the `i`-th row is kept.
    pub(crate) fn keeps(&self, i: usize) -> bool {
        match self {
            Kept::All => true,
            Kept::None => false,
            Kept::Some(bits) => bits.value(i),
        }
    }
}

/// A bitmap of `len` bits with exactly the bits at `positions` set.
pub(crate) fn bitmap(positions: impl Iterator<Item = usize>, len: usize) -> BooleanBuffer {
    let mut bits = MutableBuffer::from_len_zeroed(len.div_ceil(8));
    let out = bits.as_slice_mut();
    for position in positions {
        out[position / 8] |= 1 << (position % 8);
    }
    BooleanBuffer::new(bits.into(), 0, len)
}

/// The statistics of the table `scan` reads, as its provider gives them, and the table column
/// each of the scan's output columns is.
pub(crate) fn scan_statistics(scan: &TableScan) -> Option<(Statistics, Vec<usize>)> {
    let statistics = source_as_provider(&scan.source).ok()?.statistics()?;
    let indices = match &scan.projection {
        Some(projection) => projection.clone(),
        None => (0..scan.source.schema().fields().len()).collect(),
    };
    Some((statistics, indices))
}

/// A partition's input that a node has started reading, handed on whole to a plan that runs
/// in its place: `first`, the batch already read, then the rest of the stream. Executed
/// once (any partition number); a second read is an internal error.
pub(crate) struct StreamSource {
    stream: Mutex<Option<SendableRecordBatchStream>>,
    properties: Arc<PlanProperties>,
}

impl StreamSource {
    pub(crate) fn resuming(
        first: RecordBatch,
        rest: SendableRecordBatchStream,
        properties: Arc<PlanProperties>,
    ) -> Self {
        let schema = rest.schema();
        let rows = futures::stream::once(async { Ok(first) }).chain(rest);
        Self {
            stream: Mutex::new(Some(Box::pin(RecordBatchStreamAdapter::new(schema, rows)))),
            properties,
        }
    }
}

impl fmt::Debug for StreamSource {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("StreamSource")
    }
}

impl DisplayAs for StreamSource {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "StreamSource")
    }
}

impl ExecutionPlan for StreamSource {
    fn name(&self) -> &str {
        "StreamSource"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let taken = match self.stream.lock() {
            Ok(mut slot) => slot.take(),
            Err(_) => return internal_err!("a stream source's lock was poisoned"),
        };
        match taken {
            Some(stream) => Ok(stream),
            None => internal_err!("a partition's remaining input is read once"),
        }
    }
}
