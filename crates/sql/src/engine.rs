//! The SQL engine: one DataFusion session per statement, over the warehouses the caller may
//! see, sharing one runtime (object stores, memory pool, Parquet metadata cache).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::DataFusionError;
use datafusion::common::config::ConfigOptions;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::CatalogService;

use crate::catalog::{FloeCatalogList, WarehouseCatalog, list_warehouse};
use crate::scan::provider::TableAccess;

mod admission;
mod ddl;
mod drive;
mod results;

pub use results::{ResultLimits, SPOOL_DIR};
pub(crate) mod stores;
mod surface;

/// How the engine runs queries.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Partitions each scan and operator is split into (default: the machine's cores).
    pub target_partitions: usize,
    /// Rows per batch.
    pub batch_size: usize,
    /// Memory one query may hold before its sorts, joins and aggregations spill to disk.
    pub query_memory_limit: usize,
    /// Queries running at once; more wait in line.
    pub max_concurrent_queries: usize,
    /// Threads of the runtime queries execute on, apart from the server's own.
    pub cpu_threads: usize,
    /// The memory + disk cache of data-file ranges, if any.
    pub cache: Option<floe_storage::cache::CacheConfig>,
    /// How much of a statement's answer waits for its client in memory, and past that in the
    /// warehouse's object storage.
    pub results: ResultLimits,
    /// Longest a statement may take, from its arrival (waiting in line included) to its last
    /// row; `None` sets no limit.
    pub statement_timeout: Option<std::time::Duration>,
    /// Statements one principal may run or wait for at once; more are refused.
    pub max_queries_per_principal: usize,
    /// Which of Floe's plan rewrites run (by default, all but those switched off in the
    /// environment when the configuration was made).
    pub rewrites: crate::optimizer::Rewrites,
}

impl EngineConfig {
    /// Whether these settings, with DataFusion's from the environment, make a session: the
    /// error names a setting DataFusion refuses.
    pub fn check(&self) -> Result<(), SqlError> {
        session_config(self).map(|_| ())
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            target_partitions: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            batch_size: 8192,
            query_memory_limit: 2 << 30,
            max_concurrent_queries: 8,
            cpu_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            cache: None,
            results: ResultLimits::default(),
            statement_timeout: Some(std::time::Duration::from_secs(300)),
            max_queries_per_principal: 4,
            rewrites: crate::optimizer::Rewrites::from_env(),
        }
    }
}

/// Sets one DataFusion option.
type SetOption = fn(&mut ConfigOptions);

/// DataFusion settings whose defaults Floe changes, as named in the environment (where a
/// value set there wins), with Floe's values.
///
/// - Joins whose build side holds up to 4,096 distinct keys publish them as an `IN` list
///   (DataFusion's default is 150), which runtime filters test as a bitmap over integer keys
///   ([`crate::optimizer`]'s runtime filters); the list per partition stays capped by
///   `hash_join_inlist_pushdown_max_size` (128 KiB).
/// - A hash join collects its build side once, probed by every partition, when that side is
///   estimated under 2 Mi rows and 64 MiB (DataFusion's defaults: 128 Ki rows, 1 MiB) instead
///   of repartitioning both sides by the key: on one machine, moving the probe side between
///   partitions costs more than building one table on one thread (TPC-H Q3, Q18 and Q21
///   repartitioned millions of `lineitem` rows to probe builds of 150,000 rows and less).
const FLOE_DEFAULTS: [(&str, SetOption); 3] = [
    (
        "DATAFUSION_OPTIMIZER_HASH_JOIN_INLIST_PUSHDOWN_MAX_DISTINCT_VALUES",
        |c| c.optimizer.hash_join_inlist_pushdown_max_distinct_values = 4_096,
    ),
    (
        "DATAFUSION_OPTIMIZER_HASH_JOIN_SINGLE_PARTITION_THRESHOLD_ROWS",
        |c| c.optimizer.hash_join_single_partition_threshold_rows = 2 << 20,
    ),
    (
        "DATAFUSION_OPTIMIZER_HASH_JOIN_SINGLE_PARTITION_THRESHOLD",
        |c| c.optimizer.hash_join_single_partition_threshold = 64 << 20,
    ),
];

