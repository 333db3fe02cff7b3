//! The job scheduler every Floe node runs. Jobs live in the store ([`JobStore`]): a node
//! claims one under a lease, renews the lease while it works and records the outcome; a job
//! whose node died is claimed again once its lease runs out; a failed run is retried with
//! exponential backoff until its attempts are spent. Claims are fair across warehouses (see
//! [`JobStore::claim_job`]) and capped per warehouse across the cluster.
//!
//! Jobs are queued three ways: by commits (a commit that leaves many small files queues a
//! compaction of that table), by schedule (every table's snapshot expiry, orphan cleanup and
//! data retention, periodically) and by request (`POST /api/v1/jobs`); a soft drop queues the
//! purge of its table or view, due when the warehouse's retention ends. Jobs run on a
//! dedicated runtime with few threads, so maintenance never takes more CPU than it is given.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use floe_catalog::governance::authz::Caller;
use floe_catalog::jobs::{JobOutcome, JobRecord, JobStore, NewJob};
use floe_catalog::service::{CommittedTable, SecurableRef};
use floe_catalog::soft_delete::PURGE_JOB;
use floe_catalog::{CatalogError, Result as CatalogResult};
use iceberg::spec::TableMetadata;
use iceberg::{NamespaceIdent, TableIdent};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::exec::compact::{CompactOptions, compact};
use crate::exec::expire::{ExpireOptions, expire_snapshots};
use crate::exec::orphans::{OrphanOptions, remove_orphan_files};
use crate::exec::retention::enforce_retention;
use crate::exec::rollup::roll_up;
use crate::exec::{Maintainer, MaintenanceError};
use crate::policy::{Effective, Policy};
use floe_catalog::clock::now_ms;

/// The kinds of job a request or the schedule queues for a table. A drop in a warehouse with
/// soft delete queues one more kind, [`PURGE_JOB`], due when its retention ends.
pub const KINDS: [&str; 5] = [
    "compact",
    "expire-snapshots",
    "remove-orphan-files",
    "retention",
    "rollup",
];

#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Names this node in leases.
    pub node_id: String,
    /// Jobs this node runs at once.
    pub workers: usize,
    /// Threads of the background runtime jobs run on.
    pub threads: usize,
    /// Jobs one warehouse runs at once, across all nodes.
    pub warehouse_cap: usize,
    pub lease: Duration,
    /// How often the queue is polled when nothing wakes the scheduler.
    pub poll: Duration,
    /// How often every table gets its scheduled jobs; zero turns the schedule off.
    pub schedule_every: Duration,
    pub max_attempts: i32,
    /// First retry delay; doubled per attempt.
    pub backoff: Duration,
    /// Memory a compaction's scan and sort may use before spilling.
    pub memory_limit: usize,
    /// A compaction a commit triggers waits this long, so it runs once a burst of writes
    /// is over rather than racing it.
    pub trigger_delay: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            node_id: format!("node-{}", Uuid::now_v7()),
            workers: 2,
            threads: 1,
            warehouse_cap: 1,
            lease: Duration::from_secs(60),
            poll: Duration::from_secs(2),
            schedule_every: Duration::from_secs(3600),
            max_attempts: 5,
            backoff: Duration::from_secs(30),
            memory_limit: 1 << 30,
            trigger_delay: Duration::from_secs(60),
        }
    }
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
struct Counters {
    running: AtomicUsize,
    /// Per kind: started, succeeded, failed (retried or not), lost leases.
    by_kind: std::sync::Mutex<HashMap<String, [u64; 4]>>,
    rewritten_bytes: AtomicU64,
    written_bytes: AtomicU64,
    deleted_files: AtomicU64,
}

#[derive(Debug)]
pub struct Scheduler {
    maintainer: Maintainer,
    jobs: Arc<dyn JobStore>,
    config: SchedulerConfig,
    wake: Notify,
    counters: Counters,
    /// Effective policies of tables whose commits were checked lately.
    checked: std::sync::Mutex<HashMap<(String, TableIdent), (Instant, Effective)>>,
}

/// A job's table and options, as its parameters name them.
struct JobTarget {
    warehouse: String,
    ident: TableIdent,
}

