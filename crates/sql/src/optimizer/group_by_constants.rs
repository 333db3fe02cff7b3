//! DataFusion's `eliminate_group_by_constant`, kept from turning a grouped aggregation into a
//! global one.
//!
//! DataFusion 54 drops constant `GROUP BY` expressions (`GROUP BY 'a', x` groups by `x`) and
//! projects the constants back, which changes no answer while a real key remains. When every
//! key is a constant it drops them all, and the aggregation becomes a global one: over no
//! rows that answers one row (`count(*) = 0`) where a grouped aggregation answers none —
//! `SELECT count(*) FROM t WHERE false GROUP BY 'a'` must be empty, as in PostgreSQL and DuckDB.
//!
//! This rule stands in DataFusion's place in its list and hands every plan to DataFusion's rule
//! except an aggregation all of whose keys are constants, which it leaves as it is (grouping
//! by constants costs a hash of one value per row). A constant, here, reads no column, outer
//! reference or placeholder and calls only immutable functions.
//!
//! Why the answer cannot change: the plans it keeps are the statement as written. In those it
//! passes on, DataFusion's rule drops only keys that are deterministic functions of the keys
//! that are bare columns (a constant is a function of none), and keeps every bare column; while
//! one key remains, grouping by the rest forms the same groups, and each dropped key is
//! projected back with its one value per group.
//!
//! A key counts as a constant here as it does for DataFusion: no column, no volatile function
//! (a stable one such as `now()` is one value per statement).

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::optimizer::eliminate_group_by_constant::EliminateGroupByConstant;
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// DataFusion's rule, except where every grouping key is a constant.
#[derive(Debug, Default)]
pub struct GroupByConstants(EliminateGroupByConstant);

/// Whether `expr` is a constant: reading no column and calling no volatile function.
fn is_constant(expr: &Expr) -> bool {
    let mut constant = true;
    let _ = expr.apply(|e| {
        if let Expr::Column(_) | Expr::OuterReferenceColumn(..) | Expr::Placeholder(_) = e {
            constant = false;
        }
        // DataFusion's rule counts stable functions (`now()`) as constants too; only
        // volatile ones make a key vary within a statement.
        if let Expr::ScalarFunction(f) = e
            && f.func.signature().volatility == Volatility::Volatile
        {
            constant = false;
        }
        Ok(if constant {
            datafusion::common::tree_node::TreeNodeRecursion::Continue
        } else {
            datafusion::common::tree_node::TreeNodeRecursion::Stop
        })
    });
    constant
}

impl OptimizerRule for GroupByConstants {
    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if let LogicalPlan::Aggregate(aggregate) = &plan
            && !aggregate.group_expr.is_empty()
            && aggregate.group_expr.iter().all(is_constant)
        {
            return Ok(Transformed::no(plan));
        }
        self.0.rewrite(plan, config)
    }

    fn name(&self) -> &str {
        // DataFusion's name: the rule takes its place (and its switch) in the list.
        self.0.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.0.apply_order()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    async fn rows(context: &SessionContext, sql: &str) -> usize {
        context
            .sql(sql)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum()
    }

    const GROUPED_BY_A_CONSTANT: &str =
        "SELECT count(*) FROM (VALUES (1), (2)) AS t(x) WHERE x > 5 GROUP BY 'a'";

    #[tokio::test]
    async fn a_grouped_aggregation_over_no_rows_answers_no_row() {
        let plain = SessionContext::new();
        // DataFusion 54's own rule: one row. When this fails, DataFusion fixed it and this
        // rule can go.
        assert_eq!(rows(&plain, GROUPED_BY_A_CONSTANT).await, 1);
        let state = plain.state();
        let rules = state
            .optimizers()
            .iter()
            .map(|rule| match rule.name() {
                "eliminate_group_by_constant" => {
                    std::sync::Arc::new(super::GroupByConstants::default())
                        as std::sync::Arc<dyn datafusion::optimizer::OptimizerRule + Send + Sync>
                }
                _ => rule.clone(),
            })
            .collect();
        let fixed = SessionContext::new_with_state(
            datafusion::execution::SessionStateBuilder::new_from_existing(state)
                .with_optimizer_rules(rules)
                .build(),
        );
        assert_eq!(rows(&fixed, GROUPED_BY_A_CONSTANT).await, 0);
        // A real key left beside the constant: DataFusion's rewrite still applies, and answers
        // as before.
        assert_eq!(
            rows(
                &fixed,
                "SELECT x, count(*) FROM (VALUES (1), (2), (2)) AS t(x) GROUP BY 'a', x"
            )
            .await,
            2
        );
    }
}
