//! Runtime filters applied to rows, not only to row groups.
//!
//! DataFusion's joins, top-k sorts and aggregates publish *dynamic filters* while they run (a
//! hash join's build-side keys, say) and push them into the Parquet scans below them. With
//! Parquet filter pushdown off (it slows most TPC-H queries down, as it decodes filter columns
//! twice), a scan only prunes row groups and pages with them, so every row of a surviving row
//! group still flows into the joins and aggregations above. This rule puts a filter right
//! above each such scan that evaluates the scan's dynamic filters on its batches: a supplier
//! scan under a nation join then hands the join only that nation's suppliers, and the
//! aggregation of a correlated subquery sees only the keys its outer join can match.
//!
//! A join's own filter is not applied to a scan that feeds the join's probe side directly
//! (through filters, projections and repartitioning only): there it would repeat the probe.
//! Only when other runtime filters apply to that scan too does it go first (it is usually the
//! most selective, and the others then see fewer rows). Filters are applied where they save
//! work: under an aggregation (a decorrelated subquery), under another join, or on the build
//! side of a join below. Each filter is its own operator, in that order.
//!
//! A dynamic filter reads `true` until its producer has finished, so the filter passes rows
//! unchanged while it is not known yet; rows it removes could never have reached the result.
//! What is evaluated is a cheaper, weaker form of the filter: a partitioned join routes each
//! row by the hash of its key to one partition's key set (`CASE hash % n WHEN 0 THEN … END`);
//! here a row passes when any partition's set may hold its key, which spares hashing every
//! row. A filter that lets nearly every row through stops being evaluated until its producer
//! publishes a new version.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CaseExpr, Column, DynamicFilterPhysicalExpr, Literal,
};
use datafusion::physical_expr::utils::split_conjunction;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;

/// Filters rows of file scans by the dynamic filters pushed into them.
#[derive(Debug, Default)]
pub struct ApplyRuntimeFilters;

impl PhysicalOptimizerRule for ApplyRuntimeFilters {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        rewrite(plan, None)
    }

    fn name(&self) -> &str {
        "floe_apply_runtime_filters"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Operators that hand their input's rows on without combining them: a scan below only these
/// feeds the join above them directly.
fn passes_rows_on(plan: &dyn ExecutionPlan) -> bool {
    matches!(
        plan.name(),
        "FilterExec"
            | "RepartitionExec"
            | "CoalesceBatchesExec"
            | "CoalescePartitionsExec"
            | "ProjectionExec"
            | "CooperativeExec"
    )
}

/// Adds runtime filters under `plan`. `feeding` is the dynamic filter of the hash join whose
/// probe side `plan` feeds directly: evaluating that one on a scan's rows would only repeat the
/// join's own probe, so it is left to the join. Filters published by joins further up, by
/// aggregations or top-k sorts are applied.
fn rewrite(plan: Arc<dyn ExecutionPlan>, feeding: Option<u64>) -> Result<Arc<dyn ExecutionPlan>> {
    // Above a scan's own filter, so the cheap static predicate thins the rows first.
    if let Some(filter) = plan.downcast_ref::<FilterExec>() {
        let runtime = runtime_filters(filter.input(), feeding, &plan.schema());
        if !runtime.is_empty() {
            return filtered(plan, runtime);
        }
    }
    if plan.downcast_ref::<DataSourceExec>().is_some() {
        let runtime = runtime_filters(&plan, feeding, &plan.schema());
        return filtered(plan, runtime);
    }
    let count = plan.children().len();
    let feeds: Vec<Option<u64>> = if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let own = join.dynamic_filter_expr().and_then(|f| f.expression_id());
        vec![None, own]
    } else if passes_rows_on(plan.as_ref()) {
        vec![feeding; count]
    } else {
        vec![None; count]
    };
    map_children(plan, |i, child| rewrite(child, feeds[i]))
}

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

/// `plan` under one filter per runtime filter, the first of `filters` evaluated first.
fn filtered(
    mut plan: Arc<dyn ExecutionPlan>,
    filters: Vec<Arc<dyn PhysicalExpr>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    for filter in filters {
        let runtime = Arc::new(RuntimeFilter::new(filter));
        plan = Arc::new(FilterExec::try_new(runtime, plan)?);
    }
    Ok(plan)
}

/// The dynamic filters pushed into a file scan `node` that are worth evaluating on its rows,
/// over the columns of `output` (the scan's or the filter's above it). The filter of the join
/// the scan `feeding` goes first when there are others (it is usually the most selective,
/// and the others then see fewer rows) and is left out when alone.
fn runtime_filters(
    node: &Arc<dyn ExecutionPlan>,
    feeding: Option<u64>,
    output: &SchemaRef,
) -> Vec<Arc<dyn PhysicalExpr>> {
    let Some(config) = file_scan(node) else {
        return Vec::new();
    };
    // Rows a filter removes above a scan that stops after `limit` rows would not be made up.
    if config.limit.is_some() {
        return Vec::new();
    }
    let Some(predicate) = config.file_source().filter() else {
        return Vec::new();
    };
    let table = config.file_source().table_schema().table_schema();
    let mut dynamic: Vec<(bool, Arc<dyn PhysicalExpr>)> = dynamic_filters(&predicate)
        .filter_map(|(e, filter)| {
            let id = filter.expression_id();
            let is_feeding = feeding.is_some() && id == feeding;
            // The scan's predicate addresses the table's columns; the filter sits above the
            // projection. A column not in `output` leaves that filter out.
            let mut complete = true;
            let remapped = e
                .clone()
                .transform_up(|expr| {
                    let Some(column) = expr.downcast_ref::<Column>() else {
                        return Ok(Transformed::no(expr));
                    };
                    let Some(field) = table.fields().get(column.index()) else {
                        complete = false;
                        return Ok(Transformed::no(expr));
                    };
                    match output.index_of(field.name()) {
                        Ok(at) if output.field(at).data_type() == field.data_type() => {
                            Ok(Transformed::yes(Arc::new(Column::new(field.name(), at))))
                        }
                        _ => {
                            complete = false;
                            Ok(Transformed::no(expr))
                        }
                    }
                })
                .ok()?
                .data;
            complete.then_some((is_feeding, remapped))
        })
        .collect();
    if dynamic.iter().all(|(is_feeding, _)| *is_feeding) {
        return Vec::new();
    }
    dynamic.sort_by_key(|(is_feeding, _)| !is_feeding);
    dynamic.into_iter().map(|(_, f)| f).collect()
}