/// The settings every session of an engine starts from: DataFusion's, as set in the
/// environment (read once, when the engine starts; a value DataFusion refuses stops it),
/// with Floe's defaults where the environment sets none, and the engine's own.
fn session_config(engine: &EngineConfig) -> Result<SessionConfig, SqlError> {
    let mut config = SessionConfig::from_env()?;
    // `TIMESTAMP WITH TIME ZONE` is Iceberg's `timestamptz`: instants, shown in UTC.
    config.options_mut().execution.time_zone = Some("UTC".into());
    // Each sorting partition holds back this much for merging its spilled runs: a share
    // of the query's budget, so small budgets spill instead of failing.
    config.options_mut().execution.sort_spill_reservation_bytes = (engine.query_memory_limit
        / (4 * engine.target_partitions.max(1)))
    .clamp(256 << 10, 10 << 20);
    // Not to be turned on from the environment: DataFusion 54's filters from `min`/`max`
    // aggregations drop rows other aggregates of the same statement still need
    // (`SELECT min(a), max(b + 1) FROM t` builds its filter from `min(a)` alone, skipping the
    // aggregate over an expression) — a wrong answer, in plain DataFusion too.
    config
        .options_mut()
        .optimizer
        .enable_aggregate_dynamic_filter_pushdown = false;
    for (variable, set) in FLOE_DEFAULTS {
        if std::env::var_os(variable).is_none() {
            set(config.options_mut());
        }
    }
    Ok(config
        .with_target_partitions(engine.target_partitions)
        .with_batch_size(engine.batch_size)
        .with_information_schema(true)
        .with_create_default_catalog_and_schema(false)
        .with_extension(Arc::new(engine.rewrites)))
}

/// The warehouses (catalogs) `plan` names in its table scans; bare names read the session's.
fn read_warehouses(plan: &LogicalPlan) -> std::collections::BTreeSet<String> {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let mut names = std::collections::BTreeSet::new();
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Some(catalog) = scan.table_name.catalog()
        {
            names.insert(catalog.to_string());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    names
}

/// Plans `plan` again preferring sort-merge joins (they spill; hash joins' build sides do not)
/// and starts it.
async fn without_hash_joins(
    state: SessionState,
    plan: LogicalPlan,
) -> datafusion::common::Result<SendableRecordBatchStream> {
    let mut config = state.config().clone();
    config.options_mut().optimizer.prefer_hash_join = false;
    // Sort-merge joins sort both inputs: more sorters share the budget, each holding back
    // less for merging its spilled runs.
    let reserved = &mut config.options_mut().execution.sort_spill_reservation_bytes;
    *reserved = (*reserved / 4).max(256 << 10);
    let state = SessionStateBuilder::new_from_existing(state)
        .with_config(config)
        .build();
    datafusion::dataframe::DataFrame::new(state, plan)
        .execute_stream()
        .await
}

/// Parameter values cast to the types their placeholders are used as, where planning knows
/// them (a client may send an `int` where a `bigint` is compared, say).
fn typed_params(
    plan: &LogicalPlan,
    values: &[datafusion::common::ScalarValue],
) -> Result<Vec<datafusion::common::ScalarValue>, SqlError> {
    let types = plan.get_parameter_types()?;
    values
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let placeholder = format!("${}", i + 1);
            match types.get(&placeholder).cloned().flatten() {
                Some(wanted) if value.data_type() != wanted => {
                    value.cast_to(&wanted).map_err(|_| {
                        SqlError::new(
                            SqlErrorKind::InvalidParameter,
                            format!("parameter {placeholder}: {value:?} is not a valid {wanted}"),
                        )
                    })
                }
                _ => Ok(value.clone()),
            }
        })
        .collect()
}

/// Where unqualified names resolve.
#[derive(Debug, Clone, Default)]
pub struct QueryOptions {
    /// The catalog of `schema.table` names (default: `default`).
    pub warehouse: Option<String>,
    /// The schema of bare `table` names (default: `default`).
    pub namespace: Option<String>,
    /// Values of the statement's `$1`, `$2`, … placeholders, in order.
    pub params: Vec<datafusion::common::ScalarValue>,
}

/// Why a statement failed, classified for the front doors (HTTP status, PostgreSQL code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlErrorKind {
    /// The caller lacks a privilege on an object it can see.
    PermissionDenied,
    /// Bad SQL, an unknown table or column, a type error.
    Invalid,
    /// A parameter value that does not fit its placeholder's type.
    InvalidParameter,
    /// A statement or feature Floe does not support yet.
    Unsupported,
    /// A failure while running the query.
    Execution,
    /// The statement ran past the statement timeout and was stopped.
    Timeout,
    /// The principal already runs as many statements as it may at once.
    TooManyStatements,
    /// A fault in the engine itself (a task that panicked): the message carries only an error
    /// id; the cause is logged once with that id and the statement's plan.
    Internal,
    /// A file of a table that does not read (named, with its writer, in the message): the
    /// table's fault, not the statement's.
    Unreadable,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct SqlError {
    pub kind: SqlErrorKind,
    pub message: String,
}

