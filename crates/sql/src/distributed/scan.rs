//! A Floe table scan as it travels to workers, how it is cut into tasks, and where each task
//! goes.
//!
//! Floe reads a table with DataFusion's native Parquet scan (`DataSourceExec`), but three of
//! its parts are Floe's: each file's access plan (its position deletes and deletion vectors as
//! row selections), the field-id expression adapter and the bounded-footer reader. DataFusion's
//! own plan encoding writes the scan without them, so a worker would read deleted rows and map
//! columns by name. Before a statement is distributed, every Floe scan is wrapped in a
//! [`FloeScanExec`], which the engine's codec ([`super::codec`]) writes whole.
//!
//! The files of a scan are dealt to tasks by rendezvous hashing of their paths over the live
//! workers ([`placement`]): a file always lands on the same worker while that worker lives, so
//! its cache holds its own share; a worker that leaves moves only its share. When the
//! coordinator hands out work units, those are each task's first files, and a task done with
//! its own takes a straggler's ([`super::units`]); a scan that declares an order keeps its
//! files where they were dealt.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result, Statistics};
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfig, FileScanConfigBuilder, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::session_state::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::sort_pushdown::SortOrderPushdownResult;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DesiredTaskCountHandler,
    DistributedConfig, DistributedLeafExec, RouteTasksEvent, RouteTasksEventResponse,
    ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse, get_distributed_worker_resolver,
};
use futures::TryStreamExt;
use url::Url;

use super::filters::Waits;
use super::units::{Feed, MOST_UNITS, UnitClient, UnitSource};
use crate::engine::stores::SCHEME;
use crate::optimizer::utils::file_scan;

/// A Floe table's native Parquet scan, kept whole on its way to a worker; it runs as the scan
/// it wraps.
#[derive(Debug)]
pub struct FloeScanExec {
    scan: Arc<dyn ExecutionPlan>,
    /// Set on a task that takes its files as work units: the scan holds one file group per
    /// unit, and each of the task's partitions reads the groups its feed hands it.
    stealing: Option<Stealing>,
    /// Set on a worker when the scan's dynamic filters come from joins in other stages: it
    /// reads once they are in ([`super::filters`]).
    awaited: Option<Waits>,
}

#[derive(Debug, Clone)]
struct Stealing {
    source: UnitSource,
    /// The scan's, with the task's partition count.
    properties: Arc<PlanProperties>,
}

/// Most partitions a stealing task has.
const MOST_TASK_PARTITIONS: usize = 4096;

impl FloeScanExec {
    /// `scan` must be a `DataSourceExec` over a `FileScanConfig`.
    pub(crate) fn new(scan: Arc<dyn ExecutionPlan>) -> Result<Self> {
        if file_scan(&scan).is_none() {
            return Err(DataFusionError::Internal(
                "FloeScanExec wraps a file scan".into(),
            ));
        }
        Ok(Self {
            scan,
            stealing: None,
            awaited: None,
        })
    }

    /// The same scan with `predicate` (its dynamic filters linked to their joins' on this
    /// worker), reading once `awaited`'s filters are in when there are any.
    pub(crate) fn with_linked_filters(
        &self,
        predicate: Arc<dyn PhysicalExpr>,
        awaited: Option<Waits>,
    ) -> Result<Self> {
        let config = self.config();
        let Some(source) = config.file_source().downcast_ref::<ParquetSource>() else {
            return Err(DataFusionError::Internal(
                "a Floe scan reads Parquet".into(),
            ));
        };
        let config = FileScanConfigBuilder::from(config.clone())
            .with_source(Arc::new(source.with_predicate(predicate)))
            .build();
        Ok(Self {
            scan: DataSourceExec::from_data_source(config),
            stealing: self.stealing.clone(),
            awaited,
        })
    }

