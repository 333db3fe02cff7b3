//! Runtime filters across stages.
//!
//! A hash join publishes a *dynamic filter* once it has read its build side — the range and,
//! when there are few, the set of its keys — and DataFusion pushes that filter into the scans
//! below the join's probe side, which then skip row groups and (with Floe's
//! [`crate::optimizer::apply_runtime_filters`]) rows that cannot match. Alone, that is one
//! filter object shared in memory. A distributed plan travels in stages, and DataFusion 54's
//! encoding writes each copy of the filter as its own object, so neither link survives:
//!
//! - **Within a task** (the join and the scan in the same stage, as under a broadcast join),
//!   a worker links the copies again by the filter's id ([`link`]): the scans' copies read
//!   the join's filter, as they do alone.
//! - **Across stages** (the scan in a stage that feeds the join's probe side through a
//!   shuffle, as for a correlated subquery's aggregation), the join's task publishes its
//!   filter to the statement's board on the coordinator once it has read its build side
//!   ([`publish::PublishFilterExec`]), and the scan's task waits for it there before it
//!   reads ([`awaited::Awaited`]). Only joins whose every task holds the whole build side
//!   publish (a collect-left join over a broadcast): any one task's filter is then the whole
//!   filter. Partitioned joins' filters stay within their task.
//!
//! The coordinator works out which filters cross stages once the plan is cut
//! ([`crossing`]) and tells the statement's board ([`board::Board::expect`]); a scan waiting
//! for any other filter is told at once that it will not come. A scan waits at most
//! [`awaited::LONGEST_WAIT`]: a probe side is read only once its join's build side is, so
//! waiting costs the query nothing in the usual case, and past that bound the scan reads on
//! and takes the filter when it comes.

mod awaited;
mod board;
mod publish;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::common::NullEquality;
use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion_distributed::{DistributedLeafExec, NetworkBoundaryExt, NetworkBroadcastExec};

pub(crate) use awaited::{Awaited, Waits};
pub use board::FilterService;
pub(crate) use board::{BOARD_HEADER, Board, Boards, FilterClient, RemoteBoard, filter_service};

use super::scan::FloeScanExec;
use crate::optimizer::utils::file_scan;

