//! Repartitions that merge their inputs to keep an order, made plain.
//!
//! When a scan declares the order its files were written in ([`crate::scan::provider`]), DataFusion
//! keeps that order through the repartitions it adds whenever an operator above might use it:
//! each output partition then merges the sorted streams of every input partition instead of
//! taking batches as they come. A final aggregation grouped by the sorted key can then emit
//! each group as soon as its key is passed. Measured here, the merge costs more than it saves:
//! TPC-H Q3 at scale 10 took 1,205 ms with it in front of the final aggregation and 788 ms
//! without; Q18, whose final aggregation holds 15 million groups, 2.6 s with it and 3.2 s
//! without, and the scale 1 suite was faster without (Q18 170 against 207–243 ms). The
//! aggregation right above the sorted scan needs no repartition and keeps streaming (Q18's
//! partial aggregation of 60 million `lineitem` rows: 4.7 s of CPU hashing, 0.7 s streaming).
//!
//! [`PlainRepartitions`] runs after DataFusion's rules and replaces every `RepartitionExec`
//! that preserves order (hash or round robin) by one over the same input with the same
//! partitioning that does not. The operators above are rebuilt over it and recompute their
//! properties from an unordered input: an aggregation that streamed by the order hashes, a
//! top-k sort forgets the sorted prefix it could stop early on. When DataFusion's
//! `SanityCheckPlan` rejects the rewritten plan — some operator requires the order: a
//! sort-preserving merge, a window aggregation, a sort-merge join, an aggregation in sorted
//! mode or with an aggregate that took its input's order (`first_value(x ORDER BY y)`) — the
//! whole plan is left as DataFusion made it.
//!
//! Why the answer cannot change: a repartition routes each row by the same partitioning
//! either way, so every output partition holds the same rows; only their order within a
//! partition differs. An order matters only to an operator that uses it, and DataFusion's
//! operators that use one declare it as a required input ordering, which the sanity check
//! verifies on the rebuilt plan. A statement's final order over several partitions is made by
//! a merge, which requires it; a `LIMIT` whose sort DataFusion removed sits on such a merge.
//! DataFusion 54's one operator that relies on an order without requiring it, `PartialSortExec`,
//! is planned only over unbounded inputs, which Iceberg scans are not.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::sanity_checker::SanityCheckPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::repartition::RepartitionExec;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct PlainRepartitions;

impl PhysicalOptimizerRule for PlainRepartitions {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let rewritten = Arc::clone(&plan).transform_up(|node| {
            match node.downcast_ref::<RepartitionExec>() {
                Some(r) if r.preserve_order() => Ok(Transformed::yes(Arc::new(
                    RepartitionExec::try_new(Arc::clone(r.input()), r.partitioning().clone())?,
                )
                    as Arc<dyn ExecutionPlan>)),
                _ => Ok(Transformed::no(node)),
            }
        })?;
        if !rewritten.transformed {
            return Ok(plan);
        }
        // An operator above may have counted on the order given up.
        match SanityCheckPlan::new().optimize(Arc::clone(&rewritten.data), config) {
            Ok(_) => Ok(rewritten.data),
            Err(_) => Ok(plan),
        }
    }

    fn name(&self) -> &str {
        "floe_plain_repartitions"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::{JoinType, NullEquality};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::physical_expr::expressions::Column;
    use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
    use datafusion::physical_plan::Partitioning;
    use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
    use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;

    fn key() -> Arc<dyn PhysicalExpr> {
        Arc::new(Column::new("k", 0))
    }

    fn by_key() -> LexOrdering {
        LexOrdering::new([PhysicalSortExpr::new_default(key())]).unwrap()
    }

    /// Two sorted partitions of one key column, hash-repartitioned keeping their order.
    fn ordered_repartition() -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let batch = |keys: Vec<i64>| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(keys))]).unwrap()
        };
        let source = MemorySourceConfig::try_new(
            &[vec![batch(vec![1, 2, 3])], vec![batch(vec![4, 5, 6])]],
            schema.clone(),
            None,
        )
        .unwrap()
        .try_with_sort_information(vec![by_key()])
        .unwrap();
        let scan = DataSourceExec::from_data_source(source);
        Arc::new(
            RepartitionExec::try_new(scan, Partitioning::Hash(vec![key()], 2))
                .unwrap()
                .with_preserve_order(),
        )
    }

    fn join() -> Arc<dyn ExecutionPlan> {
        Arc::new(
            HashJoinExec::try_new(
                ordered_repartition(),
                ordered_repartition(),
                vec![(key(), key())],
                None,
                &JoinType::Inner,
                None,
                PartitionMode::Partitioned,
                NullEquality::NullEqualsNothing,
                false,
            )
            .unwrap(),
        )
    }

    fn keeping_order(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let mut count = 0;
        plan.apply(|node| {
            if node
                .downcast_ref::<RepartitionExec>()
                .is_some_and(|r| r.preserve_order())
            {
                count += 1;
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })
        .unwrap();
        count
    }

    #[test]
    fn repartitions_stop_merging_their_inputs() {
        let plan = join();
        assert_eq!(keeping_order(&plan), 2);
        let rewritten = PlainRepartitions
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        assert_eq!(keeping_order(&rewritten), 0);
    }

    #[test]
    fn an_order_used_above_the_join_is_kept() {
        // The merge above relies on the join's output following its probe side's order.
        let plan: Arc<dyn ExecutionPlan> = Arc::new(SortPreservingMergeExec::new(by_key(), join()));
        let config = ConfigOptions::default();
        assert!(
            SanityCheckPlan::new()
                .optimize(plan.clone(), &config)
                .is_ok()
        );
        let rewritten = PlainRepartitions
            .optimize(plan, &ConfigOptions::default())
            .unwrap();
        assert_eq!(keeping_order(&rewritten), 2);
    }
}