    /// A task of `partitions` partitions reading the file groups of `scan` (one file each,
    /// the work units) that `source` hands it.
    pub(crate) fn stealing(
        scan: Arc<dyn ExecutionPlan>,
        source: UnitSource,
        partitions: usize,
    ) -> Result<Self> {
        let exec = Self::new(scan)?;
        // Each group is read by the partition it is handed to alone: DataFusion's own
        // sharing of unopened files between a scan's partitions would let one unit's stream
        // read the files of units handed to other tasks.
        let config = FileScanConfigBuilder::from(exec.config().clone())
            .with_preserve_order(true)
            .build();
        let mut exec = Self::new(DataSourceExec::from_data_source(config))?;
        let units = exec.config().file_groups.len();
        if units > MOST_UNITS || !(1..=MOST_TASK_PARTITIONS).contains(&partitions) {
            return Err(DataFusionError::Internal(format!(
                "a stealing scan task has {units} units (at most {MOST_UNITS}) and \
                 {partitions} partitions (1 to {MOST_TASK_PARTITIONS})"
            )));
        }
        let properties = exec
            .scan
            .properties()
            .as_ref()
            .clone()
            .with_partitioning(Partitioning::UnknownPartitioning(partitions));
        exec.stealing = Some(Stealing {
            source,
            properties: Arc::new(properties),
        });
        Ok(exec)
    }

    /// Where this task takes its units, and its partition count, when it steals.
    pub(crate) fn unit_source(&self) -> Option<(&UnitSource, usize)> {
        self.stealing
            .as_ref()
            .map(|s| (&s.source, s.properties.partitioning.partition_count()))
    }

    /// The native scan.
    pub(crate) fn scan(&self) -> &Arc<dyn ExecutionPlan> {
        &self.scan
    }

    pub(crate) fn config(&self) -> &FileScanConfig {
        file_scan(&self.scan).expect("checked when made")
    }

    /// The same scan over `groups` of files instead.
    fn with_groups(&self, groups: Vec<FileGroup>) -> Result<Self> {
        let config = FileScanConfigBuilder::from(self.config().clone())
            .with_file_groups(groups)
            .build();
        Self::new(DataSourceExec::from_data_source(config))
    }
}

impl DisplayAs for FloeScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "FloeScanExec: ")?;
        if let Some(stealing) = &self.stealing {
            write!(
                f,
                "work units of task {} over {} partitions, ",
                stealing.source.task,
                stealing.properties.partitioning.partition_count()
            )?;
        }
        self.scan.fmt_as(t, f)
    }
}

impl ExecutionPlan for FloeScanExec {
    fn name(&self) -> &str {
        "FloeScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        match &self.stealing {
            Some(stealing) => &stealing.properties,
            None => self.scan.properties(),
        }
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some((awaited, ids)) = self.awaited.clone() else {
            return self.read(partition, context);
        };
        // The filters are in (or will not come) before the first file is opened, so its
        // row groups are pruned with them.
        let this = Self {
            scan: self.scan.clone(),
            stealing: self.stealing.clone(),
            awaited: None,
        };
        let stream = futures::stream::once(async move {
            awaited.settled(&ids).await;
            this.read(partition, context)
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        let Some((awaited, _)) = &self.awaited else {
            return self.scan.metrics();
        };
        // Filters from other stages that did not arrive as filters are reported, not hidden.
        let mut metrics = self.scan.metrics().unwrap_or_default();
        let dropped = datafusion::physical_plan::metrics::Count::new();
        dropped.add(awaited.dropped());
        metrics.push(Arc::new(datafusion::physical_plan::metrics::Metric::new(
            datafusion::physical_plan::metrics::MetricValue::Count {
                name: "runtime_filters_dropped".into(),
                count: dropped,
            },
            None,
        )));
        Some(metrics)
    }

    /// A stealing task's partitions read what they are handed: only the whole is known.
    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        match (&self.stealing, partition) {
            (Some(_), Some(_)) => Ok(Arc::new(Statistics::new_unknown(&self.schema()))),
            _ => self.scan.partition_statistics(partition),
        }
    }

