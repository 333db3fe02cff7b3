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
//! by constants costs a hash of one value per row). The answer cannot change: the plans it
//! passes on are DataFusion's, those it keeps are the statement as written.

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::optimizer::eliminate_group_by_constant::EliminateGroupByConstant;
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// DataFusion's rule, except where every grouping key is a constant.
#[derive(Debug, Default)]
pub struct GroupByConstants(EliminateGroupByConstant);

/// Whether `expr` is a constant: deterministic, and reading no column.
fn is_constant(expr: &Expr) -> bool {
    let mut constant = true;
    let _ = expr.apply(|e| {
        if let Expr::Column(_) | Expr::OuterReferenceColumn(..) | Expr::Placeholder(_) = e {
            constant = false;
        }
        if let Expr::ScalarFunction(f) = e
            && f.func.signature().volatility != Volatility::Immutable
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