impl SqlError {
    pub(crate) fn new(kind: SqlErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl SqlError {
    /// The error a client sees for a task of a statement that panicked: an id, the cause
    /// logged with it (and with `plan`, the statement's plan, when it is known).
    pub(crate) fn internal(
        cause: &dyn std::fmt::Display,
        plan: Option<&dyn std::fmt::Display>,
    ) -> Self {
        let error_id = uuid::Uuid::now_v7();
        match plan {
            Some(plan) => {
                tracing::error!(%error_id, %cause, %plan, "a statement's task panicked")
            }
            None => tracing::error!(%error_id, %cause, "a statement's task panicked"),
        }
        SqlError::new(
            SqlErrorKind::Internal,
            format!("internal error in the SQL engine; error id {error_id}"),
        )
    }
}

/// Whether `e` is a task's panic (in DataFusion's tasks or the engine's own).
pub(crate) fn is_panic(e: &DataFusionError) -> bool {
    match e.find_root() {
        DataFusionError::ExecutionJoin(join) => join.is_panic(),
        _ => false,
    }
}

impl From<DataFusionError> for SqlError {
    fn from(e: DataFusionError) -> Self {
        if is_panic(&e) {
            return SqlError::internal(&e, None);
        }
        let root = e.find_root();
        if let DataFusionError::External(inner) = root {
            if let Some(catalog) = inner.downcast_ref::<CatalogError>() {
                return SqlError::from(catalog);
            }
            // A manifest that does not read (the message names the file and its writer).
            if let Some(iceberg) = inner.downcast_ref::<iceberg::Error>()
                && floe_catalog::manifests::is_unreadable(iceberg)
            {
                return SqlError::new(SqlErrorKind::Unreadable, iceberg.to_string());
            }
            if let Some(sql) = inner.downcast_ref::<SqlError>() {
                return sql.clone();
            }
        }
        let kind = match root {
            DataFusionError::Plan(_)
            | DataFusionError::SQL(..)
            | DataFusionError::SchemaError(..) => SqlErrorKind::Invalid,
            DataFusionError::NotImplemented(_) => SqlErrorKind::Unsupported,
            _ => SqlErrorKind::Execution,
        };
        SqlError::new(kind, root.to_string())
    }
}

impl From<&CatalogError> for SqlError {
    fn from(e: &CatalogError) -> Self {
        let kind = match e {
            CatalogError::PermissionDenied(_) | CatalogError::Unauthenticated(_) => {
                SqlErrorKind::PermissionDenied
            }
            CatalogError::NotFound { .. }
            | CatalogError::Hidden(_)
            | CatalogError::BadRequest { .. }
            | CatalogError::InvalidArgument(_) => SqlErrorKind::Invalid,
            CatalogError::Unsupported(_) => SqlErrorKind::Unsupported,
            CatalogError::Timeout(_) => SqlErrorKind::Timeout,
            CatalogError::TooManyRequests(_) => SqlErrorKind::TooManyStatements,
            CatalogError::Unreadable(_) => SqlErrorKind::Unreadable,
            _ => SqlErrorKind::Execution,
        };
        SqlError::new(kind, e.to_string())
    }
}

impl From<CatalogError> for SqlError {
    fn from(e: CatalogError) -> Self {
        SqlError::from(&e)
    }
}

/// A planned statement and the session it was planned in.
struct Prepared {
    context: SessionContext,
    /// The statement's warehouse store, where its answer waits past its memory.
    spool: Option<Arc<dyn object_store::ObjectStore>>,
    plan: LogicalPlan,
    /// The cluster the statement is distributed over, if it is.
    cluster: Option<crate::distributed::Cluster>,
    partitioned_by: Option<crate::write::PartitionFields>,
    warehouse: String,
    namespace: String,
}

/// A statement's result, streamed.
pub struct QueryResult {
    pub schema: SchemaRef,
    pub stream: SendableRecordBatchStream,
    /// How the statement was cut into stages over workers, when it was (for its audit record).
    pub stages: Option<crate::distributed::StagePlan>,
    /// The row and column policies the statement read tables under (for its audit record).
    pub policies: Vec<String>,
}

/// Runs SQL over a catalog service.
#[derive(Debug)]
pub struct SqlEngine {
    service: Arc<CatalogService>,
    /// Object stores, the Parquet metadata cache and the spill directory, shared by queries.
    runtime: Arc<RuntimeEnv>,
    config: EngineConfig,
    /// Warehouses whose object store is registered in `runtime`.
    registered: Mutex<HashSet<uuid::Uuid>>,
    /// Admission: a statement holds a ticket from planning until its stream ends or is
    /// dropped.
    admission: admission::Admission,
    /// Where query streams are driven, so heavy queries do not starve the server's requests.
    cpu: CpuRuntime,
    cache: Option<Arc<floe_storage::cache::RangeCache>>,
    /// Every session's settings but its default catalog and schema, read once.
    session: SessionConfig,
    /// Every session's optimizer rules, in order.
    rules: crate::optimizer::Rules,
    /// The rules of a distributed statement's session: those whose nodes can travel.
    distributed_rules: crate::optimizer::Rules,
    /// The workers queries are distributed over, when this engine coordinates.
    cluster: Option<crate::distributed::Cluster>,
    /// Rows this node acknowledged but has not committed yet, which its reads see too.
    pending: std::sync::OnceLock<Arc<dyn crate::scan::PendingRows>>,
}

/// A dedicated Tokio runtime, shut down without blocking when the engine goes away.
struct CpuRuntime(Option<tokio::runtime::Runtime>);

impl CpuRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0
            .as_ref()
            .expect("runtime lives as long as the engine")
            .handle()
    }
}

