//! `floe serve`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use floe_catalog::service::{CatalogConfig, CatalogService};
use floe_storage::StorageProfile;
use floe_store::{SqlStore, StoreOptions};
use tokio_util::sync::CancellationToken;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address of the HTTP server (Iceberg REST catalog, management API, metrics).
    #[arg(long, env = "FLOE_LISTEN", default_value = "127.0.0.1:8181")]
    pub listen: String,
    /// Directory for the embedded catalog database and the default warehouse.
    #[arg(long, env = "FLOE_DATA_DIR", default_value = "./floe-data")]
    pub data_dir: PathBuf,
    /// Catalog database: `sqlite:PATH` or `postgres://…` (default: SQLite in the data directory).
    #[arg(long, env = "FLOE_CATALOG_DB", hide_env_values = true)]
    pub catalog_db: Option<String>,
    /// Largest number of database connections (default: 4 per core, at most 16; more
    /// connections than the machine can serve only lengthen the latency tail).
    #[arg(long, env = "FLOE_DB_MAX_CONNECTIONS")]
    pub db_max_connections: Option<u32>,
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("create data directory {}", args.data_dir.display()))?;
    let data_dir = std::fs::canonicalize(&args.data_dir)
        .with_context(|| format!("resolve data directory {}", args.data_dir.display()))?;
    let db_url = args
        .catalog_db
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", data_dir.join("catalog.db").display()));
    let store = SqlStore::connect(
        &db_url,
        StoreOptions {
            max_connections: args.db_max_connections.unwrap_or_else(default_pool_size),
            ..StoreOptions::default()
        },
    )
    .await?;
    tracing::info!(backend = ?store.backend(), url = %floe_store::redact_url(&db_url), "opened catalog database");
    let catalog = Arc::new(CatalogService::new(
        Arc::new(store.clone()),
        CatalogConfig::default(),
    ));
    ensure_default_warehouse(&catalog, &data_dir).await?;

    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("listen on {}", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, "floe is serving");
    let shutdown = CancellationToken::new();
    tokio::spawn(wait_for_signal(shutdown.clone()));
    let state = floe_server::AppState::new(catalog);
    floe_server::serve(listener, state, shutdown).await?;
    store.close().await;
    tracing::info!("floe stopped");
    Ok(())
}

fn default_pool_size() -> u32 {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u32);
    (cores * 4).clamp(4, 16)
}

async fn ensure_default_warehouse(catalog: &CatalogService, data_dir: &Path) -> anyhow::Result<()> {
    let path = data_dir.join("warehouse");
    let profile = StorageProfile::Local {
        path: path.to_string_lossy().into_owned(),
    };
    catalog
        .ensure_warehouse("default", profile)
        .await
        .context("create the default warehouse")?;
    Ok(())
}

async fn wait_for_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
    shutdown.cancel();
}
