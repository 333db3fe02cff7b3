//! Floe's front doors: every one a thin adapter that decodes a protocol, calls one core and
//! answers in the protocol's own form.
//!
//! - `/catalog/v1/…`: the Iceberg REST catalog ([`rest`], one file per resource) over
//!   [`floe_catalog::service::CatalogService`].
//! - `/api/v1/…`: the management API ([`management`], described at `/api/v1/openapi.json`):
//!   principals and grants, warehouses, maintenance, [`pipelines`], [`tenants`], the
//!   [`cluster`]'s workers, and `/api/v1/sql`.
//! - SQL over the PostgreSQL wire ([`pg`]) and Arrow Flight SQL ([`flight`]): like
//!   `/api/v1/sql`, each calls `floe_sql::SqlEngine::query`.
//! - The push doors — `/ingest/v1` ([`ingest`]), OTLP over HTTP (`otlp`) and gRPC
//!   ([`otlp_grpc`]), Prometheus remote write — decode within their budgets and hand the rows
//!   to floe-stream's `Ingestor`; they make no catalog call of their own.
//! - `/console/` ([`console`]), `/health` and `/metrics`.
//!
//! Around them: authentication (bearer tokens, OIDC: [`oidc`]) and the audit layer
//! ([`audit`]), `Idempotency-Key` replays, TLS ([`tls`]). Catalog errors become the Iceberg
//! `ErrorModel` in exactly one place, `error`.
//!
//! The public surface is what the `floe` binary wires, and no more: [`AppState`] (built by
//! [`AppState::with_engine`], its optional parts set by field) and [`serve`]; the other
//! listeners ([`pg::serve`], [`flight::serve`], [`otlp_grpc::serve`]) and the cluster's
//! worker service and heartbeat ([`cluster`]); what their state is made of (the audit sink
//! and its checkpoints, the console's and OIDC's configuration, TLS files, scan-plan limits,
//! HTTP ingestion's log, stream pipelines) and the tenants' watch. Handlers, routers and
//! their request types are `pub(crate)`.

pub mod audit;
mod auth;
/// The bounded Arrow IPC decoder every door shares (it lives with the ingestion core).
pub use floe_stream::decode::ipc as bounded_ipc;
pub mod cluster;
pub mod console;
pub(crate) mod detach;
pub(crate) mod error;
mod extract;
pub mod flight;
mod idempotency;
pub mod ingest;
mod listen;
pub(crate) mod maintenance;
pub mod management;
pub(crate) mod metrics;
pub mod oidc;
pub(crate) mod otlp;
pub mod otlp_grpc;
pub mod pg;
pub mod pipelines;
pub(crate) mod promql;
pub(crate) mod registry;
pub(crate) mod remote_write;
pub mod rest;
pub mod tenants;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use floe_catalog::service::CatalogService;
use tokio_util::sync::CancellationToken;

use idempotency::LIFETIME_MS as IDEMPOTENCY_LIFETIME_MS;

/// Largest request body accepted (Iceberg commits with many snapshots can be large).
pub(crate) const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    pub catalog: Arc<CatalogService>,
    pub(crate) auth: Arc<floe_catalog::governance::auth::AuthService>,
    pub(crate) authz: Arc<floe_catalog::governance::authz::Authorizer>,
    pub(crate) audit: audit::AuditSink,
    pub(crate) audit_store: Arc<dyn floe_catalog::governance::audit::AuditStore>,
    pub(crate) metrics: metrics::Metrics,
    /// The SQL engine behind `/api/v1/sql`.
    pub sql: Arc<floe_sql::SqlEngine>,
    /// HTTP ingestion's write-ahead log and committers, when enabled.
    pub ingest: Option<Arc<ingest::Ingest>>,
    /// How much memory decoding one request's rows may take (HTTP ingestion, Flight SQL).
    pub decode: bounded_ipc::DecodeLimits,
    /// The maintenance job scheduler, when this server runs one.
    pub scheduler: Option<Arc<floe_maintenance::scheduler::Scheduler>>,
    /// Stream pipelines and their supervisor, when enabled.
    pub pipelines: Option<Arc<pipelines::Pipelines>>,
    /// The youngest file an on-demand orphan cleanup may delete (milliseconds).
    pub orphan_age_floor_ms: i64,
    /// The Confluent-compatible schema registry, when enabled.
    pub registry: Option<floe_stream::registry::Registry>,
    /// Where the cluster's workers are registered, when this node knows of a cluster.
    pub cluster: Option<Arc<dyn floe_catalog::cluster::ClusterStore>>,
    /// Where `floe migrate` keeps its records, when the store keeps them.
    pub migrations: Option<Arc<dyn floe_catalog::migrations::MigrationStore>>,
    /// Serialized `LoadTableResult` bodies by metadata location and snapshot mode: metadata
    /// files never change, so neither does their JSON.
    load_bodies: Arc<floe_catalog::metadata::MetadataCache<bytes::Bytes>>,
    /// Server-side scan plans this node holds for their clients.
    pub plans: Arc<rest::planning::PlanStore>,
    /// What the web console offers at sign-in.
    pub console: Arc<console::ConsoleConfig>,
    /// Requests finishing on tasks of their own after their clients hung up ([`detach`]).
    pub(crate) detached: detach::Detached,
    /// The metric metadata tenants' Prometheus servers sent, for the samples sent apart.
    pub(crate) remote_write_metadata: Arc<floe_stream::remote_write::v1::MetadataMemory>,
    /// The change-event sinks this node publishes to, with their figures.
    pub change_events: floe_stream::events::Stats,
}

