//! `floe serve`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use floe_catalog::governance::auth::{AuthConfig, AuthService, ClientCredentials};
use floe_catalog::governance::authz::Authorizer;
use floe_catalog::service::{CatalogConfig, CatalogService};
use floe_storage::StorageProfile;
use floe_store::{SqlStore, StoreOptions};
use tokio_util::sync::CancellationToken;

/// Not `Debug`: it holds the catalog database URL, whose password must never be logged.
#[derive(Args)]
pub struct ServeArgs {
    /// Address of the HTTP server (Iceberg REST catalog, management API, metrics).
    #[arg(long, env = "FLOE_LISTEN", default_value = "127.0.0.1:8181")]
    pub listen: String,
    /// Address of the PostgreSQL wire protocol server (`off` to disable).
    #[arg(long, env = "FLOE_PG_LISTEN", default_value = "127.0.0.1:5433")]
    pub pg_listen: String,
    /// Address of the Arrow Flight SQL server (`off` to disable).
    #[arg(long, env = "FLOE_FLIGHT_LISTEN", default_value = "127.0.0.1:50051")]
    pub flight_listen: String,
    /// Address of the OTLP/gRPC server (`off` to disable); OTLP/HTTP is on `--listen`.
    #[arg(long, env = "FLOE_OTLP_GRPC_LISTEN", default_value = "127.0.0.1:4317")]
    pub otlp_grpc_listen: String,
    /// PEM certificate chain for TLS on the PostgreSQL and Flight SQL front doors (with
    /// `--tls-key`).
    #[arg(long, env = "FLOE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM private key for `--tls-cert`.
    #[arg(long, env = "FLOE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Memory (MiB) one SQL query may hold before it spills to disk.
    #[arg(long, env = "FLOE_QUERY_MEMORY_LIMIT_MB", default_value_t = 2048)]
    pub query_memory_limit_mb: usize,
    /// SQL queries running at once; more wait in line.
    #[arg(long, env = "FLOE_MAX_CONCURRENT_QUERIES", default_value_t = 8)]
    pub max_concurrent_queries: usize,
    /// Longest a graceful stop (SIGTERM or Ctrl-C) takes, in seconds. In-flight requests and
    /// background work get the first half to finish; then whatever is left is abandoned (every
    /// unit of work rolls back when cut, see docs/cancellation.md) and the process exits,
    /// with status 1 if it had to be forced.
    #[arg(long, env = "FLOE_SHUTDOWN_TIMEOUT_SECS", default_value_t = 30)]
    pub shutdown_timeout_secs: u64,
    /// Longest a SQL statement may take, waiting in line included, in seconds (0: no limit).
    #[arg(long, env = "FLOE_SQL_STATEMENT_TIMEOUT_SECS", default_value_t = 300)]
    pub sql_statement_timeout_secs: u64,
    /// SQL statements one principal may run or wait for at once; more are refused (429,
    /// PostgreSQL 53400, gRPC RESOURCE_EXHAUSTED).
    #[arg(long, env = "FLOE_SQL_MAX_QUERIES_PER_PRINCIPAL", default_value_t = 4)]
    pub sql_max_queries_per_principal: usize,
    /// Memory (MiB) a statement's answer may take while its client has not read it; past
    /// that it waits in the statement's warehouse storage.
    #[arg(long, env = "FLOE_SQL_RESULT_MEMORY_MB", default_value_t = 16)]
    pub sql_result_memory_mb: usize,
    /// Storage (MiB) a statement's unread answer may take in its warehouse (below
    /// `.floe/results`) while its client reads slowly; past that the query waits for the
    /// client (0: answers wait in memory only).
    #[arg(long, env = "FLOE_SQL_RESULT_SPOOL_MB", default_value_t = 4096)]
    pub sql_result_spool_mb: u64,
    /// Memory (MiB) for cached data-file ranges read by SQL (0 disables the cache).
    #[arg(long, env = "FLOE_CACHE_MEMORY_MB", default_value_t = 256)]
    pub cache_memory_mb: u64,
    /// Local disk (MiB) for cached ranges that no longer fit in memory.
    #[arg(long, env = "FLOE_CACHE_DISK_MB", default_value_t = 4096)]
    pub cache_disk_mb: u64,
    /// Directory of the disk cache (default: `<data-dir>/cache`, kept across restarts).
    #[arg(long, env = "FLOE_CACHE_DIR")]
    pub cache_dir: Option<std::path::PathBuf>,
    /// Part of `--cache-disk-mb` (MiB) for the hot tier: whole data files this node's
    /// ingestion committed, kept while inside their tenant's `hot-window-seconds` (0: none).
    #[arg(long, env = "FLOE_CACHE_HOT_MB", default_value_t = 1024)]
    pub cache_hot_mb: u64,
    /// How often rows taken by `/ingest/v1/…` are committed to their tables (milliseconds).
    #[arg(long, env = "FLOE_INGEST_COMMIT_INTERVAL_MS", default_value_t = 1000)]
    pub ingest_commit_interval_ms: u64,
    /// Largest body `/ingest/v1/…` takes (MiB); larger ones get 413.
    #[arg(long, env = "FLOE_INGEST_MAX_BODY_MB", default_value_t = 64)]
    pub ingest_max_body_mb: usize,
    /// Bytes (MiB) of acknowledged ingest not yet committed past which new ingest requests
    /// are shed with 503 + `Retry-After` until the committers catch up.
    #[arg(long, env = "FLOE_INGEST_MAX_BACKLOG_MB", default_value_t = 1024)]
    pub ingest_max_backlog_mb: usize,
    /// Bytes (MiB) of ingest request bodies decoded at once past which new requests are
    /// shed with 503 + `Retry-After`.
    #[arg(long, env = "FLOE_INGEST_MAX_INFLIGHT_MB", default_value_t = 512)]
    pub ingest_max_inflight_mb: usize,
    /// How long committed ingest log entries are kept for `floe ingest replay` (seconds; 0
    /// deletes them once committed).
    #[arg(long, env = "FLOE_INGEST_RETAIN_SECS", default_value_t = 3600)]
    pub ingest_retain_secs: u64,
    /// The most MiB of committed entries one table's ingest log keeps for replay (the oldest
    /// are dropped first).
    #[arg(long, env = "FLOE_INGEST_RETAIN_MB", default_value_t = 256)]
    pub ingest_retain_mb: usize,
    /// Memory (MiB) decoding one request's rows may take — an `/ingest/v1/…` body, a Flight
    /// SQL `DoPut` stream or bound parameters — and no more than 64 times the request's
    /// size; more gets 413 (Flight: RESOURCE_EXHAUSTED).
    #[arg(long, env = "FLOE_DECODE_MEMORY_MB", default_value_t = 256)]
    pub decode_memory_mb: usize,
    /// Directory for the embedded catalog database and the default warehouse.
    /// Maintenance jobs (compaction, expiry, orphan cleanup, retention) this node runs at
    /// once; 0 runs none here (other nodes sharing the store still do).
    #[arg(long, env = "FLOE_MAINTENANCE_WORKERS", default_value_t = 2)]
    pub maintenance_workers: usize,
    /// Threads of the background runtime maintenance runs on (its CPU bound).
    #[arg(long, env = "FLOE_MAINTENANCE_THREADS", default_value_t = 1)]
    pub maintenance_threads: usize,
    /// Maintenance jobs one warehouse runs at once, across all nodes.
    #[arg(long, env = "FLOE_MAINTENANCE_WAREHOUSE_CAP", default_value_t = 1)]
    pub maintenance_warehouse_cap: usize,
    /// How often every table gets its scheduled expiry, orphan cleanup and retention jobs
    /// (seconds; 0 turns the schedule off).
    #[arg(long, env = "FLOE_MAINTENANCE_SCHEDULE_SECS", default_value_t = 3600)]
    pub maintenance_schedule_secs: u64,
    /// Lease of a running job (seconds): a job whose node stops renewing it is taken over
    /// this long after.
    #[arg(long, env = "FLOE_MAINTENANCE_LEASE_SECS", default_value_t = 60)]
    pub maintenance_lease_secs: u64,
    /// First retry delay of a failed job (seconds), doubled per attempt.
    #[arg(long, env = "FLOE_MAINTENANCE_RETRY_SECS", default_value_t = 30)]
    pub maintenance_retry_secs: u64,
    /// A compaction queued by a commit that left many small files waits this long (seconds),
    /// so it runs after a burst of writes rather than racing it.
    #[arg(
        long,
        env = "FLOE_MAINTENANCE_TRIGGER_DELAY_SECS",
        default_value_t = 60
    )]
    pub maintenance_trigger_delay_secs: u64,
    /// Memory a compaction's scan and sort hold before spilling (MiB).
    #[arg(long, env = "FLOE_MAINTENANCE_MEMORY_MB", default_value_t = 1024)]
    pub maintenance_memory_mb: usize,
    /// The youngest a file may be (seconds) for orphan cleanup to delete it, whatever a run
    /// asks: younger files may belong to a commit still in flight.
    #[arg(long, env = "FLOE_ORPHAN_MIN_AGE_FLOOR_SECS", default_value_t = 3600)]
    pub orphan_min_age_floor_secs: u64,
    /// Server-side scan planning: snapshots with more data files than this are planned in the
    /// background (the client polls the plan id).
    #[arg(long, env = "FLOE_SCAN_PLAN_SYNC_FILES", default_value_t = 10_000)]
    pub scan_plan_sync_files: u64,
    /// Server-side scan planning: file scan tasks per answer (the rest as plan tasks).
    #[arg(long, env = "FLOE_SCAN_PLAN_PAGE_FILES", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub scan_plan_page_files: u64,
    /// Lease of a running stream pipeline (seconds): a pipeline whose node stops renewing
    /// it is taken over by another node this long after.
    #[arg(long, env = "FLOE_PIPELINE_LEASE_SECS", default_value_t = 15)]
    pub pipeline_lease_secs: u64,
    /// Run queries over the cluster's live workers (`floe worker`, or nodes started with
    /// `--worker-listen`) whenever one is live; without it every query runs on this node.
    #[arg(long, env = "FLOE_DISTRIBUTED")]
    pub distributed: bool,
    /// Bytes of data one task of a distributed scan reads, about (default 128 MiB); a smaller
    /// scan stays on one task, and a query of such scans on this node.
    #[arg(long, env = "FLOE_DISTRIBUTED_TASK_BYTES", default_value_t = floe_sql::distributed::DEFAULT_TASK_BYTES)]
    pub distributed_task_bytes: usize,
    /// Seconds a worker running a distributed query's tasks may answer no probe before the
    /// query is run again without it (a worker that leaves the live list is lost at once).
    #[arg(long, env = "FLOE_DISTRIBUTED_STALL_SECS", default_value_t = floe_sql::distributed::DEFAULT_STALL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub distributed_stall_secs: u64,
    /// Hand the files of distributed scans to tasks one at a time, so that a task done with
    /// its own takes a straggler's (`false`: each task reads the files placed with it).
    #[arg(long, env = "FLOE_WORK_STEALING", default_value_t = true, action = clap::ArgAction::Set)]
    pub work_stealing: bool,
    /// URL workers reach this coordinator's work units at: its Flight SQL listener (default
    /// `http://` and the address it listens on; `https://` with `--tls-cert`).
    #[arg(long, env = "FLOE_COORDINATOR_ADVERTISE")]
    pub coordinator_advertise: Option<String>,
    /// Also run the worker service of distributed queries at this address (`off`: none).
    #[arg(long, env = "FLOE_WORKER_LISTEN", default_value = "off")]
    pub worker_listen: String,
    /// URL the cluster's other nodes reach this node's worker service at (default:
    /// `http://` and the address it listens on; `https://` with `--tls-cert`, which the
    /// worker service serves too).
    #[arg(long, env = "FLOE_WORKER_ADVERTISE")]
    pub worker_advertise: Option<String>,
    #[command(flatten)]
    pub events: crate::change_events::EventArgs,
    #[command(flatten)]
    pub cluster_link: crate::worker::ClusterLinkArgs,
    #[arg(long, env = "FLOE_DATA_DIR", default_value = "./floe-data")]
    pub data_dir: PathBuf,
    /// Catalog database: `sqlite:PATH` or `postgres://…` (default: SQLite in the data directory).
    #[arg(long, env = "FLOE_CATALOG_DB", hide_env_values = true)]
    pub catalog_db: Option<String>,
    /// Lifetime of issued access tokens, in seconds.
    #[arg(long, env = "FLOE_TOKEN_TTL_SECS", default_value_t = 3600)]
    pub token_ttl_secs: u64,
    /// How often the audit trail's head is noted in the checkpoint file, in seconds.
    #[arg(long, env = "FLOE_AUDIT_CHECKPOINT_SECS", default_value_t = 10)]
    pub audit_checkpoint_secs: u64,
    /// Where the audit trail's head is noted (default `<data-dir>/audit-checkpoints`); best
    /// somewhere the catalog database's writers cannot write.
    #[arg(long, env = "FLOE_AUDIT_CHECKPOINT_FILE")]
    pub audit_checkpoint_file: Option<PathBuf>,
    /// Lifetime of vended storage credentials, in seconds (10 to 43,200). STS issues 900 or
    /// more; a shorter lifetime is enforced by a deadline in the credential's session policy.
    #[arg(long, env = "FLOE_VENDED_CREDENTIALS_TTL_SECS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(10..=43_200))]
    pub vended_credentials_ttl_secs: u64,
    /// How long token exchange may extend a session begun with client credentials, in seconds.
    #[arg(long, env = "FLOE_MAX_SESSION_SECS", default_value_t = 43_200)]
    pub max_session_secs: u64,
    /// Also accept access tokens from this OpenID Connect issuer (RS256, checked against its
    /// published keys).
    #[arg(long, env = "FLOE_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// The audience external tokens must carry.
    #[arg(long, env = "FLOE_OIDC_AUDIENCE", default_value = "floe")]
    pub oidc_audience: String,
    /// The claim of external tokens that names the Floe principal.
    #[arg(long, env = "FLOE_OIDC_PRINCIPAL_CLAIM", default_value = "sub")]
    pub oidc_principal_claim: String,
    /// The client id the web console signs in with at the OpenID Connect issuer (a public
    /// client allowed the redirect URI `<this server>/console/`); unset, the console offers
    /// client credentials only.
    #[arg(long, env = "FLOE_CONSOLE_OIDC_CLIENT_ID", requires = "oidc_issuer")]
    pub console_oidc_client_id: Option<String>,
    /// The scopes the web console asks the OpenID Connect issuer for.
    #[arg(long, env = "FLOE_CONSOLE_OIDC_SCOPE", default_value = "openid")]
    pub console_oidc_scope: String,
    /// Largest number of database connections (default: 4 per core, at most 16; more
    /// connections than the machine can serve only lengthen the latency tail).
    #[arg(long, env = "FLOE_DB_MAX_CONNECTIONS")]
    pub db_max_connections: Option<u32>,
}

