//! The statements Floe's SQL runs, as an allow-list checked on every planned statement before
//! anything of it executes (all front doors plan through [`super::SqlEngine`]).
//!
//! Allowed: queries (with subqueries, CTEs, `VALUES`, the `generate_series` and `range` table
//! functions, `information_schema`), `EXPLAIN [ANALYZE]` of an allowed statement (but not
//! `EXPLAIN VERBOSE` or `ANALYZE` of one that reads under a row or column policy), `DESCRIBE`,
//! `INSERT INTO` an Iceberg table, and the DDL Floe carries out itself (`CREATE SCHEMA`,
//! `CREATE TABLE [AS SELECT]`, `DROP TABLE`). Everything else DataFusion can plan — `COPY … TO`,
//! `UPDATE`, `DELETE`, `TRUNCATE`, external tables, views and functions kept in the session,
//! `SET`, `PREPARE` — is refused with [`SqlErrorKind::Unsupported`], wherever in the plan it
//! appears. Only Iceberg tables can be named at all (the session's catalogs are the caller's
//! warehouses; URL tables are off), and the object stores behind the plan are only the
//! warehouses' ([`super::stores`]).

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, WriteOp};

use super::{SqlError, SqlErrorKind};
use crate::scan::provider::IcebergTableProvider;

/// What the refusal says Floe runs.
const ALLOWED: &str = "Floe's SQL runs queries, EXPLAIN, DESCRIBE, INSERT INTO Iceberg tables, \
                       CREATE SCHEMA, CREATE TABLE [AS SELECT] and DROP TABLE";

/// Checks `plan` against the allow-list.
pub(super) fn check(plan: &LogicalPlan) -> Result<(), SqlError> {
    match plan {
        LogicalPlan::Ddl(ddl) => match ddl {
            DdlStatement::CreateCatalogSchema(_) | DdlStatement::DropTable(_) => Ok(()),
            DdlStatement::CreateMemoryTable(create) => check_query(&create.input),
            other => Err(refuse(other.name())),
        },
        LogicalPlan::Explain(explain) => {
            if explain.verbose {
                refuse_under_policy(&explain.plan, "EXPLAIN VERBOSE")?;
            }
            // What lies below a policy is left out of an indented plan only
            // (`policy::without_what_the_policy_keeps_back`).
            if !matches!(
                explain.explain_format,
                datafusion::common::format::ExplainFormat::Indent
            ) {
                refuse_under_policy(
                    &explain.plan,
                    &format!("EXPLAIN FORMAT {}", explain.explain_format),
                )?;
            }
            check(&explain.plan)
        }
        LogicalPlan::Analyze(analyze) => {
            refuse_under_policy(&analyze.input, "EXPLAIN ANALYZE")?;
            check(&analyze.input)
        }
        LogicalPlan::DescribeTable(_) => Ok(()),
        LogicalPlan::Dml(dml) => {
            let WriteOp::Insert(_) = dml.op else {
                return Err(refuse(&dml.op.to_string()));
            };
            let target = source_as_provider(&dml.target);
            if target
                .as_ref()
                .is_ok_and(|p| p.downcast_ref::<crate::policy::PolicyTable>().is_some())
            {
                return Err(SqlError::new(
                    SqlErrorKind::PermissionDenied,
                    format!(
                        "INSERT INTO {} is refused: a row or column policy applies to you on \
                         that table",
                        dml.table_name
                    ),
                ));
            }
            let into_iceberg =
                target.is_ok_and(|p| p.downcast_ref::<IcebergTableProvider>().is_some());
            if !into_iceberg {
                return Err(SqlError::new(
                    SqlErrorKind::Unsupported,
                    format!(
                        "INSERT INTO {} is not supported: only Iceberg tables take rows",
                        dml.table_name
                    ),
                ));
            }
            check_query(&dml.input)
        }
        query => check_query(query),
    }
}

/// Checks that `plan`, and every subquery in it, only reads.
fn check_query(plan: &LogicalPlan) -> Result<(), SqlError> {
    let mut refused = None;
    plan.apply_with_subqueries(|node| {
        let what = match node {
            LogicalPlan::Copy(_) => Some("COPY".to_string()),
            LogicalPlan::Dml(dml) => Some(dml.op.to_string()),
            LogicalPlan::Ddl(ddl) => Some(ddl.name().to_string()),
            LogicalPlan::Statement(statement) => Some(statement.name().to_string()),
            LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) => {
                Some("EXPLAIN inside a query".to_string())
            }
            _ => None,
        };
        Ok(match what {
            Some(what) => {
                refused = Some(refuse(&what));
                TreeNodeRecursion::Stop
            }
            None => TreeNodeRecursion::Continue,
        })
    })
    .map_err(SqlError::from)?;
    refused.map_or(Ok(()), Err)
}

/// Refuses `what` over `plan` when it reads a table under a row or column policy: the
/// statistics `EXPLAIN VERBOSE` prints and the metrics `EXPLAIN ANALYZE` prints are those of
/// every node, the table's own scan below the policy's barrier included — its row count and
/// its raw columns' bounds (a masked column's smallest and largest values, the values of
/// filtered rows). Plain `EXPLAIN` shows neither, and leaves out the plan from the barrier on
/// ([`crate::policy::without_what_the_policy_keeps_back`]).
fn refuse_under_policy(plan: &LogicalPlan, what: &str) -> Result<(), SqlError> {
    let applied = crate::policy::applied_in(plan);
    if applied.is_empty() {
        return Ok(());
    }
    Err(SqlError::new(
        SqlErrorKind::PermissionDenied,
        format!(
            "{what} is refused: it would show the row counts and column bounds of tables read \
             under a row or column policy ({}); plain EXPLAIN shows the plan",
            applied.join(", ")
        ),
    ))
}

fn refuse(what: &str) -> SqlError {
    SqlError::new(
        SqlErrorKind::Unsupported,
        format!("{what} is not supported: {ALLOWED}"),
    )
}
