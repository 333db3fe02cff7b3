//! `x IN (subquery)` keeps its third value, NULL, wherever a filter can tell NULL from FALSE.
//!
//! DataFusion 54 plans an `IN` subquery that is a whole condition of a filter as a semi join
//! (`NOT IN` as a null-aware anti join), which is right. One inside a larger expression —
//! `x NOT IN (…) OR b`, `(x IN (…)) IS NULL`, `NOT (x IN (…) AND c)` — becomes a mark join
//! whose mark is only ever TRUE or FALSE: it says FALSE where SQL says NULL (a null `x` over a
//! non-empty subquery, or no match where the subquery yields a null), so `NOT`, `IS NULL` and
//! `IS NOT TRUE` above it keep rows they must drop (found by `floe bench fuzz`: `WHERE b NOT
//! IN (SELECT b FROM u) OR b` answered 21 rows where DuckDB answers 17).
//!
//! [`ThreeValuedIn`] runs right before DataFusion's `decorrelate_predicate_subquery` and
//! rewrites each such `x IN (S)` (`S` a subquery yielding a column `y`) into
//!
//! ```text
//! CASE WHEN x IN (S)                      THEN TRUE
//!      WHEN x IS NULL                     THEN CASE WHEN EXISTS (S) THEN NULL ELSE FALSE END
//!      WHEN EXISTS (S WHERE y IS NULL)    THEN NULL
//!      ELSE FALSE END
//! ```
//!
//! (and `x NOT IN (S)` into `NOT` of it), leaving out the second branch when `x` cannot be
//! null by its type and the third when `y` cannot. The `IN` and the `EXISTS`s it holds become
//! mark joins as before, each now in a place where only TRUE counts.
//!
//! Where it fires: in a filter's predicate, on an `IN` subquery that is not itself a whole
//! condition of the filter (nor `NOT` of one) and is not reached only through `AND`, `OR` and
//! `CASE WHEN` conditions from the top — those are the places where a filter keeps the same
//! rows whether it reads NULL or FALSE, which the mark join gets right. Nowhere else: in a
//! projection or a join condition DataFusion does not plan `IN` subqueries at all.
//!
//! Why the answer cannot change where the mark join was right, and is right where it was not:
//! the `CASE` is the definition of `x IN (S)` in SQL's three-valued logic — TRUE when some
//! `y` equals `x`; otherwise FALSE when `S` is empty; otherwise NULL when `x` is null or some
//! `y` is null; otherwise FALSE — evaluated per outer row, so a correlated `S` is the same
//! subquery in each branch. It applies always, rewrites on or off: it corrects an answer.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{Exists, InSubquery};
use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
use datafusion::logical_expr::{
    BinaryExpr, Case, Expr, ExprSchemable, Filter, LogicalPlan, LogicalPlanBuilder, Operator,
    Subquery, lit, when,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// The logical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct ThreeValuedIn;

impl OptimizerRule for ThreeValuedIn {
    fn name(&self) -> &str {
        "floe_three_valued_in"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        plan.transform_up_with_subqueries(|node| {
            let LogicalPlan::Filter(filter) = node else {
                return Ok(Transformed::no(node));
            };
            if !has_in_subquery(&filter.predicate) {
                return Ok(Transformed::no(LogicalPlan::Filter(filter)));
            }
            let schema = Arc::clone(filter.input.schema());
            let mut changed = false;
            let mut conditions = Vec::new();
            for condition in split_conjunction_owned(filter.predicate.clone()) {
                if is_whole_subquery_condition(&condition) {
                    conditions.push(condition);
                    continue;
                }
                let rewritten = in_truth_place(condition, &schema)?;
                changed |= rewritten.transformed;
                conditions.push(rewritten.data);
            }
            if !changed {
                return Ok(Transformed::no(LogicalPlan::Filter(filter)));
            }
            let predicate = conjunction(conditions).unwrap_or_else(|| lit(true));
            Ok(Transformed::yes(LogicalPlan::Filter(Filter::try_new(
                predicate,
                filter.input,
            )?)))
        })
    }
}

fn has_in_subquery(expr: &Expr) -> bool {
    expr.exists(|e| Ok(matches!(e, Expr::InSubquery(_))))
        .unwrap_or(true)
}

/// A condition DataFusion turns into a semi or (null-aware) anti join of its own.
fn is_whole_subquery_condition(condition: &Expr) -> bool {
    match condition {
        Expr::InSubquery(_) | Expr::Exists(_) => true,
        Expr::Not(inner) => matches!(**inner, Expr::InSubquery(_) | Expr::Exists(_)),
        _ => false,
    }
}

/// `expr` where only its being TRUE matters (a filter's condition, the operand of `AND`/`OR`
/// in such a place, a `CASE WHEN` condition): `IN` subqueries stay as they are here.
fn in_truth_place(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::And | Operator::Or) =>
        {
            let left = in_truth_place(*left, schema)?;
            let right = in_truth_place(*right, schema)?;
            let transformed = left.transformed || right.transformed;
            let expr = Expr::BinaryExpr(BinaryExpr::new(
                Box::new(left.data),
                op,
                Box::new(right.data),
            ));
            Ok(Transformed::new_transformed(expr, transformed))
        }
        Expr::InSubquery(InSubquery {
            expr,
            subquery,
            negated: false,
        }) => {
            let left = in_value_place(*expr, schema)?;
            Ok(Transformed::new_transformed(
                Expr::InSubquery(InSubquery::new(Box::new(left.data), subquery, false)),
                left.transformed,
            ))
        }
        Expr::Case(case) => case_branches(case, schema, true),
        other => in_value_place(other, schema),
    }
}

