//! The nodes of a cluster as the store keeps them: the secret their calls to each other
//! carry, and the workers that run tasks of distributed queries, each heartbeating while it
//! lives. Implementations live in `floe-store`.

use async_trait::async_trait;
use serde::Serialize;
use uuid::Uuid;

use crate::Result;

/// One worker as it last reported itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerRecord {
    pub id: Uuid,
    /// Where coordinators reach its worker service (`http://host:port`).
    pub url: String,
    /// The Floe version it runs; coordinators use only workers of their own.
    pub version: String,
    pub started_at_ms: i64,
    pub heartbeat_ms: i64,
    /// Its machine's one-minute load average at its last heartbeat.
    pub load_average: f64,
    /// Its cache's blocks since it started: found in memory, on disk, fetched from storage.
    pub cache: CacheCounts,
}

/// What a cache of data-file blocks has answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CacheCounts {
    pub memory_hits: i64,
    pub disk_hits: i64,
    pub misses: i64,
}

#[async_trait]
pub trait ClusterStore: Send + Sync + std::fmt::Debug {
    /// The cluster's secret: made by the first node that asks, the same for every node after.
    async fn cluster_secret(&self) -> Result<String>;
    /// Registers `worker`, or records its heartbeat when it is registered already.
    async fn heartbeat_worker(&self, worker: &WorkerRecord) -> Result<()>;
    /// Every registered worker, by URL.
    async fn list_workers(&self) -> Result<Vec<WorkerRecord>>;
    /// Forgets a worker (one stopping cleanly says so).
    async fn remove_worker(&self, id: Uuid) -> Result<()>;
    /// Forgets the workers whose last heartbeat is older than `before_ms`; how many.
    async fn prune_workers(&self, before_ms: i64) -> Result<u64>;
}
