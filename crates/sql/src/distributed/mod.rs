//! Distributed execution: one statement run by several Floe nodes together, on
//! DataFusion-distributed.
//!
//! A node that coordinates plans a statement as it would alone, wraps Floe's table scans so
//! they travel whole ([`scan`]), and lets DataFusion-distributed cut the plan into stages of
//! tasks; the tasks of a stage that reads a table take its files by rendezvous hashing of
//! their paths over the live workers. Plans travel encoded by DataFusion's codec and Floe's
//! ([`codec`]), over gRPC calls that carry the cluster's secret ([`auth`]); a worker runs
//! them in a session with Floe's settings and the warehouses' object stores ([`worker`]).
//!
//! A coordinator started with work units hands each scan task its files one at a time, and a
//! task done with its own takes a straggler's ([`units`]).
//!
//! Joins' runtime filters reach the scans below them on workers: within a task by linking the
//! filter's copies again, across stages through a board on the coordinator ([`filters`]).
//! Nodes a worker adds to a task plan run as overlays that keep the plan's shape, so the
//! metrics the worker reports line up with the coordinator's plan ([`overlay`]).
//!
//! Grants are checked on the coordinator while it plans (a table's scan checks the caller's
//! read privilege); a worker checks only that a plan comes from its cluster.
//!
//! The coordinator plans without Floe's runtime filters and shared repeated aggregations,
//! which join two places of one plan through memory; workers make the runtime filters over
//! each task plan they run.

mod auth;
mod codec;
mod filters;
mod overlay;
mod prepare;
mod relaunch;
mod round_trip;
mod scan;
mod stage_metrics;
mod stages;
mod units;
mod watchdog;
mod worker;

use std::sync::{Arc, RwLock};

use datafusion::common::Result;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion_distributed::{DistributedExt, SessionStateBuilderExt, WorkerResolver};
use url::Url;

pub use auth::{ClusterSecret, RequireSecret, SECRET_HEADER};
pub use codec::FloeCodec;
pub use filters::FilterService;
pub use relaunch::RELAUNCHES;
pub(crate) use relaunch::Relaunch;
pub use round_trip::round_trip;
pub use scan::FloeScanExec;
pub use stage_metrics::{Exchange, ExchangeTotals, StageTotals};
pub use units::UnitService;
pub use watchdog::DEFAULT_STALL;
pub use worker::worker_routes;

/// What this process's coordinators did, for `/metrics`.
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// Plans cut into stages over workers (a query run again after losing workers counts
    /// again; a query too small to cut, kept on its coordinator, does not count).
    pub queries: std::sync::atomic::AtomicU64,
    /// Queries run again after losing workers.
    pub relaunches: std::sync::atomic::AtomicU64,
    /// Workers found lost by a query (one worker lost by two queries counts twice).
    pub lost_workers: std::sync::atomic::AtomicU64,
    /// Work units (files of a scan) handed to tasks.
    pub units: std::sync::atomic::AtomicU64,
    /// Work units handed to a task other than the one they were placed with.
    pub stolen_units: std::sync::atomic::AtomicU64,
    /// Joins' runtime filters published to scans in other stages.
    pub runtime_filters: std::sync::atomic::AtomicU64,
    /// What the stages of finished distributed queries did, by how their output moved.
    pub stages: StageTotals,
}

/// This process's [`ClusterStats`].
pub fn stats() -> &'static ClusterStats {
    static STATS: std::sync::LazyLock<ClusterStats> = std::sync::LazyLock::new(Default::default);
    &STATS
}

/// How a distributed statement was cut: for its audit record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StagePlan {
    /// Each stage run on workers, by number, with its task count (the coordinator's own
    /// stage, which gathers the answer, is not listed).
    pub stages: Vec<StageTasks>,
    /// The workers the statement was planned over.
    pub workers: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StageTasks {
    pub stage: usize,
    pub tasks: usize,
}