    /// As the scan it wraps: a worker's sort pushdown sets the row-group order again (it does
    /// not travel with the scan). A stealing task reads in no order.
    fn try_pushdown_sort(
        &self,
        order: &[PhysicalSortExpr],
    ) -> Result<SortOrderPushdownResult<Arc<dyn ExecutionPlan>>> {
        if self.stealing.is_some() {
            return Ok(SortOrderPushdownResult::Unsupported);
        }
        let pushed = self.scan.try_pushdown_sort(order)?;
        let wrapped = |inner| -> Result<Arc<dyn ExecutionPlan>> {
            Ok(Arc::new(Self {
                awaited: self.awaited.clone(),
                ..Self::new(inner)?
            }))
        };
        Ok(match pushed {
            SortOrderPushdownResult::Exact { inner } => SortOrderPushdownResult::Exact {
                inner: wrapped(inner)?,
            },
            SortOrderPushdownResult::Inexact { inner } => SortOrderPushdownResult::Inexact {
                inner: wrapped(inner)?,
            },
            SortOrderPushdownResult::Unsupported => SortOrderPushdownResult::Unsupported,
        })
    }
}

impl FloeScanExec {
    fn read(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        match &self.stealing {
            Some(stealing) => self.take_units(stealing, partition, context),
            None => self.scan.execute(partition, context),
        }
    }

    /// Partition `partition` of a stealing task: the units its feed hands it, one after
    /// another, until none is left.
    fn take_units(
        &self,
        stealing: &Stealing,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let partitions = stealing.properties.partitioning.partition_count();
        if partition >= partitions {
            return Err(DataFusionError::Internal(format!(
                "a scan task of {partitions} partitions has no partition {partition}"
            )));
        }
        let client = context
            .session_config()
            .get_extension::<UnitClient>()
            .ok_or_else(|| {
                DataFusionError::Internal("work units are taken only on a worker".into())
            })?;
        let units = self.config().file_groups.len();
        let start = (self.scan.clone(), stealing.source.clone(), client, context);
        let streams = futures::stream::try_unfold(start, move |state| async move {
            let (scan, source, client, context) = state;
            let Some(handout) = client.next(&source).await? else {
                return Ok(None);
            };
            let unit = handout.unit as usize;
            if unit >= units {
                return Err(DataFusionError::Execution(format!(
                    "the coordinator handed out unit {unit} of a scan of {units}"
                )));
            }
            let stream = scan.execute(unit, context.clone())?;
            Ok(Some((stream, (scan, source, client, context))))
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            streams.try_flatten(),
        )))
    }
}

/// Whether `plan` is a scan of a Floe warehouse's files.
fn is_floe_scan(plan: &Arc<dyn ExecutionPlan>) -> bool {
    file_scan(plan).is_some_and(|config| config.object_store_url.as_str().starts_with(SCHEME))
}

/// `plan` with every Floe scan wrapped in a [`FloeScanExec`].
pub(crate) fn wrap_scans(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if is_floe_scan(&node) {
            let wrapped: Arc<dyn ExecutionPlan> = Arc::new(FloeScanExec::new(node)?);
            return Ok(Transformed::yes(wrapped));
        }
        Ok(Transformed::no(node))
    })
    .map(|t| t.data)
}

/// DataFusion's physical planner, then the plan made ready to travel
/// ([`super::prepare::for_travel`]); the distributed planner runs over its output.
#[derive(Debug, Default)]
pub(crate) struct WrapScans;

#[async_trait]
impl QueryPlanner for WrapScans {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &SessionState,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = DefaultPhysicalPlanner::default()
            .create_physical_plan(logical_plan, session_state)
            .await?;
        super::prepare::for_travel(plan)
    }
}

/// How many tasks a Floe scan asks for: one per `file_scan_config_bytes_per_partition` of
/// data (the cluster's task size), and at most one per live worker.
#[derive(Debug, Default)]
pub(crate) struct ScanTaskCount;

