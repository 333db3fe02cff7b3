//! Operators that make rows faster than they read them, made to yield.
//!
//! A statement's deadline ([`crate::engine`]) stops a query by dropping its stream, which
//! takes effect when the task polling it next returns. DataFusion makes its scans and
//! exchanges cooperative (they spend tokio's task budget and return `Pending` when it is
//! spent), which is enough while every output batch costs an input batch. A join is not so
//! bound: a cross join of two million-row inputs emits 10¹² rows from a few hundred input
//! batches, and an aggregation over it loops on them inside one poll, so the deadline (and a
//! client going away) would wait until the join had finished.
//!
//! [`YieldAfterJoins`] runs last of Floe's rules (before DataFusion's `SanityCheckPlan`) and
//! puts a `CooperativeExec` above every operator with more than one input (the joins; a
//! union, where it is harmless) and above `UnnestExec`: their output then spends the budget
//! too. It fires on every such node and refuses none; it is not switched off.
//!
//! Why the answer cannot change: `CooperativeExec` hands on its input's batches unchanged and
//! in order, partition by partition, with its input's schema, partitioning and ordering; it
//! only returns `Pending` when the task's budget is spent and is polled again. What changes is
//! when a stream is polled, never what it yields.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coop::CooperativeExec;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct YieldAfterJoins;

fn multiplies_rows(node: &dyn ExecutionPlan) -> bool {
    node.children().len() > 1 || node.name() == "UnnestExec"
}

impl PhysicalOptimizerRule for YieldAfterJoins {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if multiplies_rows(node.as_ref()) {
                Ok(Transformed::yes(
                    Arc::new(CooperativeExec::new(node)) as Arc<dyn ExecutionPlan>
                ))
            } else {
                Ok(Transformed::no(node))
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "floe_yield_after_joins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