/// Where a statement's planner leaves its [`StagePlan`] and the last plan it cut into
/// stages (a session configuration extension, shared by the statement's reruns).
#[derive(Debug, Default)]
pub(crate) struct PlannedStages {
    stages: std::sync::Mutex<Option<StagePlan>>,
    last: std::sync::Mutex<Option<Arc<dyn datafusion::physical_plan::ExecutionPlan>>>,
}

impl PlannedStages {
    pub(crate) fn take(&self) -> Option<StagePlan> {
        self.stages.lock().expect("planned stages").take()
    }

    fn note(&self, stages: StagePlan, plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>) {
        *self.stages.lock().expect("planned stages") = Some(stages);
        *self.last.lock().expect("planned stages") = Some(plan);
    }

    /// Once the statement has answered: its stages' figures added up for `/metrics`, in the
    /// background.
    pub(crate) fn record_finished(&self) {
        if let Some(plan) = self.last.lock().expect("planned stages").take() {
            stage_metrics::record(plan);
        }
    }
}

/// Whether `url` names this machine (a loopback address or `localhost`): seen from another
/// machine, it names that one.
pub fn is_loopback(url: &Url) -> bool {
    url.host().is_some_and(|host| match host {
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
        url::Host::Domain(name) => name.eq_ignore_ascii_case("localhost"),
    })
}

/// Whether workers at `workers` reach a coordinator at `coordinator`: a loopback URL reaches
/// it only from workers on its own machine (from any other, it names that machine).
pub(crate) fn reaches_every_worker(coordinator: &Url, workers: &[Url]) -> bool {
    !is_loopback(coordinator) || workers.iter().all(is_loopback)
}

/// How long a worker a statement lost is left out of new statements' plans.
pub const SET_ASIDE: std::time::Duration = std::time::Duration::from_secs(30);

/// Data a scan task reads by default: 128 MiB.
pub const DEFAULT_TASK_BYTES: usize = 128 << 20;

/// The workers a coordinator hands tasks to, kept fresh by whoever watches the cluster.
#[derive(Debug, Clone, Default)]
pub struct LiveWorkers(Arc<RwLock<Vec<Url>>>);

impl LiveWorkers {
    /// From now on, tasks go to `urls`.
    pub fn set(&self, mut urls: Vec<Url>) {
        urls.sort();
        urls.dedup();
        *self.0.write().expect("live workers") = urls;
    }

    pub fn get(&self) -> Vec<Url> {
        self.0.read().expect("live workers").clone()
    }
}

impl WorkerResolver for LiveWorkers {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.get())
    }
}

/// What a coordinating engine distributes with: the live workers and the cluster's secret.
#[derive(Clone)]
pub struct Cluster {
    pub workers: LiveWorkers,
    /// The live list kept fresh by whoever watches the cluster (`workers` itself, until a
    /// statement pins its own).
    watched: LiveWorkers,
    channels: auth::SecretChannels,
    /// Connections for probing workers, apart from the data's.
    probes: auth::SecretChannels,
    /// How long a worker running a statement's tasks may answer no probe before it is lost.
    stall: std::time::Duration,
    /// Workers statements lost lately, by when: left out of new plans for [`SET_ASIDE`].
    set_aside: Arc<std::sync::Mutex<std::collections::HashMap<Url, std::time::Instant>>>,
    /// Data a scan task reads, about: a scan of less stays on one task.
    task_bytes: usize,
    /// Whether a file goes to the same worker every time (its cache then holds its share).
    affinity: bool,
    /// Where workers take work units from this coordinator, when they do.
    units: Option<Stealing>,
    /// Where workers publish and take joins' runtime filters across stages, when they do.
    filters: Option<FilterBoards>,
}

/// A coordinator passing runtime filters between stages: its address for workers and the
/// boards of its statements.
#[derive(Debug, Clone)]
struct FilterBoards {
    coordinator: Url,
    boards: filters::Boards,
}

/// A distributed statement's board of runtime filters (in its session configuration, so it
/// lives as long as the statement).
#[derive(Debug)]
pub(crate) struct StatementBoard(Arc<filters::Board>);