/// The data directory (made, and resolved) and the catalog database in it or at
/// `catalog_db`, opened (migrated).
pub(crate) async fn open_store(
    data_dir: &Path,
    catalog_db: Option<&str>,
    max_connections: Option<u32>,
) -> anyhow::Result<(PathBuf, SqlStore)> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("create data directory {}", data_dir.display()))?;
    let data_dir = std::fs::canonicalize(data_dir)
        .with_context(|| format!("resolve data directory {}", data_dir.display()))?;
    let db_url = catalog_db
        .map(str::to_string)
        .unwrap_or_else(|| format!("sqlite:{}", data_dir.join("catalog.db").display()));
    let store = SqlStore::connect(
        &db_url,
        StoreOptions {
            max_connections: max_connections.unwrap_or_else(default_pool_size),
            ..StoreOptions::default()
        },
    )
    .await?;
    tracing::info!(backend = ?store.backend(), url = %floe_store::redact_url(&db_url), "opened catalog database");
    Ok((data_dir, store))
}

/// The cache of data-file ranges `memory_mb` and `disk_mb` describe (none when `memory_mb`
/// is 0), on disk in `dir` or `<data-dir>/cache`, `hot_mb` of the disk for the hot tier.
pub(crate) fn cache_config(
    memory_mb: u64,
    disk_mb: u64,
    hot_mb: u64,
    dir: Option<&Path>,
    data_dir: &Path,
) -> Option<floe_storage::cache::CacheConfig> {
    (memory_mb > 0).then(|| floe_storage::cache::CacheConfig {
        memory_bytes: memory_mb << 20,
        disk_bytes: disk_mb << 20,
        hot_bytes: hot_mb << 20,
        hot_window_ms: floe_storage::cache::DEFAULT_HOT_WINDOW_MS,
        dir: dir.map_or_else(|| data_dir.join("cache"), Path::to_path_buf),
    })
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let (data_dir, store) = open_store(
        &args.data_dir,
        args.catalog_db.as_deref(),
        args.db_max_connections,
    )
    .await?;
    let catalog = Arc::new(CatalogService::new(
        Arc::new(store.clone()),
        CatalogConfig {
            vended_credentials_ttl: Duration::from_secs(args.vended_credentials_ttl_secs),
            ..CatalogConfig::default()
        },
    ));
    let respelled = catalog.canonicalize_locations().await?;
    if respelled > 0 {
        tracing::info!(
            tabulars = respelled,
            "stored table and view locations in canonical spelling"
        );
    }
    ensure_default_warehouse(&catalog, &data_dir).await?;
    // Tenant limits are in force before the first request.
    catalog.tenants().attach(Arc::new(store.clone()));
    catalog
        .tenants()
        .refresh()
        .await
        .context("read tenant limits")?;
    let mut auth = AuthService::new(
        Arc::new(store.clone()),
        AuthConfig {
            token_ttl: Duration::from_secs(args.token_ttl_secs.max(1)),
            max_session: Duration::from_secs(args.max_session_secs.max(1)),
            ..AuthConfig::default()
        },
    );
    let mut console = floe_server::console::ConsoleConfig::default();
    if let Some(issuer) = &args.oidc_issuer {
        let verifier = floe_server::oidc::OidcVerifier::discover(floe_server::oidc::OidcConfig {
            issuer: issuer.clone(),
            audience: args.oidc_audience.clone(),
            principal_claim: args.oidc_principal_claim.clone(),
        })
        .await
        .map_err(|e| anyhow::anyhow!("OpenID Connect issuer {issuer}: {e}"))?;
        tracing::info!(issuer, "accepting tokens from the OpenID Connect issuer");
        if let Some(client_id) = &args.console_oidc_client_id {
            let (authorization_endpoint, token_endpoint) =
                verifier.browser_endpoints().ok_or_else(|| {
                    anyhow::anyhow!(
                        "OpenID Connect issuer {issuer} names no authorization_endpoint and \
                         token_endpoint, which --console-oidc-client-id needs"
                    )
                })?;
            for endpoint in [&authorization_endpoint, &token_endpoint] {
                if !floe_server::console::browser_endpoint_ok(endpoint) {
                    anyhow::bail!(
                        "OpenID Connect issuer {issuer} names the browser endpoint {endpoint}; \
                         the console signs in only through https (or http on loopback)"
                    );
                }
            }
            tracing::info!(%authorization_endpoint, %token_endpoint, "the console signs in through the OpenID Connect issuer");
            console.oidc = Some(floe_server::console::ConsoleOidc {
                issuer: verifier.issuer().to_string(),
                client_id: client_id.clone(),
                scope: args.console_oidc_scope.clone(),
                authorization_endpoint,
                token_endpoint,
            });
        }
        auth = auth.with_external(Arc::new(verifier));
    }
    let auth = Arc::new(auth);
    auth.init().await.context("load token signing keys")?;
    bootstrap_root(&auth, &data_dir).await?;

    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("listen on {}", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, "floe is serving");
    let shutdown = CancellationToken::new();
    let stop_bound = Duration::from_secs(args.shutdown_timeout_secs.max(2));
    tokio::spawn(wait_for_signal(shutdown.clone(), stop_bound));
    let audit_shutdown = CancellationToken::new();
    let (audit, audit_writer) =
        floe_server::audit::AuditSink::start(Arc::new(store.clone()), audit_shutdown.clone());
    let checkpoints_path = args
        .audit_checkpoint_file
        .clone()
        .unwrap_or_else(|| data_dir.join(floe_catalog::governance::audit::CHECKPOINT_FILE));
    let checkpoints = floe_server::audit::start_checkpoints(
        Arc::new(store.clone()),
        checkpoints_path.clone(),
        Duration::from_secs(args.audit_checkpoint_secs.max(1)),
        audit_shutdown.clone(),
    );
    let authz = Arc::new(Authorizer::new(
        Arc::new(store.clone()),
        Duration::from_secs(2),
    ));
    let sql_config = floe_sql::EngineConfig {
        query_memory_limit: args.query_memory_limit_mb.max(1) << 20,
        max_concurrent_queries: args.max_concurrent_queries.max(1),
        statement_timeout: (args.sql_statement_timeout_secs > 0)
            .then(|| Duration::from_secs(args.sql_statement_timeout_secs)),
        max_queries_per_principal: args.sql_max_queries_per_principal.max(1),
        results: floe_sql::ResultLimits {
            memory: args.sql_result_memory_mb.max(1) << 20,
            spool: args.sql_result_spool_mb << 20,
        },
        cache: cache_config(
            args.cache_memory_mb,
            args.cache_disk_mb,
            args.cache_hot_mb,
            args.cache_dir.as_deref(),
            &data_dir,
        ),
        ..floe_sql::EngineConfig::default()
    };
    // DataFusion's settings from the environment are read once, here: a value it refuses
    // stops the start with its error rather than every query.
    let mut engine = floe_sql::SqlEngine::new(catalog.clone(), sql_config)
        .map_err(|e| anyhow::anyhow!("SQL engine settings: {e}"))?;
    let secret = args.cluster_link.secret(&store).await?;
    let live = floe_sql::distributed::LiveWorkers::default();
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            Some(floe_server::tls::TlsFiles::load(cert, key).map_err(|e| anyhow::anyhow!(e))?)
        }
        _ => None,
    };
    let flight_listener =
        bind_optional(&args.flight_listen, "Arrow Flight SQL", "--flight-listen").await?;
    if args.distributed {
        let mut cluster = floe_sql::distributed::Cluster::new(live.clone(), secret.clone())
            .with_task_bytes(args.distributed_task_bytes)
            .with_stall(Duration::from_secs(args.distributed_stall_secs));
        if let Some(url) = coordinator_url(&args, flight_listener.as_ref(), tls.is_some())? {
            if args.work_stealing {
                tracing::info!(%url, "workers take work units from this coordinator");
                cluster = cluster.with_work_units(url.clone());
            }
            tracing::info!(%url, "workers pass runtime filters between stages through this coordinator");
            cluster = cluster.with_runtime_filters(url);
        }
        engine = engine.with_cluster(cluster);
        tokio::spawn(floe_server::cluster::watch_workers(
            Arc::new(store.clone()),
            live,
            shutdown.clone(),
        ));
    }
    let engine = Arc::new(engine);
    let mut state = floe_server::AppState::with_engine(
        catalog,
        auth,
        authz,
        audit,
        Arc::new(store.clone()),
        engine.clone(),
    );
    state.console = Arc::new(console);
    state.cluster = Some(Arc::new(store.clone()));
    state.migrations = Some(Arc::new(store.clone()));
    state.decode = floe_server::bounded_ipc::DecodeLimits {
        max_bytes: args.decode_memory_mb.max(1) << 20,
        ..Default::default()
    };
    // The ingest log is replayed before the server takes requests.
    let ingest_dir = data_dir.join("ingest-wal");
    state.ingest = Some(
        floe_server::ingest::Ingest::open(
            floe_server::ingest::IngestConfig {
                dir: ingest_dir.clone(),
                commit_interval: std::time::Duration::from_millis(
                    args.ingest_commit_interval_ms.max(10),
                ),
                max_body_bytes: args.ingest_max_body_mb << 20,
                wait_timeout: std::time::Duration::from_secs(60),
                max_backlog_bytes: (args.ingest_max_backlog_mb as u64) << 20,
                max_inflight_bytes: (args.ingest_max_inflight_mb as u64) << 20,
                retain_committed: Duration::from_secs(args.ingest_retain_secs),
                retain_committed_bytes: (args.ingest_retain_mb as u64) << 20,
            },
            state.catalog.clone(),
            state.sql.clone(),
            shutdown.clone(),
        )
        .await
        .with_context(|| format!("open the ingest log in {}", ingest_dir.display()))?,
    );
    if let Some(ingest) = &state.ingest {
        // Floe SQL on this node reads what its log acknowledged before it is committed.
        state
            .sql
            .set_pending_rows(Arc::new(floe_stream::core::FreshRows(Arc::downgrade(
                ingest,
            ))));
    }
    state.orphan_age_floor_ms = (args.orphan_min_age_floor_secs as i64).saturating_mul(1000);
    state.plans = Arc::new(floe_server::rest::planning::PlanStore::new(
        floe_server::rest::planning::PlanLimits {
            sync_files: args.scan_plan_sync_files,
            page_files: args.scan_plan_page_files as usize,
        },
    ));
    let scheduler = Arc::new(floe_maintenance::scheduler::Scheduler::new(
        floe_maintenance::exec::Maintainer::new(state.catalog.clone(), state.sql.clone())
            .with_orphan_age_floor(state.orphan_age_floor_ms),
        Arc::new(store.clone()),
        floe_maintenance::scheduler::SchedulerConfig {
            workers: args.maintenance_workers,
            threads: args.maintenance_threads,
            warehouse_cap: args.maintenance_warehouse_cap,
            schedule_every: std::time::Duration::from_secs(args.maintenance_schedule_secs),
            lease: std::time::Duration::from_secs(args.maintenance_lease_secs.max(3)),
            backoff: std::time::Duration::from_secs(args.maintenance_retry_secs),
            memory_limit: args.maintenance_memory_mb << 20,
            trigger_delay: std::time::Duration::from_secs(args.maintenance_trigger_delay_secs),
            ..Default::default()
        },
    ));
    state.scheduler = Some(scheduler.clone());
    state.change_events = crate::change_events::start(
        &args.events,
        Arc::new(store.clone()),
        format!("node-{}", uuid::Uuid::now_v7()),
        shutdown.clone(),
    )?;
    let registry = floe_stream::registry::Registry::new(Arc::new(store.clone()));
    state.registry = Some(registry.clone());
    let pipelines = Arc::new(
        floe_server::pipelines::Pipelines::new(
            Arc::new(store.clone()),
            state.catalog.clone(),
            state.sql.clone(),
            std::time::Duration::from_secs(args.pipeline_lease_secs.max(3)),
        )
        .with_registry(Arc::new(registry)),
    );
    state.pipelines = Some(pipelines.clone());
    let supervisor = tokio::spawn(pipelines.supervise(shutdown.clone()));
    tokio::spawn(floe_server::tenants::watch(
        state.catalog.clone(),
        shutdown.clone(),
    ));
    let maintenance = if args.maintenance_workers > 0 {
        Some(
            scheduler
                .start(shutdown.clone())
                .context("start the maintenance runtime")?,
        )
    } else {
        None
    };
    let pg = bind_optional(
        &args.pg_listen,
        "the PostgreSQL wire protocol",
        "--pg-listen",
    )
    .await?
    .map(|pg| {
        tokio::spawn(floe_server::pg::serve(
            pg,
            state.clone(),
            shutdown.clone(),
            tls.clone(),
        ))
    });
    let otlp_grpc = bind_optional(&args.otlp_grpc_listen, "OTLP/gRPC", "--otlp-grpc-listen")
        .await?
        .map(|listener| {
            tokio::spawn(floe_server::otlp_grpc::serve(
                listener,
                state.clone(),
                shutdown.clone(),
                tls.clone(),
            ))
        });
    let flight = flight_listener.map(|flight| {
        tokio::spawn(floe_server::flight::serve(
            flight,
            state.clone(),
            shutdown.clone(),
            tls.clone(),
        ))
    });
    let worker =
        match bind_optional(&args.worker_listen, "the worker service", "--worker-listen").await? {
            Some(listener) => Some(
                crate::worker::start(
                    listener,
                    crate::worker::WorkerServing {
                        advertise: args.worker_advertise.clone(),
                        tls: tls.clone(),
                        plaintext_cluster: args.cluster_link.plaintext_cluster,
                    },
                    engine.clone(),
                    secret,
                    Arc::new(store.clone()),
                    shutdown.clone(),
                )
                .await?,
            ),
            None => None,
        };
    // Doors and background work get half the bound to finish what they hold; the rest is
    // for the audit writer, the last checkpoint and the store.
    let drain = stop_bound / 2;
    floe_server::serve(listener, state, shutdown.clone(), drain).await?;
    let deadline = tokio::time::Instant::now() + drain;
    let stopped = async {
        if let Some(worker) = worker {
            worker.stopped().await;
        }
        if let Some(otlp_grpc) = otlp_grpc {
            let _ = otlp_grpc.await;
        }
        if let Some(flight) = flight {
            let _ = flight.await;
        }
        if let Some(pg) = pg {
            let _ = pg.await;
        }
        let _ = supervisor.await;
        if let Some(maintenance) = maintenance {
            let _ = tokio::task::spawn_blocking(move || maintenance.join()).await;
        }
    };
    if tokio::time::timeout_at(deadline, stopped).await.is_err() {
        tracing::warn!(
            seconds = drain.as_secs(),
            "stop waiting for front doors and background work still running"
        );
    }
    // Every answered request's audit record is written before the process exits.
    audit_shutdown.cancel();
    let _ = audit_writer.await;
    // The head after the last records, so a restart's first minutes are covered too.
    let _ = checkpoints.await;
    floe_server::audit::checkpoint(&store, &checkpoints_path, &mut None).await;
    store.close().await;
    tracing::info!("floe stopped");
    Ok(())
}

