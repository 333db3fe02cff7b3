//! `floe worker`: a node that runs only the worker service of distributed queries; `floe
//! worker list`: the workers a running server knows.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use floe_catalog::cluster::ClusterStore;
use floe_catalog::service::{CatalogConfig, CatalogService};
use floe_sql::distributed::ClusterSecret;
use floe_sql::{EngineConfig, SqlEngine};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::client::{ServerArgs, print};

/// Not `Debug`: it holds the catalog database URL, whose password must never be logged.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WorkerArgs {
    #[command(subcommand)]
    command: Option<WorkerCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum WorkerCommand {
    /// List the workers a running server knows: live or not, load and version.
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// How a node reaches and serves the cluster's other nodes: shared by `floe worker` and
/// `floe serve`.
#[derive(Args, Clone)]
pub struct ClusterLinkArgs {
    /// PEM certificate authority that signed the certificates of workers advertised at
    /// `https://` URLs (workers serve TLS with `--tls-cert`); this node trusts no other for them.
    #[arg(long, env = "FLOE_CLUSTER_CA")]
    pub cluster_ca: Option<PathBuf>,
    /// Serve the worker service without TLS on an address other than loopback. The cluster
    /// secret then crosses the network in the clear: only on a network you trust.
    #[arg(long, env = "FLOE_PLAINTEXT_CLUSTER")]
    pub plaintext_cluster: bool,
}

impl ClusterLinkArgs {
    /// The cluster's secret from `store`, trusting `--cluster-ca` for TLS workers.
    pub async fn secret(&self, store: &dyn ClusterStore) -> anyhow::Result<ClusterSecret> {
        let secret = ClusterSecret::new(
            store
                .cluster_secret()
                .await
                .context("read the cluster's secret")?,
        );
        Ok(match &self.cluster_ca {
            Some(path) => secret.trusting(
                std::fs::read(path)
                    .with_context(|| format!("read --cluster-ca {}", path.display()))?,
            ),
            None => secret,
        })
    }
}

/// What a worker service is served with.
pub struct WorkerServing {
    /// URL the cluster's other nodes reach it at (default: the listener's address, `https://`
    /// with TLS).
    pub advertise: Option<String>,
    pub tls: Option<floe_server::tls::TlsFiles>,
    /// Whether plaintext is allowed off loopback (`--plaintext-cluster`).
    pub plaintext_cluster: bool,
}

#[derive(Args)]
struct RunArgs {
    /// Address of the worker service.
    #[arg(long, env = "FLOE_WORKER_LISTEN", default_value = "127.0.0.1:50061")]
    listen: String,
    /// URL the cluster's other nodes reach this worker at (default: `http://` and the address
    /// it listens on; `https://` with `--tls-cert`).
    #[arg(long, env = "FLOE_WORKER_ADVERTISE")]
    advertise: Option<String>,
    /// PEM certificate chain: the worker service serves TLS (requires `--tls-key`).
    #[arg(long, env = "FLOE_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for `--tls-cert`.
    #[arg(long, env = "FLOE_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    #[command(flatten)]
    link: ClusterLinkArgs,
    #[arg(long, env = "FLOE_DATA_DIR", default_value = "./floe-data")]
    data_dir: PathBuf,
    /// Catalog database: `sqlite:PATH` or `postgres://…` (default: SQLite in the data
    /// directory) — the cluster's, where the worker registers.
    #[arg(long, env = "FLOE_CATALOG_DB", hide_env_values = true)]
    catalog_db: Option<String>,
    /// Memory (MiB) the tasks running on this worker may hold before they spill to disk.
    #[arg(long, env = "FLOE_QUERY_MEMORY_LIMIT_MB", default_value_t = 2048)]
    query_memory_limit_mb: usize,
    /// Memory (MiB) for cached data-file ranges (0 disables the cache).
    #[arg(long, env = "FLOE_CACHE_MEMORY_MB", default_value_t = 256)]
    cache_memory_mb: u64,
    /// Local disk (MiB) for cached ranges that no longer fit in memory.
    #[arg(long, env = "FLOE_CACHE_DISK_MB", default_value_t = 4096)]
    cache_disk_mb: u64,
    /// Directory of the disk cache (default: `<data-dir>/cache`, kept across restarts).
    #[arg(long, env = "FLOE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Largest number of database connections.
    #[arg(long, env = "FLOE_DB_MAX_CONNECTIONS")]
    db_max_connections: Option<u32>,
}

pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    match args.command {
        Some(WorkerCommand::List { server }) => print(
            &server
                .connect()
                .await?
                .call(reqwest::Method::GET, "/api/v1/workers", None)
                .await?,
        ),
        None => serve(args.run).await,
    }
}