impl Drop for CpuRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for CpuRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CpuRuntime")
    }
}

impl SqlEngine {
    pub fn new(service: Arc<CatalogService>, config: EngineConfig) -> Result<Self, SqlError> {
        let runtime = RuntimeEnvBuilder::new()
            .with_object_store_registry(Arc::new(stores::WarehouseStores::default()))
            .build_arc()?;
        let cpu = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.cpu_threads.max(1))
            .thread_name("floe-sql")
            .enable_all()
            .build()
            .map_err(|e| {
                SqlError::new(
                    SqlErrorKind::Execution,
                    format!("start the query runtime: {e}"),
                )
            })?;
        let cache = match &config.cache {
            Some(cache) => Some(floe_storage::cache::RangeCache::new(cache.clone()).map_err(
                |e| {
                    SqlError::new(
                        SqlErrorKind::Execution,
                        format!("prepare the cache directory {}: {e}", cache.dir.display()),
                    )
                },
            )?),
            None => None,
        };
        Ok(Self {
            session: session_config(&config)?,
            rules: crate::optimizer::Rules::new(&config.rewrites),
            distributed_rules: crate::optimizer::Rules::new(&config.rewrites.for_distribution()),
            cluster: None,
            pending: std::sync::OnceLock::new(),
            service,
            runtime,
            cache,
            admission: admission::Admission::new(&config),
            config,
            registered: Mutex::new(HashSet::new()),
            cpu: CpuRuntime(Some(cpu)),
        })
    }

    /// Reads see the rows `pending` holds for their tables (this node's ingestion log, which
    /// is opened after the engine); set once.
    pub fn set_pending_rows(&self, pending: Arc<dyn crate::scan::PendingRows>) {
        let _ = self.pending.set(pending);
    }

    /// Queries planned from now on run over `cluster`'s workers whenever one is live (DDL and
    /// writes stay on this node).
    pub fn with_cluster(mut self, cluster: crate::distributed::Cluster) -> Self {
        let cluster = if self.config.rewrites.runtime_filters {
            cluster
        } else {
            cluster.without_runtime_filters()
        };
        self.cluster = Some(cluster);
        self
    }

    /// The runtime a worker runs every task in: the shared object stores, caches and spill
    /// directory, and one memory pool of a query's limit for all its tasks.
    pub(crate) fn worker_runtime(&self) -> Result<Arc<RuntimeEnv>, SqlError> {
        self.query_runtime(self.config.query_memory_limit)
    }

    /// The gRPC service workers take work units from, when this engine coordinates a
    /// cluster that hands them out ([`crate::distributed::Cluster::with_work_units`]).
    /// The gRPC service workers pass runtime filters between stages through, when this
    /// engine coordinates and passes them (serve it beside [`SqlEngine::unit_service`]).
    pub fn filter_service(
        &self,
    ) -> Option<
        tonic::service::interceptor::InterceptedService<
            crate::distributed::FilterService,
            crate::distributed::RequireSecret,
        >,
    > {
        self.cluster.as_ref()?.filter_service()
    }

    pub fn unit_service(
        &self,
    ) -> Option<
        tonic::service::interceptor::InterceptedService<
            crate::distributed::UnitService,
            crate::distributed::RequireSecret,
        >,
    > {
        self.cluster.as_ref()?.unit_service()
    }

    /// The workers this engine hands tasks to now, when it coordinates a cluster.
    pub fn routed_workers(&self) -> Option<Vec<url::Url>> {
        self.cluster.as_ref().map(|c| c.workers.get())
    }

    /// How this engine runs queries.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Every warehouse's object store registered (a worker's tasks may read any of them).
    pub(crate) async fn register_warehouses(&self) -> Result<(), SqlError> {
        let system = Caller::system();
        for warehouse in self.service.list_warehouses(&system).await? {
            self.access(&system, &warehouse.name).await?;
        }
        Ok(())
    }

    /// Whether the object stores of warehouses `ids` are registered here already.
    pub(crate) fn has_registered(&self, ids: &[uuid::Uuid]) -> bool {
        let registered = self.registered.lock().expect("registered stores");
        ids.iter().all(|id| registered.contains(id))
    }

    /// `config` (a worker task's session) given this engine's settings: DataFusion's
    /// execution and optimizer options (the task's batch size kept) and Floe's rewrites.
    pub(crate) fn apply_session_options(&self, config: &mut SessionConfig) {
        let batch_size = config.batch_size();
        let ours = self.session.options();
        config.options_mut().execution = ours.execution.clone();
        config.options_mut().execution.batch_size = batch_size;
        config.options_mut().optimizer = ours.optimizer.clone();
        config.set_extension(Arc::new(self.config.rewrites));
    }

    /// A runtime for one query: the shared object stores, caches and spill directory, and a
    /// memory pool of `memory` bytes, the query's own limit (spilling operators share it
    /// fairly).
    fn query_runtime(&self, memory: usize) -> Result<Arc<RuntimeEnv>, SqlError> {
        let mut env = RuntimeEnvBuilder::new()
            .with_object_store_registry(self.runtime.object_store_registry.clone())
            .with_memory_pool(Arc::new(FairSpillPool::new(memory)))
            .build()?;
        env.cache_manager = self.runtime.cache_manager.clone();
        env.disk_manager = self.runtime.disk_manager.clone();
        Ok(Arc::new(env))
    }

    /// A session for background work (compaction): the engine's object stores and caches,
    /// its own memory pool of `memory_limit` bytes (operators spill beyond it) and
    /// `partitions` parallel partitions. Tables are registered in it by the caller.
    pub fn background_session(
        &self,
        memory_limit: usize,
        partitions: usize,
    ) -> Result<SessionContext, SqlError> {
        let mut env = RuntimeEnvBuilder::new()
            .with_object_store_registry(self.runtime.object_store_registry.clone())
            .with_memory_pool(Arc::new(FairSpillPool::new(memory_limit)))
            .build()?;
        env.cache_manager = self.runtime.cache_manager.clone();
        env.disk_manager = self.runtime.disk_manager.clone();
        let mut config = SessionConfig::new();
        config.options_mut().execution.time_zone = Some("UTC".into());
        let config = config
            .with_target_partitions(partitions.max(1))
            .with_batch_size(self.config.batch_size);
        let context = SessionContext::new_with_config_rt(config, Arc::new(env));
        let mut state = context.state();
        crate::register_functions(&mut state)?;
        Ok(SessionContext::new_with_state(state))
    }

    /// The range cache's hits and misses, when a cache is configured.
    pub fn cache_stats(&self) -> Option<&floe_storage::cache::CacheStats> {
        self.cache.as_ref().map(|c| &c.stats)
    }

    /// The node's cache of data-file ranges, with its hot tier, when it has one.
    pub fn cache(&self) -> Option<&Arc<floe_storage::cache::RangeCache>> {
        self.cache.as_ref()
    }

    /// `access` writing through a store that keeps what it writes, and that store, for
    /// [`crate::write::admit_hot`] once the commit succeeds; `None` when this node keeps no
    /// hot tier.
    pub fn write_through(
        &self,
        access: &TableAccess,
    ) -> Option<(TableAccess, Arc<floe_storage::cache::WriteThrough>)> {
        let kept = self
            .cache
            .as_ref()?
            .write_through(access.storage.object_store())?;
        let mut through = access.clone();
        through.storage = access.storage.with_object_store(kept.clone());
        Some((through, kept))
    }

    /// Makes the data files a commit through [`Self::write_through`]'s `access` wrote hot on
    /// this node, under the tenant's `hot-window-seconds` and `hot-share-bytes` (the node's
    /// defaults where its limits set none). Call it once the commit succeeded: a file in the
    /// hot tier is a copy of a committed one. Returns how many files were admitted.
    pub async fn admit_hot(
        &self,
        access: &TableAccess,
        kept: &floe_storage::cache::WriteThrough,
        files: &[iceberg::spec::DataFile],
    ) -> usize {
        let Some(cache) = &self.cache else { return 0 };
        let Some(config) = &self.config.cache else {
            return 0;
        };
        let limits = self.service.tenants().get(&access.warehouse).limits();
        let policy = floe_storage::cache::HotPolicy {
            window_ms: limits.hot_window_seconds.map_or(config.hot_window_ms, |s| {
                i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
            }),
            share_bytes: limits.hot_share_bytes.unwrap_or(config.hot_bytes),
        };
        // Paths a commit names are checked against the warehouse like any other.
        let paths: Vec<object_store::path::Path> = files
            .iter()
            .filter_map(|file| access.storage.object_path(file.file_path()).ok())
            .collect();
        let committed_ms = chrono::Utc::now().timestamp_millis();
        let scope = access.warehouse_id.to_string();
        cache
            .admit_hot(
                kept,
                &scope,
                &access.warehouse,
                policy,
                &paths,
                committed_ms,
            )
            .await
    }

    /// Queries waiting for a slot right now.
    pub fn queued(&self) -> usize {
        self.admission.queued()
    }

    /// Plans and starts one statement as `caller`.
    pub async fn query(
        &self,
        caller: &Caller,
        sql: &str,
        options: &QueryOptions,
    ) -> Result<QueryResult, SqlError> {
        // Wait in line; the ticket travels with the result stream.
        // A statement counts against the tenant of its session's warehouse — one the caller
        // can see (a name it cannot see reads nothing, so holds nobody's places) — and,
        // once planned, against every other warehouse it reads.
        let session = options.warehouse.as_deref().unwrap_or("default");
        let tenant = match self.service.tenants().existing(session) {
            Some(tenant)
                if self
                    .service
                    .visible_warehouse(caller, session)
                    .await
                    .is_ok() =>
            {
                Some(tenant)
            }
            _ => None,
        };
        let mut ticket = self.admission.admit(caller, tenant.as_deref()).await?;
        let memory = tenant.as_ref().map_or(self.config.query_memory_limit, |t| {
            t.query_memory(self.config.query_memory_limit)
        });
        let deadline = ticket.deadline;
        let prepared = deadline
            .run(self.prepare(
                caller,
                sql,
                options,
                self.query_runtime(memory)?,
                Planning::AsConfigured,
            ))
            .await??;
        let Prepared {
            context,
            spool,
            plan,
            cluster,
            partitioned_by,
            warehouse,
            namespace,
        } = prepared;
        for name in read_warehouses(&plan) {
            if name == session {
                continue;
            }
            if let Some(other) = self.service.tenants().existing(&name) {
                let place = deadline
                    .run(other.admit_query())
                    .await?
                    .map_err(|refused| {
                        SqlError::new(SqlErrorKind::TooManyStatements, refused.to_string())
                    })?;
                ticket.hold(place);
            }
        }
        if let LogicalPlan::Ddl(ddl) = &plan {
            let access = |name: &str| {
                catalogs_access(&context, name).ok_or_else(|| {
                    SqlError::new(
                        SqlErrorKind::Invalid,
                        format!("warehouse {name:?} does not exist"),
                    )
                })
            };
            // `CREATE TABLE … AS SELECT` reads its query's tables like any query.
            let policies = crate::policy::applied_in(&plan);
            let mut done = deadline
                .run(ddl::run(
                    &context,
                    ddl,
                    access,
                    &warehouse,
                    &namespace,
                    partitioned_by,
                ))
                .await??;
            done.policies = policies;
            return Ok(done);
        }
        let plan = if options.params.is_empty() {
            plan
        } else {
            let params = typed_params(&plan, &options.params)?;
            plan.with_param_values(params)?
        };
        // A query that runs out of memory in a hash join (which cannot spill) before answering
        // anything is planned again with sort-merge joins, which can.
        let retry = match &plan {
            LogicalPlan::Dml(_) => None,
            plan => Some((context.state(), plan.clone())),
        };
        // A distributed query that loses a worker before answering runs again without it.
        let relaunch = cluster.map(|cluster| {
            crate::distributed::Relaunch::new(cluster, context.state(), plan.clone())
        });
        let frame = deadline.run(context.execute_logical_plan(plan)).await??;
        // Physical planning and `execute` run on the query runtime too: operators spawn their
        // input tasks where they are executed, and those must not land on the server's.
        // The answer's columns are the physical plan's: the logical plan a frame holds is not
        // yet type-coerced (a `UNION` or `CASE` takes its first branch's type there), and
        // batches cast to it would lose values.
        let logical = frame.logical_plan().clone();
        let (physical_schema, stream, physical) = deadline
            .run(self.cpu.handle().spawn(async move {
                let task = Arc::new(frame.task_ctx());
                let physical = crate::policy::without_what_the_policy_keeps_back(
                    frame.create_physical_plan().await?,
                )?;
                let schema = physical.schema();
                datafusion::physical_plan::execute_stream(physical.clone(), task)
                    .map(|s| (schema, s, physical))
            }))
            .await?
            .map_err(|e| {
                if e.is_panic() {
                    SqlError::internal(&e, Some(&logical.display_indent()))
                } else {
                    SqlError::new(SqlErrorKind::Execution, format!("query task failed: {e}"))
                }
            })??;
        let schema = plain_schema(&physical_schema);
        let planned = context
            .state()
            .config()
            .get_extension::<crate::distributed::PlannedStages>();
        let stages = planned.as_ref().and_then(|slot| slot.take());
        // A query too small to cut runs here alone: no worker of it to lose or to watch.
        let relaunch = relaunch
            .filter(|_| stages.is_some())
            .map(crate::distributed::Relaunch::watched);
        let policies = crate::policy::applied_in(&logical);
        Ok(QueryResult {
            policies,
            schema: schema.clone(),
            stream: self.drive(
                schema,
                stream,
                ticket,
                drive::Reruns {
                    retry,
                    relaunch,
                    planned,
                    plan: physical,
                },
                spool,
            ),
            stages,
        })
    }

    /// The columns a statement will answer with, planned but neither run nor queued (for
    /// the PostgreSQL and Flight SQL describe steps): a statement that changes something is
    /// not carried out here.
    pub async fn describe(
        &self,
        caller: &Caller,
        sql: &str,
        options: &QueryOptions,
    ) -> Result<SchemaRef, SqlError> {
        let ticket = self.admission.plan_only(caller)?;
        let prepared = ticket
            .deadline
            .run(self.prepare(
                caller,
                sql,
                options,
                self.runtime.clone(),
                Planning::AsConfigured,
            ))
            .await??;
        Ok(match &prepared.plan {
            LogicalPlan::Ddl(_) => ddl::count_schema(),
            // Described as it will answer: with the types coercion gives its columns.
            plan => plain_schema(prepared.context.state().optimize(plan)?.schema().inner()),
        })
    }

    /// The physical plan a coordinator would cut into stages for the query `sql`: planned with
    /// the rules of a distributed statement and its scans wrapped to travel, not run.
    pub async fn distributable_plan(
        &self,
        caller: &Caller,
        sql: &str,
        options: &QueryOptions,
    ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>, SqlError> {
        let ticket = self.admission.plan_only(caller)?;
        let prepared = ticket
            .deadline
            .run(self.prepare(
                caller,
                sql,
                options,
                self.runtime.clone(),
                Planning::Distributable,
            ))
            .await??;
        if !matches!(prepared.plan, LogicalPlan::Dml(_) | LogicalPlan::Ddl(_)) {
            return Ok(prepared
                .context
                .state()
                .create_physical_plan(&prepared.plan)
                .await?);
        }
        Err(SqlError::new(
            SqlErrorKind::Invalid,
            "only queries are distributed",
        ))
    }

    /// The types of the statement's `$1`, `$2`, … placeholders, as far as planning can tell
    /// them from where they are used (`None` where it cannot).
    pub async fn parameter_types(
        &self,
        caller: &Caller,
        sql: &str,
        options: &QueryOptions,
    ) -> Result<Vec<Option<DataType>>, SqlError> {
        let ticket = self.admission.plan_only(caller)?;
        let prepared = ticket
            .deadline
            .run(self.prepare(
                caller,
                sql,
                options,
                self.runtime.clone(),
                Planning::AsConfigured,
            ))
            .await??;
        let types = prepared.plan.get_parameter_types()?;
        let count = types
            .keys()
            .filter_map(|k| k.strip_prefix('$')?.parse::<usize>().ok())
            .max()
            .unwrap_or(0);
        Ok((1..=count)
            .map(|i| types.get(&format!("${i}")).cloned().flatten())
            .collect())
    }

    /// Parses and plans a statement as `caller`; DDL is returned unplanned for [`ddl::run`],
    /// anything else is checked to be a query or an insert.
    async fn prepare(
        &self,
        caller: &Caller,
        sql: &str,
        options: &QueryOptions,
        runtime: Arc<RuntimeEnv>,
        planning: Planning,
    ) -> Result<Prepared, SqlError> {
        let warehouse = options.warehouse.as_deref().unwrap_or("default");
        let namespace = options.namespace.as_deref().unwrap_or("default");
        let config = self
            .session
            .clone()
            .with_default_catalog_and_schema(warehouse, namespace);
        let parser = SessionStateBuilder::new()
            .with_config(config.clone())
            .with_runtime_env(runtime.clone())
            .with_default_features()
            .build();
        let dialect = parser.config().options().sql_parser.dialect;
        let (sql, partitioned_by) = crate::write::take_partitioned_by(sql)?;
        let statement = parser.sql_to_statement(&sql, &dialect)?;
        let references = parser.resolve_table_references(&statement)?;
        let lists = references
            .iter()
            .any(|r| r.schema() == Some("information_schema"));

        let catalogs = self.catalogs(caller, lists).await?;
        let spool = catalogs
            .warehouses
            .get(warehouse)
            .map(|w| w.access.storage.object_store());
        let stores: Vec<uuid::Uuid> = catalogs
            .warehouses
            .values()
            .map(|w| w.access.warehouse_id)
            .collect();
        // A query is distributed when this node coordinates a cluster with a live worker.
        let cluster = self
            .cluster
            .as_ref()
            .filter(|_| is_query(&statement) && planning == Planning::AsConfigured)
            .and_then(crate::distributed::Cluster::pinned);
        let rules = match (&cluster, planning) {
            (Some(_), _) | (None, Planning::Distributable) => &self.distributed_rules,
            (None, Planning::AsConfigured) => &self.rules,
        };
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_catalog_list(Arc::new(catalogs));
        let mut state = state
            .with_analyzer_rule(Arc::new(crate::optimizer::multiset_set_ops::MultisetSetOps))
            .with_analyzer_rule(Arc::new(crate::optimizer::null_in_lists::NullInLists))
            .with_optimizer_rules(rules.logical.clone())
            .with_physical_optimizer_rules(rules.physical.clone());
        if let Some(cluster) = &cluster {
            state = cluster.distribute(state, &stores)?;
        } else if planning == Planning::Distributable {
            state = crate::distributed::wrapping_scans(state);
        }
        let mut state = state.build();
        crate::register_functions(&mut state)?;
        let plan = state.statement_to_plan(statement).await?;
        if !matches!(plan, LogicalPlan::Ddl(_)) && partitioned_by.is_some() {
            return Err(SqlError::new(
                SqlErrorKind::Invalid,
                "PARTITIONED BY belongs to CREATE TABLE",
            ));
        }
        surface::check(&plan)?;
        Ok(Prepared {
            context: SessionContext::new_with_state(state),
            spool,
            cluster,
            plan,
            partitioned_by,
            warehouse: warehouse.to_string(),
            namespace: namespace.to_string(),
        })
    }

    /// The catalog service the engine runs over.
    pub fn catalog(&self) -> &Arc<CatalogService> {
        &self.service
    }

    /// How `caller` reads and writes tables of `warehouse` (its object store registered).
    pub async fn access(&self, caller: &Caller, warehouse: &str) -> Result<TableAccess, SqlError> {
        let handle = self.service.warehouse(warehouse).await?;
        let id = handle.warehouse.id;
        let store_url = ObjectStoreUrl::parse(format!("{}://wh-{id}", stores::SCHEME))?;
        let newly = self
            .registered
            .lock()
            .expect("registered stores")
            .insert(id);
        if newly {
            let store = handle.storage.object_store();
            let store = match &self.cache {
                Some(cache) => cache.wrap(store, &id.to_string(), warehouse),
                None => store,
            };
            self.runtime
                .register_object_store(store_url.as_ref(), store);
        }
        Ok(TableAccess {
            pending: self.pending.get().cloned(),
            service: self.service.clone(),
            caller: caller.clone(),
            warehouse: warehouse.to_string(),
            storage: handle.storage.clone(),
            store_url,
            warehouse_id: id,
        })
    }

    /// The caller's warehouses as DataFusion catalogs; with `listing`, also every namespace
    /// and table name in them.
    async fn catalogs(&self, caller: &Caller, listing: bool) -> Result<FloeCatalogList, SqlError> {
        let mut warehouses = HashMap::new();
        for warehouse in self.service.list_warehouses(caller).await? {
            let access = self.access(caller, &warehouse.name).await?;
            let listing = if listing {
                Some(list_warehouse(&access).await?)
            } else {
                None
            };
            warehouses.insert(
                warehouse.name.clone(),
                Arc::new(WarehouseCatalog { access, listing }),
            );
        }
        Ok(FloeCatalogList { warehouses })
    }
}

