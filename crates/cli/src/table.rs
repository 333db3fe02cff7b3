//! `floe table check|repair`: a table's integrity through a running server's management API
//! (`/api/v1/tables/check`, `/api/v1/tables/repair`).

use anyhow::bail;
use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::{ServerArgs, print};

#[derive(Subcommand, Debug)]
pub enum TableCommand {
    /// Find metadata that references missing files, manifests whose counts disagree with
    /// their entries, broken metadata files and logs, and files nothing references. Exits
    /// with status 1 when the table is not healthy.
    Check {
        warehouse: String,
        /// `namespace.table` (nested namespaces joined by dots).
        table: String,
        /// Also read every live Parquet file's footer and compare its row count.
        #[arg(long)]
        deep: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Mend what a check finds where that is safe (point back at the last readable metadata,
    /// roll back to the last readable snapshot, drop references to missing files), as new
    /// audited commits. Without `--apply`, a dry run that says what it would do.
    Repair {
        warehouse: String,
        table: String,
        #[arg(long)]
        apply: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// `namespace.table` as its namespace levels and name.
fn split(table: &str) -> anyhow::Result<(Vec<String>, String)> {
    let mut parts: Vec<String> = table.split('.').map(str::to_string).collect();
    if parts.len() < 2 || parts.iter().any(String::is_empty) {
        bail!("name the table as namespace.table, not {table:?}");
    }
    let name = parts.pop().expect("two parts or more");
    Ok((parts, name))
}

pub async fn run(command: TableCommand) -> anyhow::Result<()> {
    match command {
        TableCommand::Check {
            warehouse,
            table,
            deep,
            server,
        } => {
            let (namespace, name) = split(&table)?;
            let body = json!({"warehouse": warehouse, "namespace": namespace, "table": name, "deep": deep});
            let report = server
                .connect()
                .await?
                .call(Method::POST, "/api/v1/tables/check", Some(body))
                .await?;
            print(&report)?;
            if report["healthy"] != Value::Bool(true) {
                std::process::exit(1);
            }
            Ok(())
        }
        TableCommand::Repair {
            warehouse,
            table,
            apply,
            server,
        } => {
            let (namespace, name) = split(&table)?;
            let body = json!({"warehouse": warehouse, "namespace": namespace, "table": name, "dry-run": !apply});
            let report = server
                .connect()
                .await?
                .call(Method::POST, "/api/v1/tables/repair", Some(body))
                .await?;
            print(&report)
        }
    }
}
