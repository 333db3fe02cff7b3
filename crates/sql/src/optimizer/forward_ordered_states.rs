//! Ordered aggregates whose state crosses stages are kept running forward (a correction of
//! DataFusion 54, always on).
//!
//! When one aggregation holds ordered aggregates with opposite orders — `array_agg(x ORDER
//! BY y DESC)` beside `array_agg(x ORDER BY y ASC)` — DataFusion plans one input order for
//! both and runs the second *reversed*: it collects in the input's order and reverses its
//! list at the end. In one stage that is right. Across stages (a partial aggregation whose
//! state a final one merges) it is not: the reversed accumulator hands over its values
//! reversed but their sort keys unreversed, and the merge interleaves them wrongly
//! (`SELECT array_agg(a ORDER BY a DESC), array_agg(a ORDER BY a ASC) … GROUP BY g`
//! answered `[3, 2, 1] [3, 2, 1]`; found by running DataFusion's own sqllogictest files,
//! group_by.slt:2511, at four partitions; fixed upstream in apache/datafusion#22597).
//!
//! The rule turns every reversed aggregate of an aggregation that hands over or merges
//! state (every mode but `Single` and `SinglePartitioned`) back into the aggregate the query
//! wrote, in every stage alike, so partial and final agree. The forward aggregate does not
//! rely on its input's order (it sorts what it collects), so the answer is the one the query
//! asks for whatever order its input arrives in; the plan keeps its sorts. Aggregations in one
//! stage are left as DataFusion made them.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct ForwardOrderedStates;

impl PhysicalOptimizerRule for ForwardOrderedStates {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            if matches!(
                aggregate.mode(),
                AggregateMode::Single | AggregateMode::SinglePartitioned
            ) || !aggregate.aggr_expr().iter().any(|e| e.is_reversed())
            {
                return Ok(Transformed::no(node));
            }
            let mut forward = Vec::with_capacity(aggregate.aggr_expr().len());
            for expr in aggregate.aggr_expr() {
                if !expr.is_reversed() {
                    forward.push(Arc::clone(expr));
                    continue;
                }
                // A reversed aggregate that cannot be turned back is left as it is (none of
                // DataFusion's reverses that way: reversing is its own inverse).
                match expr.reverse_expr() {
                    Some(back) if !back.is_reversed() => forward.push(Arc::new(back)),
                    _ => return Ok(Transformed::no(node)),
                }
            }
            let rebuilt: Arc<dyn ExecutionPlan> = Arc::new(aggregate.with_new_aggr_exprs(forward));
            Ok(Transformed::yes(rebuilt))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "floe_forward_ordered_states"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
