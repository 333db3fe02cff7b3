//! `floe audit …`: verify the hash-chained audit trail, and query it.

use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use floe_catalog::governance::audit::{
    AuditStore, CHECKPOINT_FILE, Checkpoint, verify, verify_checkpoints,
};
use floe_store::{SqlStore, StoreOptions};

use crate::client::{ServerArgs, print};

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Recompute the whole chain from the catalog database and name the first record that
    /// was edited, deleted or reordered. Exits non-zero when the trail is not intact.
    Verify(StoreArgs),
    /// Query the trail through a running server (needs `read-audit`).
    List {
        #[arg(long)]
        principal: Option<String>,
        #[arg(long)]
        action: Option<String>,
        /// Records whose resource path starts with this.
        #[arg(long)]
        resource: Option<String>,
        /// `allow` or `deny`.
        #[arg(long)]
        decision: Option<String>,
        #[arg(long)]
        since_ms: Option<i64>,
        #[arg(long)]
        until_ms: Option<i64>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Every principal's roles and privileges, for periodic access reviews.
    AccessReview {
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Args)]
pub struct StoreArgs {
    /// Data directory whose embedded catalog database to read.
    #[arg(long, env = "FLOE_DATA_DIR", default_value = "./floe-data")]
    pub data_dir: PathBuf,
    /// Catalog database (`sqlite:PATH` or `postgres://…`), instead of the data directory's.
    #[arg(long, env = "FLOE_CATALOG_DB", hide_env_values = true)]
    pub catalog_db: Option<String>,
    /// Checkpoints to hold the trail to (the server notes them in
    /// `<data-dir>/audit-checkpoints`, which is read when present and this is not given).
    #[arg(long)]
    pub checkpoints: Option<PathBuf>,
    /// Fail when there are no checkpoints to hold the trail to.
    #[arg(long)]
    pub require_checkpoints: bool,
}

/// Never shows the database URL's password.
impl std::fmt::Debug for StoreArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreArgs")
            .field("data_dir", &self.data_dir)
            .field(
                "catalog_db",
                &self.catalog_db.as_deref().map(floe_store::redact_url),
            )
            .field("checkpoints", &self.checkpoints)
            .field("require_checkpoints", &self.require_checkpoints)
            .finish()
    }
}

pub async fn run(command: AuditCommand) -> anyhow::Result<()> {
    match command {
        AuditCommand::Verify(args) => {
            let url = match args.catalog_db {
                Some(url) => url,
                None => {
                    let path = args.data_dir.join("catalog.db");
                    if !path.is_file() {
                        bail!("no catalog database at {}", path.display());
                    }
                    format!("sqlite:{}", path.display())
                }
            };
            let checkpoints = match args.checkpoints {
                Some(path) => Some(read_checkpoints(&path)?),
                None => {
                    let path = args.data_dir.join(CHECKPOINT_FILE);
                    match path.is_file() {
                        true => Some(read_checkpoints(&path)?),
                        false => None,
                    }
                }
            };
            if checkpoints.is_none() && args.require_checkpoints {
                bail!(
                    "no audit checkpoints at {} (give --checkpoints FILE)",
                    args.data_dir.join(CHECKPOINT_FILE).display()
                );
            }
            let store = SqlStore::connect(&url, StoreOptions::default()).await?;
            let trail = store.audit_trail().await?;
            let n = verify(&trail).map_err(|broken| anyhow!("audit trail broken: {broken}"))?;
            let last = trail.last().map(|r| r.hash.as_str()).unwrap_or("-");
            let held = match &checkpoints {
                Some(checkpoints) => {
                    verify_checkpoints(&trail, checkpoints)
                        .map_err(|broken| anyhow!("audit trail broken: {broken}"))?;
                    format!("; it holds all {} checkpoints", checkpoints.len())
                }
                None => "; no checkpoints to hold it to".to_string(),
            };
            println!("audit trail intact: {n} records, last hash {last}{held}");
            Ok(())
        }
        AuditCommand::List {
            principal,
            action,
            resource,
            decision,
            since_ms,
            until_ms,
            limit,
            server,
        } => {
            let mut query = vec![("limit".to_string(), limit.to_string())];
            for (k, v) in [
                ("principal", principal),
                ("action", action),
                ("resource", resource),
                ("decision", decision),
                ("since-ms", since_ms.map(|v| v.to_string())),
                ("until-ms", until_ms.map(|v| v.to_string())),
            ] {
                if let Some(v) = v {
                    query.push((k.to_string(), v));
                }
            }
            let client = server.connect().await?;
            let query = serde_urlencoded::to_string(&query)?;
            print(
                &client
                    .call(
                        reqwest::Method::GET,
                        &format!("/api/v1/audit?{query}"),
                        None,
                    )
                    .await?,
            )
        }
        AuditCommand::AccessReview { server } => {
            let client = server.connect().await?;
            print(
                &client
                    .call(reqwest::Method::GET, "/api/v1/access-review", None)
                    .await?,
            )
        }
    }
}

fn read_checkpoints(path: &std::path::Path) -> anyhow::Result<Vec<Checkpoint>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("read audit checkpoints {}", path.display()))?;
    Checkpoint::parse_file(&text).map_err(|e| anyhow!("audit checkpoints {}: {e}", path.display()))
}
