//! Maintenance jobs and policies as the store keeps them. Jobs are leased: a node runs a job
//! while it holds an unexpired lease, renews it while it works, and a job whose lease ran out
//! (its node died) is claimed again by any node. Implementations live in `floe-store`.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Result;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => Self::Queued,
            "running" => Self::Running,
            "succeeded" => Self::Succeeded,
            "failed" => Self::Failed,
            _ => return None,
        })
    }
}

/// A job to queue.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub warehouse_id: Uuid,
    /// The table's id (jobs follow a renamed table; they fail once it is dropped).
    pub table_id: Uuid,
    /// `compact`, `expire-snapshots`, `remove-orphan-files`, `retention`.
    pub kind: String,
    /// Higher runs first within a warehouse.
    pub priority: i32,
    /// What queued it: `commit`, `schedule`, `request`.
    pub trigger: String,
    pub max_attempts: i32,
    /// Options of this run (JSON object).
    pub params: serde_json::Value,
    /// Not claimed before this time.
    pub not_before_ms: i64,
}

/// A job as stored.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobRecord {
    pub id: Uuid,
    pub warehouse_id: Uuid,
    pub table_id: Uuid,
    pub kind: String,
    pub status: JobStatus,
    pub priority: i32,
    pub trigger: String,
    /// Runs started so far (a claim counts as one).
    pub attempts: i32,
    pub max_attempts: i32,
    pub params: serde_json::Value,
    pub not_before_ms: i64,
    pub lease_owner: Option<String>,
    pub lease_until_ms: Option<i64>,
    pub created_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    /// The last run's answer (JSON), when it succeeded.
    pub result: Option<serde_json::Value>,
    /// The last run's error, when it failed.
    pub error: Option<String>,
}

/// How a claimed run ended.
#[derive(Debug, Clone)]
pub enum JobOutcome {
    Succeeded(serde_json::Value),
    /// Queued again at `retry_at_ms` while attempts remain, else failed for good.
    Failed {
        error: String,
        retry_at_ms: i64,
    },
}

/// Which jobs a listing returns (newest first).
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub warehouse_id: Option<Uuid>,
    pub table_id: Option<Uuid>,
    pub kind: Option<String>,
    pub status: Option<JobStatus>,
    pub limit: usize,
}

#[async_trait]
pub trait JobStore: Send + Sync + std::fmt::Debug {
    /// Queues a job unless one of the same kind for the same table is already queued or
    /// running; returns the new job's id, or `None` when it was not queued.
    async fn enqueue_job(&self, job: &NewJob) -> Result<Option<Uuid>>;

    /// Claims the next job for `owner`: a queued job due at `now_ms`, or a running one whose
    /// lease expired before `now_ms`. Fair across warehouses: a warehouse already running
    /// `warehouse_cap` jobs (unexpired leases) is skipped; among the others the one running
    /// the fewest jobs goes first, ties to the one that started a job least recently; within
    /// a warehouse, highest priority then oldest. The claim sets the lease to
    /// `now_ms + lease_ms`, counts an attempt and marks the job running. Claims are
    /// serialized across nodes.
    async fn claim_job(
        &self,
        owner: &str,
        now_ms: i64,
        lease_ms: i64,
        warehouse_cap: usize,
    ) -> Result<Option<JobRecord>>;

    /// Extends the lease while `owner` still holds it; false when it does not (the job was
    /// taken over: the owner must stop and not report).
    async fn renew_job_lease(&self, id: Uuid, owner: &str, until_ms: i64) -> Result<bool>;

    /// Gives back a job `owner` holds but stops running because its node is stopping: queued
    /// again, claimable at `now_ms`, the attempt not counted (the job did not fail). False
    /// when `owner` no longer holds it.
    async fn release_job(&self, id: Uuid, owner: &str, now_ms: i64) -> Result<bool>;

    /// Makes a queued job claimable at `now_ms` (if it was due later) with at least
    /// `priority`: a request that finds a delayed triggered job waiting runs it now. False
    /// when the job is not queued.
    async fn expedite_job(&self, id: Uuid, now_ms: i64, priority: i32) -> Result<bool>;

    /// Records how a run ended, if `owner` still holds the job; false otherwise.
    async fn finish_job(
        &self,
        id: Uuid,
        owner: &str,
        now_ms: i64,
        outcome: &JobOutcome,
    ) -> Result<bool>;

    async fn get_job(&self, id: Uuid) -> Result<Option<JobRecord>>;
    async fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<JobRecord>>;

    /// Sets (replaces) the maintenance policy of a warehouse, namespace or table, by its id;
    /// `None` removes it.
    async fn set_policy(
        &self,
        scope_id: Uuid,
        warehouse_id: Uuid,
        policy: Option<&serde_json::Value>,
    ) -> Result<()>;
    /// The policies set on any of `scope_ids`.
    async fn get_policies(&self, scope_ids: &[Uuid]) -> Result<Vec<(Uuid, serde_json::Value)>>;
}