/// A coordinator handing out scans' files as work units: its address for workers and the
/// feeds of its queries (in a statement's session configuration when it steals).
#[derive(Debug, Clone)]
pub(crate) struct Stealing {
    pub(crate) coordinator: Url,
    pub(crate) feeds: units::Feeds,
}

/// In a statement's session when its files are dealt without affinity: by a hash salted
/// for that statement alone (to measure what affinity is worth).
#[derive(Debug)]
pub(crate) struct Scattered(pub(crate) u64);

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    pub fn new(workers: LiveWorkers, secret: ClusterSecret) -> Self {
        let channels = auth::SecretChannels::new(secret);
        Self {
            watched: workers.clone(),
            workers,
            probes: channels.apart(),
            channels,
            stall: DEFAULT_STALL,
            set_aside: Arc::default(),
            task_bytes: DEFAULT_TASK_BYTES,
            affinity: true,
            units: None,
            filters: None,
        }
    }

    /// Joins' runtime filters passed between stages through this coordinator, which workers
    /// reach at `coordinator` (where [`Cluster::filter_service`] is served).
    pub fn with_runtime_filters(mut self, coordinator: Url) -> Self {
        self.filters = Some(FilterBoards {
            coordinator,
            boards: filters::Boards::default(),
        });
        self
    }

    /// No runtime filters passed between stages (runtime filters are switched off).
    pub(crate) fn without_runtime_filters(mut self) -> Self {
        self.filters = None;
        self
    }

    /// The gRPC service workers pass runtime filters through (behind the cluster's secret),
    /// when this coordinator passes them.
    pub fn filter_service(
        &self,
    ) -> Option<tonic::service::interceptor::InterceptedService<FilterService, RequireSecret>> {
        let filters = self.filters.as_ref()?;
        Some(filters::filter_service(
            filters.boards.clone(),
            self.channels.secret().clone(),
        ))
    }

    /// Scans' files handed out as work units from this coordinator, which workers reach at
    /// `coordinator` (where [`Cluster::unit_service`] is served): a task done with its own
    /// files takes a straggler's.
    pub fn with_work_units(mut self, coordinator: Url) -> Self {
        self.units = Some(Stealing {
            coordinator,
            feeds: units::Feeds::default(),
        });
        self
    }

    /// The gRPC service workers take work units from (behind the cluster's secret), when
    /// this coordinator hands them out.
    pub fn unit_service(
        &self,
    ) -> Option<tonic::service::interceptor::InterceptedService<UnitService, RequireSecret>> {
        let units = self.units.as_ref()?;
        Some(units::unit_service(
            units.feeds.clone(),
            self.channels.secret().clone(),
        ))
    }

    /// Whether a data file goes to the same worker in every statement (the default), or to
    /// one chosen afresh per statement.
    pub fn with_affinity(mut self, affinity: bool) -> Self {
        self.affinity = affinity;
        self
    }

    /// A worker running a statement's tasks that answers no probe for `stall` is lost
    /// (default [`DEFAULT_STALL`]).
    pub fn with_stall(mut self, stall: std::time::Duration) -> Self {
        self.stall = stall;
        self
    }

    /// This cluster with the workers live now, kept for one statement: the workers it is
    /// planned over are those it runs on (a worker dropping out meanwhile is a lost
    /// worker, handled by [`Relaunch`]); `None` when no worker is live. Workers a statement
    /// lost within [`SET_ASIDE`] are left out: one still listed live (its heartbeats reach
    /// the catalog, its service does not answer) costs one statement its stall time, not
    /// every statement.
    pub(crate) fn pinned(&self) -> Option<Self> {
        let mut live = self.workers.get();
        {
            let mut set_aside = self.set_aside.lock().expect("workers set aside");
            set_aside.retain(|_, since| since.elapsed() < SET_ASIDE);
            live.retain(|url| !set_aside.contains_key(url));
        }
        if live.is_empty() {
            return None;
        }
        let workers = LiveWorkers::default();
        workers.set(live);
        Some(Self {
            workers,
            ..self.clone()
        })
    }

    /// A watchdog over `workers` running a statement's tasks (none for no workers).
    pub(crate) fn watch(&self, workers: &[Url]) -> Option<watchdog::Watchdog> {
        (!workers.is_empty()).then(|| {
            watchdog::Watchdog::start(
                self.probes.clone(),
                self.watched.clone(),
                workers.to_vec(),
                self.stall,
            )
        })
    }

    /// Leaves `lost` out of the plans of the next [`SET_ASIDE`].
    pub(crate) fn set_aside(&self, lost: &[Url]) {
        let now = std::time::Instant::now();
        let mut set_aside = self.set_aside.lock().expect("workers set aside");
        for url in lost {
            set_aside.insert(url.clone(), now);
        }
    }

    /// Scans get a task per `bytes` of data they read (at most one per live worker).
    pub fn with_task_bytes(mut self, bytes: usize) -> Self {
        self.task_bytes = bytes.max(1);
        self
    }

    /// `builder` (configured already) planning distributed statements over this cluster,
    /// which read the warehouses whose object stores are `stores` (the warehouse ids): their
    /// workers register those stores before running a task, and no others.
    pub(crate) fn distribute(
        &self,
        builder: SessionStateBuilder,
        stores: &[uuid::Uuid],
    ) -> Result<SessionStateBuilder> {
        let mut builder = builder;
        let mut headers = worker::stores_header(stores);
        if let Some(config) = builder.config() {
            if let Some(filters) = &self.filters
                && reaches_every_worker(&filters.coordinator, &self.workers.get())
            {
                let (id, board) = filters.boards.open();
                let remote = filters::RemoteBoard {
                    coordinator: filters.coordinator.clone(),
                    board: id,
                };
                if let Some(value) = remote.header_value() {
                    headers.insert(filters::BOARD_HEADER, value);
                    config.set_extension(Arc::new(StatementBoard(board)));
                }
            }
            config.set_extension(Arc::new(PlannedStages::default()));
            if let Some(units) = &self.units {
                config.set_extension(Arc::new(units.clone()));
            }
            if !self.affinity {
                let salt = uuid::Uuid::new_v4().as_u64_pair().0;
                config.set_extension(Arc::new(Scattered(salt)));
            }
        }
        // The resolver first: it puts DataFusion-distributed's options in the configuration.
        let mut builder = builder
            .with_distributed_worker_resolver(self.workers.clone())
            .with_distributed_passthrough_headers(headers)?
            .with_distributed_file_scan_config_bytes_per_partition(self.task_bytes)?
            // A union runs every child in every task, each child's scans taking the task's
            // share of their files. With children isolated per task, a worker that rebuilds
            // the union (as its rules and runtime filters do) counts its partitions again
            // over placeholders that lost theirs on the way (DataFusion's EmptyExec is
            // encoded without them): the stage then answered too few partitions, or a
            // broadcast read one twice (TPC-DS Q5's catalog returns counted twice).
            .with_distributed_children_isolator_unions(false)?
            .with_query_planner(Arc::new(scan::WrapScans))
            .with_distributed_channel_resolver(self.channels.clone())
            .with_distributed_user_codec(FloeCodec)
            .with_distributed_desired_task_count_handler(scan::ScanTaskCount)
            .with_distributed_scale_up_leaf_node_handler(scan::scale_up_scan)
            .with_distributed_route_tasks_handler(scan::RouteScanTasks)
            .with_distributed_planner();
        let inner = builder
            .query_planner()
            .take()
            .expect("the distributed planner was set just now");
        Ok(builder.with_query_planner(Arc::new(stages::Stages { inner })))
    }
}

/// `builder` planning as a coordinator does before cutting stages: scans wrapped to travel,
/// scalar subqueries planned as joins (as DataFusion-distributed has them planned: a
/// physical scalar subquery does not travel).
pub(crate) fn wrapping_scans(mut builder: SessionStateBuilder) -> SessionStateBuilder {
    if let Some(config) = builder.config() {
        config
            .options_mut()
            .optimizer
            .enable_physical_uncorrelated_scalar_subquery = false;
    }
    builder.with_query_planner(Arc::new(scan::WrapScans))
}
