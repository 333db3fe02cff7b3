//! `EXPLAIN` of a distributed statement: its plan cut into stages, tasks and the workers they
//! go to (DataFusion's own `EXPLAIN` plans the statement again by itself, undistributed).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::Result;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{LogicalPlan, PlanType, StringifiedPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::explain::ExplainExec;
use datafusion_distributed::display_plan_ascii;

/// Plans with `inner` (the distributed planner); an `EXPLAIN` shows what `inner` made.
#[derive(Debug)]
pub(crate) struct ShowStages {
    pub(crate) inner: Arc<dyn QueryPlanner + Send + Sync>,
}

#[async_trait]
impl QueryPlanner for ShowStages {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &SessionState,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let LogicalPlan::Explain(explain) = logical_plan else {
            return self
                .inner
                .create_physical_plan(logical_plan, session_state)
                .await;
        };
        let plan = self
            .inner
            .create_physical_plan(&explain.plan, session_state)
            .await?;
        let mut plans = explain.stringified_plans.clone();
        plans.push(StringifiedPlan::new(
            PlanType::FinalPhysicalPlan,
            display_plan_ascii(plan.as_ref(), false),
        ));
        Ok(Arc::new(ExplainExec::new(
            Arc::clone(explain.schema.inner()),
            plans,
            explain.verbose,
        )))
    }
}
