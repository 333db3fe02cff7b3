//! Hash joins whose build side is bounded by a key-unique input, broadcast instead of
//! partitioned.
//!
//! DataFusion chooses between a *partitioned* hash join (both sides repartitioned by the join
//! key) and a *collect-left* one (the build side collected once and probed by every partition
//! of the other, which then needs no repartitioning) from the estimated size of the build
//! side. Its estimate of a join's output multiplies its inputs' sizes by a selectivity taken
//! from column bounds, which knows nothing of keys: in TPC-H Q17 the 200 `part` rows of one
//! brand and container joined with `lineitem`'s average quantity *per part* is estimated at
//! 7.2 million rows, so the outer join repartitions all 6 million `lineitem` rows (300 MB of
//! batches at scale 1) to probe 204 keys.
//!
//! [`BroadcastBoundedBuilds`] runs right after DataFusion's join selection and bounds the
//! rows of each partitioned join's inputs by what the plan guarantees: an inner join with an
//! input that is unique on its join keys (an aggregation grouped by those keys) yields at most
//! as many rows as its other input, a semi or anti join at most its kept side, filters,
//! projections and aggregations at most their input. When such a bound puts an input under
//! DataFusion's own limit for collecting a build side (`hash_join_single_partition_threshold_rows`)
//! and is below DataFusion's estimate for it, the join becomes a collect-left join on that
//! input. Floe also raises that limit (see the engine); a collect-left join whose build side
//! is over DataFusion's own limit is kept only when its probe side is estimated larger still
//! ([`large_build_checked`]), and one whose output is grouped by its key at once is
//! partitioned again ([`partitioned_under_grouping`]).
//!
//! Why the answer cannot change: the rule changes only a hash join's partition mode, and to
//! build on the bounded side swaps its inputs with DataFusion's own `swap_inputs` (which swaps
//! the join type and restores the column order) — never for a null-aware anti join or a join
//! type that cannot swap, and it never partitions a null-aware join. A hash join answers the
//! same in both modes: collect-left probes every probe partition against the whole build side
//! and emits unmatched build rows (left, full, semi, anti and mark joins) once, from a bitmap
//! the partitions share; partitioned matches each key within the one hash partition both
//! sides send it to. The bounds only choose the mode: DataFusion's estimates stand in at the
//! leaves and may be low, which costs memory and time, not rows. It runs before distribution
//! is enforced and before any dynamic filter exists, so the repartitions and filters
//! DataFusion adds afterwards are those of the mode chosen.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::{JoinType, Result};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;

use crate::optimizer::utils::map_children;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct BroadcastBoundedBuilds;

impl PhysicalOptimizerRule for BroadcastBoundedBuilds {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let limit = config.optimizer.hash_join_single_partition_threshold_rows;
        rewrite(plan, limit)
    }

    fn name(&self) -> &str {
        "floe_broadcast_bounded_builds"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// DataFusion's own limit for collecting a build side (rows), which Floe raises.
const DATAFUSION_COLLECT_ROWS: usize = 128 * 1024;

fn rewrite(plan: Arc<dyn ExecutionPlan>, limit: usize) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = map_children(plan, |_, child| rewrite(child, limit))?;
    if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
        return partitioned_under_grouping(aggregate, plan.clone());
    }
    let Some(join) = plan.downcast_ref::<HashJoinExec>() else {
        return Ok(plan);
    };
    if *join.partition_mode() == PartitionMode::CollectLeft {
        return large_build_checked(join, plan.clone());
    }
    if !matches!(
        join.partition_mode(),
        PartitionMode::Partitioned | PartitionMode::Auto
    ) {
        return Ok(plan);
    }
    let tighter = |side: &Arc<dyn ExecutionPlan>| {
        let bound = bound(side)?;
        let estimate = estimate(side).unwrap_or(usize::MAX);
        (bound <= limit && bound < estimate).then_some(bound)
    };
    let (left, right) = (tighter(join.left()), tighter(join.right()));
    match (left, right) {
        (Some(l), Some(r)) if r < l && can_swap(join) => {
            join.swap_inputs(PartitionMode::CollectLeft)
        }
        (Some(_), _) => join
            .builder()
            .with_partition_mode(PartitionMode::CollectLeft)
            .build_exec(),
        (None, Some(_)) if can_swap(join) => join.swap_inputs(PartitionMode::CollectLeft),
        _ => Ok(plan),
    }
}

