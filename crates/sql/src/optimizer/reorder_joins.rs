//! The order of inner joins, chosen from table statistics.
//!
//! DataFusion joins tables in the order the query names them (turning `FROM a, b, c WHERE …`
//! into joins from the left, each with the first table that shares a key with what is joined
//! so far) and only swaps the two sides of each join. In a chain such as TPC-H Q5 that joins
//! `customer` and `orders` first and repartitions all of `lineitem` for them, while the few
//! suppliers of one region would have cut `lineitem` to a fifth at the cost of probing a tiny
//! hash table.
//!
//! [`ReorderJoins`] takes every maximal tree of inner equi-joins (looking through the column
//! projections between them), estimates each input's rows from the Iceberg tables' statistics
//! (row counts, column bounds; filters' selectivities from those bounds) and each join's
//! output from its keys' distinct values, and searches all left-deep orders that join
//! connected inputs for the one with the least estimated work. The plan is rewritten only when
//! that order is estimated at most 80 % of the work of the query's own order. Joins without a
//! key (nested-loop joins, such as TPC-H Q7's two `nation` rows joined on an `OR` of their
//! names) are counted apart and avoided first: DataFusion knows nothing of their output size,
//! so every hash join above one is planned blind (in Q7 all 1.5 million `orders` became the
//! build side against 8,000 customers). Which side of each join builds is DataFusion's choice.
//!
//! It fires on trees of 3 to 12 inputs joined by logical inner joins with `ON` conditions (not
//! `USING`), nulls equal to nothing and not null-aware, through projections of bare columns;
//! outer, semi, anti and mark joins end a tree (their inputs are reordered on their own). It
//! refuses a tree two of whose inputs share a column, or with a condition reading a column
//! no input owns.
//!
//! Why the answer cannot change: inner joins are commutative and associative over bags of
//! rows, so every order yields the same rows with the same multiplicities (an empty input
//! empties the result in any order). Each key equality and each conjunct of a join filter is
//! applied at the first join where every input it reads is present; among inner joins a
//! condition holds at any join above its inputs or at none, as a row failing it yields no
//! output row wherever it fails. A key equality applied as a filter drops null keys as the key
//! did. A projection of the tree's own columns, in their order, ends the new tree.
//!
//! A tree with a volatile condition (`random() < 0.5` in an `ON`) is left as it is: moved, the
//! condition would be drawn for other combinations of rows.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, NullEquality, Result, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction_owned;
use datafusion::logical_expr::{
    BinaryExpr, Expr, Join, JoinConstraint, JoinType, LogicalPlan, Operator, Projection,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::optimizer::utils::scan_statistics;

/// Inputs beyond which a join tree is left in the query's order (the search is exponential).
const MAX_INPUTS: usize = 12;
/// A new order must be estimated at most this share of the query's own order's work.
const GAIN: f64 = 0.8;
/// Rows assumed for an input whose size nothing tells.
const UNKNOWN_ROWS: f64 = 1_000_000.0;
/// Build sides larger than this are hash-partitioned by DataFusion (both inputs are shuffled).
const PARTITIONED_BUILD_ROWS: f64 = 131_072.0;

/// The logical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct ReorderJoins;

impl OptimizerRule for ReorderJoins {
    fn name(&self) -> &str {
        "floe_reorder_joins"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        reorder(plan)
    }
}

fn reorder(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    if matches!(&plan, LogicalPlan::Join(join) if reorderable(join))
        && let Some(rewritten) = reorder_tree(&plan)?
    {
        return Ok(Transformed::yes(rewritten));
    }
    // Not rewritten here: joins further down (inside this tree too) may still be.
    plan.map_children(reorder)
}

/// Inner equi-joins whose inputs may be joined in any order.
fn reorderable(join: &Join) -> bool {
    join.join_type == JoinType::Inner
        && join.join_constraint == JoinConstraint::On
        && join.null_equality == NullEquality::NullEqualsNothing
        && !join.null_aware
}

/// A join tree: inputs by index, joined pairwise.
enum Tree {
    Input(usize),
    Join(Box<Tree>, Box<Tree>),
}

/// A set of inputs, one bit each.
type Set = u32;

/// A join condition and the inputs each of its sides reads.
struct Condition {
    expr: Expr,
    /// For `a = b` from a join's keys: the two sides and the inputs each reads.
    equi: Option<(Expr, Set, Expr, Set)>,
    inputs: Set,
}

/// What the estimates know of a column.
#[derive(Clone, Copy)]
struct ColumnEstimate {
    distinct: f64,
    /// Whether `distinct` comes from bounds (otherwise it is the table's rows).
    distinct_known: bool,
    min: Option<f64>,
    max: Option<f64>,
}

/// What the estimates know of an input: rows after its filters, rows of what it reads
/// (before filters), and its columns in schema order.
#[derive(Clone)]
struct Estimate {
    rows: f64,
    base_rows: f64,
    columns: Vec<ColumnEstimate>,
}

impl Estimate {
    fn unknown(rows: f64, width: usize) -> Self {
        Self::derived(rows, Vec::new(), width)
    }

    /// An input made from others (an aggregation, a join): its `rows` are also its base rows;
    /// columns past `columns`, up to `width`, are unknown.
    fn derived(rows: f64, mut columns: Vec<ColumnEstimate>, width: usize) -> Self {
        columns.resize(width, ColumnEstimate::unknown(rows));
        Self {
            rows,
            base_rows: rows,
            columns,
        }
    }

    /// What is known of `column` of this input, whose schema is `schema`.
    fn column(&self, schema: &DFSchema, column: &Column) -> Option<ColumnEstimate> {
        let index = schema.index_of_column(column).ok()?;
        self.columns.get(index).copied()
    }
}

impl ColumnEstimate {
    fn unknown(rows: f64) -> Self {
        Self {
            distinct: rows.max(1.0),
            distinct_known: false,
            min: None,
            max: None,
        }
    }
}

struct Region {
    inputs: Vec<LogicalPlan>,
    conditions: Vec<Condition>,
}

/// The tree rooted at `root` in a better order, or `None` when its own order is kept.
fn reorder_tree(root: &LogicalPlan) -> Result<Option<LogicalPlan>> {
    let mut region = Region {
        inputs: Vec::new(),
        conditions: Vec::new(),
    };
    let mut pending = Vec::new();
    let tree = flatten(root, &mut region.inputs, &mut pending);
    let n = region.inputs.len();
    if !(3..=MAX_INPUTS).contains(&n) {
        return Ok(None);
    }
    // Which input each column comes from.
    let mut owner: HashMap<Column, usize> = HashMap::new();
    for (i, input) in region.inputs.iter().enumerate() {
        for column in input.schema().columns() {
            if owner.insert(column, i).is_some() {
                return Ok(None);
            }
        }
    }
    let inputs_of = |expr: &Expr| -> Option<Set> {
        let mut set = 0;
        for column in expr.column_refs() {
            set |= 1 << owner.get(column)?;
        }
        Some(set)
    };
    for item in pending {
        // A volatile condition (`random() < 0.5`) is drawn per row of the join it sits at;
        // moved elsewhere it would be drawn for other combinations of rows.
        let volatile = match &item {
            Pending::Key(left, right) => left.is_volatile() || right.is_volatile(),
            Pending::Filter(expr) => expr.is_volatile(),
        };
        if volatile {
            return Ok(None);
        }
        let condition = match item {
            Pending::Key(left, right) => {
                let (Some(l), Some(r)) = (inputs_of(&left), inputs_of(&right)) else {
                    return Ok(None);
                };
                Condition {
                    expr: Expr::BinaryExpr(BinaryExpr::new(
                        Box::new(left.clone()),
                        Operator::Eq,
                        Box::new(right.clone()),
                    )),
                    equi: Some((left, l, right, r)),
                    inputs: l | r,
                }
            }
            Pending::Filter(expr) => {
                let Some(inputs) = inputs_of(&expr) else {
                    return Ok(None);
                };
                Condition {
                    expr,
                    equi: None,
                    inputs,
                }
            }
        };
        region.conditions.push(condition);
    }

    let estimates: Vec<Estimate> = region.inputs.iter().map(estimate).collect();
    let model = Model::new(&region, &estimates, &owner);
    let own = model.tree_cost(&tree).0;
    let (best, order) = model.best_left_deep();
    if order.len() != n || !best.better_than(own) {
        return Ok(None);
    }

    // Optimize inside each input (subqueries' joins), then join them in the chosen order.
    let mut inputs: Vec<Option<LogicalPlan>> = region
        .inputs
        .into_iter()
        .map(|input| reorder(input).map(|t| Some(t.data)))
        .collect::<Result<_>>()?;
    let mut used = vec![false; region.conditions.len()];
    let first = order[0];
    let mut joined: Set = 1 << first;
    let mut plan = inputs[first].take().expect("each input joined once");
    for &next in &order[1..] {
        let right = inputs[next].take().expect("each input joined once");
        let with: Set = joined | 1 << next;
        let mut on = Vec::new();
        let mut filters = Vec::new();
        for (condition, used) in region.conditions.iter().zip(used.iter_mut()) {
            if *used || condition.inputs & !with != 0 {
                continue;
            }
            *used = true;
            match &condition.equi {
                Some((l, ls, r, rs)) if *ls & !joined == 0 && *rs == 1 << next => {
                    on.push((l.clone(), r.clone()))
                }
                Some((l, ls, r, rs)) if *rs & !joined == 0 && *ls == 1 << next => {
                    on.push((r.clone(), l.clone()))
                }
                _ => filters.push(condition.expr.clone()),
            }
        }
        let filter = filters.into_iter().reduce(Expr::and);
        plan = LogicalPlan::Join(Join::try_new(
            Arc::new(plan),
            Arc::new(right),
            on,
            filter,
            JoinType::Inner,
            JoinConstraint::On,
            NullEquality::NullEqualsNothing,
            false,
        )?);
        joined = with;
    }
    // The tree's own columns, in its order.
    let columns = root.schema().columns().into_iter().map(Expr::Column);
    let projection = Projection::try_new(columns.collect(), Arc::new(plan))?;
    Ok(Some(LogicalPlan::Projection(projection)))
}

/// A join key pair or a filter conjunct, before its inputs are known.
enum Pending {
    Key(Expr, Expr),
    Filter(Expr),
}

fn flatten(plan: &LogicalPlan, inputs: &mut Vec<LogicalPlan>, pending: &mut Vec<Pending>) -> Tree {
    match plan {
        LogicalPlan::Join(join) if reorderable(join) => {
            let left = flatten(&join.left, inputs, pending);
            let right = flatten(&join.right, inputs, pending);
            for (l, r) in &join.on {
                pending.push(Pending::Key(l.clone(), r.clone()));
            }
            if let Some(filter) = &join.filter {
                for conjunct in split_conjunction_owned(filter.clone()) {
                    pending.push(Pending::Filter(conjunct));
                }
            }
            Tree::Join(Box::new(left), Box::new(right))
        }
        LogicalPlan::Projection(projection)
            if projection.expr.iter().all(|e| matches!(e, Expr::Column(_)))
                && matches!(projection.input.as_ref(), LogicalPlan::Join(j) if reorderable(j)) =>
        {
            flatten(&projection.input, inputs, pending)
        }
        other => {
            inputs.push(other.clone());
            Tree::Input(inputs.len() - 1)
        }
    }
}

/// The estimated cost of a join order: its joins without a key, then its work (rows).
#[derive(Clone, Copy)]
struct Cost {
    keyless: u32,
    work: f64,
}

impl Cost {
    const ZERO: Cost = Cost {
        keyless: 0,
        work: 0.0,
    };
    const NONE: Cost = Cost {
        keyless: u32::MAX,
        work: f64::INFINITY,
    };

    fn plus(self, other: Cost) -> Cost {
        Cost {
            keyless: self.keyless.saturating_add(other.keyless),
            work: self.work + other.work,
        }
    }

    fn less(self, other: Cost) -> bool {
        self.keyless < other.keyless || (self.keyless == other.keyless && self.work < other.work)
    }

    /// Whether an order of this cost replaces the query's own (of cost `own`): fewer joins
    /// without a key, or as many and at most [`GAIN`] of the work. (False when an estimate is
    /// not a number, which keeps the query's order.)
    fn better_than(self, own: Cost) -> bool {
        self.keyless < own.keyless
            || (self.keyless == own.keyless
                && self.work.partial_cmp(&(GAIN * own.work)) == Some(std::cmp::Ordering::Less))
    }
}

/// Estimated rows and work of join orders over one region.
struct Model {
    n: usize,
    /// Rows of every subset of inputs joined (by the subset's bits).
    cards: Vec<f64>,
    /// Pairs of inputs sharing a join key.
    linked: Vec<Set>,
}

impl Model {
    fn new(region: &Region, estimates: &[Estimate], owner: &HashMap<Column, usize>) -> Self {
        let n = region.inputs.len();
        let rows: Vec<f64> = estimates.iter().map(|e| e.rows.max(1.0)).collect();
        let mut linked = vec![0 as Set; n];
        // Key pairs grouped by the two inputs they join.
        let mut keys: HashMap<(usize, usize), Vec<(&Expr, &Expr)>> = HashMap::new();
        let mut others: Vec<(Set, f64)> = Vec::new();
        // A column's estimate and its input's base rows.
        let lookup = |column: &Column| {
            let input = *owner.get(column)?;
            let estimate = &estimates[input];
            let found = estimate.column(region.inputs[input].schema(), column)?;
            Some((found, estimate.base_rows))
        };
        let column_of = |expr: &Expr| match unwrap_casts(expr) {
            Expr::Column(column) => lookup(column).map(|(found, _)| found),
            _ => None,
        };
        for condition in &region.conditions {
            match &condition.equi {
                Some((l, ls, r, rs))
                    if ls.count_ones() == 1 && rs.count_ones() == 1 && ls != rs =>
                {
                    let (i, j) = (ls.trailing_zeros() as usize, rs.trailing_zeros() as usize);
                    linked[i] |= 1 << j;
                    linked[j] |= 1 << i;
                    if i < j {
                        keys.entry((i, j)).or_default().push((l, r));
                    } else {
                        keys.entry((j, i)).or_default().push((r, l));
                    }
                }
                _ => others.push((condition.inputs, selectivity(&condition.expr, &lookup))),
            }
        }
        // Selectivity of each linked pair: one over the distinct keys of the side holding
        // unique keys (a key-like side), or of the side with more distinct keys.
        let mut pair_selectivity: HashMap<(usize, usize), f64> = HashMap::new();
        for (&(i, j), pairs) in &keys {
            let side = |input: usize, exprs: Vec<&Expr>| -> (f64, bool) {
                let base = estimates[input].base_rows.max(1.0);
                let mut distinct = 1.0f64;
                for expr in exprs {
                    distinct *= column_of(expr).map_or(base, |c| c.distinct);
                }
                let distinct = distinct.min(base);
                (distinct, distinct >= 0.9 * base)
            };
            let (di, ki) = side(i, pairs.iter().map(|(l, _)| *l).collect());
            let (dj, kj) = side(j, pairs.iter().map(|(_, r)| *r).collect());
            let distinct = match (ki, kj) {
                (true, true) => di.min(dj),
                (true, false) => di,
                (false, true) => dj,
                (false, false) => di.max(dj),
            };
            pair_selectivity.insert((i, j), 1.0 / distinct.max(1.0));
        }
        let mut cards = vec![1.0f64; 1 << n];
        for set in 1..(1usize << n) {
            let low = set.trailing_zeros() as usize;
            let rest = set & (set - 1);
            let mut card = cards[rest] * rows[low];
            for j in 0..n {
                if rest & (1 << j) != 0
                    && let Some(s) = pair_selectivity.get(&(low.min(j), low.max(j)))
                {
                    card *= s;
                }
            }
            for (inputs, s) in &others {
                let inputs = *inputs as usize;
                if inputs & (1 << low) != 0 && inputs & !set == 0 {
                    card *= s;
                }
            }
            cards[set] = card.max(1.0);
        }
        Self { n, cards, linked }
    }

    /// Estimated cost of joining `a` and `b` (one set each) into their union.
    fn join_cost(&self, a: Set, b: Set) -> Cost {
        let (ra, rb) = (self.cards[a as usize], self.cards[b as usize]);
        let out = self.cards[(a | b) as usize];
        let keyed = (0..self.n).any(|i| a & (1 << i) != 0 && self.linked[i] & b != 0);
        if !keyed {
            // A nested-loop join: every pair of rows.
            return Cost {
                keyless: 1,
                work: ra * rb + out,
            };
        }
        let (build, probe) = (ra.min(rb), ra.max(rb));
        let mut work = probe + 2.0 * build + out;
        if build > PARTITIONED_BUILD_ROWS {
            work += ra + rb;
        }
        Cost { keyless: 0, work }
    }

    /// The cost of `tree` and the inputs it joins.
    fn tree_cost(&self, tree: &Tree) -> (Cost, Set) {
        match tree {
            Tree::Input(i) => (Cost::ZERO, 1 << i),
            Tree::Join(left, right) => {
                let (cl, l) = self.tree_cost(left);
                let (cr, r) = self.tree_cost(right);
                (cl.plus(cr).plus(self.join_cost(l, r)), l | r)
            }
        }
    }

    /// The cheapest left-deep order (each input joined to all before it) and its cost.
    fn best_left_deep(&self) -> (Cost, Vec<usize>) {
        let full = (1usize << self.n) - 1;
        let mut best = vec![Cost::NONE; 1 << self.n];
        let mut last = vec![usize::MAX; 1 << self.n];
        for i in 0..self.n {
            best[1 << i] = Cost::ZERO;
            last[1 << i] = i;
        }
        for set in 1..=full {
            if set.count_ones() < 2 {
                continue;
            }
            for x in 0..self.n {
                if set & (1 << x) == 0 {
                    continue;
                }
                let rest = set & !(1 << x);
                if !best[rest].work.is_finite() {
                    continue;
                }
                let cost = best[rest].plus(self.join_cost(rest as Set, 1 << x));
                // Ties go to the lower input: the query's own order where nothing differs.
                if cost.less(best[set]) {
                    best[set] = cost;
                    last[set] = x;
                }
            }
        }
        let mut order = Vec::with_capacity(self.n);
        let mut set = full;
        while set != 0 {
            let x = last[set];
            if x == usize::MAX {
                // No order was costed (cannot happen with finite estimates): keep the query's.
                return (Cost::NONE, Vec::new());
            }
            order.push(x);
            set &= !(1 << x);
        }
        order.reverse();
        (best[full], order)
    }
}

/// The estimated rows and columns of an input.
fn estimate(plan: &LogicalPlan) -> Estimate {
    let width = plan.schema().fields().len();
    match plan {
        LogicalPlan::TableScan(scan) => {
            let Some((statistics, indices)) = scan_statistics(scan) else {
                return Estimate::unknown(UNKNOWN_ROWS, width);
            };
            let mut rows = statistics
                .num_rows
                .get_value()
                .map_or(UNKNOWN_ROWS, |r| *r as f64);
            if let Some(fetch) = scan.fetch {
                rows = rows.min(fetch as f64);
            }
            let source_schema = scan.source.schema();
            let columns = indices
                .iter()
                .map(|&i| {
                    let Some(column) = statistics.column_statistics.get(i) else {
                        return ColumnEstimate::unknown(rows);
                    };
                    let min = column.min_value.get_value().and_then(to_f64);
                    let max = column.max_value.get_value().and_then(to_f64);
                    let discrete = matches!(
                        source_schema.field(i).data_type(),
                        DataType::Int8
                            | DataType::Int16
                            | DataType::Int32
                            | DataType::Int64
                            | DataType::UInt8
                            | DataType::UInt16
                            | DataType::UInt32
                            | DataType::UInt64
                            | DataType::Date32
                    );
                    match (min, max) {
                        (Some(lo), Some(hi)) if discrete && hi >= lo => ColumnEstimate {
                            distinct: (hi - lo + 1.0).min(rows).max(1.0),
                            distinct_known: true,
                            min,
                            max,
                        },
                        _ => ColumnEstimate {
                            min,
                            max,
                            ..ColumnEstimate::unknown(rows)
                        },
                    }
                })
                .collect();
            Estimate {
                rows,
                base_rows: rows,
                columns,
            }
        }
        LogicalPlan::Filter(filter) => {
            let mut input = estimate(&filter.input);
            let schema = filter.input.schema();
            let lookup = |c: &Column| Some((input.column(schema, c)?, input.base_rows));
            let s = selectivity(&filter.predicate, &lookup);
            input.rows = (input.rows * s).max(1.0);
            input
        }
        LogicalPlan::Projection(projection) => {
            let input = estimate(&projection.input);
            let schema = projection.input.schema();
            let columns = projection
                .expr
                .iter()
                .map(|e| match unwrap_casts(e) {
                    Expr::Column(c) => input.column(schema, c),
                    _ => None,
                })
                .map(|c| c.unwrap_or_else(|| ColumnEstimate::unknown(input.rows)))
                .collect();
            Estimate { columns, ..input }
        }
        LogicalPlan::SubqueryAlias(alias) => estimate(&alias.input),
        LogicalPlan::Aggregate(aggregate) => {
            let input = estimate(&aggregate.input);
            let schema = aggregate.input.schema();
            let groups: Vec<Option<ColumnEstimate>> = aggregate
                .group_expr
                .iter()
                .map(|e| match e {
                    Expr::Column(c) => input.column(schema, c),
                    _ => None,
                })
                .collect();
            let rows = if aggregate.group_expr.is_empty() {
                1.0
            } else {
                let combinations: f64 = groups
                    .iter()
                    .map(|g| g.map_or(input.rows, |g| g.distinct))
                    .product();
                combinations.min(input.rows).max(1.0)
            };
            let columns = groups
                .into_iter()
                .map(|g| match g {
                    Some(g) => ColumnEstimate {
                        distinct: g.distinct.min(rows),
                        ..g
                    },
                    None => ColumnEstimate::unknown(rows),
                })
                .collect();
            Estimate::derived(rows, columns, width)
        }
        LogicalPlan::Join(join) => {
            let left = estimate(&join.left);
            let right = estimate(&join.right);
            let rows = match join.join_type {
                JoinType::LeftSemi | JoinType::LeftAnti => left.rows * 0.5,
                JoinType::RightSemi | JoinType::RightAnti => right.rows * 0.5,
                JoinType::Left | JoinType::LeftMark => left.rows,
                JoinType::Right | JoinType::RightMark => right.rows,
                JoinType::Full => left.rows + right.rows,
                JoinType::Inner => left.rows.max(right.rows),
            }
            .max(1.0);
            let columns = if width == left.columns.len() {
                left.columns
            } else if width == right.columns.len() {
                right.columns
            } else {
                left.columns.into_iter().chain(right.columns).collect()
            };
            Estimate::derived(rows, columns, width)
        }
        LogicalPlan::Limit(limit) => {
            let mut input = estimate(&limit.input);
            if let Ok(datafusion::logical_expr::logical_plan::FetchType::Literal(Some(fetch))) =
                limit.get_fetch_type()
            {
                input.rows = input.rows.min(fetch as f64).max(1.0);
            }
            input
        }
        LogicalPlan::Distinct(_) | LogicalPlan::Sort(_) | LogicalPlan::Repartition(_) => {
            let mut input = estimate(plan.inputs()[0]);
            input
                .columns
                .resize(width, ColumnEstimate::unknown(input.rows));
            input
        }
        _ => {
            let rows = plan
                .inputs()
                .iter()
                .map(|i| estimate(i).rows)
                .fold(0.0, f64::max);
            let rows = if rows > 0.0 { rows } else { UNKNOWN_ROWS };
            Estimate::unknown(rows, width)
        }
    }
}

/// The share of rows `predicate` keeps, from the bounds and distinct values of the columns it
/// reads (`lookup` gives a column's estimate and its input's rows).
fn selectivity(predicate: &Expr, lookup: &dyn Fn(&Column) -> Option<(ColumnEstimate, f64)>) -> f64 {
    let column = |e: &Expr| match unwrap_casts(e) {
        Expr::Column(c) => lookup(c),
        _ => None,
    };
    let literal = |e: &Expr| match unwrap_casts(e) {
        Expr::Literal(v, _) => to_f64(v).map(Some).or(Some(None)),
        _ => None,
    };
    let equal = |(c, rows): (ColumnEstimate, f64)| {
        if c.distinct_known {
            1.0 / c.distinct.max(1.0)
        } else {
            (1.0 / rows.max(1.0)).max(0.05)
        }
    };
    let s = match predicate {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => selectivity(left, lookup) * selectivity(right, lookup),
            Operator::Or => {
                let (a, b) = (selectivity(left, lookup), selectivity(right, lookup));
                a + b - a * b
            }
            Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq => {
                // Column against a literal, either way round.
                let (c, v, op) = match (column(left), literal(right), column(right), literal(left))
                {
                    (Some(c), Some(v), _, _) => (c, v, *op),
                    (_, _, Some(c), Some(v)) => (c, v, op.swap().unwrap_or(*op)),
                    (Some(_), None, Some(_), None) => {
                        return if *op == Operator::Eq { 0.1 } else { 1.0 / 3.0 };
                    }
                    _ => return 0.5,
                };
                match op {
                    Operator::Eq => equal(c),
                    Operator::NotEq => 1.0 - equal(c),
                    _ => range(c, v, op),
                }
            }
            _ => 0.5,
        },
        Expr::Not(inner) => 1.0 - selectivity(inner, lookup),
        Expr::Between(between) => {
            let s = match (
                column(&between.expr),
                literal(&between.low).flatten(),
                literal(&between.high).flatten(),
            ) {
                (Some(c), Some(low), Some(high)) => match (c.0.min, c.0.max) {
                    (Some(min), Some(max)) if max > min => {
                        ((high.min(max) - low.max(min)) / (max - min)).clamp(0.0, 1.0)
                    }
                    _ => 0.25,
                },
                _ => 0.25,
            };
            if between.negated { 1.0 - s } else { s }
        }
        Expr::InList(list) => {
            let one = column(&list.expr).map_or(0.1, equal);
            let s = (one * list.list.len() as f64).min(1.0);
            if list.negated { 1.0 - s } else { s }
        }
        Expr::Like(like) | Expr::SimilarTo(like) => {
            if like.negated {
                0.9
            } else {
                0.1
            }
        }
        Expr::IsNull(_) => 0.05,
        Expr::IsNotNull(_) => 0.95,
        _ => 0.5,
    };
    s.clamp(0.0, 1.0)
}

