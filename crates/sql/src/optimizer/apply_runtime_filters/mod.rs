//! Runtime filters applied to rows, not only to row groups.
//!
//! DataFusion's hash joins, top-k sorts and ungrouped `min`/`max` aggregations publish
//! *dynamic filters* while they run (a join's build-side keys, say) and push them into the
//! Parquet scans below them. With Parquet filter pushdown off (it slows most TPC-H queries
//! down, as it decodes filter columns twice), a scan only prunes row groups and pages with
//! them, so every row of a surviving row group still flows into the joins and aggregations
//! above. This rule joins a scan's dynamic filters to the filter right above it as further
//! conditions of its `AND` (or makes one filter of their own), evaluated on the rows still
//! selected ([`crate::optimizer::fast_conjunctions`]); as a filter of their own above the
//! scan's, TPC-H Q7 copied the 1.8 million `lineitem` rows of two years to then keep the
//! 146,000 of two nations' suppliers. A join's own filter on a scan that feeds its probe side
//! directly (through filters, projections, repartitions, coalesces) would only repeat the
//! probe: it is left out there unless other filters apply too (it then goes first, being
//! usually the most selective) or, for an inner or semi join, while it is a key set ([`key_set`],
//! [`collect_keys`]). A partitioned join's filter, `CASE hash % n WHEN i THEN … END`, is
//! evaluated by routing each row to its branch over only the columns it reads (~19 ns a row on
//! TPC-H Q3's `lineitem`; DataFusion's `CASE` copies every column per branch, ~170 ns, and an
//! `OR` of all branches hashed every row once per partition, ~50 ns). A filter that has passed
//! over 80 % of at least 65,536 rows is switched off until its producer publishes anew.
//!
//! It fires on every file scan (DataFusion's, or Floe's scan node on a worker) whose predicate
//! holds dynamic filters. It refuses a scan with a row limit (rows dropped above it would not
//! be made up), filters of joins that match null keys (null-aware anti joins, nulls equal to
//! nulls: on a scan's rows they would drop the null keys such a join needs), and filters that
//! read a column the scan's output lacks or holds with another type.
//!
//! Why the answer cannot change: DataFusion pushes a filter only where a row failing it cannot
//! reach the result — into the probe side of joins that do not keep unmatched probe rows
//! (inner, left, semi, left anti and mark joins), below a top-k sort past its k-th value so
//! far, below `min`/`max` where a value cannot improve them — the contract it relies on itself
//! with Parquet pushdown on. What is evaluated is that filter or a weaker one: a `CASE` in
//! positive position becomes the `OR` of its outcomes, key bounds beside a key set that
//! implies them are dropped; the routed `CASE` and the key sets test exactly what they stand
//! for, and a null answer drops the row as the filter's would. A filter not yet published reads
//! `true`, one switched off passes every row, collected keys stand in only once complete, so a
//! late or absent producer costs time, not rows. Rows are only dropped: partitioning and order
//! stay the scan's. Workers run the rule over each task plan once its filters are linked again
//! by id ([`crate::distributed`]).
//!
//! Refused: DataFusion 54's filters from `min`/`max` aggregations, which can drop rows another
//! aggregate of the statement still needs (`SELECT min(a), max(b + 1) FROM t` builds its filter
//! from `min(a)` alone) — the engine turns their pushdown off altogether; and a filter with
//! several children of which one is not a plain column (a top-k sort over `CASE WHEN a > 0
//! THEN b END, a`), which DataFusion re-addresses bottom-up, leaving a column inside one child
//! that equals another child at its old position, so on rows it would read the wrong column.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{AsArray, BooleanArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinType, NullEquality, Result, ScalarValue};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, CaseExpr, Column, Literal};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};

use crate::optimizer::utils::{bitmap, compacted, dynamic_filters, file_scan, kept, map_children};

mod collect_keys;
mod key_set;

use collect_keys::{BuildKeys, CollectKeysExec, collectable};
use key_set::IntegerSet;

