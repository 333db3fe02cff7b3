//! `floe tenant …`: a tenant's (a warehouse's) limits through a running server's
//! management API (`/api/v1/tenants/{warehouse}/limits`).

use anyhow::{Context, bail};
use clap::Subcommand;
use reqwest::Method;
use serde_json::{Map, Value};

use crate::client::{ServerArgs, print};

#[derive(Subcommand, Debug)]
pub enum TenantCommand {
    /// Show a tenant's limits and usage, or change them: `--set name=value` sets a limit
    /// (e.g. `--set ingest-records-per-second=10000`), `--unset name` removes one,
    /// `--clear` removes them all. Changes are in force within a second on every node.
    Limits {
        /// The tenant: a warehouse's name.
        warehouse: String,
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        #[arg(long = "unset", value_name = "NAME")]
        unset: Vec<String>,
        #[arg(long, conflicts_with_all = ["set", "unset"])]
        clear: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
}

pub async fn run(command: TenantCommand) -> anyhow::Result<()> {
    let TenantCommand::Limits {
        warehouse,
        set,
        unset,
        clear,
        server,
    } = command;
    let client = server.connect().await?;
    let path = format!("/api/v1/tenants/{warehouse}/limits");
    if clear {
        client.call(Method::DELETE, &path, None).await?;
        println!("tenant {warehouse}: no limits");
        return Ok(());
    }
    let current = client.call(Method::GET, &path, None).await?;
    if set.is_empty() && unset.is_empty() {
        return print(&current);
    }
    let mut limits: Map<String, Value> = current
        .get("limits")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for name in unset {
        limits.remove(&name);
    }
    for pair in set {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("--set takes NAME=VALUE, not {pair:?}");
        };
        let value: u64 = value
            .trim()
            .parse()
            .with_context(|| format!("--set {name}: {value:?} is not a whole number"))?;
        limits.insert(name.trim().to_string(), Value::from(value));
    }
    let answer = client
        .call(Method::PUT, &path, Some(Value::Object(limits)))
        .await?;
    print(&answer)
}