/// `expr` where NULL and FALSE may differ: every `IN` subquery in it is rewritten.
fn in_value_place(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::InSubquery(InSubquery {
            expr,
            subquery,
            negated,
        }) => {
            let left = in_value_place(*expr, schema)?.data;
            three_valued(left, subquery, negated, schema)
        }
        Expr::Case(case) => case_branches(case, schema, false),
        other => other.map_children(|child| in_value_place(child, schema)),
    }
}

/// A `CASE`: its `WHEN` conditions are truth places; its results are where the `CASE` is.
fn case_branches(case: Case, schema: &DFSchema, truth: bool) -> Result<Transformed<Expr>> {
    let result = |e: Expr| {
        if truth {
            in_truth_place(e, schema)
        } else {
            in_value_place(e, schema)
        }
    };
    let mut transformed = false;
    let operand = match case.expr {
        Some(operand) => {
            let t = in_value_place(*operand, schema)?;
            transformed |= t.transformed;
            Some(Box::new(t.data))
        }
        None => None,
    };
    let mut when_then = Vec::with_capacity(case.when_then_expr.len());
    for (condition, then) in case.when_then_expr {
        // With an operand, a WHEN holds a value compared with it, not a condition.
        let condition = if operand.is_some() {
            in_value_place(*condition, schema)?
        } else {
            in_truth_place(*condition, schema)?
        };
        let then = result(*then)?;
        transformed |= condition.transformed || then.transformed;
        when_then.push((Box::new(condition.data), Box::new(then.data)));
    }
    let otherwise = match case.else_expr {
        Some(e) => {
            let t = result(*e)?;
            transformed |= t.transformed;
            Some(Box::new(t.data))
        }
        None => None,
    };
    Ok(Transformed::new_transformed(
        Expr::Case(Case::new(operand, when_then, otherwise)),
        transformed,
    ))
}

