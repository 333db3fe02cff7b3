//! String and binary views compacted before a merge of sorted partitions
//! (`FLOE_SQL_COMPACT_VIEWS`).
//!
//! A sort's output is built by picking rows out of many input batches; for string and binary
//! views Arrow does not copy the bytes but points at the input batches' buffers, so each
//! output batch keeps alive — and DataFusion's memory accounting charges it for — every
//! buffer any of its rows came from. A `SortPreservingMergeExec` holding a batch of each
//! sorted partition was charged several times the bytes it held: sorting 80 MB of 64-byte
//! strings under a 64 MiB budget in two partitions failed in the final merge ("Failed to
//! allocate additional 5.8 MB for SortPreservingMergeExec[0] with 9.0 MB already allocated")
//! although the sorts themselves had spilled as they should.
//!
//! [`CompactViews`] puts a [`CompactViewsExec`] under every `SortPreservingMergeExec` whose
//! input has string or binary view columns. Each batch's view columns whose buffers are more
//! than twice the bytes their rows use are compacted (Arrow's `gc`: the bytes copied into
//! buffers of their own); other batches pass untouched.
//!
//! Why the answer cannot change: `gc` keeps every value, and the node hands on each batch in
//! order, partition by partition, with its input's schema, partitioning and ordering. It is
//! left out of distributed plans (its node does not travel to workers).

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, GenericByteViewArray, RecordBatch, RecordBatchOptions,
};
use datafusion::arrow::datatypes::{ByteViewType, DataType};
use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct CompactViews;

fn has_views(plan: &dyn ExecutionPlan) -> bool {
    plan.schema()
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Utf8View | DataType::BinaryView))
}

impl PhysicalOptimizerRule for CompactViews {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if node.downcast_ref::<SortPreservingMergeExec>().is_none() {
                return Ok(Transformed::no(node));
            }
            let Some(input) = node.children().first().map(|c| Arc::clone(*c)) else {
                return Ok(Transformed::no(node));
            };
            if !has_views(input.as_ref()) || input.downcast_ref::<CompactViewsExec>().is_some() {
                return Ok(Transformed::no(node));
            }
            let compacted: Arc<dyn ExecutionPlan> = Arc::new(CompactViewsExec::new(input));
            Ok(Transformed::yes(node.with_new_children(vec![compacted])?))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "floe_compact_views"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Hands on its input's batches with their view columns compacted where their buffers are
/// mostly bytes of other rows.
#[derive(Debug)]
pub struct CompactViewsExec {
    input: Arc<dyn ExecutionPlan>,
}

impl CompactViewsExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self { input }
    }
}

impl DisplayAs for CompactViewsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CompactViewsExec")
    }
}

impl ExecutionPlan for CompactViewsExec {
    fn name(&self) -> &str {
        "CompactViewsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(children.swap_remove(0))))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let compacted = input.map(|batch| compact(&batch?));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, compacted)))
    }
}

/// The bytes `views`' data buffers hold, whoever's rows they are.
fn held<T: ByteViewType + ?Sized>(views: &GenericByteViewArray<T>) -> usize {
    views.data_buffers().iter().map(|b| b.capacity()).sum()
}

/// `views` compacted, when its buffers hold more than twice the bytes its rows use.
fn compacted<T: ByteViewType + ?Sized>(views: &GenericByteViewArray<T>) -> Option<ArrayRef> {
    (held(views) > 2 * views.total_buffer_bytes_used().max(1))
        .then(|| Arc::new(views.gc()) as ArrayRef)
}

/// `batch` with each view column compacted whose buffers hold more than twice its rows' bytes.
fn compact(batch: &RecordBatch) -> Result<RecordBatch> {
    let mut changed = false;
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|column| {
            let compact = match column.data_type() {
                DataType::Utf8View => compacted(column.as_string_view()),
                DataType::BinaryView => compacted(column.as_binary_view()),
                _ => None,
            };
            changed |= compact.is_some();
            compact.unwrap_or_else(|| Arc::clone(column))
        })
        .collect();
    if !changed {
        return Ok(batch.clone());
    }
    Ok(RecordBatch::try_new_with_options(
        batch.schema(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringViewArray;
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    #[test]
    fn a_slice_of_long_views_is_compacted_and_keeps_its_values() {
        let long: Vec<String> = (0..1000).map(|i| format!("{i:0>40}")).collect();
        let views = StringViewArray::from_iter_values(long.iter());
        let few = views.slice(10, 3);
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Utf8View,
            false,
        )]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(few.clone())]).unwrap();
        let out = compact(&batch).unwrap();
        let column = out.column(0).as_string_view();
        let bytes = held(column);
        assert!(bytes < 1000, "{bytes} bytes held for 3 values");
        let values: Vec<&str> = column.iter().map(|v| v.unwrap()).collect();
        assert_eq!(values, vec![&long[10], &long[11], &long[12]]);
    }
}
