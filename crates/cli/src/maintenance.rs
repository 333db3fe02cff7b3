//! `floe maintenance …`: table maintenance through a running server's management API.

use clap::Subcommand;
use serde_json::json;

use crate::client::{ServerArgs, print};

#[derive(Subcommand, Debug)]
pub enum MaintenanceCommand {
    /// Expire snapshots per the table's retention policy and delete the files only they
    /// reached.
    ExpireSnapshots {
        /// The table, as `namespace.table` (nested namespaces: `a.b.table`).
        table: String,
        #[arg(long, default_value = "default")]
        warehouse: String,
        /// List what would expire and be deleted; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Keep snapshots younger than this (default: the table's
        /// `history.expire.max-snapshot-age-ms`, else 5 days).
        #[arg(long)]
        max_snapshot_age_ms: Option<i64>,
        /// Keep at least this many snapshots per branch (default: the table's
        /// `history.expire.min-snapshots-to-keep`, else 1).
        #[arg(long)]
        min_snapshots_to_keep: Option<usize>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Delete files under the table's location that no metadata references and that are older
    /// than the minimum age; lists them only, unless `--delete` is given.
    RemoveOrphanFiles {
        /// The table, as `namespace.table` (nested namespaces: `a.b.table`).
        table: String,
        #[arg(long, default_value = "default")]
        warehouse: String,
        /// Delete the orphans (without it, only list them).
        #[arg(long)]
        delete: bool,
        /// Only files older than this are orphans (default 3 days).
        #[arg(long)]
        older_than_ms: Option<i64>,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// `namespace.table` split into namespace levels and table name.
fn split_table(table: &str) -> anyhow::Result<(Vec<&str>, &str)> {
    let mut parts: Vec<&str> = table.split('.').collect();
    let name = parts.pop().unwrap_or_default();
    if parts.is_empty() || name.is_empty() {
        anyhow::bail!("name the table as namespace.table, got {table:?}");
    }
    Ok((parts, name))
}

pub async fn run(command: MaintenanceCommand) -> anyhow::Result<()> {
    match command {
        MaintenanceCommand::RemoveOrphanFiles {
            table,
            warehouse,
            delete,
            older_than_ms,
            server,
        } => {
            let (namespace, name) = split_table(&table)?;
            let client = server.connect().await?;
            let answer = client
                .call(
                    reqwest::Method::POST,
                    "/api/v1/maintenance/remove-orphan-files",
                    Some(json!({
                        "warehouse": warehouse,
                        "namespace": namespace,
                        "table": name,
                        "dry-run": !delete,
                        "older-than-ms": older_than_ms,
                    })),
                )
                .await?;
            print(&answer)
        }
        MaintenanceCommand::ExpireSnapshots {
            table,
            warehouse,
            dry_run,
            max_snapshot_age_ms,
            min_snapshots_to_keep,
            server,
        } => {
            let (parts, name) = split_table(&table)?;
            let client = server.connect().await?;
            let answer = client
                .call(
                    reqwest::Method::POST,
                    "/api/v1/maintenance/expire-snapshots",
                    Some(json!({
                        "warehouse": warehouse,
                        "namespace": parts,
                        "table": name,
                        "dry-run": dry_run,
                        "max-snapshot-age-ms": max_snapshot_age_ms,
                        "min-snapshots-to-keep": min_snapshots_to_keep,
                    })),
                )
                .await?;
            print(&answer)
        }
    }
}