/// Where this coordinator's workers take work units and pass runtime filters between stages
/// (its Flight SQL listener), or `None` when they do neither: there is no Flight SQL
/// listener, or the cluster's secret would cross a network in the clear.
fn coordinator_url(
    args: &ServeArgs,
    flight: Option<&tokio::net::TcpListener>,
    tls: bool,
) -> anyhow::Result<Option<url::Url>> {
    let Some(flight) = flight else {
        tracing::warn!(
            "no Flight SQL listener (--flight-listen off): workers take no work units (each \
             scan task reads the files placed with it) and pass no runtime filters between \
             stages"
        );
        return Ok(None);
    };
    let address = flight.local_addr()?;
    let url = match &args.coordinator_advertise {
        Some(url) => url.clone(),
        None if address.ip().is_unspecified() => {
            tracing::warn!(
                %address,
                "Flight SQL listens on every address: workers take no work units and pass no \
                 runtime filters until --coordinator-advertise says which URL reaches this \
                 coordinator"
            );
            return Ok(None);
        }
        None => format!("{}://{address}", if tls { "https" } else { "http" }),
    };
    let url = url::Url::parse(&url).with_context(|| format!("--coordinator-advertise {url:?}"))?;
    let loopback = floe_sql::distributed::is_loopback(&url);
    if url.scheme() != "https" && !loopback && !args.cluster_link.plaintext_cluster {
        tracing::warn!(
            %url,
            "workers would send the cluster secret to {url} in the clear: they take no work \
             units and pass no runtime filters (serve Flight SQL with --tls-cert, or pass \
             --plaintext-cluster on a network you trust)"
        );
        return Ok(None);
    }
    Ok(Some(url))
}