/// A collect-left join whose build side is larger than DataFusion would collect is kept only
/// when the probe side is estimated larger still; when nothing is known of the probe side
/// (DataFusion's join selection then trusts the build side's estimate alone, and TPC-H Q7
/// built all 1.5 million `orders` rows on one thread to probe 8,700 customers) the join is
/// partitioned again.
fn large_build_checked(
    join: &HashJoinExec,
    plan: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if join.null_aware {
        return Ok(plan);
    }
    let Some(build) = estimate(join.left()) else {
        return Ok(plan);
    };
    if build <= DATAFUSION_COLLECT_ROWS {
        return Ok(plan);
    }
    match bound(join.right()) {
        Some(probe) if probe >= build => Ok(plan),
        _ => join
            .builder()
            .with_partition_mode(PartitionMode::Partitioned)
            .build_exec(),
    }
}

/// A collect-left join with a build side over DataFusion's own limit, whose rows are grouped
/// by its key alone right away, is partitioned by that key again: its output then arrives
/// partitioned as the grouping needs, so the aggregation is done in one step on each
/// partition's share of the keys. Collected, every partition's partial aggregation met nearly
/// every key (TPC-H Q13: 150,000 customers grouped twice over, then repartitioned and grouped
/// again), in tables too large for the processor's caches.
fn partitioned_under_grouping(
    aggregate: &AggregateExec,
    plan: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    // One grouping column, so that partitions by the key are partitions by the groups.
    let [(group, _)] = aggregate.group_expr().expr() else {
        return Ok(plan);
    };
    if *aggregate.mode() != AggregateMode::Partial || !aggregate.group_expr().is_single() {
        return Ok(plan);
    }
    match partitioned_if_keyed(aggregate.input(), column_index(group))? {
        Some(input) => plan.with_new_children(vec![input]),
        None => Ok(plan),
    }
}

/// `plan` — a collect-left join with a build side over DataFusion's limit, under projections
/// of columns — with the join partitioned, when its output column `column` is one of the
/// join's keys.
fn partitioned_if_keyed(
    plan: &Arc<dyn ExecutionPlan>,
    column: Option<usize>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(column) = column else {
        return Ok(None);
    };
    if let Some(projection) = plan.downcast_ref::<ProjectionExec>() {
        let below = projection
            .expr()
            .get(column)
            .and_then(|e| column_index(&e.expr));
        return match partitioned_if_keyed(projection.input(), below)? {
            Some(input) => Ok(Some(plan.clone().with_new_children(vec![input])?)),
            None => Ok(None),
        };
    }
    let Some(join) = plan.downcast_ref::<HashJoinExec>() else {
        return Ok(None);
    };
    // One key, so that the join's partitions are partitions by the grouping column; a left
    // join's output is partitioned by its left key only (its right key is null where no row
    // matched), an inner join's by either.
    let [(left_key, right_key)] = join.on() else {
        return Ok(None);
    };
    if *join.partition_mode() != PartitionMode::CollectLeft
        || join.null_aware
        || !matches!(join.join_type(), JoinType::Inner | JoinType::Left)
        || estimate(join.left()).is_none_or(|rows| rows <= DATAFUSION_COLLECT_ROWS)
    {
        return Ok(None);
    }
    // Positions of the join's keys among its columns before its own projection.
    let left_columns = join.left().schema().fields().len();
    let mut keys = vec![column_index(left_key)];
    if *join.join_type() == JoinType::Inner {
        keys.push(column_index(right_key).map(|r| r + left_columns));
    }
    let keys: Vec<usize> = keys.into_iter().flatten().collect();
    let unprojected = match &join.projection {
        Some(projection) => projection.get(column).copied(),
        None => Some(column),
    };
    if !unprojected.is_some_and(|c| keys.contains(&c)) {
        return Ok(None);
    }
    Ok(Some(
        join.builder()
            .with_partition_mode(PartitionMode::Partitioned)
            .build_exec()?,
    ))
}