/// Filters rows of file scans by the dynamic filters pushed into them.
#[derive(Debug)]
pub struct ApplyRuntimeFilters {
    /// Whether joins' integer build-side keys are collected for the filters to test
    /// ([`collect_keys`]).
    pub collect_keys: bool,
}

impl ApplyRuntimeFilters {
    pub fn new(collect_keys: bool) -> Self {
        Self { collect_keys }
    }
}

/// How one run of the rule works (see [`ApplyRuntimeFilters`]).
struct How {
    collect_keys: bool,
    /// The filters of joins that match null keys (a null-aware anti join, or nulls equal to
    /// nulls): DataFusion 54 makes them, yet read on a scan's rows they would drop the null
    /// keys such a join needs. They are left to the join.
    null_keyed: std::collections::HashSet<u64>,
}

impl PhysicalOptimizerRule for ApplyRuntimeFilters {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let how = How {
            collect_keys: self.collect_keys,
            null_keyed: null_keyed_filters(&plan),
        };
        rewrite(plan, None, &HashMap::new(), &how)
    }

    fn name(&self) -> &str {
        "floe_apply_runtime_filters"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Operators that hand their input's rows on without combining them: a scan below only these
/// feeds the join above them directly.
fn passes_rows_on(plan: &dyn ExecutionPlan) -> bool {
    matches!(
        plan.name(),
        "FilterExec"
            | "RepartitionExec"
            | "CoalesceBatchesExec"
            | "CoalescePartitionsExec"
            | "ProjectionExec"
            | "CooperativeExec"
    )
}

/// The hash join whose probe side a plan feeds directly, by its dynamic filter.
#[derive(Debug, Clone, Copy)]
struct Feeding {
    filter: u64,
    /// The join's filter is applied to the scan's rows while it is a key set: a probe row
    /// without a match never matters to the join, and its filter can become one.
    keyed: bool,
}

/// Adds runtime filters under `plan`. `feeding` is the hash join whose probe side `plan` feeds
/// directly: evaluating its filter on a scan's rows with a hash lookup would only repeat the
/// join's own probe, so it is left to the join (even behind a partitioned join's repartition:
/// applied there, TPC-H Q3, Q8 and Q21 took 15–30 % longer, as the scan runs ahead of the
/// build side while the filter still passes everything, and hashes every row once more). It
/// is applied while it is a key set ([`IntegerSet`]: an `IN` list of a collect-left join, or
/// the join's collected keys): a bit test or a probe of a small table per row, which spares
/// the join's hash probe and a partitioned join's repartition every row it drops. Filters
/// published by joins further up, by aggregations or top-k sorts are applied.
///
/// `collecting` holds the joins above whose build-side keys are collected
/// ([`collect_keys`]), by their filters; a join whose keys a filter below it uses gets
/// a [`CollectKeysExec`] on its build side.
fn rewrite(
    plan: Arc<dyn ExecutionPlan>,
    feeding: Option<Feeding>,
    collecting: &Collecting,
    how: &How,
) -> Result<Arc<dyn ExecutionPlan>> {
    // After a scan's own conditions, so the cheap static predicate thins the rows first.
    if let Some(filter) = plan.downcast_ref::<FilterExec>() {
        let runtime = runtime_filters(
            filter.input(),
            feeding,
            collecting,
            &filter.input().schema(),
            how,
        );
        if !runtime.is_empty() {
            let predicate = conjoin(Some(filter.predicate().clone()), runtime)
                .expect("a filter's own predicate");
            return Ok(Arc::new(
                FilterExecBuilder::from(filter)
                    .with_predicate(predicate)
                    .build()?,
            ));
        }
    }
    if scan_config(&plan).is_some() {
        let runtime = runtime_filters(&plan, feeding, collecting, &plan.schema(), how);
        return filtered(plan, runtime);
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let collectable = collectable_keys(join).filter(|_| how.collect_keys);
        // The probe side is filtered only by a join that drops its probe rows without a
        // match and needs no probe row to decide another's fate (found by `floe bench fuzz`:
        // a right join's preserved side lost its unmatched rows).
        let own = join
            .dynamic_filter_expr()
            .and_then(|f| f.expression_id())
            .filter(|_| probe_rows_without_a_match_are_dropped(join))
            .map(|filter| Feeding {
                filter,
                // Only where a probe row without a match can never matter (a null-aware
                // anti join must see the probe side's nulls, say).
                keyed: (*join.partition_mode() == PartitionMode::CollectLeft
                    || collectable.is_some())
                    && !join.null_aware
                    && matches!(
                        join.join_type(),
                        JoinType::Inner | JoinType::LeftSemi | JoinType::RightSemi
                    ),
            });
        let keys = own.and_then(|own| Some((own.filter, collectable?)));
        let mut below = collecting.clone();
        if let Some((filter, keys)) = &keys {
            below.insert(*filter, keys.clone());
        }
        let build = rewrite(join.left().clone(), None, collecting, how)?;
        let probe = rewrite(join.right().clone(), own, &below, how)?;
        drop(below);
        // Collected only where a runtime filter below holds the keys.
        let build = match keys {
            Some((_, keys)) if Arc::strong_count(&keys) > 1 => {
                Arc::new(CollectKeysExec::new(build, keys)) as Arc<dyn ExecutionPlan>
            }
            _ => build,
        };
        if Arc::ptr_eq(&build, join.left()) && Arc::ptr_eq(&probe, join.right()) {
            return Ok(plan);
        }
        return plan.with_new_children(vec![build, probe]);
    }
    let count = plan.children().len();
    let feeds: Vec<Option<Feeding>> = if passes_rows_on(plan.as_ref()) {
        vec![feeding; count]
    } else {
        vec![None; count]
    };
    map_children(plan, |i, child| rewrite(child, feeds[i], collecting, how))
}

/// Whether `join`'s answer is the same when its probe (right) side loses the rows whose keys
/// no build row has: an inner join, a left outer, semi, anti or mark join (their probe rows
/// only ever meet build rows), a right semi join (it keeps only probe rows with a match) —
/// and not a null-aware anti join, for which one probe row with a null key decides every
/// build row. A right outer, full, right anti or right mark join keeps (or marks) probe rows
/// without a match, so no filter may take them away.
fn probe_rows_without_a_match_are_dropped(join: &HashJoinExec) -> bool {
    !join.null_aware
        && matches!(
            join.join_type(),
            JoinType::Inner
                | JoinType::Left
                | JoinType::LeftSemi
                | JoinType::LeftAnti
                | JoinType::LeftMark
                | JoinType::RightSemi
        )
}

/// The filters of the joins in `plan` that match null keys ([`How::null_keyed`]).
fn null_keyed_filters(plan: &Arc<dyn ExecutionPlan>) -> std::collections::HashSet<u64> {
    let mut ids = std::collections::HashSet::new();
    let _ = plan.apply(|node| {
        if let Some(join) = node.downcast_ref::<HashJoinExec>()
            && (join.null_aware || join.null_equality() == NullEquality::NullEqualsNull)
            && let Some(id) = join.dynamic_filter_expr().and_then(|f| f.expression_id())
        {
            ids.insert(id);
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    ids
}

/// The joins above a plan whose build-side keys can be collected, by their filters.
type Collecting = HashMap<u64, Arc<BuildKeys>>;

/// The collector for `join`'s build-side keys, when they can be collected as integers: one
/// key (a null one joining nothing) of an integer type.
fn collectable_keys(join: &HashJoinExec) -> Option<Arc<BuildKeys>> {
    let [(key, _)] = join.on() else {
        return None;
    };
    if join.null_equality() != NullEquality::NullEqualsNothing
        || join.null_aware
        || !collectable(&key.data_type(&join.left().schema()).ok()?)
    {
        return None;
    }
    let partitions = join.left().properties().partitioning.partition_count();
    Some(Arc::new(BuildKeys::new(key.clone(), partitions)))
}

/// A dynamic filter to evaluate on a scan's rows.
struct Found {
    filter: Arc<dyn PhysicalExpr>,
    /// Evaluated only while it is a key set ([`IntegerSet`]).
    bitmap_only: bool,
    /// Its join's build-side keys, when they are being collected.
    keys: Option<Arc<BuildKeys>>,
}

/// `plan` under one filter of the runtime filters `filters` (the first evaluated first), or
/// `plan` itself when there are none.
fn filtered(plan: Arc<dyn ExecutionPlan>, filters: Vec<Found>) -> Result<Arc<dyn ExecutionPlan>> {
    match conjoin(None, filters) {
        Some(predicate) => Ok(Arc::new(FilterExec::try_new(predicate, plan)?)),
        None => Ok(plan),
    }
}

/// The file scan configuration of a scan: DataFusion's, or a Floe scan wrapped to travel
/// (as a worker runs it).
fn scan_config(plan: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    match plan.downcast_ref::<crate::distributed::FloeScanExec>() {
        Some(scan) => Some(scan.config()),
        None => file_scan(plan),
    }
}

/// `own AND f1 AND f2 …` over the runtime filters `filters`, in that order.
fn conjoin(
    own: Option<Arc<dyn PhysicalExpr>>,
    filters: Vec<Found>,
) -> Option<Arc<dyn PhysicalExpr>> {
    filters
        .into_iter()
        .map(|found| {
            Arc::new(RuntimeFilter::new(
                found.filter,
                found.bitmap_only,
                found.keys,
            )) as Arc<dyn PhysicalExpr>
        })
        .fold(own, |acc, filter| {
            Some(match acc {
                Some(acc) => Arc::new(BinaryExpr::new(acc, Operator::And, filter)),
                None => filter,
            })
        })
}

/// The dynamic filters pushed into a file scan `node` that are worth evaluating on its rows,
/// over the columns of `output` (the scan's or the filter's above it). The filter of the join
/// the scan `feeding` goes first when there are others (it is usually the most selective,
/// and the others then see fewer rows); alone, it is left out, or for a keyed join (see
/// [`Feeding`]) kept for when it is a key set. Filters of joins in `collecting` come with
/// their keys when these can be tested on the scan's column.
fn runtime_filters(
    node: &Arc<dyn ExecutionPlan>,
    feeding: Option<Feeding>,
    collecting: &Collecting,
    output: &SchemaRef,
    how: &How,
) -> Vec<Found> {
    let Some(config) = scan_config(node) else {
        return Vec::new();
    };
    // Rows a filter removes above a scan that stops after `limit` rows would not be made up.
    if config.limit.is_some() {
        return Vec::new();
    }
    let Some(predicate) = config.file_source().filter() else {
        return Vec::new();
    };
    let table = config.file_source().table_schema().table_schema();
    let mut dynamic: Vec<(bool, Found)> = dynamic_filters(&predicate)
        .filter_map(|(e, filter)| {
            let id = filter.expression_id();
            if id.is_some_and(|id| how.null_keyed.contains(&id)) {
                return None;
            }
            // Children other than plain columns, beside other children (a top-k sort over
            // `CASE WHEN a > 0 THEN b … END, a`): DataFusion 54 remaps such a filter's
            // expressions bottom-up, and a column inside one child that equals another child
            // is replaced first, leaving the enclosing child's other columns at their old
            // positions. Evaluated here on rows, it would read the wrong columns.
            //
            // And a filter on an expression of several columns from above a join (`a.k + b.k`
            // of a join's key): DataFusion 54 maps its columns down by name, so two columns of
            // one name from two tables become one table's (`k + k` on `a`), which its pruning
            // cannot act on but a row filter would (found by `floe bench fuzz`: a left join's
            // preserved side lost rows). Only plain columns are remapped soundly.
            let children = e.children();
            if children
                .iter()
                .any(|c| c.downcast_ref::<Column>().is_none())
            {
                return None;
            }
            let is_feeding = feeding.is_some_and(|f| id == Some(f.filter));
            // The scan's predicate addresses the table's columns; the filter sits above the
            // projection. A column not in `output` leaves that filter out.
            let mut complete = true;
            let remapped = e
                .clone()
                .transform_up(|expr| {
                    let Some(column) = expr.downcast_ref::<Column>() else {
                        return Ok(Transformed::no(expr));
                    };
                    let Some(field) = table.fields().get(column.index()) else {
                        complete = false;
                        return Ok(Transformed::no(expr));
                    };
                    match output.index_of(field.name()) {
                        Ok(at) if output.field(at).data_type() == field.data_type() => {
                            Ok(Transformed::yes(Arc::new(Column::new(field.name(), at))))
                        }
                        _ => {
                            complete = false;
                            Ok(Transformed::no(expr))
                        }
                    }
                })
                .ok()?
                .data;
            // A filter with a column the output lacks is left out (below) before any of its
            // columns is looked up there: its indices still address the table.
            if !complete {
                return None;
            }
            let keys = id
                .and_then(|id| collecting.get(&id))
                .filter(|_| {
                    probe_column(&remapped).is_some_and(|at| {
                        output
                            .fields()
                            .get(at)
                            .is_some_and(|field| collectable(field.data_type()))
                    })
                })
                .cloned();
            let found = Found {
                filter: remapped,
                bitmap_only: false,
                keys,
            };
            Some((is_feeding, found))
        })
        .collect();
    if dynamic.iter().all(|(is_feeding, _)| *is_feeding) {
        return match feeding {
            Some(Feeding { keyed: true, .. }) => dynamic
                .into_iter()
                .map(|(_, found)| Found {
                    bitmap_only: true,
                    ..found
                })
                .collect(),
            _ => Vec::new(),
        };
    }
    dynamic.sort_by_key(|(is_feeding, _)| !is_feeding);
    dynamic.into_iter().map(|(_, found)| found).collect()
}

/// The column a join's dynamic filter tests, when it tests one column.
fn probe_column(dynamic: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    match dynamic.children()[..] {
        [key] => Some(key.downcast_ref::<Column>()?.index()),
        _ => None,
    }
}

/// Whether `expr` is a runtime filter this rule added.
pub(crate) fn is_runtime_filter(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<RuntimeFilter>().is_some()
}

/// Whether `expr` is a runtime filter switched off for now (it passes every row).
pub(crate) fn is_switched_off(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<RuntimeFilter>()
        .is_some_and(|filter| matches!(filter.current(), Ok((_, None))))
}

/// Rows seen before a filter's pass rate is judged.
const JUDGED_AFTER_ROWS: usize = 65_536;
/// A filter passing more than this share of rows is not worth evaluating.
const USELESS_PASS_RATE: f64 = 0.8;

/// A dynamic filter evaluated in its weakened form (or as its join's collected keys), and
/// switched off while it filters little.
#[derive(Debug)]
struct RuntimeFilter {
    dynamic: Arc<dyn PhysicalExpr>,
    /// Evaluated only while its weakened form, or its join's collected keys, make a key set
    /// ([`IntegerSet`]).
    bitmap_only: bool,
    /// The build-side keys of the join that publishes the filter, tested in its place once
    /// all were collected.
    keys: Option<Arc<BuildKeys>>,
    state: Mutex<FilterState>,
}

#[derive(Debug, Default)]
struct FilterState {
    /// The version of the dynamic filter `expr` was made from.
    generation: u64,
    /// The join's collected keys `expr` was made with (by address), if any.
    collected: Option<usize>,
    expr: Option<Arc<dyn PhysicalExpr>>,
    seen: usize,
    passed: usize,
    off: bool,
}

impl RuntimeFilter {
    fn new(
        dynamic: Arc<dyn PhysicalExpr>,
        bitmap_only: bool,
        keys: Option<Arc<BuildKeys>>,
    ) -> Self {
        Self {
            dynamic,
            bitmap_only,
            keys,
            state: Mutex::default(),
        }
    }

    /// The expression to evaluate now, or `None` while the filter is switched off.
    fn current(&self) -> Result<(u64, Option<Arc<dyn PhysicalExpr>>)> {
        let generation = self.dynamic.snapshot_generation();
        let collected = self.keys.as_ref().and_then(|keys| keys.keys());
        let address = collected.as_ref().map(|keys| Arc::as_ptr(keys) as usize);
        let mut state = self.state.lock().expect("runtime filter lock");
        if state.expr.is_none() || state.generation != generation || state.collected != address {
            let current = self
                .dynamic
                .snapshot()?
                .unwrap_or_else(|| self.dynamic.clone());
            let mut expr = weaken(current);
            // The complete set of the join's keys tests exactly what its filter does (before
            // the join has published it, too), with a bit test or a small table's probe per
            // row.
            if expr.downcast_ref::<IntegerSet>().is_none()
                && let Some(keys) = collected
                && let Some(column) = probe_column(&self.dynamic)
            {
                expr = Arc::new(IntegerSet::of(column, keys.clone(), self.dynamic.clone()));
            }
            *state = FilterState {
                generation,
                collected: address,
                off: self.bitmap_only && expr.downcast_ref::<IntegerSet>().is_none(),
                expr: Some(expr),
                ..FilterState::default()
            };
        }
        Ok((
            generation,
            (!state.off).then(|| state.expr.clone()).flatten(),
        ))
    }

    fn judge(&self, generation: u64, seen: usize, passed: usize) {
        let mut state = self.state.lock().expect("runtime filter lock");
        if state.generation != generation {
            return;
        }
        state.seen += seen;
        state.passed += passed;
        if state.seen >= JUDGED_AFTER_ROWS
            && state.passed as f64 > state.seen as f64 * USELESS_PASS_RATE
        {
            state.off = true;
        }
    }
}

/// Whether `expr` is a `false` or null literal: an outcome no row passes.
fn never_true(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<Literal>()
        .is_some_and(|l| matches!(l.value(), ScalarValue::Boolean(Some(false) | None)))
}

/// `expr` in the form evaluated here: a `CASE` over literal values (a partitioned join's)
/// becomes [`Routed`]; other boolean `CASE`s in positive position (the top, or under `AND`
/// and `OR`) become the `OR` of their outcomes, which holds wherever the `CASE` does.
fn weaken(expr: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
    if let Some(binary) = expr.downcast_ref::<BinaryExpr>()
        && matches!(binary.op(), Operator::And | Operator::Or)
    {
        let (left, right) = (
            weaken(binary.left().clone()),
            weaken(binary.right().clone()),
        );
        // A join's key bounds next to its key set: the set alone decides.
        if *binary.op() == Operator::And {
            for (set, other) in [(&left, &right), (&right, &left)] {
                if let Some(keys) = set.downcast_ref::<IntegerSet>()
                    && keys.implies(other)
                {
                    return set.clone();
                }
            }
        }
        return Arc::new(BinaryExpr::new(left, *binary.op(), right));
    }
    if let Some(keys) = IntegerSet::try_new(&expr) {
        return Arc::new(keys);
    }
    if let Some(case) = expr.downcast_ref::<CaseExpr>() {
        if let Some(routed) = Routed::try_new(case, expr.clone()) {
            return Arc::new(routed);
        }
        let outcomes = case
            .when_then_expr()
            .iter()
            .map(|(_, then)| then)
            .chain(case.else_expr())
            .filter(|e| !never_true(e))
            .map(|e| weaken(e.clone()))
            .reduce(|a, b| Arc::new(BinaryExpr::new(a, Operator::Or, b)));
        return outcomes
            .unwrap_or_else(|| Arc::new(Literal::new(ScalarValue::Boolean(Some(false)))));
    }
    expr
}

/// A boolean `CASE selector WHEN v0 THEN f0 WHEN v1 THEN f1 … END` (a partitioned join's
/// filter: the selector is the row's partition, `hash % n`) evaluated by routing: each row is
/// tested against its own branch only, on a batch of just the columns the `CASE` reads. A
/// row no branch takes is tested against the `ELSE` (false when there is none). Nulls count as
/// false: this is a filter's whole predicate.
#[derive(Debug)]
struct Routed {
    /// The input columns read, in the order of the compact batch the branches address.
    columns: Vec<usize>,
    selector: Arc<dyn PhysicalExpr>,
    branches: Vec<(ScalarValue, Arc<dyn PhysicalExpr>)>,
    /// The branches' values when all are `u64` (a hash partition's number), for routing
    /// without building a scalar per row.
    partitions: Option<Vec<u64>>,
    otherwise: Option<Arc<dyn PhysicalExpr>>,
    /// The `CASE` as planned, for display.
    original: Arc<dyn PhysicalExpr>,
}

impl Routed {
    fn try_new(case: &CaseExpr, original: Arc<dyn PhysicalExpr>) -> Option<Self> {
        let selector = case.expr()?;
        let mut branches = Vec::new();
        for (when, then) in case.when_then_expr() {
            let value = when.downcast_ref::<Literal>()?.value().clone();
            if value.is_null() {
                return None;
            }
            branches.push((value, then.clone()));
        }
        let otherwise = case.else_expr().filter(|e| !never_true(e)).cloned();
        let partitions = branches
            .iter()
            .map(|(v, _)| match v {
                ScalarValue::UInt64(Some(k)) => Some(*k),
                _ => None,
            })
            .collect();
        // The columns read, and every expression re-addressed to them.
        let mut all: Vec<&Arc<dyn PhysicalExpr>> = vec![selector];
        all.extend(branches.iter().map(|(_, then)| then));
        all.extend(otherwise.iter());
        let (compact, columns) = compacted(&all);
        let mut compact = compact.into_iter();
        let selector = compact.next().expect("the selector, re-addressed");
        let branches = branches
            .into_iter()
            .zip(compact.by_ref())
            .map(|((value, _), then)| (value, weaken(then)))
            .collect();
        Some(Self {
            partitions,
            selector,
            branches,
            // What is left: the `ELSE`, when there is one.
            otherwise: compact.next(),
            columns,
            original,
        })
    }
}

impl PhysicalExpr for Routed {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(false)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let rows = batch.num_rows();
        let compact = batch.project(&self.columns)?;
        let selector = self.selector.evaluate(&compact)?.into_array(rows)?;
        // Each row's branch (`branches.len()` for the `ELSE`).
        let count = self.branches.len();
        let mut routes: Vec<Vec<u32>> = vec![Vec::new(); count + 1];
        match (&self.partitions, selector.as_primitive_opt::<UInt64Type>()) {
            (Some(partitions), Some(selector)) => {
                for (row, value) in selector.iter().enumerate() {
                    let branch = value
                        .and_then(|v| partitions.iter().position(|k| *k == v))
                        .unwrap_or(count);
                    routes[branch].push(row as u32);
                }
            }
            _ => {
                for row in 0..rows {
                    let value = ScalarValue::try_from_array(&selector, row)?;
                    let branch = self
                        .branches
                        .iter()
                        .position(|(v, _)| !value.is_null() && *v == value)
                        .unwrap_or(count);
                    routes[branch].push(row as u32);
                }
            }
        }
        let thens = self
            .branches
            .iter()
            .map(|(_, then)| Some(then))
            .chain(std::iter::once(self.otherwise.as_ref()));
        let mut passing: Vec<usize> = Vec::new();
        for (then, rows_of) in thens.zip(&routes) {
            let Some(then) = then else { continue };
            if rows_of.is_empty() {
                continue;
            }
            let indices = UInt32Array::from(rows_of.clone());
            let taken = take_record_batch(&compact, &indices)?;
            let passed = kept(then.evaluate(&taken)?, rows_of.len())?;
            passing.extend(
                rows_of
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| passed.keeps(*k))
                    .map(|(_, &row)| row as usize),
            );
        }
        let result = bitmap(passing.into_iter(), rows);
        Ok(ColumnarValue::Array(Arc::new(BooleanArray::new(
            result, None,
        ))))
    }

    // Evaluated on its own compact batches: nothing to re-address from outside.
    crate::leaf_of_original!(original);
}

impl fmt::Display for Routed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "routed({})", self.original)
    }
}

