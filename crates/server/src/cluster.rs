//! The node's place in a cluster: workers register in the catalog database and heartbeat;
//! coordinators keep the list of live workers of their own version fresh from it; the worker
//! service is served behind the cluster's secret; `GET /api/v1/workers` lists the workers.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::{Extension, Json};
use floe_catalog::cluster::{CacheCounts, ClusterStore, WorkerRecord};
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_sql::distributed::LiveWorkers;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::AppState;
use crate::auth::require_server;
use crate::error::ApiResult;
use floe_catalog::clock::now_ms;

/// How often a worker records that it lives.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// A worker whose last heartbeat is older than this is no longer given tasks.
pub(crate) const WORKER_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a coordinator reads the workers again.
pub(crate) const WATCH_EVERY: Duration = Duration::from_secs(1);
/// A worker silent this long is forgotten by the store.
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// Whether a worker may be given tasks now: it heartbeat within [`WORKER_TIMEOUT`] and runs
/// this node's version (plans are encoded for the version that made them).
pub(crate) fn is_live(worker: &WorkerRecord, now_ms: i64) -> bool {
    now_ms - worker.heartbeat_ms <= WORKER_TIMEOUT.as_millis() as i64
        && worker.version == env!("CARGO_PKG_VERSION")
}

/// Keeps `live` to the workers that may be given tasks, until `shutdown`.
pub async fn watch_workers(
    store: Arc<dyn ClusterStore>,
    live: LiveWorkers,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(WATCH_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut known: Vec<url::Url> = Vec::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let workers = match store.list_workers().await {
            Ok(workers) => workers,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the cluster's workers");
                continue;
            }
        };
        let now = now_ms();
        let mut urls = Vec::new();
        for worker in workers.iter().filter(|w| is_live(w, now)) {
            match url::Url::parse(&worker.url) {
                Ok(url) => urls.push(url),
                Err(e) => tracing::warn!(url = worker.url, error = %e, "a worker's URL is not one"),
            }
        }
        urls.sort();
        if urls != known {
            tracing::info!(
                workers = ?urls.iter().map(|u| u.as_str()).collect::<Vec<_>>(),
                "live workers changed"
            );
            known = urls.clone();
        }
        live.set(urls);
    }
}

/// The machine's one-minute load average (0 where the system does not say).
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Registers this worker, heartbeats every [`HEARTBEAT_EVERY`] until `shutdown`, then
/// deregisters it.
pub async fn heartbeat(
    store: Arc<dyn ClusterStore>,
    url: String,
    engine: Arc<floe_sql::SqlEngine>,
    shutdown: CancellationToken,
) {
    let cache = || {
        engine
            .cache_stats()
            .map_or_else(CacheCounts::default, |stats| {
                let load = |c: &std::sync::atomic::AtomicU64| {
                    c.load(std::sync::atomic::Ordering::Relaxed) as i64
                };
                CacheCounts {
                    memory_hits: load(&stats.memory_hits),
                    disk_hits: load(&stats.disk_hits),
                    misses: load(&stats.misses),
                }
            })
    };
    let mut record = WorkerRecord {
        id: uuid::Uuid::now_v7(),
        url,
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at_ms: now_ms(),
        heartbeat_ms: now_ms(),
        load_average: load_average(),
        cache: cache(),
    };
    let mut ticks = tokio::time::interval(HEARTBEAT_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = ticks.tick() => {}
        }
        record.heartbeat_ms = now_ms();
        record.load_average = load_average();
        record.cache = cache();
        if let Err(e) = store.heartbeat_worker(&record).await {
            tracing::warn!(error = %e, "could not record this worker's heartbeat");
        }
        if let Err(e) = store
            .prune_workers(now_ms() - FORGET_AFTER.as_millis() as i64)
            .await
        {
            tracing::debug!(error = %e, "could not forget long-silent workers");
        }
    }
    if let Err(e) = store.remove_worker(record.id).await {
        tracing::warn!(error = %e, "could not deregister this worker");
    }
}

/// Serves the worker service (`routes`) on `listener` until `shutdown`.
pub async fn serve_worker(
    listener: TcpListener,
    routes: tonic::service::Routes,
    shutdown: CancellationToken,
    tls: Option<crate::tls::TlsFiles>,
) -> Result<(), tonic::transport::Error> {
    crate::listen::grpc_server(tls)?
        .add_routes(routes)
        .serve_with_incoming_shutdown(
            crate::listen::incoming(listener, "worker", shutdown.clone()),
            shutdown.cancelled_owned(),
        )
        .await
}

/// One registration per URL, the newest (a worker restarted at its address registers anew;
/// the old registration lingers until pruned and is not a second worker).
fn newest_per_url(workers: Vec<WorkerRecord>) -> Vec<WorkerRecord> {
    let mut newest: std::collections::BTreeMap<String, WorkerRecord> = Default::default();
    for worker in workers {
        let key = worker.url.trim_end_matches('/').to_string();
        let newer = newest.get(&key).is_none_or(|kept| {
            (worker.started_at_ms, worker.heartbeat_ms) > (kept.started_at_ms, kept.heartbeat_ms)
        });
        if newer {
            newest.insert(key, worker);
        }
    }
    newest.into_values().collect()
}

/// `GET /api/v1/workers`: every worker URL's newest registration, whether it is live, whether
/// this node hands tasks to its URL (when it coordinates), its load and version.
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Value>> {
    require_server(&caller, Privilege::ManageWarehouses)?;
    let Some(store) = &state.cluster else {
        return Ok(Json(json!({"workers": []})));
    };
    let now = now_ms();
    let routed = state.sql.routed_workers();
    let workers: Vec<Value> = newest_per_url(store.list_workers().await?)
        .into_iter()
        .map(|w| {
            let live = is_live(&w, now);
            json!({
                "id": w.id,
                "url": w.url,
                "version": w.version,
                "live": live,
                "routed": routed.as_ref().is_some_and(|urls| {
                    url::Url::parse(&w.url).is_ok_and(|url| urls.contains(&url))
                }),
                "started-at-ms": w.started_at_ms,
                "heartbeat-ms": w.heartbeat_ms,
                "load-average": w.load_average,
                "cache": w.cache,
            })
        })
        .collect();
    Ok(Json(json!({ "workers": workers })))
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    fn registration(url: &str, started_at_ms: i64, heartbeat_ms: i64) -> WorkerRecord {
        WorkerRecord {
            id: Uuid::now_v7(),
            url: url.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            started_at_ms,
            heartbeat_ms,
            load_average: 0.0,
            cache: Default::default(),
        }
    }

    #[test]
    fn a_worker_restarted_at_its_url_is_listed_once_by_its_new_registration() {
        let old = registration("http://10.0.0.1:7000", 1_000, 5_000);
        let new = registration("http://10.0.0.1:7000/", 20_000, 21_000);
        let other = registration("http://10.0.0.2:7000", 1_000, 21_000);
        let listed = newest_per_url(vec![old, new.clone(), other.clone()]);
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().any(|w| w.id == new.id));
        assert!(listed.iter().any(|w| w.id == other.id));
        // A dead registration alone is still listed, as dead.
        let dead = registration("http://10.0.0.3:7000", 1_000, 1_000);
        let listed = newest_per_url(vec![dead.clone()]);
        assert_eq!(listed.len(), 1);
        assert!(!is_live(&listed[0], 1_000_000));
    }
}