/// The filter `node` publishes to scans in other stages: a collect-left hash join's whose
/// build side every task of its stage reads whole (through broadcasts only).
fn published_filter(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<DynamicFilterPhysicalExpr>> {
    let join = node.downcast_ref::<HashJoinExec>()?;
    if *join.partition_mode() != PartitionMode::CollectLeft || !whole(join.left()) {
        return None;
    }
    linked_filter(join)
}

/// A join's dynamic filter, when scans may read it: not one of a join matching null keys
/// (a null-aware anti join, or nulls equal to nulls), whose filter DataFusion 54 would let
/// drop the null keys such a join needs.
fn linked_filter(join: &HashJoinExec) -> Option<Arc<DynamicFilterPhysicalExpr>> {
    if join.null_aware || join.null_equality() == NullEquality::NullEqualsNull {
        return None;
    }
    join.dynamic_filter_expr().cloned()
}

/// The dynamic filter `node` makes for scans below it, when it makes one they may read: a
/// hash join's ([`linked_filter`]), a top-k sort's or an aggregation's.
fn made_filter(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<DynamicFilterPhysicalExpr>> {
    if let Some(join) = node.downcast_ref::<HashJoinExec>() {
        return linked_filter(join);
    }
    if let Some(sort) = node.downcast_ref::<SortExec>() {
        return sort.dynamic_filter_expr();
    }
    node.downcast_ref::<AggregateExec>()?
        .dynamic_filter_expr()
        .cloned()
}

/// The filters of joins matching null keys, which scans must not read ([`linked_filter`]).
fn unlinked_filters(plan: &Arc<dyn ExecutionPlan>) -> HashSet<u64> {
    let mut ids = HashSet::new();
    let _ = plan.apply(|node| {
        if let Some(join) = node.downcast_ref::<HashJoinExec>()
            && linked_filter(join).is_none()
            && let Some(id) = join.dynamic_filter_expr().and_then(|f| f.expression_id())
        {
            ids.insert(id);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    ids
}

/// Whether every task of a stage reads all of `plan`'s rows: its leaves are broadcasts from
/// other stages or make rows of their own, and nothing on the way keeps only some of them
/// (a limit keeps whichever rows come first, which differ from task to task).
fn whole(plan: &Arc<dyn ExecutionPlan>) -> bool {
    if plan.is_network_boundary() {
        return plan.downcast_ref::<NetworkBroadcastExec>().is_some();
    }
    if plan.fetch().is_some()
        || matches!(
            plan.name(),
            "GlobalLimitExec" | "LocalLimitExec" | "ChildrenIsolatorUnionExec"
        )
    {
        return false;
    }
    let children = plan.children();
    if children.is_empty() {
        return plan.downcast_ref::<EmptyExec>().is_some()
            || plan.downcast_ref::<PlaceholderRowExec>().is_some();
    }
    children.into_iter().all(whole)
}

/// The predicate of a Floe scan (wrapped, bare or cut into tasks).
fn scan_predicate(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn PhysicalExpr>> {
    if let Some(leaf) = node.downcast_ref::<DistributedLeafExec>() {
        return scan_predicate(leaf.original());
    }
    let config = match node.downcast_ref::<FloeScanExec>() {
        Some(scan) => scan.config(),
        None => file_scan(node)?,
    };
    config.file_source().filter()
}

/// The dynamic filters in `predicate`, each once, by id.
fn dynamic_filters(predicate: &Arc<dyn PhysicalExpr>) -> Vec<(u64, &DynamicFilterPhysicalExpr)> {
    let mut found = Vec::new();
    let _ = predicate.apply(|expr| {
        let Some(filter) = expr.downcast_ref::<DynamicFilterPhysicalExpr>() else {
            return Ok(TreeNodeRecursion::Continue);
        };
        if let Some(id) = filter.expression_id() {
            found.push((id, filter));
        }
        Ok(TreeNodeRecursion::Jump)
    });
    found
}

/// The filters of `plan` (cut into stages) that a join in one stage run on workers
/// publishes for a scan in another.
pub(crate) fn crossing(plan: &Arc<dyn ExecutionPlan>) -> Vec<u64> {
    #[derive(Default)]
    struct Seen {
        producers: HashMap<u64, usize>,
        consumers: HashMap<u64, HashSet<Option<usize>>>,
    }
    fn walk(node: &Arc<dyn ExecutionPlan>, stage: Option<usize>, seen: &mut Seen) {
        let stage = match node.as_network_boundary() {
            Some(boundary) => Some(boundary.input_stage().num()),
            None => stage,
        };
        if let (Some(stage), Some(filter)) = (stage, published_filter(node))
            && let Some(id) = filter.expression_id()
        {
            seen.producers.insert(id, stage);
        }
        if let Some(predicate) = scan_predicate(node) {
            for (id, _) in dynamic_filters(&predicate) {
                seen.consumers.entry(id).or_default().insert(stage);
            }
        }
        for child in node.children() {
            walk(child, stage, seen);
        }
    }
    let mut seen = Seen::default();
    walk(plan, None, &mut seen);
    let mut ids: Vec<u64> = seen
        .producers
        .iter()
        .filter(|(id, stage)| {
            seen.consumers
                .get(id)
                .is_some_and(|at| at.iter().any(|s| *s != Some(**stage)))
        })
        .map(|(id, _)| *id)
        .collect();
    ids.sort_unstable();
    ids
}

/// A task plan as a worker runs it: every scan's copy of a dynamic filter reads the filter
/// of the node that makes it in this task; with a `remote` board, scans whose filters come
/// from another stage wait for them there. (The joins that publish their filters to other
/// stages are wrapped by [`publish`], after the worker's rules.)
pub(crate) fn link(
    plan: Arc<dyn ExecutionPlan>,
    remote: Option<(RemoteBoard, FilterClient)>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let unlinked = unlinked_filters(&plan);
    let mut roots: HashMap<u64, Arc<DynamicFilterPhysicalExpr>> = HashMap::new();
    plan.apply(|node| {
        if let Some(filter) = made_filter(node)
            && let Some(id) = filter.expression_id()
        {
            roots.insert(id, filter);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    // A filter made in another stage gets one root here, which the board's copy fills.
    let mut remote_roots: HashMap<u64, Arc<DynamicFilterPhysicalExpr>> = HashMap::new();
    plan.apply(|node| {
        if node.downcast_ref::<FloeScanExec>().is_some()
            && let Some(predicate) = scan_predicate(node)
        {
            for (id, copy) in dynamic_filters(&predicate) {
                if !roots.contains_key(&id) && !unlinked.contains(&id) {
                    remote_roots.entry(id).or_insert_with(|| {
                        Arc::new(DynamicFilterPhysicalExpr::from_parts(
                            copy.original_children().to_vec(),
                            None,
                            copy.inner(),
                        ))
                    });
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let awaited = match &remote {
        Some((board, client)) if !remote_roots.is_empty() => Some(Arc::new(Awaited::new(
            board.clone(),
            client.clone(),
            remote_roots.clone(),
        ))),
        _ => None,
    };
    roots.extend(remote_roots);
    plan.transform_up(|node| {
        if let Some(scan) = node.downcast_ref::<FloeScanExec>() {
            let Some(predicate) = scan.config().file_source().filter() else {
                return Ok(Transformed::no(node));
            };
            let waits = awaited.as_ref().and_then(|awaited| {
                let ids: Vec<u64> = dynamic_filters(&predicate)
                    .iter()
                    .map(|(id, _)| *id)
                    .filter(|id| awaited.awaits(*id))
                    .collect();
                (!ids.is_empty()).then(|| (awaited.clone(), ids))
            });
            let linked = relink(predicate, &roots)?;
            return Ok(Transformed::yes(Arc::new(
                scan.with_linked_filters(linked, waits)?,
            )));
        }
        Ok(Transformed::no(node))
    })
    .map(|t| t.data)
}

/// `plan` (a task plan the worker's rules have run over) with each join that publishes its
/// filter to other stages run under a [`publish::PublishFilterExec`].
pub(crate) fn publish(
    plan: Arc<dyn ExecutionPlan>,
    board: RemoteBoard,
    client: FilterClient,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(filter) = published_filter(&node) else {
            return Ok(Transformed::no(node));
        };
        let publisher =
            publish::PublishFilterExec::new(node, filter, board.clone(), client.clone());
        Ok(Transformed::yes(
            Arc::new(publisher) as Arc<dyn ExecutionPlan>
        ))
    })
    .map(|t| t.data)
}

/// `predicate` with each dynamic filter replaced by its root's copy over the same columns.
fn relink(
    predicate: Arc<dyn PhysicalExpr>,
    roots: &HashMap<u64, Arc<DynamicFilterPhysicalExpr>>,
) -> Result<Arc<dyn PhysicalExpr>> {
    predicate
        .transform_down(|expr| {
            let Some(filter) = expr.downcast_ref::<DynamicFilterPhysicalExpr>() else {
                return Ok(Transformed::no(expr));
            };
            let Some(root) = filter.expression_id().and_then(|id| roots.get(&id)) else {
                return Ok(Transformed::new(expr, false, TreeNodeRecursion::Jump));
            };
            let children = expr.children().into_iter().cloned().collect();
            let linked = (root.clone() as Arc<dyn PhysicalExpr>).with_new_children(children)?;
            Ok(Transformed::new(linked, true, TreeNodeRecursion::Jump))
        })
        .map(|t| t.data)
}