/// The share of a column's values on `op`'s side of `value`, by its bounds.
fn range((c, rows): (ColumnEstimate, f64), value: Option<f64>, op: Operator) -> f64 {
    let (Some(min), Some(max), Some(v)) = (c.min, c.max, value) else {
        return 1.0 / 3.0;
    };
    if max <= min {
        return 1.0 / 3.0;
    }
    let below = ((v - min) / (max - min)).clamp(0.0, 1.0);
    let share = match op {
        Operator::Lt | Operator::LtEq => below,
        _ => 1.0 - below,
    };
    share.max(1.0 / rows.max(1.0))
}

fn unwrap_casts(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(cast) => unwrap_casts(&cast.expr),
        Expr::TryCast(cast) => unwrap_casts(&cast.expr),
        other => other,
    }
}

/// A number, date or time as a float, to place it between bounds.
fn to_f64(value: &ScalarValue) -> Option<f64> {
    Some(match value {
        ScalarValue::Int8(Some(v)) => *v as f64,
        ScalarValue::Int16(Some(v)) => *v as f64,
        ScalarValue::Int32(Some(v)) => *v as f64,
        ScalarValue::Int64(Some(v)) => *v as f64,
        ScalarValue::UInt8(Some(v)) => *v as f64,
        ScalarValue::UInt16(Some(v)) => *v as f64,
        ScalarValue::UInt32(Some(v)) => *v as f64,
        ScalarValue::UInt64(Some(v)) => *v as f64,
        ScalarValue::Float32(Some(v)) => *v as f64,
        ScalarValue::Float64(Some(v)) => *v,
        ScalarValue::Date32(Some(v)) => *v as f64,
        ScalarValue::Date64(Some(v)) => *v as f64 / 86_400_000.0,
        ScalarValue::Decimal128(Some(v), _, scale) => *v as f64 / 10f64.powi(*scale as i32),
        ScalarValue::TimestampSecond(Some(v), _) => *v as f64,
        ScalarValue::TimestampMillisecond(Some(v), _) => *v as f64 / 1e3,
        ScalarValue::TimestampMicrosecond(Some(v), _) => *v as f64 / 1e6,
        ScalarValue::TimestampNanosecond(Some(v), _) => *v as f64 / 1e9,
        _ => return None,
    })
}