#[async_trait]
impl DesiredTaskCountHandler for ScanTaskCount {
    async fn handle(
        &self,
        ev: DesiredTaskCountEvent<'_>,
    ) -> Option<Result<DesiredTaskCountEventResponse>> {
        let scan = ev.plan.downcast_ref::<FloeScanExec>()?;
        let per_partition = match DistributedConfig::from_session_config(ev.session_config) {
            Ok(config) => config.file_scan_config_bytes_per_partition.max(1),
            Err(e) => return Some(Err(e)),
        };
        let bytes: u64 = scan
            .config()
            .file_groups
            .iter()
            .flat_map(|g| g.files())
            .map(|f| f.effective_size())
            .sum();
        let live =
            match get_distributed_worker_resolver(ev.session_config).and_then(|r| r.get_urls()) {
                Ok(urls) => urls.len().max(1),
                Err(e) => return Some(Err(e)),
            };
        // More tasks than workers would leave the extra ones without files (a file has one
        // home worker).
        let tasks = (bytes as usize).div_ceil(per_partition).clamp(1, live);
        Some(Ok(DesiredTaskCountEventResponse::desired(tasks)))
    }
}

/// The files of a Floe scan dealt to `task_count` tasks: task `i` runs on the `i`-th live
/// worker (in URL order, [`RouteScanTasks`]) and takes the files whose path hashes highest for
/// that worker among the first `task_count` ([`placement`]). Each task's files are spread over
/// as many partitions as the scan had.
pub(crate) fn scale_up_scan(
    ev: ScaleUpLeafNodeEvent,
) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let scan = ev.plan.downcast_ref::<FloeScanExec>()?;
    let partitions = ev.plan.properties().partitioning.partition_count().max(1);
    let tasks = ev.task_count.max(1);
    let workers = match task_workers(ev.session_config, tasks) {
        Ok(workers) => workers,
        Err(e) => return Some(Err(e)),
    };
    let salt = ev
        .session_config
        .get_extension::<super::Scattered>()
        .map(|s| s.0);
    let owner = |path: &str| match salt {
        Some(salt) => placement::owner(&format!("{salt}/{path}"), &workers),
        None => placement::owner(path, &workers),
    };
    let stealing = ev.session_config.get_extension::<super::Stealing>();
    if let Some(stealing) = stealing
        && tasks > 1
        && partitions <= MOST_TASK_PARTITIONS
        && scan.config().output_ordering.is_empty()
        && super::reaches_every_worker(
            &stealing.coordinator,
            &workers
                .iter()
                .filter_map(|w| Url::parse(w).ok())
                .collect::<Vec<_>>(),
        )
    {
        let files: Vec<_> = scan
            .config()
            .file_groups
            .iter()
            .flat_map(|g| g.files().iter().cloned())
            .collect();
        // Every task's plan holds every file: a scan too large for that keeps its files
        // where they were placed.
        let selectors: usize = files.iter().map(selectors_of).sum();
        if files.len() * tasks <= MOST_UNITS && selectors * tasks <= MOST_STOLEN_SELECTORS {
            match stealing_tasks(&ev, scan, files, tasks, partitions, &stealing, &owner) {
                Ok(Some(leaf)) => return Some(Ok(leaf)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
    let mut per_task: Vec<Vec<Vec<_>>> = vec![vec![Vec::new(); partitions]; tasks];
    let mut bytes: Vec<Vec<u64>> = vec![vec![0; partitions]; tasks];
    if !scan.config().output_ordering.is_empty() {
        // The scan declares an order: each file stays in its group, in its place there, so
        // every task's partition reads a subsequence of an ordered run (still ordered).
        for (g, group) in scan.config().file_groups.iter().enumerate() {
            for file in group.files() {
                let task = owner(file.object_meta.location.as_ref());
                per_task[task][g % partitions].push(file.clone());
            }
        }
    } else {
        let mut files: Vec<_> = scan
            .config()
            .file_groups
            .iter()
            .flat_map(|g| g.files().iter().cloned())
            .collect();
        // Largest first into the task's lightest partition: balanced partitions in a task.
        files.sort_by_key(|f| std::cmp::Reverse(f.effective_size()));
        for file in files {
            let task = owner(file.object_meta.location.as_ref());
            let lightest = (0..partitions).min_by_key(|&p| bytes[task][p]).unwrap_or(0);
            bytes[task][lightest] += file.effective_size();
            per_task[task][lightest].push(file);
        }
    }
    let variants: Result<Vec<Arc<dyn ExecutionPlan>>> = per_task
        .into_iter()
        .map(|groups| {
            let groups = groups.into_iter().map(FileGroup::new).collect();
            Ok(Arc::new(scan.with_groups(groups)?) as Arc<dyn ExecutionPlan>)
        })
        .collect();
    let leaf = variants.and_then(|v| DistributedLeafExec::try_new(ev.plan.clone(), v));
    Some(leaf.map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))))
}

