//! `NOT IN` subqueries over columns that hold no nulls, planned as plain anti joins.
//!
//! `x NOT IN (SELECT y …)` keeps no row at all when `y` yields a null, and never keeps a row
//! whose `x` is null. DataFusion plans it as a *null-aware* anti join whenever either column
//! may be null by its type, and such a join can neither put the subquery on its build side
//! nor run in parallel partitions: it builds a hash table of the whole outer side and
//! emits its survivors in one batch (TPC-H Q16 at scale 10: 1.2 million `partsupp ⋈ part` rows
//! built to probe 56 suppliers). Iceberg columns are optional unless declared required, so
//! this is the common case. [`PlainNotIn`] looks at the statistics of the snapshots read:
//! when both columns trace back, through filters, projections, aliases, groupings and inner
//! joins, to table columns whose null count is zero, no null can occur and the join is
//! planned as an ordinary anti join, which DataFusion then builds on the smaller side.
//!
//! It fires on a logical null-aware `LeftAnti` join without a join filter whose every key, on
//! both sides, is a bare column that is non-nullable in its schema (Iceberg's `required`) or
//! traces back — through filters, sorts, limits, `DISTINCT`, subquery aliases, projections of
//! bare columns, plain (one grouping set) `GROUP BY` columns, either side of an inner join or
//! the kept side of a left semi or anti join — to a scanned column whose null count is zero in
//! every data file of the snapshot read. Everything else keeps the null-aware join: a key
//! that is an expression; a column of an outer, right semi or right anti join, of a union, a
//! window or a grouping set; a column some file records no null count for (one added after
//! the file was written, a writer that keeps no metrics).
//!
//! Why the answer cannot change: `x NOT IN (S)` and the anti join `NOT EXISTS (S WHERE y = x)`
//! differ only when an `x` is null (its row is dropped, not kept) or `S` yields a null `y`
//! (every row is dropped, not only the matched ones). The operators traced through keep or
//! drop whole rows or pass a column's values on unchanged, and deletes only remove rows, so
//! zero nulls in the snapshot's files means zero nulls in the rows the query reads. Without
//! nulls, an empty subquery keeps every outer row in both forms, and duplicates on either side
//! change neither. The rewrite is logical: a distributed plan is cut from the rewritten one.

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Expr, Join, JoinType, LogicalPlan};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::optimizer::utils::scan_statistics;

/// The logical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct PlainNotIn;

impl OptimizerRule for PlainNotIn {
    fn name(&self) -> &str {
        "floe_plain_not_in"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        plan.transform_up(|node| {
            let LogicalPlan::Join(join) = &node else {
                return Ok(Transformed::no(node));
            };
            if !join.null_aware
                || join.join_type != JoinType::LeftAnti
                || join.filter.is_some()
                || join.on.is_empty()
                || !join
                    .on
                    .iter()
                    .all(|(l, r)| never_null(&join.left, l) && never_null(&join.right, r))
            {
                return Ok(Transformed::no(node));
            }
            let plain = Join::try_new(
                join.left.clone(),
                join.right.clone(),
                join.on.clone(),
                None,
                join.join_type,
                join.join_constraint,
                join.null_equality,
                false,
            )?;
            Ok(Transformed::yes(LogicalPlan::Join(plain)))
        })
    }
}

/// Whether `expr`, a column of `plan`'s output, can never be null in `plan`'s rows.
fn never_null(plan: &LogicalPlan, expr: &Expr) -> bool {
    let Expr::Column(column) = expr else {
        return false;
    };
    plan.schema()
        .index_of_column(column)
        .is_ok_and(|index| column_never_null(plan, index))
}

fn column_never_null(plan: &LogicalPlan, index: usize) -> bool {
    if !plan.schema().field(index).is_nullable() {
        return true;
    }
    match plan {
        LogicalPlan::TableScan(scan) => {
            scan_statistics(scan).is_some_and(|(statistics, indices)| {
                indices
                    .get(index)
                    .and_then(|&column| statistics.column_statistics.get(column))
                    .is_some_and(|column| column.null_count.get_value() == Some(&0))
            })
        }
        // Rows are only dropped or kept whole.
        LogicalPlan::Filter(filter) => column_never_null(&filter.input, index),
        LogicalPlan::SubqueryAlias(alias) => column_never_null(&alias.input, index),
        LogicalPlan::Sort(sort) => column_never_null(&sort.input, index),
        LogicalPlan::Limit(limit) => column_never_null(&limit.input, index),
        LogicalPlan::Distinct(_) => column_never_null(plan.inputs()[0], index),
        LogicalPlan::Projection(projection) => match projection.expr.get(index) {
            Some(Expr::Column(c)) => never_null(&projection.input, &Expr::Column(c.clone())),
            Some(Expr::Alias(alias)) => match alias.expr.as_ref() {
                Expr::Column(c) => never_null(&projection.input, &Expr::Column(c.clone())),
                _ => false,
            },
            _ => false,
        },
        LogicalPlan::Aggregate(aggregate) => {
            aggregate.group_expr.len() > index
                && matches!(&aggregate.group_expr[index], Expr::Column(_))
                && never_null(&aggregate.input, &aggregate.group_expr[index])
        }
        LogicalPlan::Join(join) if join.join_type == JoinType::Inner => {
            let left = join.left.schema().fields().len();
            if index < left {
                column_never_null(&join.left, index)
            } else {
                column_never_null(&join.right, index - left)
            }
        }
        LogicalPlan::Join(join)
            if matches!(join.join_type, JoinType::LeftSemi | JoinType::LeftAnti) =>
        {
            column_never_null(&join.left, index)
        }
        _ => false,
    }
}
