//! Stream pipelines as the store keeps them: a definition (JSON) and a lease, so that of
//! several nodes sharing a store exactly one runs each pipeline, a node that stops renewing
//! loses it, and another takes it over. Implementations live in `floe-store`.

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
    /// The node running it, while its lease lasts.
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
    /// Removes a pipeline; false when there was none.
    async fn delete_pipeline(&self, name: &str) -> Result<bool>;
    /// Takes or extends the lease of a pipeline for `owner` until `until_ms`: granted when
    /// nobody holds it, `owner` holds it, or the holder's lease ran out before `now_ms`.
    async fn lease_pipeline(
        &self,
        name: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool>;
    /// Gives a lease up (a node stopping cleanly).
    async fn release_pipeline(&self, name: &str, owner: &str) -> Result<()>;
}