crate::same_as_inner_expr!(Routed, original);

impl PhysicalExpr for RuntimeFilter {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.dynamic.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let (generation, expr) = self.current()?;
        let Some(expr) = expr else {
            return Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))));
        };
        let result = expr.evaluate(batch)?;
        if let ColumnarValue::Array(array) = &result {
            self.judge(
                generation,
                batch.num_rows(),
                array.as_boolean().true_count(),
            );
        }
        Ok(result)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.dynamic]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(RuntimeFilter::new(
            children.remove(0),
            self.bitmap_only,
            self.keys.clone(),
        )))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "runtime_filter(")?;
        self.dynamic.fmt_sql(f)?;
        write!(f, ")")
    }
}

impl fmt::Display for RuntimeFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RuntimeFilter({})", self.dynamic)
    }
}

crate::same_as_inner_expr!(RuntimeFilter, dynamic);

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, UInt64Array};
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::binary;

    use super::*;

    #[test]
    fn a_routed_case_tests_each_row_against_its_own_branch() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("wide", DataType::Int64, true),
            Field::new("route", DataType::UInt64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        let route: UInt64Array = (0..500u64).map(|i| (i % 9 != 4).then_some(i % 3)).collect();
        let b: Int64Array = (0..500i64)
            .map(|i| (i % 11 != 2).then_some(i % 10))
            .collect();
        let wide: Int64Array = (0..500i64).map(Some).collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(wide), Arc::new(route), Arc::new(b)],
        )
        .unwrap();
        let col = |n: &str| -> Arc<dyn PhysicalExpr> {
            Arc::new(Column::new_with_schema(n, &schema).unwrap())
        };
        let int = |v: i64| -> Arc<dyn PhysicalExpr> {
            Arc::new(Literal::new(ScalarValue::Int64(Some(v))))
        };
        let key = |v: u64| -> Arc<dyn PhysicalExpr> {
            Arc::new(Literal::new(ScalarValue::UInt64(Some(v))))
        };
        // Route 0 keeps b > 5, route 1 keeps b < 3, route 2 goes to the ELSE: b = 4.
        let case: Arc<dyn PhysicalExpr> = Arc::new(
            CaseExpr::try_new(
                Some(col("route")),
                vec![
                    (
                        key(0),
                        binary(col("b"), Operator::Gt, int(5), &schema).unwrap(),
                    ),
                    (
                        key(1),
                        binary(col("b"), Operator::Lt, int(3), &schema).unwrap(),
                    ),
                ],
                Some(binary(col("b"), Operator::Eq, int(4), &schema).unwrap()),
            )
            .unwrap(),
        );
        let weakened = weaken(case);
        assert!(weakened.downcast_ref::<Routed>().is_some());
        let ColumnarValue::Array(got) = weakened.evaluate(&batch).unwrap() else {
            panic!("an array");
        };
        let got: Vec<bool> = got.as_boolean().iter().map(|v| v == Some(true)).collect();
        let expected: Vec<bool> = (0..500u64)
            .map(|i| {
                let b = (i % 11 != 2).then_some(i as i64 % 10);
                match ((i % 9 != 4).then_some(i % 3), b) {
                    (_, None) => false,
                    (Some(0), Some(b)) => b > 5,
                    (Some(1), Some(b)) => b < 3,
                    (_, Some(b)) => b == 4,
                }
            })
            .collect();
        assert_eq!(got, expected);
    }
}
