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
    /// Queue a maintenance job for the scheduler (and with `--wait`, wait for its outcome).
    Run {
        /// compact, expire-snapshots, remove-orphan-files or retention.
        kind: String,
        /// The table, as `namespace.table` (nested namespaces: `a.b.table`).
        table: String,
        #[arg(long, default_value = "default")]
        warehouse: String,
        /// Plan and report; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Compaction's target file size (default: the table's policy, else 512 MiB).
        #[arg(long)]
        target_file_size_bytes: Option<u64>,
        /// Orphan cleanup's minimum age (default: the policy's, else 3 days).
        #[arg(long)]
        older_than_ms: Option<i64>,
        /// Wait until the job has finished and print its outcome.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Jobs of a warehouse (or of one table), newest first.
    Status {
        /// One table, as `namespace.table`; all of the warehouse's without it.
        table: Option<String>,
        #[arg(long, default_value = "default")]
        warehouse: String,
        /// Only jobs of this kind.
        #[arg(long)]
        kind: Option<String>,
        /// Only jobs in this state: queued, running, succeeded, failed.
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Show or set the maintenance policy of a warehouse, a namespace or a table.
    Policy {
        /// `namespace` or `namespace.table` (with `--table`); the warehouse's without it.
        name: Option<String>,
        /// The name is a table's.
        #[arg(long)]
        table: bool,
        #[arg(long, default_value = "default")]
        warehouse: String,
        /// Replace the policy with this JSON object, e.g.
        /// '{"target-file-size-bytes": 134217728, "max-snapshot-age-ms": 86400000}'.
        #[arg(long, conflicts_with = "clear")]
        set: Option<String>,
        /// Remove the policy of this level (it inherits again).
        #[arg(long)]
        clear: bool,
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
        MaintenanceCommand::Run {
            kind,
            table,
            warehouse,
            dry_run,
            target_file_size_bytes,
            older_than_ms,
            wait,
            server,
        } => {
            let (namespace, name) = split_table(&table)?;
            let mut options = serde_json::Map::new();
            if dry_run {
                options.insert("dry-run".into(), json!(true));
            }
            if let Some(target) = target_file_size_bytes {
                options.insert("target-file-size-bytes".into(), json!(target));
            }
            if let Some(age) = older_than_ms {
                options.insert("older-than-ms".into(), json!(age));
            }
            let client = server.connect().await?;
            let answer = client
                .call(
                    reqwest::Method::POST,
                    "/api/v1/jobs",
                    Some(json!({
                        "warehouse": warehouse,
                        "namespace": namespace,
                        "table": name,
                        "kind": kind,
                        "options": options,
                        "wait": wait,
                    })),
                )
                .await?;
            print(&answer)?;
            if wait && answer["job"]["status"] == "failed" {
                anyhow::bail!("the job failed: {}", answer["job"]["error"]);
            }
            Ok(())
        }
        MaintenanceCommand::Status {
            table,
            warehouse,
            kind,
            status,
            limit,
            server,
        } => {
            let mut query: Vec<(&str, String)> = vec![
                ("warehouse", warehouse.clone()),
                ("limit", limit.to_string()),
            ];
            if let Some(table) = &table {
                let (namespace, name) = split_table(table)?;
                query.push(("namespace", namespace.join(".")));
                query.push(("table", name.to_string()));
            }
            if let Some(kind) = kind {
                query.push(("kind", kind));
            }
            if let Some(status) = status {
                query.push(("status", status));
            }
            let query = serde_urlencoded::to_string(&query)?;
            let client = server.connect().await?;
            let answer = client
                .call(reqwest::Method::GET, &format!("/api/v1/jobs?{query}"), None)
                .await?;
            print(&answer)
        }
        MaintenanceCommand::Policy {
            name,
            table,
            warehouse,
            set,
            clear,
            server,
        } => {
            let (namespace, table_name): (Option<Vec<&str>>, Option<&str>) = match &name {
                None => (None, None),
                Some(name) if table => {
                    let (namespace, table) = split_table(name)?;
                    (Some(namespace), Some(table))
                }
                Some(name) => (Some(name.split('.').collect()), None),
            };
            let client = server.connect().await?;
            if set.is_some() || clear {
                let policy: serde_json::Value = match &set {
                    Some(text) => serde_json::from_str(text)
                        .map_err(|e| anyhow::anyhow!("--set takes a JSON object: {e}"))?,
                    None => serde_json::Value::Null,
                };
                let on = match (&namespace, table_name) {
                    (None, _) => json!({"type": "warehouse", "warehouse": warehouse}),
                    (Some(ns), None) => {
                        json!({"type": "namespace", "warehouse": warehouse, "namespace": ns})
                    }
                    (Some(ns), Some(t)) => {
                        json!({"type": "table", "warehouse": warehouse, "namespace": ns, "name": t})
                    }
                };
                let answer = client
                    .call(
                        reqwest::Method::PUT,
                        "/api/v1/maintenance/policies",
                        Some(json!({"on": on, "policy": policy})),
                    )
                    .await?;
                return print(&answer);
            }
            let mut query: Vec<(&str, String)> = vec![("warehouse", warehouse.clone())];
            if let Some(ns) = &namespace {
                query.push(("namespace", ns.join(".")));
            }
            if let Some(t) = table_name {
                query.push(("table", t.to_string()));
            }
            let query = serde_urlencoded::to_string(&query)?;
            let answer = client
                .call(
                    reqwest::Method::GET,
                    &format!("/api/v1/maintenance/policies?{query}"),
                    None,
                )
                .await?;
            print(&answer)
        }
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