/// Whether `expr` is a runtime filter this rule added.
pub(crate) fn is_runtime_filter(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<RuntimeFilter>().is_some()
}

/// Rows seen before a filter's pass rate is judged.
const JUDGED_AFTER_ROWS: usize = 65_536;
/// A filter passing more than this share of rows is not worth evaluating.
const USELESS_PASS_RATE: f64 = 0.8;

/// A dynamic filter evaluated in its weakened form, and switched off while it filters little.
#[derive(Debug)]
struct RuntimeFilter {
    dynamic: Arc<dyn PhysicalExpr>,
    state: Mutex<FilterState>,
}

#[derive(Debug, Default)]
struct FilterState {
    /// The version of the dynamic filter `expr` was made from.
    generation: u64,
    expr: Option<Arc<dyn PhysicalExpr>>,
    seen: usize,
    passed: usize,
    off: bool,
}

impl RuntimeFilter {
    fn new(dynamic: Arc<dyn PhysicalExpr>) -> Self {
        Self {
            dynamic,
            state: Mutex::default(),
        }
    }

    /// The expression to evaluate now, or `None` while the filter is switched off.
    fn current(&self) -> Result<(u64, Option<Arc<dyn PhysicalExpr>>)> {
        let generation = self.dynamic.snapshot_generation();
        let mut state = self.state.lock().expect("runtime filter lock");
        if state.expr.is_none() || state.generation != generation {
            let current = self
                .dynamic
                .snapshot()?
                .unwrap_or_else(|| self.dynamic.clone());
            *state = FilterState {
                generation,
                expr: Some(weaken(current)),
                ..FilterState::default()
            };
        }
        Ok((
            generation,
            (!state.off).then(|| state.expr.clone()).flatten(),
        ))
    }

    fn judge(&self, generation: u64, seen: usize, passed: usize) {
        let mut state = self.state.lock().expect("runtime filter lock");
        if state.generation != generation {
            return;
        }
        state.seen += seen;
        state.passed += passed;
        if state.seen >= JUDGED_AFTER_ROWS
            && state.passed as f64 > state.seen as f64 * USELESS_PASS_RATE
        {
            state.off = true;
        }
    }
}

/// A boolean expression that holds wherever `expr` holds: boolean `CASE`s in positive
/// position (the top, or under `AND` and `OR`) become the `OR` of their outcomes.
fn weaken(expr: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
    if let Some(binary) = expr.downcast_ref::<BinaryExpr>()
        && matches!(binary.op(), Operator::And | Operator::Or)
    {
        return Arc::new(BinaryExpr::new(
            weaken(binary.left().clone()),
            *binary.op(),
            weaken(binary.right().clone()),
        ));
    }
    if let Some(case) = expr.downcast_ref::<CaseExpr>() {
        let is_false = |e: &Arc<dyn PhysicalExpr>| {
            e.downcast_ref::<Literal>()
                .is_some_and(|l| matches!(l.value(), ScalarValue::Boolean(Some(false) | None)))
        };
        let outcomes = case
            .when_then_expr()
            .iter()
            .map(|(_, then)| then)
            .chain(case.else_expr())
            .filter(|e| !is_false(e))
            .map(|e| weaken(e.clone()))
            .reduce(|a, b| Arc::new(BinaryExpr::new(a, Operator::Or, b)));
        return outcomes
            .unwrap_or_else(|| Arc::new(Literal::new(ScalarValue::Boolean(Some(false)))));
    }
    expr
}

impl PhysicalExpr for RuntimeFilter {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.dynamic.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let (generation, expr) = self.current()?;
        let Some(expr) = expr else {
            return Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))));
        };
        let result = expr.evaluate(batch)?;
        if let ColumnarValue::Array(array) = &result {
            self.judge(
                generation,
                batch.num_rows(),
                array.as_boolean().true_count(),
            );
        }
        Ok(result)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.dynamic]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(RuntimeFilter::new(children.remove(0))))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "runtime_filter(")?;
        self.dynamic.fmt_sql(f)?;
        write!(f, ")")
    }
}

impl fmt::Display for RuntimeFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RuntimeFilter({})", self.dynamic)
    }
}

impl PartialEq for RuntimeFilter {
    fn eq(&self, other: &Self) -> bool {
        self.dynamic.as_ref() == other.dynamic.as_ref()
    }
}

impl Eq for RuntimeFilter {}

impl Hash for RuntimeFilter {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.dynamic.hash(state);
    }
}
