//! Stream pipelines as the store keeps them: a definition (JSON), the nodes taking part in
//! running it (members, each with a lease), and a lease per source partition, so that nodes
//! sharing a store split a pipeline's partitions, exactly one node reads each partition, a
//! node that stops renewing loses its partitions, and the others take them over.
//! Implementations live in `floe-store`.

use async_trait::async_trait;
use serde::Serialize;
use uuid::Uuid;

use crate::Result;

/// A pipeline as stored.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PipelineRecord {
    pub name: String,
    pub warehouse_id: Uuid,
    /// The definition, as the management API took it.
    pub spec: serde_json::Value,
    pub created_at_ms: i64,
}

/// A source partition's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PartitionLease {
    pub topic: String,
    pub partition: i32,
    /// The node reading it, while its lease lasts.
    pub owner: Option<String>,
    pub lease_until_ms: Option<i64>,
}

#[async_trait]
pub trait PipelineStore: Send + Sync + std::fmt::Debug {
    /// Stores a new pipeline; `AlreadyExists` when the name is taken.
    async fn create_pipeline(
        &self,
        name: &str,
        warehouse_id: Uuid,
        spec: &serde_json::Value,
    ) -> Result<()>;
    async fn get_pipeline(&self, name: &str) -> Result<Option<PipelineRecord>>;
    /// Every pipeline, by name.
    async fn list_pipelines(&self) -> Result<Vec<PipelineRecord>>;
    /// The pipelines `principal` holds `manage-pipelines` for (on their target namespace or
    /// above it), by name, chosen inside the store's query.
    async fn list_managed_pipelines(&self, principal: Uuid) -> Result<Vec<PipelineRecord>>;
    /// Removes a pipeline; false when there was none.
    async fn delete_pipeline(&self, name: &str) -> Result<bool>;
    /// Records `node` as taking part in the pipeline until `until_ms`, forgets members whose
    /// lease ran out before `now_ms`, and returns the live members by name.
    async fn join_pipeline(
        &self,
        name: &str,
        node: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Vec<String>>;
    /// Takes or extends the leases of `wanted` partitions for `node` until `until_ms`;
    /// returns those granted: a partition nobody holds, `node` holds, or whose holder's
    /// lease ran out before `now_ms`.
    async fn lease_partitions(
        &self,
        name: &str,
        node: &str,
        now_ms: i64,
        until_ms: i64,
        wanted: &[(String, i32)],
    ) -> Result<Vec<(String, i32)>>;
    /// Gives up every partition `node` holds but those in `keep`.
    async fn release_partitions(
        &self,
        name: &str,
        node: &str,
        keep: &[(String, i32)],
    ) -> Result<()>;
    /// Leaves the pipeline: gives up its partitions and membership (a node stopping
    /// cleanly).
    async fn leave_pipeline(&self, name: &str, node: &str) -> Result<()>;
    /// Every partition lease of a pipeline, by topic and partition.
    async fn partition_leases(&self, name: &str) -> Result<Vec<PartitionLease>>;
}
