//! A rewrite that is wrong on purpose, so that the differential checks can be shown to catch
//! a wrong one: it removes the first filter of a plan (one without a projection of its own,
//! so the plan stays well formed), and a statement whose filter drops rows answers more.
//!
//! Only `floe bench … --break-a-rewrite` turns it on ([`super::Rewrites::broken_on_purpose`]);
//! no server reads that switch. CI runs the fuzzer's `rewrites` oracle and `floe bench tpch
//! --compare-rewrites` with it and requires both to fail.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct BrokenOnPurpose;

impl PhysicalOptimizerRule for BrokenOnPurpose {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|node| {
            if let Some(filter) = node.downcast_ref::<FilterExec>()
                && filter.projection().is_none()
            {
                let input = Arc::clone(filter.input());
                return Ok(Transformed::new(input, true, TreeNodeRecursion::Stop));
            }
            Ok(Transformed::no(node))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "floe_broken_on_purpose"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