/// `x [NOT] IN (S)` in three-valued logic (the module documentation's `CASE`).
fn three_valued(
    x: Expr,
    subquery: Subquery,
    negated: bool,
    schema: &DFSchema,
) -> Result<Transformed<Expr>> {
    let x_nullable = x.nullable(schema).unwrap_or(true);
    let output = subquery.subquery.schema();
    let y_nullable = output.fields().first().is_none_or(|f| f.is_nullable());
    if !x_nullable && !y_nullable {
        return Ok(Transformed::no(Expr::InSubquery(InSubquery::new(
            Box::new(x),
            subquery,
            negated,
        ))));
    }
    let null = lit(ScalarValue::Boolean(None));
    let matched = Expr::InSubquery(InSubquery::new(
        Box::new(x.clone()),
        subquery.clone(),
        false,
    ));
    let mut cases = when(matched, lit(true));
    if x_nullable {
        let any = Expr::Exists(Exists::new(subquery.clone(), false));
        cases = cases.when(x.is_null(), when(any, null.clone()).otherwise(lit(false))?);
    }
    if y_nullable {
        let y = Expr::Column(Column::from(output.qualified_field(0)));
        let nulls = LogicalPlanBuilder::from(Arc::unwrap_or_clone(Arc::clone(&subquery.subquery)))
            .filter(y.is_null())?
            .build()?;
        let nulls = Subquery {
            subquery: Arc::new(nulls),
            outer_ref_columns: subquery.outer_ref_columns.clone(),
            spans: subquery.spans.clone(),
        };
        cases = cases.when(Expr::Exists(Exists::new(nulls, false)), null);
    }
    let in_three_values = cases.otherwise(lit(false))?;
    Ok(Transformed::yes(if negated {
        !in_three_values
    } else {
        in_three_values
    }))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionContext;

    use super::*;

    const TABLES: [&str; 2] = [
        "CREATE TABLE t (x INT) AS VALUES (1), (2), (NULL)",
        "CREATE TABLE u (y INT) AS VALUES (2), (NULL)",
    ];

    /// Each statement with the count SQL's three-valued logic gives (PostgreSQL and DuckDB
    /// agree).
    const CASES: [(&str, i64); 6] = [
        // x = 1: NULL OR TRUE; x = 2: FALSE OR FALSE; x NULL: NULL OR NULL.
        (
            "SELECT count(*) FROM t WHERE x NOT IN (SELECT y FROM u) OR x = 1",
            1,
        ),
        (
            "SELECT count(*) FROM t WHERE (x IN (SELECT y FROM u)) IS NULL",
            2,
        ),
        (
            "SELECT count(*) FROM t WHERE NOT (x IN (SELECT y FROM u) AND x > 0)",
            0,
        ),
        // The subquery without its null: x = 1 FALSE, x NULL NULL.
        (
            "SELECT count(*) FROM t WHERE (x IN (SELECT y FROM u WHERE y IS NOT NULL)) IS NOT TRUE",
            2,
        ),
        // An empty subquery: FALSE even for a null x.
        (
            "SELECT count(*) FROM t WHERE NOT (x IN (SELECT y FROM u WHERE y > 5)) OR false",
            3,
        ),
        // Whole conditions are DataFusion's semi and null-aware anti joins, left alone.
        ("SELECT count(*) FROM t WHERE x NOT IN (SELECT y FROM u)", 0),
    ];

    async fn count(ctx: &SessionContext, sql: &str) -> i64 {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let column = batches[0].column(0);
        let counts = column.as_any().downcast_ref::<Int64Array>().unwrap();
        counts.value(0)
    }

    async fn context(fixed: bool) -> SessionContext {
        let plain = SessionContext::new();
        let ctx = if fixed {
            let state = plain.state();
            let mut rules = Vec::new();
            for rule in state.optimizers() {
                if rule.name() == "decorrelate_predicate_subquery" {
                    rules.push(Arc::new(ThreeValuedIn)
                        as Arc<dyn datafusion::optimizer::OptimizerRule + Send + Sync>);
                }
                rules.push(rule.clone());
            }
            SessionContext::new_with_state(
                SessionStateBuilder::new_from_existing(state)
                    .with_optimizer_rules(rules)
                    .build(),
            )
        } else {
            plain
        };
        for table in TABLES {
            ctx.sql(table).await.unwrap().collect().await.unwrap();
        }
        ctx
    }

    #[tokio::test]
    async fn in_subqueries_inside_expressions_answer_in_three_valued_logic() {
        let fixed = context(true).await;
        for (sql, expected) in CASES {
            assert_eq!(count(&fixed, sql).await, expected, "{sql}");
        }
    }

    #[tokio::test]
    async fn datafusion_alone_still_answers_two_valued() {
        // DataFusion 54's mark join: x NULL counts as not in. When this fails, DataFusion
        // fixed it and the rule can go.
        let plain = context(false).await;
        assert_eq!(count(&plain, CASES[0].0).await, 2);
        assert_eq!(count(&plain, CASES[1].0).await, 0);
    }

    #[tokio::test]
    async fn a_rewritten_filter_is_not_rewritten_again() {
        let fixed = context(true).await;
        let plan = fixed
            .sql(CASES[0].0)
            .await
            .unwrap()
            .into_optimized_plan()
            .unwrap();
        let joins = plan
            .display_indent()
            .to_string()
            .matches("LeftMark")
            .count();
        // The IN, EXISTS (S) for a null x, EXISTS (S WHERE y IS NULL): three mark joins, once.
        assert_eq!(joins, 3, "{}", plan.display_indent());
    }
}