/// How [`SqlEngine::prepare`] plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Planning {
    /// Distributed when the engine coordinates a cluster with a live worker.
    AsConfigured,
    /// As a distributed statement's coordinator plans before cutting stages.
    Distributable,
}

/// Whether `statement` only reads: a query, or `EXPLAIN` of one.
fn is_query(statement: &datafusion::sql::parser::Statement) -> bool {
    use datafusion::sql::parser::Statement;
    match statement {
        Statement::Statement(s) => {
            matches!(**s, datafusion::sql::sqlparser::ast::Statement::Query(_))
        }
        Statement::Explain(explain) => is_query(&explain.statement),
        _ => false,
    }
}

/// Results leave with plain string and binary types: DataFusion computes with view types,
/// which many clients (and the PostgreSQL and Flight SQL front doors' peers) do not read.
/// Converted batch by batch as they leave (a cast projection in the plan on top of a sort
/// of view types is merged wrongly by DataFusion 54's optimizer).
fn plain_schema(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8View => f.as_ref().clone().with_data_type(DataType::Utf8),
            DataType::BinaryView => f.as_ref().clone().with_data_type(DataType::Binary),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The table access of a warehouse of this session.
fn catalogs_access(context: &SessionContext, warehouse: &str) -> Option<TableAccess> {
    let catalog = context.catalog(warehouse)?;
    let catalog = catalog.downcast_ref::<WarehouseCatalog>()?;
    Some(catalog.access.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_panicked_is_an_internal_error_with_an_id_not_its_message() {
        let join =
            tokio::spawn(async { panic!("index out of bounds: the len is 6 but the index is 7") })
                .await
                .unwrap_err();
        let wrapped = DataFusionError::Context(
            "while running a join".into(),
            Box::new(DataFusionError::ExecutionJoin(Box::new(join))),
        );
        let error = SqlError::from(wrapped);
        assert_eq!(error.kind, SqlErrorKind::Internal);
        assert!(error.message.contains("error id"), "{}", error.message);
        assert!(
            !error.message.contains("index out of bounds"),
            "{}",
            error.message
        );
        let plain = SqlError::from(DataFusionError::Execution("no such thing".into()));
        assert_eq!(plain.kind, SqlErrorKind::Execution);
    }
}