/// Row selectors all the task plans of a stealing scan may hold together (a quarter of what
/// one plan may carry to a worker).
const MOST_STOLEN_SELECTORS: usize = 1 << 22;

/// The row selectors of `file`'s access plan (its position deletes), which travel with it.
fn selectors_of(file: &datafusion::datasource::listing::PartitionedFile) -> usize {
    use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
    file.extension::<ParquetAccessPlan>().map_or(0, |plan| {
        plan.inner()
            .iter()
            .map(|group| match group {
                RowGroupAccess::Selection(selection) => selection.iter().count(),
                _ => 1,
            })
            .sum()
    })
}

/// The tasks of a scan that take `files` as work units: a feed on this coordinator queues
/// each file for the task its path hashes to, and every task holds every file (one group
/// each), so it can read whichever it is handed ([`super::units`]).
fn stealing_tasks(
    ev: &ScaleUpLeafNodeEvent,
    scan: &FloeScanExec,
    files: Vec<datafusion::datasource::listing::PartitionedFile>,
    tasks: usize,
    partitions: usize,
    stealing: &super::Stealing,
    owner: &impl Fn(&str) -> usize,
) -> Result<Option<ScaleUpLeafNodeEventResponse>> {
    let mut queues = vec![Vec::new(); tasks];
    for (unit, file) in files.iter().enumerate() {
        let task = owner(file.object_meta.location.as_ref());
        queues[task].push((unit as u32, file.effective_size()));
    }
    // The coordinator holds as many units as it may already: this scan's files stay put.
    let Some(feed) = stealing.feeds.open(Feed::new(queues)) else {
        return Ok(None);
    };
    let groups = files.into_iter().map(|f| FileGroup::new(vec![f])).collect();
    let every_file = scan.with_groups(groups)?.scan;
    let variants = (0..tasks)
        .map(|task| {
            let source = UnitSource {
                coordinator: stealing.coordinator.clone(),
                feed,
                task: task as u32,
            };
            let exec = FloeScanExec::stealing(every_file.clone(), source, partitions)?;
            Ok(Arc::new(exec) as Arc<dyn ExecutionPlan>)
        })
        .collect::<Result<Vec<_>>>()?;
    let leaf = DistributedLeafExec::try_new(ev.plan.clone(), variants)?;
    Ok(Some(ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))))
}

/// The workers tasks `0..tasks` of a scan run on: the live workers in URL order, cycled when
/// there are fewer workers than tasks.
fn task_workers(config: &datafusion::prelude::SessionConfig, tasks: usize) -> Result<Vec<String>> {
    let mut urls = get_distributed_worker_resolver(config)?.get_urls()?;
    if urls.is_empty() {
        return Err(DataFusionError::Execution(
            "no live worker to run the query's tasks".into(),
        ));
    }
    urls.sort();
    Ok((0..tasks)
        .map(|i| urls[i % urls.len()].to_string())
        .collect())
}

/// Routes the tasks of a stage that reads a Floe scan to the workers [`scale_up_scan`] dealt
/// its files for: task `i` to the `i`-th live worker in URL order. Other stages are left to
/// DataFusion-distributed's own routing.
#[derive(Debug, Default)]
pub(crate) struct RouteScanTasks;