impl AppState {
    /// The state over `catalog` and an SQL engine made by the caller; every optional part
    /// (ingestion, pipelines, the registry, the cluster, …) starts off.
    pub fn with_engine(
        catalog: Arc<CatalogService>,
        auth: Arc<floe_catalog::governance::auth::AuthService>,
        authz: Arc<floe_catalog::governance::authz::Authorizer>,
        audit: audit::AuditSink,
        audit_store: Arc<dyn floe_catalog::governance::audit::AuditStore>,
        sql: Arc<floe_sql::SqlEngine>,
    ) -> Self {
        Self {
            sql,
            catalog,
            auth,
            authz,
            audit,
            audit_store,
            metrics: metrics::Metrics::new(),
            ingest: None,
            decode: bounded_ipc::DecodeLimits::default(),
            scheduler: None,
            pipelines: None,
            orphan_age_floor_ms: floe_maintenance::exec::orphans::DEFAULT_MIN_AGE_FLOOR_MS,
            registry: None,
            cluster: None,
            migrations: None,
            load_bodies: Arc::new(floe_catalog::metadata::MetadataCache::new(256)),
            plans: Arc::default(),
            console: Arc::default(),
            detached: detach::Detached::default(),
            remote_write_metadata: Default::default(),
            change_events: Vec::new(),
        }
    }
}

/// The whole HTTP application.
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics::serve_metrics))
        .nest("/catalog", rest::router(state.clone()))
        .nest("/api/v1", management::router(state.clone()))
        .nest("/schema-registry", registry::router(state.clone()))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .merge(ingest_router(state.clone()))
        .merge(otlp_router(state.clone()))
        .merge(promql::router(state.clone()))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            audit::record,
        ))
        // Outside the audit layer: a request whose client hangs up still finishes and is
        // audited ([`detach`]).
        .layer(axum::middleware::from_fn_with_state(
            state.detached.clone(),
            detach::detach_writes,
        ))
        // The console's files are public and not audited; the API calls it makes are.
        .merge(console::router(state.clone()))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .with_state(state)
}

/// `/ingest/v1/…`.
fn ingest_router(state: AppState) -> Router<AppState> {
    Router::new()
        .route(
            "/ingest/v1/{warehouse}/{namespace}/{table}",
            axum::routing::post(ingest::ingest),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state,
            auth::require_principal,
        ))
        // The handler reads the body itself, within `--ingest-max-body-mb`.
        .layer(DefaultBodyLimit::disable())
}

/// `/otlp/…` and `/prometheus/…/api/v1/write` ([`otlp`]).
fn otlp_router(state: AppState) -> Router<AppState> {
    Router::new()
        .route(
            "/otlp/{warehouse}/v1/{signal}",
            axum::routing::post(otlp::export_to),
        )
        .route(
            "/otlp/v1/{signal}",
            axum::routing::post(otlp::export_by_header),
        )
        .route(
            "/prometheus/{warehouse}/api/v1/write",
            axum::routing::post(remote_write::remote_write),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state,
            otlp::require_principal,
        ))
        // The handlers read the body themselves, within `--ingest-max-body-mb`.
        .layer(DefaultBodyLimit::disable())
}

async fn health(axum::extract::State(state): axum::extract::State<AppState>) -> impl IntoResponse {
    match state.catalog.store().list_warehouses().await {
        Ok(_) => (StatusCode::OK, "ok").into_response(),
        Err(e) => error::ApiError(floe_catalog::CatalogError::Unavailable(format!(
            "metadata store unavailable: {}",
            e.error_type()
        )))
        .into_response(),
    }
}

async fn not_found(uri: axum::http::Uri) -> impl IntoResponse {
    error::error_response(
        StatusCode::NOT_FOUND,
        "NotFoundException",
        &format!("no such endpoint: {}", uri.path()),
    )
}

/// Serves HTTP/1.1 until `shutdown` is cancelled, then drains in-flight requests for up to
/// `drain` (a request still running after that is abandoned with its connection). A client
/// gets [`listen::FIRST_BYTES_TIMEOUT`] to send its request headers (and as long between
/// requests on a kept-alive connection); failed accepts are retried ([`listen`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: CancellationToken,
    drain: Duration,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;

    spawn_idempotency_sweeper(state.clone(), shutdown.clone());
    let detached = state.detached.clone();
    let app = router(state);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(listen::FIRST_BYTES_TIMEOUT);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut pause = listen::AcceptPause::default();
    while let Some((socket, peer)) = listen::accept(&listener, &mut pause, "HTTP", &shutdown).await
    {
        let _ = socket.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            // A body that stalls is an error after as long as headers may take.
            app.clone().oneshot(request.map(|body| {
                axum::body::Body::new(listen::IdleBody::new(body, listen::FIRST_BYTES_TIMEOUT))
            }))
        });
        let connection = http.serve_connection(TokioIo::new(socket), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    let drained = async {
        graceful.shutdown().await;
        // Requests whose clients hung up may still be finishing.
        detached.idle().await;
    };
    if tokio::time::timeout(drain, drained).await.is_err() {
        tracing::warn!(
            seconds = drain.as_secs(),
            "stop waiting for HTTP requests still in flight"
        );
    }
    Ok(())
}

fn spawn_idempotency_sweeper(state: AppState, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {
                    let before = floe_catalog::clock::now_ms() - IDEMPOTENCY_LIFETIME_MS;
                    if let Err(e) = state.catalog.store().expire_idempotent(before).await {
                        tracing::warn!(error = %e, "expire idempotency keys");
                    }
                }
            }
        }
    });
}
