//! `floe ingest …`: a running server's ingestion (`/api/v1/ingest/…`).

use anyhow::bail;
use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use crate::client::{ServerArgs, print};

#[derive(Subcommand, Debug)]
pub enum IngestCommand {
    /// Take entries of a table's write-ahead log again after a bad deploy: committed entries
    /// still retained (`--ingest-retain-secs`) that the table no longer holds, and dead
    /// letters — each once, never duplicating what the table holds. Without `--apply`, a dry
    /// run that lists what it would take. Run it against the node whose log holds them.
    Replay {
        warehouse: String,
        /// `namespace.table` (nested namespaces joined by dots).
        table: String,
        /// First log sequence of the range (as `/ingest/v1` answers report them).
        #[arg(long)]
        from: u64,
        /// Last log sequence of the range.
        #[arg(long)]
        to: u64,
        #[arg(long)]
        apply: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
}

pub async fn run(command: IngestCommand) -> anyhow::Result<()> {
    let IngestCommand::Replay {
        warehouse,
        table,
        from,
        to,
        apply,
        server,
    } = command;
    let mut parts: Vec<String> = table.split('.').map(str::to_string).collect();
    if parts.len() < 2 || parts.iter().any(String::is_empty) {
        bail!("name the table as namespace.table, not {table:?}");
    }
    let name = parts.pop().expect("two parts or more");
    let body = json!({
        "warehouse": warehouse, "namespace": parts, "table": name,
        "from-sequence": from, "to-sequence": to, "dry-run": !apply,
    });
    let answer = server
        .connect()
        .await?
        .call(Method::POST, "/api/v1/ingest/replay", Some(body))
        .await?;
    print(&answer)
}