fn target_of(params: &Value) -> Result<JobTarget, String> {
    let warehouse = params["warehouse"]
        .as_str()
        .ok_or("job parameters lack the warehouse")?
        .to_string();
    let levels: Vec<String> = params["namespace"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let namespace = NamespaceIdent::from_vec(levels).map_err(|e| format!("namespace: {e}"))?;
    let table = params["table"]
        .as_str()
        .ok_or("job parameters lack the table")?
        .to_string();
    Ok(JobTarget {
        warehouse,
        ident: TableIdent::new(namespace, table),
    })
}

impl Scheduler {
    pub fn new(maintainer: Maintainer, jobs: Arc<dyn JobStore>, config: SchedulerConfig) -> Self {
        Self {
            maintainer,
            jobs,
            config,
            wake: Notify::new(),
            counters: Counters::default(),
            checked: std::sync::Mutex::new(HashMap::new()),
        }
    }

    pub fn jobs(&self) -> &Arc<dyn JobStore> {
        &self.jobs
    }

    /// Looks at the queue now rather than at the next poll.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The table's id, as jobs and policies know it.
    async fn table_id(&self, warehouse: &str, ident: &TableIdent) -> CatalogResult<Uuid> {
        let securable = self
            .maintainer
            .catalog
            .resolve_securable(&SecurableRef::Table {
                warehouse: warehouse.to_string(),
                namespace: ident.namespace().clone().inner(),
                name: ident.name().to_string(),
            })
            .await?;
        Uuid::parse_str(&securable.id)
            .map_err(|e| CatalogError::internal("table id", std::io::Error::other(e.to_string())))
    }

    /// Queues a `kind` job for a table; `None` when an equal one is already queued or running.
    pub async fn enqueue(
        &self,
        warehouse: &str,
        ident: &TableIdent,
        kind: &str,
        trigger: &str,
        priority: i32,
        options: Value,
    ) -> CatalogResult<Option<Uuid>> {
        self.enqueue_after(
            warehouse,
            ident,
            kind,
            trigger,
            priority,
            options,
            Duration::ZERO,
        )
        .await
    }

    /// Like [`Scheduler::enqueue`], claimable only after `delay`.
    #[allow(clippy::too_many_arguments)]
    async fn enqueue_after(
        &self,
        warehouse: &str,
        ident: &TableIdent,
        kind: &str,
        trigger: &str,
        priority: i32,
        options: Value,
        delay: Duration,
    ) -> CatalogResult<Option<Uuid>> {
        if !KINDS.contains(&kind) {
            return Err(CatalogError::bad_request(format!(
                "job kind must be one of {}, not {kind}",
                KINDS.join(", ")
            )));
        }
        let table_id = self.table_id(warehouse, ident).await?;
        let warehouse_id = self
            .maintainer
            .catalog
            .warehouse(warehouse)
            .await?
            .warehouse
            .id;
        let mut params = json!({
            "warehouse": warehouse,
            "namespace": ident.namespace().clone().inner(),
            "table": ident.name(),
        });
        if let (Some(params), Some(options)) = (params.as_object_mut(), options.as_object()) {
            for (key, value) in options {
                params.insert(key.clone(), value.clone());
            }
        }
        let id = self
            .jobs
            .enqueue_job(&NewJob {
                warehouse_id,
                table_id,
                kind: kind.to_string(),
                priority,
                trigger: trigger.to_string(),
                max_attempts: self.config.max_attempts,
                params,
                not_before_ms: now_ms() + delay.as_millis() as i64,
            })
            .await?;
        if id.is_some() {
            self.wake.notify_one();
        }
        Ok(id)
    }

    /// The policy levels of a table, nearest first: the table's, its namespaces' (innermost
    /// first), its warehouse's.
    pub async fn policy_levels(
        &self,
        warehouse: &str,
        ident: &TableIdent,
    ) -> CatalogResult<Vec<Policy>> {
        let catalog = &self.maintainer.catalog;
        let mut ids = vec![self.table_id(warehouse, ident).await?];
        let levels = ident.namespace().clone().inner();
        for depth in (1..=levels.len()).rev() {
            let securable = catalog
                .resolve_securable(&SecurableRef::Namespace {
                    warehouse: warehouse.to_string(),
                    namespace: levels[..depth].to_vec(),
                })
                .await?;
            if let Ok(id) = Uuid::parse_str(&securable.id) {
                ids.push(id);
            }
        }
        ids.push(catalog.warehouse(warehouse).await?.warehouse.id);
        let set: HashMap<Uuid, Value> = self.jobs.get_policies(&ids).await?.into_iter().collect();
        Ok(ids
            .iter()
            .map(|id| {
                set.get(id)
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default()
            })
            .collect())
    }

    /// The table's effective policy, with its tenant's retention over observability tables.
    pub async fn effective_policy(
        &self,
        warehouse: &str,
        ident: &TableIdent,
        metadata: &TableMetadata,
    ) -> CatalogResult<Effective> {
        let levels = self.policy_levels(warehouse, ident).await?;
        let mut effective = Effective::resolve(&levels, metadata.properties());
        let tenant_days = self
            .maintainer
            .catalog
            .tenants()
            .existing(warehouse)
            .and_then(|t| t.limits().retention_days);
        if let Some(days) = tenant_days
            && ident.namespace().as_ref().as_slice() == [OBSERVABILITY_NAMESPACE]
            && let Some(column) = day_partition_source(metadata)
        {
            effective.retention = Some(match effective.retention {
                Some((own, own_days)) => (own, own_days.min(days)),
                None => (column, days),
            });
        }
        Ok(effective)
    }

    /// Runs until `shutdown`: the claim loop, the commit trigger and the schedule, on a
    /// runtime of its own. The returned handle ends when they have stopped.
    pub fn start(
        self: Arc<Self>,
        shutdown: CancellationToken,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.config.threads.max(1))
            .thread_name("floe-maintenance")
            .enable_all()
            .build()?;
        let commits = self.maintainer.catalog.subscribe_commits();
        std::thread::Builder::new()
            .name("floe-maintenance".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let trigger =
                        tokio::spawn(self.clone().watch_commits(commits, shutdown.clone()));
                    let schedule = tokio::spawn(self.clone().schedule(shutdown.clone()));
                    self.claim_loop(shutdown).await;
                    let _ = trigger.await;
                    let _ = schedule.await;
                });
                runtime.shutdown_timeout(Duration::from_secs(5));
            })
    }

    async fn claim_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let mut running = tokio::task::JoinSet::new();
        loop {
            while running.len() < self.config.workers.max(1) {
                let claimed = self
                    .jobs
                    .claim_job(
                        &self.config.node_id,
                        now_ms(),
                        self.config.lease.as_millis() as i64,
                        self.config.warehouse_cap.max(1),
                    )
                    .await;
                match claimed {
                    Ok(Some(job)) => {
                        running.spawn(self.clone().run(job, shutdown.clone()));
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "claim a maintenance job");
                        break;
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wake.notified() => {}
                Some(_) = running.join_next(), if !running.is_empty() => {}
                _ = tokio::time::sleep(self.config.poll) => {}
            }
        }
        // Jobs in flight see the stop too and give themselves back to the queue; any still
        // busy after a moment stop with the runtime, their leases run out and another node
        // (or this one, restarted) takes them again.
        let _ = tokio::time::timeout(Duration::from_secs(3), async {
            while running.join_next().await.is_some() {}
        })
        .await;
        running.abort_all();
    }

    /// Runs one claimed job, renewing its lease, and records how it ended.
    async fn run(self: Arc<Self>, job: JobRecord, shutdown: CancellationToken) {
        self.count(&job.kind, 0);
        self.counters.running.fetch_add(1, Ordering::Relaxed);
        let lost = CancellationToken::new();
        let renew = {
            let jobs = self.jobs.clone();
            let owner = self.config.node_id.clone();
            let lease = self.config.lease;
            let lost = lost.clone();
            let id = job.id;
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(lease / 3).await;
                    let until = now_ms() + lease.as_millis() as i64;
                    match jobs.renew_job_lease(id, &owner, until).await {
                        Ok(true) => {}
                        Ok(false) => {
                            lost.cancel();
                            break;
                        }
                        Err(e) => tracing::warn!(job = %id, error = %e, "renew a job lease"),
                    }
                }
            })
        };
        let started = Instant::now();
        // The job's steps are each a catalog commit or an idempotent deletion, so a job
        // stopped between two of them is run again whole by whoever claims it next.
        let outcome = tokio::select! {
            outcome = self.execute(&job) => Some(outcome),
            _ = lost.cancelled() => None,
            _ = shutdown.cancelled() => None,
        };
        renew.abort();
        self.counters.running.fetch_sub(1, Ordering::Relaxed);
        let Some(outcome) = outcome else {
            self.count(&job.kind, 3);
            if lost.is_cancelled() {
                tracing::warn!(job = %job.id, kind = %job.kind, "stop a job whose lease was lost");
            } else {
                // Stopping: the job goes back to the queue at once, its attempt not spent,
                // instead of waiting for its lease to run out.
                match self
                    .jobs
                    .release_job(job.id, &self.config.node_id, now_ms())
                    .await
                {
                    Ok(_) => {
                        tracing::info!(job = %job.id, kind = %job.kind, "give back a job as the node stops")
                    }
                    Err(e) => {
                        tracing::warn!(job = %job.id, error = %e, "give back a job as the node stops")
                    }
                }
            }
            return;
        };
        let outcome = match outcome {
            Ok(result) => {
                self.count(&job.kind, 1);
                tracing::info!(job = %job.id, kind = %job.kind, seconds = started.elapsed().as_secs_f64(), "finish a maintenance job");
                JobOutcome::Succeeded(result)
            }
            Err(error) => {
                self.count(&job.kind, 2);
                tracing::warn!(job = %job.id, kind = %job.kind, attempt = job.attempts, %error, "maintenance job failed");
                let delay = self.config.backoff.as_millis() as i64
                    * (1i64 << (job.attempts - 1).clamp(0, 10));
                JobOutcome::Failed {
                    error,
                    retry_at_ms: now_ms() + delay,
                }
            }
        };
        match self
            .jobs
            .finish_job(job.id, &self.config.node_id, now_ms(), &outcome)
            .await
        {
            Ok(true) => {}
            Ok(false) => tracing::warn!(job = %job.id, "a job's lease was lost before it finished"),
            Err(e) => tracing::warn!(job = %job.id, error = %e, "record a job's outcome"),
        }
        self.wake.notify_one();
    }

    fn count(&self, kind: &str, what: usize) {
        let mut by_kind = self.counters.by_kind.lock().expect("job counters");
        by_kind.entry(kind.to_string()).or_default()[what] += 1;
    }

    /// Does one job's work; its answer, or why it failed.
    async fn execute(&self, job: &JobRecord) -> Result<Value, String> {
        if job.kind == PURGE_JOB {
            return self.expire_dropped(job).await;
        }
        let target = target_of(&job.params)?;
        let (warehouse, ident) = (target.warehouse.as_str(), &target.ident);
        let table_id = self
            .table_id(warehouse, ident)
            .await
            .map_err(|e| e.to_string())?;
        if table_id != job.table_id {
            return Err(format!(
                "table {ident} is not the table this job was queued for (it was dropped or renamed)"
            ));
        }
        let loaded = self
            .maintainer
            .catalog
            .load_table(&Caller::system(), warehouse, ident)
            .await
            .map_err(|e| e.to_string())?;
        let policy = self
            .effective_policy(warehouse, ident, &loaded.metadata)
            .await
            .map_err(|e| e.to_string())?;
        if !policy.enabled && job.trigger != "request" {
            return Ok(json!({"skipped": "maintenance is disabled by policy"}));
        }
        let params = &job.params;
        let dry_run = params["dry-run"].as_bool().unwrap_or(false);
        let m = &self.maintainer;
        let error = |e: MaintenanceError| e.to_string();
        let compact_options = || {
            let mut policy = policy.compaction();
            if let Some(target) = params["target-file-size-bytes"].as_u64() {
                policy.target_size_bytes = target.max(1);
                policy.small_file_bytes = target / 4 * 3;
            }
            CompactOptions {
                policy,
                memory_limit: self.config.memory_limit,
                dry_run,
                ..Default::default()
            }
        };
        let value = match job.kind.as_str() {
            "compact" => {
                let report = compact(m, warehouse, ident, &compact_options())
                    .await
                    .map_err(error)?;
                self.counters
                    .rewritten_bytes
                    .fetch_add(report.rewritten_bytes, Ordering::Relaxed);
                self.counters
                    .written_bytes
                    .fetch_add(report.added_bytes, Ordering::Relaxed);
                serde_json::to_value(report)
            }
            "expire-snapshots" => {
                let options = ExpireOptions {
                    dry_run,
                    max_snapshot_age_ms: params["max-snapshot-age-ms"]
                        .as_i64()
                        .or(Some(policy.max_snapshot_age_ms)),
                    min_snapshots_to_keep: params["min-snapshots-to-keep"]
                        .as_u64()
                        .map(|v| v as usize)
                        .or(Some(policy.min_snapshots_to_keep)),
                    metadata_files_to_keep: Some(policy.metadata_files_to_keep),
                };
                let report = expire_snapshots(m, warehouse, ident, &options)
                    .await
                    .map_err(error)?;
                self.counters
                    .deleted_files
                    .fetch_add(report.deleted_files as u64, Ordering::Relaxed);
                serde_json::to_value(report)
            }
            "remove-orphan-files" => {
                let options = OrphanOptions {
                    dry_run,
                    older_than_ms: params["older-than-ms"]
                        .as_i64()
                        .unwrap_or(policy.orphan_min_age_ms),
                };
                let report = remove_orphan_files(m, warehouse, ident, &options)
                    .await
                    .map_err(error)?;
                self.counters
                    .deleted_files
                    .fetch_add(report.deleted_files as u64, Ordering::Relaxed);
                serde_json::to_value(report)
            }
            "retention" => {
                let column = params["retention-column"]
                    .as_str()
                    .map(String::from)
                    .or(policy.retention.as_ref().map(|(c, _)| c.clone()));
                let days = params["retention-days"]
                    .as_u64()
                    .map(|d| d as u32)
                    .or(policy.retention.as_ref().map(|(_, d)| *d));
                let (Some(column), Some(days)) = (column, days) else {
                    return Ok(json!({"skipped": "no retention rule applies to the table"}));
                };
                let report =
                    enforce_retention(m, warehouse, ident, &column, days, &compact_options())
                        .await
                        .map_err(error)?;
                serde_json::to_value(report)
            }
            "rollup" => {
                let runs = roll_up(m, warehouse, ident, self.config.memory_limit)
                    .await
                    .map_err(error)?;
                serde_json::to_value(runs)
            }
            other => return Err(format!("unknown job kind {other}")),
        };
        value.map_err(|e| e.to_string())
    }

    /// Ends the retention of a dropped table or view (a `purge-dropped` job, queued by its
    /// drop and due when the warehouse's soft-delete retention ends).
    async fn expire_dropped(&self, job: &JobRecord) -> Result<Value, String> {
        let warehouse = job.params["warehouse"]
            .as_str()
            .ok_or("job parameters lack the warehouse")?;
        self.maintainer
            .catalog
            .expire_dropped(warehouse, job.table_id)
            .await
            .map_err(|e| e.to_string())
    }

    /// Queues a compaction when a commit leaves many small files.
    async fn watch_commits(
        self: Arc<Self>,
        mut commits: tokio::sync::broadcast::Receiver<CommittedTable>,
        shutdown: CancellationToken,
    ) {
        loop {
            let commit = tokio::select! {
                _ = shutdown.cancelled() => break,
                received = commits.recv() => match received {
                    Ok(commit) => commit,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                },
            };
            // Floe's own maintenance commits never trigger more maintenance.
            let Some(snapshot) = commit.metadata.current_snapshot() else {
                continue;
            };
            if snapshot.summary().operation == iceberg::spec::Operation::Replace {
                continue;
            }
            if let Err(e) = self.check_compaction(&commit, "commit").await {
                tracing::debug!(table = %commit.ident, error = %e, "check a commit for compaction");
            }
        }
    }

    async fn check_compaction(&self, table: &CommittedTable, trigger: &str) -> CatalogResult<()> {
        let Some(snapshot) = table.metadata.current_snapshot() else {
            return Ok(());
        };
        // A stream of commits to one table looks its policy up once every ten seconds.
        let key = (table.warehouse.clone(), table.ident.clone());
        let cached = {
            let checked = self.checked.lock().expect("checked tables");
            checked
                .get(&key)
                .filter(|(at, _)| at.elapsed() < Duration::from_secs(10))
                .map(|(_, policy)| policy.clone())
        };
        let policy = match cached {
            Some(policy) => policy,
            None => {
                let policy = self
                    .effective_policy(&table.warehouse, &table.ident, &table.metadata)
                    .await?;
                let mut checked = self.checked.lock().expect("checked tables");
                if checked.len() > 10_000 {
                    checked.retain(|_, (at, _)| at.elapsed() < Duration::from_secs(10));
                }
                checked.insert(key, (Instant::now(), policy.clone()));
                policy
            }
        };
        if policy.enabled && policy.rollups && has_rollups(&table.ident) {
            self.enqueue_after(
                &table.warehouse,
                &table.ident,
                "rollup",
                trigger,
                20,
                json!({}),
                self.config.trigger_delay,
            )
            .await?;
        }
        if policy.enabled && policy.wants_compaction(&snapshot.summary().additional_properties) {
            self.enqueue_after(
                &table.warehouse,
                &table.ident,
                "compact",
                trigger,
                10,
                json!({}),
                self.config.trigger_delay,
            )
            .await?;
        }
        Ok(())
    }

    /// Every `schedule_every`, queues each table's scheduled jobs.
    async fn schedule(self: Arc<Self>, shutdown: CancellationToken) {
        if self.config.schedule_every.is_zero() {
            return;
        }
        // The first pass comes one period after start, not at start: a restart must not
        // queue every table's jobs again.
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + self.config.schedule_every,
            self.config.schedule_every,
        );
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {
                    if let Err(e) = self.schedule_pass().await {
                        tracing::warn!(error = %e, "queue scheduled maintenance");
                    }
                }
            }
        }
    }

    /// Queues expiry, orphan cleanup and (where a rule applies) retention for every table,
    /// and compaction where the table wants it.
    pub async fn schedule_pass(&self) -> CatalogResult<usize> {
        let system = Caller::system();
        let catalog = &self.maintainer.catalog;
        let mut queued = 0;
        for warehouse in catalog.list_warehouses(&system).await? {
            let name = warehouse.name.clone();
            for ident in self.maintainer.catalog.all_tables(&name).await? {
                let Ok(loaded) = catalog.load_table(&system, &name, &ident).await else {
                    continue;
                };
                let policy = self
                    .effective_policy(&name, &ident, &loaded.metadata)
                    .await?;
                if !policy.enabled {
                    continue;
                }
                let mut kinds = vec!["expire-snapshots", "remove-orphan-files"];
                if policy.retention.is_some() {
                    kinds.push("retention");
                }
                if policy.rollups && has_rollups(&ident) {
                    kinds.push("rollup");
                }
                for kind in kinds {
                    if self
                        .enqueue(&name, &ident, kind, "schedule", 0, json!({}))
                        .await?
                        .is_some()
                    {
                        queued += 1;
                    }
                }
                self.check_compaction(
                    &CommittedTable {
                        warehouse: name.clone(),
                        ident: ident.clone(),
                        metadata: loaded.metadata.clone(),
                    },
                    "schedule",
                )
                .await?;
            }
        }
        Ok(queued)
    }

    /// Prometheus text for `/metrics`.
    pub fn render_metrics(&self) -> String {
        let mut text = String::new();
        text.push_str(
            "# HELP floe_maintenance_jobs_running Maintenance jobs running on this node.\n",
        );
        text.push_str("# TYPE floe_maintenance_jobs_running gauge\n");
        text.push_str(&format!(
            "floe_maintenance_jobs_running {}\n",
            self.counters.running.load(Ordering::Relaxed)
        ));
        text.push_str("# HELP floe_maintenance_jobs_total Maintenance job runs on this node by kind and outcome.\n");
        text.push_str("# TYPE floe_maintenance_jobs_total counter\n");
        let by_kind = self.counters.by_kind.lock().expect("job counters");
        for (kind, counts) in by_kind.iter() {
            for (i, outcome) in ["started", "succeeded", "failed", "lease-lost"]
                .iter()
                .enumerate()
            {
                text.push_str(&format!(
                    "floe_maintenance_jobs_total{{kind=\"{kind}\",outcome=\"{outcome}\"}} {}\n",
                    counts[i]
                ));
            }
        }
        for (name, help, value) in [
            (
                "floe_maintenance_rewritten_bytes_total",
                "Bytes of data files compaction replaced.",
                &self.counters.rewritten_bytes,
            ),
            (
                "floe_maintenance_written_bytes_total",
                "Bytes of data files compaction wrote.",
                &self.counters.written_bytes,
            ),
            (
                "floe_maintenance_deleted_files_total",
                "Files expiry and orphan cleanup deleted.",
                &self.counters.deleted_files,
            ),
        ] {
            text.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n",
                value.load(Ordering::Relaxed)
            ));
        }
        text
    }
}

/// The namespace of a tenant's observability tables (`otel`, as OTLP ingestion creates them),
/// which its `retention-days` limit applies to.
const OBSERVABILITY_NAMESPACE: &str = "otel";

/// Whether `ident` is an observability table with rollups.
fn has_rollups(ident: &TableIdent) -> bool {
    ident.namespace().as_ref().as_slice() == [OBSERVABILITY_NAMESPACE]
        && !crate::rollup::rollups_of(ident.name()).is_empty()
}

/// The column the table's default spec partitions by day (or hour), if one: the time its
/// rows are kept by.
fn day_partition_source(metadata: &TableMetadata) -> Option<String> {
    use iceberg::spec::Transform;
    let spec = metadata.default_partition_spec();
    let field = spec
        .fields()
        .iter()
        .find(|f| matches!(f.transform, Transform::Day | Transform::Hour))?;
    metadata
        .current_schema()
        .field_by_id(field.source_id)
        .map(|f| f.name.clone())
}
