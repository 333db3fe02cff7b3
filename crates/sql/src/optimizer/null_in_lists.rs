//! `IN` lists holding a NULL, in their three-valued meaning.
//!
//! `x IN (1, NULL)` is TRUE where `x = 1` and NULL elsewhere; `x NOT IN (1, NULL)` is FALSE
//! where `x = 1` and NULL elsewhere — never TRUE. DataFusion 54's expression simplifier
//! merges the lists of `IN` and `NOT IN` over one expression joined by `AND`/`OR` as if they
//! held values only: `b IN (FALSE) AND b NOT IN (NULL)` becomes `b IN (FALSE)`, which is TRUE
//! for `b = FALSE` where the original is NULL (found by `floe bench fuzz`, seed 11: a `FULL
//! JOIN` on that condition matched 252 pairs where none match, and ternary logic partitioning
//! of `WHERE c IN (1.0)` by `c IN (NULL)` counted every row twice).
//!
//! [`NullInLists`], an analyzer rule (it runs before the simplifier), writes each `IN` list
//! with a NULL among its items as what it means: `CASE WHEN x IN (the other items) THEN TRUE
//! ELSE NULL END` (`FALSE` for `NOT IN`), or a NULL of type boolean when no other item is
//! left. The values it gives are the original's, row by row, so nothing that reads the
//! condition (a filter, a join's condition, a projection) can tell the difference; the
//! simplifier then has no list with a NULL to merge. It applies always: it corrects answers.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::{Expr, LogicalPlan, lit, when};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct NullInLists;

impl AnalyzerRule for NullInLists {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            node.map_expressions(|expr| expr.transform_up(three_valued))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "floe_null_in_lists"
    }
}

/// Whether `expr` is a NULL constant (possibly under casts).
fn is_null_constant(expr: &Expr) -> bool {
    match expr {
        Expr::Literal(value, _) => value.is_null(),
        Expr::Cast(cast) => is_null_constant(&cast.expr),
        Expr::TryCast(cast) => is_null_constant(&cast.expr),
        _ => false,
    }
}

fn three_valued(expr: Expr) -> Result<Transformed<Expr>> {
    let Expr::InList(list) = expr else {
        return Ok(Transformed::no(expr));
    };
    if !list.list.iter().any(is_null_constant) {
        return Ok(Transformed::no(Expr::InList(list)));
    }
    let InList {
        expr: tested,
        list: items,
        negated,
    } = list;
    let values: Vec<Expr> = items.into_iter().filter(|e| !is_null_constant(e)).collect();
    let unknown = Expr::Literal(ScalarValue::Boolean(None), None);
    if values.is_empty() {
        return Ok(Transformed::yes(unknown));
    }
    let found = Expr::InList(InList {
        expr: tested,
        list: values,
        negated: false,
    });
    Ok(Transformed::yes(
        when(found, lit(!negated)).otherwise(unknown)?,
    ))
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;

    async fn answers(sql: &str) -> Vec<String> {
        let ctx = SessionContext::new();
        ctx.add_analyzer_rule(std::sync::Arc::new(NullInLists));
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        text.lines()
            .skip(3)
            .filter(|l| !l.starts_with('+'))
            .map(|l| l.trim_matches('|').trim().to_string())
            .collect()
    }

    #[tokio::test]
    async fn a_null_in_an_in_list_keeps_its_meaning_beside_another_list() {
        let t = "(VALUES (true), (false), (CAST(NULL AS BOOLEAN))) AS t(b)";
        // Counted with and without the rule: DataFusion 54 alone answers 1 for the first
        // (it keeps `b IN (FALSE)`); PostgreSQL and DuckDB answer 0.
        assert_eq!(
            answers(&format!(
                "SELECT count(*) FROM {t} WHERE b IN (false) AND b NOT IN (CAST(NULL AS BOOLEAN))"
            ))
            .await,
            vec!["0"]
        );
        assert_eq!(
            answers(&format!(
                "SELECT count(*) FROM {t} WHERE (b IN (false) AND b NOT IN (NULL)) IS NULL"
            ))
            .await,
            vec!["2"]
        );
        assert_eq!(
            answers(&format!(
                "SELECT count(*) FROM {t} WHERE b IN (true, NULL) OR b IN (false)"
            ))
            .await,
            vec!["2"]
        );
        assert_eq!(
            answers(&format!(
                "SELECT count(*) FROM {t} WHERE NOT (b IN (true, NULL))"
            ))
            .await,
            vec!["0"]
        );
    }
}