impl datafusion_distributed::RouteTasksHandler for RouteScanTasks {
    fn handle(&self, ev: RouteTasksEvent) -> Option<Result<RouteTasksEventResponse>> {
        let reads_scan = ev
            .plan
            .exists(|node| {
                Ok(node
                    .downcast_ref::<DistributedLeafExec>()
                    .is_some_and(|leaf| leaf.original().downcast_ref::<FloeScanExec>().is_some()))
            })
            .unwrap_or(false);
        if !reads_scan {
            return None;
        }
        let urls = task_workers(ev.task_ctx.session_config(), ev.task_count).and_then(|w| {
            w.iter()
                .map(|u| Url::parse(u).map_err(|e| DataFusionError::Execution(e.to_string())))
                .collect::<Result<Vec<_>>>()
        });
        Some(urls.map(RouteTasksEventResponse::new))
    }
}

/// Rendezvous (highest random weight) hashing of file paths over workers.
pub(crate) mod placement {
    use sha2::{Digest, Sha256};

    /// The weight of `path` on `worker`.
    fn weight(path: &str, worker: &str) -> u64 {
        let mut hash = Sha256::new();
        hash.update(worker.as_bytes());
        hash.update([0]);
        hash.update(path.as_bytes());
        let digest = hash.finalize();
        u64::from_be_bytes(digest[..8].try_into().expect("eight bytes"))
    }

    /// The position in `workers` of the worker `path` belongs to: the one it weighs most on
    /// (ties, which need equal hashes, go to the first). A worker named at several positions
    /// counts once, at its first.
    pub(crate) fn owner(path: &str, workers: &[String]) -> usize {
        let mut best = 0;
        let mut best_weight = None;
        for (i, worker) in workers.iter().enumerate() {
            if workers[..i].contains(worker) {
                continue;
            }
            let w = weight(path, worker);
            if best_weight.is_none_or(|b| w > b) {
                best = i;
                best_weight = Some(w);
            }
        }
        best
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn workers(n: usize) -> Vec<String> {
            (0..n).map(|i| format!("http://10.0.0.{i}:7000/")).collect()
        }

        #[test]
        fn a_worker_leaving_moves_only_its_own_files() {
            let before = workers(4);
            let after: Vec<String> = before
                .iter()
                .filter(|w| !w.ends_with("2:7000/"))
                .cloned()
                .collect();
            let mut moved = 0;
            for f in 0..2000 {
                let path = format!("data/part-{f}.parquet");
                let was = &before[owner(&path, &before)];
                let is = &after[owner(&path, &after)];
                if was != is {
                    assert!(
                        was.ends_with("2:7000/"),
                        "{path} moved off a worker that stayed"
                    );
                    moved += 1;
                }
            }
            // About a quarter of the files lived on the worker that left.
            assert!((350..650).contains(&moved), "{moved} of 2000 moved");
        }

        #[test]
        fn files_spread_evenly_and_stay_put() {
            let ws = workers(3);
            let mut counts = [0usize; 3];
            for f in 0..3000 {
                let path = format!("data/{f}.parquet");
                let o = owner(&path, &ws);
                assert_eq!(o, owner(&path, &ws));
                counts[o] += 1;
            }
            assert!(
                counts.iter().all(|&c| (850..1150).contains(&c)),
                "{counts:?}"
            );
        }

        #[test]
        fn repeated_workers_take_their_first_position() {
            let ws = vec!["a".to_string(), "b".to_string(), "a".to_string()];
            for f in 0..100 {
                assert_ne!(owner(&format!("{f}"), &ws), 2);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_coordinator_steals_only_for_workers_on_its_machine() {
        let local = Url::parse("http://127.0.0.1:50051").unwrap();
        let remote = Url::parse("https://coordinator.internal:50051").unwrap();
        let urls =
            |all: &[&str]| -> Vec<Url> { all.iter().map(|u| Url::parse(u).unwrap()).collect() };
        let here = urls(&["http://127.0.0.1:7001/", "http://localhost:7002/"]);
        let there = urls(&["http://127.0.0.1:7001/", "https://10.0.0.7:7000/"]);
        assert!(super::super::reaches_every_worker(&local, &here));
        assert!(!super::super::reaches_every_worker(&local, &there));
        assert!(super::super::reaches_every_worker(&remote, &there));
    }
}
