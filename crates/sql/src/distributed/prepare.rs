//! What a coordinator does to a plan before DataFusion-distributed cuts it into stages, so
//! that each task plan arrives on its worker as it was planned.
//!
//! - Floe's scans are wrapped to travel whole ([`super::scan::wrap_scans`]).
//! - A join that keeps no column (`projection=[]`, as under `count(*)`) arrives keeping all
//!   of them: DataFusion 54 encodes a hash or nested-loop join's empty projection as none.
//!   Such a join keeps its first column instead, under a projection of no column.
//! - A hash join's row limit (`fetch`, pushed into it by DataFusion's limit pushdown) is not
//!   encoded either: it becomes a per-partition limit above the join, which is what it is.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::{
    HashJoinExec, NestedLoopJoinExec, NestedLoopJoinExecBuilder,
};
use datafusion::physical_plan::limit::LocalLimitExec;
use datafusion::physical_plan::projection::ProjectionExec;

/// `plan` ready to be cut into stages.
pub(crate) fn for_travel(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = super::scan::wrap_scans(plan)?;
    plan.transform_up(|node| {
        let node = match join_limit_above(&node)? {
            Some(limited) => return Ok(Transformed::yes(limited)),
            None => node,
        };
        Ok(match empty_join_kept(&node)? {
            Some(kept) => Transformed::yes(kept),
            None => Transformed::no(node),
        })
    })
    .map(|t| t.data)
}

/// `node`, if it is a hash join with a row limit, as the join without it under a limit of
/// each partition's rows (and its empty projection kept, [`empty_join_kept`]).
fn join_limit_above(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(join) = node.downcast_ref::<HashJoinExec>() else {
        return Ok(None);
    };
    let Some(fetch) = join.fetch() else {
        return Ok(None);
    };
    let unlimited: Arc<dyn ExecutionPlan> = Arc::new(join.builder().with_fetch(None).build()?);
    let unlimited = empty_join_kept(&unlimited)?.unwrap_or(unlimited);
    Ok(Some(Arc::new(LocalLimitExec::new(unlimited, fetch))))
}

/// `node`, if it is a join projecting no column, as the same join projecting its first
/// column under a projection of none.
fn empty_join_kept(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let first: Arc<dyn ExecutionPlan> = if let Some(join) = node.downcast_ref::<HashJoinExec>() {
        if !join.projection.as_ref().is_some_and(|p| p.is_empty()) {
            return Ok(None);
        }
        let all = join.builder().with_projection(None).build()?;
        if all.schema().fields().is_empty() {
            return Ok(Some(Arc::new(all)));
        }
        Arc::new(join.builder().with_projection(Some(vec![0])).build()?)
    } else if let Some(join) = node.downcast_ref::<NestedLoopJoinExec>() {
        if !join.projection().as_ref().is_some_and(|p| p.is_empty()) {
            return Ok(None);
        }
        let all = NestedLoopJoinExecBuilder::from(join)
            .with_projection(None)
            .build()?;
        if all.schema().fields().is_empty() {
            return Ok(Some(Arc::new(all)));
        }
        Arc::new(
            NestedLoopJoinExecBuilder::from(join)
                .with_projection(Some(vec![0]))
                .build()?,
        )
    } else {
        return Ok(None);
    };
    let none: Vec<(Arc<dyn datafusion::physical_expr::PhysicalExpr>, String)> = Vec::new();
    Ok(Some(Arc::new(ProjectionExec::try_new(none, first)?)))
}