async fn serve(args: RunArgs) -> anyhow::Result<()> {
    let (data_dir, store) = crate::serve::open_store(
        &args.data_dir,
        args.catalog_db.as_deref(),
        args.db_max_connections,
    )
    .await?;
    let catalog = Arc::new(CatalogService::new(
        Arc::new(store.clone()),
        CatalogConfig::default(),
    ));
    let config = EngineConfig {
        query_memory_limit: args.query_memory_limit_mb.max(1) << 20,
        // A worker commits nothing, so it keeps no hot tier.
        cache: crate::serve::cache_config(
            args.cache_memory_mb,
            args.cache_disk_mb,
            0,
            args.cache_dir.as_deref(),
            &data_dir,
        ),
        ..EngineConfig::default()
    };
    let engine = Arc::new(
        SqlEngine::new(catalog, config).map_err(|e| anyhow::anyhow!("SQL engine settings: {e}"))?,
    );
    let secret = args.link.secret(&store).await?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            Some(floe_server::tls::TlsFiles::load(cert, key).map_err(|e| anyhow::anyhow!(e))?)
        }
        _ => None,
    };
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("listen on {} for the worker service", args.listen))?;
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::serve::wait_for_signal(
        shutdown.clone(),
        std::time::Duration::from_secs(30),
    ));
    let serving = WorkerServing {
        advertise: args.advertise,
        tls,
        plaintext_cluster: args.link.plaintext_cluster,
    };
    let worker = start(
        listener,
        serving,
        engine,
        secret,
        Arc::new(store.clone()),
        shutdown,
    )
    .await?;
    worker.stopped().await;
    store.close().await;
    tracing::info!("floe worker stopped");
    Ok(())
}

/// A running worker service and its heartbeat.
pub struct RunningWorker {
    service: JoinHandle<Result<(), tonic::transport::Error>>,
    heartbeat: JoinHandle<()>,
}

impl RunningWorker {
    /// Waits for the service to stop (after shutdown) and the worker to deregister.
    pub async fn stopped(self) {
        match self.service.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "the worker service stopped with an error"),
            Err(e) => tracing::warn!(error = %e, "the worker service's task failed"),
            Ok(Ok(())) => {}
        }
        let _ = self.heartbeat.await;
    }
}

/// Serves `engine`'s worker service on `listener` as `serving` says and registers it in
/// `store`, until `shutdown`. Plaintext off loopback is refused unless allowed: a plan can
/// read any file the worker can, and the secret guarding that would travel in the clear.
pub async fn start(
    listener: tokio::net::TcpListener,
    serving: WorkerServing,
    engine: Arc<SqlEngine>,
    secret: ClusterSecret,
    store: Arc<dyn ClusterStore>,
    shutdown: CancellationToken,
) -> anyhow::Result<RunningWorker> {
    let address = listener.local_addr()?;
    if serving.tls.is_none() && !address.ip().is_loopback() && !serving.plaintext_cluster {
        anyhow::bail!(
            "the worker service would listen on {address} without TLS: give it --tls-cert and \
             --tls-key (and coordinators --cluster-ca), or pass --plaintext-cluster on a \
             network you trust"
        );
    }
    let scheme = if serving.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let url = serving
        .advertise
        .unwrap_or_else(|| format!("{scheme}://{address}"));
    url::Url::parse(&url).with_context(|| format!("the worker's URL {url:?}"))?;
    let routes = floe_sql::distributed::worker_routes(engine.clone(), secret)
        .map_err(|e| anyhow::anyhow!("start the worker service: {e}"))?;
    tracing::info!(%address, url, "the worker service is serving");
    let service = tokio::spawn(floe_server::cluster::serve_worker(
        listener,
        routes,
        shutdown.clone(),
        serving.tls,
    ));
    let heartbeat = tokio::spawn(floe_server::cluster::heartbeat(
        store, url, engine, shutdown,
    ));
    Ok(RunningWorker { service, heartbeat })
}