fn can_swap(join: &HashJoinExec) -> bool {
    join.join_type().supports_swap() && !join.null_aware
}

/// DataFusion's row estimate for `plan`'s output.
fn estimate(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    plan.partition_statistics(None)
        .ok()?
        .num_rows
        .get_value()
        .copied()
}

/// An upper bound on the rows of `plan`'s output, as far as the plan tells (DataFusion's
/// estimates stand in at the leaves).
fn bound(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    let own = estimate(plan);
    let derived = if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let (left, right) = (join.left(), join.right());
        match join.join_type() {
            JoinType::Inner => {
                let keys = |side: usize| -> Vec<Option<usize>> {
                    join.on()
                        .iter()
                        .map(|(l, r)| column_index(if side == 0 { l } else { r }))
                        .collect()
                };
                let mut found = None;
                if unique_on(right, &keys(1)) {
                    found = min(found, bound(left));
                }
                if unique_on(left, &keys(0)) {
                    found = min(found, bound(right));
                }
                found
            }
            JoinType::LeftSemi | JoinType::LeftAnti => bound(left),
            JoinType::RightSemi | JoinType::RightAnti => bound(right),
            _ => None,
        }
    } else if passes_rows_on(plan.as_ref()) || plan.downcast_ref::<AggregateExec>().is_some() {
        match plan.children().as_slice() {
            [child] => bound(child),
            _ => None,
        }
    } else {
        None
    };
    min(derived, own)
}

/// The smaller of two bounds, either of which may be unknown.
fn min(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Operators whose output rows are a subset of their input's (possibly re-projected).
fn passes_rows_on(plan: &dyn ExecutionPlan) -> bool {
    matches!(
        plan.name(),
        "FilterExec"
            | "ProjectionExec"
            | "RepartitionExec"
            | "CoalesceBatchesExec"
            | "CoalescePartitionsExec"
            | "SortExec"
            | "CooperativeExec"
    )
}

fn column_index(expr: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    expr.downcast_ref::<Column>().map(Column::index)
}

/// True when no two output rows of `plan` agree on all the output columns `columns` (a
/// `None` is a key that is not a plain column and is left out, which only makes the check
/// stricter).
fn unique_on(plan: &Arc<dyn ExecutionPlan>, columns: &[Option<usize>]) -> bool {
    let known: Vec<usize> = columns.iter().flatten().copied().collect();
    if known.is_empty() {
        return false;
    }
    if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
        let group = aggregate.group_expr();
        let complete = matches!(
            aggregate.mode(),
            AggregateMode::Final
                | AggregateMode::FinalPartitioned
                | AggregateMode::Single
                | AggregateMode::SinglePartitioned
        );
        // The grouping columns come first in the output; unique when the key holds them all.
        return complete
            && group.is_single()
            && !group.expr().is_empty()
            && (0..group.expr().len()).all(|g| known.contains(&g));
    }
    if let Some(projection) = plan.downcast_ref::<ProjectionExec>() {
        let mapped: Vec<Option<usize>> = known
            .iter()
            .map(|&c| column_index(&projection.expr().get(c)?.expr))
            .collect();
        return unique_on(projection.input(), &mapped);
    }
    if let Some(filter) = plan.downcast_ref::<FilterExec>() {
        let mapped: Vec<Option<usize>> = match filter.projection() {
            Some(projection) => known.iter().map(|&c| projection.get(c).copied()).collect(),
            None => known.iter().map(|&c| Some(c)).collect(),
        };
        return unique_on(filter.input(), &mapped);
    }
    // The rest of the operators that pass rows on keep their columns where they are.
    if passes_rows_on(plan.as_ref())
        && let [child] = plan.children().as_slice()
    {
        return unique_on(child, columns);
    }
    false
}
