//! `INTERSECT ALL` and `EXCEPT ALL` with bag semantics.
//!
//! SQL keeps `min(m, n)` copies of a row that the left side has `m` times and the right side
//! `n` times under `INTERSECT ALL`, and `max(m - n, 0)` under `EXCEPT ALL`. DataFusion 54
//! plans them as a plain semi and anti join on every column (nulls equal), which keeps all
//! `m` copies or none: `VALUES (1), (1), (1), (2) INTERSECT ALL VALUES (1), (2), (2)` answers
//! 1, 1, 1, 2 instead of 1, 2, and the same `EXCEPT ALL` answers no row instead of 1, 1
//! (found by `floe bench fuzz`).
//!
//! [`MultisetSetOps`], an analyzer rule (it runs on the plan as SQL made it, before any
//! optimizer rule could make another join of that form), numbers the copies of each row on
//! both sides (`row_number()` over a window partitioned by that side's join keys, the values
//! the join compares) and adds the numbers
//! to the join's keys: the `k`-th copy of a row on the left meets the `k`-th on the right, so
//! the semi join keeps `min(m, n)` copies and the anti join the `m - n` beyond the right's.
//!
//! It fires on a semi or anti join whose keys pair every column of the left with the column
//! at the same position on the right — either possibly under the cast type coercion puts
//! there when the two sides' types differ (`BIGINT EXCEPT ALL max(INT)`) — nulls equal, with
//! no other condition, whose left input
//! is not `DISTINCT` — the form DataFusion's planner gives `INTERSECT ALL` and `EXCEPT ALL`
//! and nothing else at this stage (subqueries are still expressions; the `DISTINCT` forms
//! put a `Distinct` on the left, where every copy is the first). It applies always: it
//! corrects an answer.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, NullEquality, Result};
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::{
    Expr, ExprFunctionExt, Join, JoinType, LogicalPlan, LogicalPlanBuilder,
};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct MultisetSetOps;

const LEFT_COPY: &str = "__floe_left_copy";
const RIGHT_COPY: &str = "__floe_right_copy";

impl AnalyzerRule for MultisetSetOps {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| match &node {
            LogicalPlan::Join(join) if is_bag_set_operation(join) => {
                Ok(Transformed::yes(numbered_join(join)?))
            }
            _ => Ok(Transformed::no(node)),
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "floe_multiset_set_ops"
    }
}

fn is_bag_set_operation(join: &Join) -> bool {
    let left = join.left.schema().fields();
    let right = join.right.schema().fields();
    matches!(join.join_type, JoinType::LeftSemi | JoinType::LeftAnti)
        && join.null_equality == NullEquality::NullEqualsNull
        && join.filter.is_none()
        && !matches!(join.left.as_ref(), LogicalPlan::Distinct(_))
        && !left.is_empty()
        && join.on.len() == left.len()
        && left.len() == right.len()
        && join.on.iter().enumerate().all(|(i, (l, r))| {
            key_column(l).is_some_and(|c| c.name == *left[i].name())
                && key_column(r).is_some_and(|c| c.name == *right[i].name())
        })
}

/// The column a join key compares: the column itself, or under a cast.
fn key_column(key: &Expr) -> Option<&Column> {
    match key {
        Expr::Column(column) => Some(column),
        Expr::Cast(cast) => key_column(&cast.expr),
        Expr::TryCast(cast) => key_column(&cast.expr),
        _ => None,
    }
}

/// `plan` with a column `name` numbering the copies of each value of `keys` among its rows.
fn numbered(plan: &Arc<LogicalPlan>, keys: Vec<Expr>, name: &str) -> Result<LogicalPlan> {
    let copy = row_number().partition_by(keys).build()?.alias(name);
    LogicalPlanBuilder::from(Arc::unwrap_or_clone(Arc::clone(plan)))
        .window(vec![copy])?
        .build()
}

fn numbered_join(join: &Join) -> Result<LogicalPlan> {
    let output: Vec<Expr> = join
        .left
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let (left_keys, right_keys): (Vec<Expr>, Vec<Expr>) = join.on.iter().cloned().unzip();
    let mut on = join.on.clone();
    on.push((
        Expr::Column(Column::from_name(LEFT_COPY)),
        Expr::Column(Column::from_name(RIGHT_COPY)),
    ));
    let numbered_join = Join::try_new(
        Arc::new(numbered(&join.left, left_keys, LEFT_COPY)?),
        Arc::new(numbered(&join.right, right_keys, RIGHT_COPY)?),
        on,
        None,
        join.join_type,
        join.join_constraint,
        NullEquality::NullEqualsNull,
        false,
    )?;
    LogicalPlanBuilder::from(LogicalPlan::Join(numbered_join))
        .project(output)?
        .build()
}