/// Binds a front door's listener, unless its address is `off`.
pub(crate) async fn bind_optional(
    address: &str,
    what: &str,
    flag: &str,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    if address == "off" {
        return Ok(None);
    }
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("listen on {address} for {what} ({flag}; `off` disables it)"))?;
    tracing::info!(address = %listener.local_addr()?, "{what} is serving");
    Ok(Some(listener))
}

/// Creates the root principal on first start: with the credentials in
/// `FLOE_ROOT_CLIENT_ID` / `FLOE_ROOT_CLIENT_SECRET` when set, otherwise with generated ones
/// written to `<data-dir>/root-credentials.json` (mode 0600).
async fn bootstrap_root(auth: &AuthService, data_dir: &Path) -> anyhow::Result<()> {
    let configured = match (
        std::env::var("FLOE_ROOT_CLIENT_ID")
            .ok()
            .filter(|v| !v.is_empty()),
        std::env::var("FLOE_ROOT_CLIENT_SECRET")
            .ok()
            .filter(|v| !v.is_empty()),
    ) {
        (Some(client_id), Some(client_secret)) => Some(ClientCredentials {
            client_id,
            client_secret,
        }),
        (None, None) => None,
        _ => anyhow::bail!("set both FLOE_ROOT_CLIENT_ID and FLOE_ROOT_CLIENT_SECRET, or neither"),
    };
    if let Some(generated) = auth.bootstrap_root(configured).await? {
        let path = data_dir.join("root-credentials.json");
        write_private(&path, &serde_json::to_vec_pretty(&generated)?)
            .with_context(|| format!("write {}", path.display()))?;
        tracing::info!(path = %path.display(), "created the root principal; its credentials are in this file");
    }
    Ok(())
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
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

/// Waits for SIGTERM or Ctrl-C, then cancels `shutdown` and starts the watchdog that ends the
/// process if the graceful stop has not finished within `bound`.
pub(crate) async fn wait_for_signal(shutdown: CancellationToken, bound: Duration) {
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
    tracing::info!(bound_secs = bound.as_secs(), "shutting down");
    shutdown.cancel();
    // A thread, not a task: it must fire even when every runtime thread is stuck.
    std::thread::spawn(move || {
        std::thread::sleep(bound);
        tracing::error!(
            bound_secs = bound.as_secs(),
            "the graceful stop did not finish in time; exiting"
        );
        std::process::exit(1);
    });
}
