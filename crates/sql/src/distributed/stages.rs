//! The coordinator's planner: DataFusion-distributed's, checked for orders it cannot keep,
//! counted for `/metrics`, and shown by `EXPLAIN` (DataFusion's own `EXPLAIN` would plan the
//! statement again by itself, undistributed).
//!
//! A shuffle or broadcast that reads several tasks interleaves their streams, yet
//! DataFusion-distributed 3.0 has it declare its input's order (found by
//! `tls_workers_keep_a_sorted_tables_order`: an aggregation streaming by a sorted key over
//! such a shuffle answered some keys twice). A plan with one is made again with scans that
//! declare no written order, and when that still has one, on this node alone.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::Result;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{LogicalPlan, PlanType, StringifiedPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::explain::ExplainExec;

use super::{PlannedStages, StagePlan, StageTasks, StatementBoard};
use datafusion_distributed::{
    DistributedExec, DistributedGetterExt, NetworkBoundaryExt, NetworkBroadcastExec,
    NetworkShuffleExec, display_plan_ascii,
};

/// Plans with `inner` (the distributed planner), as the module documentation says.
#[derive(Debug)]
pub(crate) struct Stages {
    pub(crate) inner: Arc<dyn QueryPlanner + Send + Sync>,
}

impl Stages {
    async fn plan(
        &self,
        logical: &LogicalPlan,
        state: &SessionState,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = self.inner.create_physical_plan(logical, state).await?;
        if !merges_an_order(&plan)? {
            return Ok(plan);
        }
        let mut unordered = SessionStateBuilder::new_from_existing(state.clone());
        if let Some(config) = unordered.config() {
            let mut rewrites = config
                .get_extension::<crate::optimizer::Rewrites>()
                .map(|r| *r)
                .unwrap_or_default();
            rewrites.written_order = false;
            config.set_extension(Arc::new(rewrites));
        }
        let unordered = unordered.build();
        let plan = self.inner.create_physical_plan(logical, &unordered).await?;
        if !merges_an_order(&plan)? {
            return Ok(plan);
        }
        let alone = SessionStateBuilder::new_from_existing(unordered)
            .with_query_planner(Arc::new(super::scan::WrapScans))
            .build();
        alone
            .query_planner()
            .create_physical_plan(logical, &alone)
            .await
    }
}

/// Tells the statement's board which runtime filters `plan` passes between stages.
fn expect_filters(plan: &Arc<dyn ExecutionPlan>, state: &SessionState) {
    if let Some(board) = state.config().get_extension::<StatementBoard>() {
        board.0.expect(super::filters::crossing(plan));
    }
}

/// The stages of `plan` (cut by the distributed planner) and the workers it was planned over.
fn stage_plan(plan: &Arc<dyn ExecutionPlan>, state: &SessionState) -> Result<StagePlan> {
    let mut stages = std::collections::BTreeMap::new();
    plan.apply(|node| {
        if let Some(boundary) = node.as_network_boundary() {
            let stage = boundary.input_stage();
            stages.insert(stage.num(), stage.task_count());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let workers = state
        .config()
        .get_distributed_worker_resolver()
        .and_then(|r| r.get_urls())
        .unwrap_or_default();
    Ok(StagePlan {
        stages: stages
            .into_iter()
            .map(|(stage, tasks)| StageTasks { stage, tasks })
            .collect(),
        workers: workers.into_iter().map(String::from).collect(),
    })
}

/// Whether `plan` has a shuffle or broadcast over several tasks that declares an order.
fn merges_an_order(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    let mut found = false;
    plan.apply(|node| {
        let interleaves = node.downcast_ref::<NetworkShuffleExec>().is_some()
            || node.downcast_ref::<NetworkBroadcastExec>().is_some();
        let tasks = node
            .as_network_boundary()
            .map_or(0, |b| b.input_stage().task_count());
        if interleaves && tasks > 1 && node.properties().output_ordering().is_some() {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

#[async_trait]
impl QueryPlanner for Stages {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &SessionState,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let LogicalPlan::Explain(explain) = logical_plan else {
            let plan = self.plan(logical_plan, session_state).await?;
            expect_filters(&plan, session_state);
            // Counted once planned into stages: a query too small to cut runs here alone.
            if plan.downcast_ref::<DistributedExec>().is_some() {
                super::stats()
                    .queries
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if let Some(slot) = session_state.config().get_extension::<PlannedStages>() {
                    slot.note(stage_plan(&plan, session_state)?, plan.clone());
                }
            }
            return Ok(plan);
        };
        let plan = self.plan(&explain.plan, session_state).await?;
        let mut plans = explain.stringified_plans.clone();
        let mut text = display_plan_ascii(plan.as_ref(), false);
        let crossing = super::filters::crossing(&plan);
        if !crossing.is_empty()
            && session_state
                .config()
                .get_extension::<StatementBoard>()
                .is_some()
        {
            text.push_str(&format!(
                "Runtime filters across stages: {} (each published by its join's tasks once \
                 they have read its build side, awaited by the scans it filters)\n",
                crossing.len()
            ));
        }
        plans.push(StringifiedPlan::new(PlanType::FinalPhysicalPlan, text));
        Ok(Arc::new(ExplainExec::new(
            Arc::clone(explain.schema.inner()),
            plans,
            explain.verbose,
        )))
    }
}
