//! A distributed query that loses a worker before it answered runs again on the workers that
//! still answer (at most [`RELAUNCHES`] times; on this node alone when none does), then fails
//! with an error naming the workers it lost. A worker is lost when the attempt fails and the
//! worker answers no probe, or when the attempt's [`Watchdog`] finds it gone or stalled
//! while no error comes. Only queries are distributed, so running one again writes nothing
//! twice.

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion_distributed::DistributedExt;
use url::Url;

use super::watchdog::{Watchdog, replies};
use super::{Cluster, LiveWorkers};

/// Runs again a query may get after losing workers.
pub const RELAUNCHES: usize = 2;

/// A distributed query's session and plan, to run it again.
pub(crate) struct Relaunch {
    cluster: Cluster,
    state: SessionState,
    plan: LogicalPlan,
    /// The workers the running attempt was given.
    workers: Vec<Url>,
    /// Watches them while the attempt runs (none once it runs on this node alone).
    watchdog: Option<Watchdog>,
    lost: Vec<Url>,
    left: usize,
}

impl Relaunch {
    pub(crate) fn new(cluster: Cluster, state: SessionState, plan: LogicalPlan) -> Self {
        let workers = cluster.workers.get();
        Self {
            cluster,
            state,
            plan,
            workers,
            watchdog: None,
            lost: Vec::new(),
            left: RELAUNCHES,
        }
    }

    /// Once the query is known to run in stages on its workers: watched while it runs.
    pub(crate) fn watched(mut self) -> Self {
        self.watchdog = self.cluster.watch(&self.workers);
        self
    }

    /// The running attempt's workers found lost while it runs (left the live list, or no
    /// probe answered for the stall time); pending until some are.
    pub(crate) async fn stalled(&mut self) -> Vec<Url> {
        match self.watchdog.as_mut() {
            Some(watchdog) => watchdog.lost().await,
            None => std::future::pending().await,
        }
    }

    /// After the running attempt failed with `error` before answering: the query started
    /// again without the workers that no longer answer, or the error to report (naming the
    /// workers lost, if any were).
    pub(crate) async fn after(
        &mut self,
        error: DataFusionError,
    ) -> Result<SendableRecordBatchStream> {
        let replies = replies(&self.cluster.probes, &self.workers).await;
        let lost: Vec<Url> = self
            .workers
            .iter()
            .zip(replies)
            .filter(|(_, replied)| !replied)
            .map(|(url, _)| url.clone())
            .collect();
        if lost.is_empty() {
            return Err(self.naming_lost(error));
        }
        self.without(lost, error).await
    }

    /// After the watchdog found `lost` while the attempt ran, before it answered: the query
    /// started again without them, or the error to report.
    pub(crate) async fn after_stall(
        &mut self,
        lost: Vec<Url>,
    ) -> Result<SendableRecordBatchStream> {
        let error = self.stall_error(&lost);
        self.without(lost, error).await
    }

    /// After the watchdog found `lost` once the query had begun answering: the error that
    /// ends it (its rows cannot be taken back).
    pub(crate) fn stalled_after_answering(&mut self, lost: Vec<Url>) -> DataFusionError {
        self.count_lost(&lost);
        let error = self.stall_error(&lost);
        self.naming_lost(DataFusionError::Context(
            "after the query had begun answering".into(),
            Box::new(error),
        ))
    }

    fn stall_error(&self, lost: &[Url]) -> DataFusionError {
        let lost: Vec<&str> = lost.iter().map(Url::as_str).collect();
        DataFusionError::Execution(format!(
            "worker(s) {} left the cluster's live list or answered no probe for {} s",
            lost.join(", "),
            self.cluster.stall.as_secs_f64()
        ))
    }

    fn count_lost(&mut self, lost: &[Url]) {
        self.lost.extend(lost.iter().cloned());
        self.cluster.set_aside(lost);
        super::stats()
            .lost_workers
            .fetch_add(lost.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// The query started again without `lost`, or `error` naming them when it is out of
    /// tries.
    async fn without(
        &mut self,
        lost: Vec<Url>,
        error: DataFusionError,
    ) -> Result<SendableRecordBatchStream> {
        self.watchdog = None;
        self.count_lost(&lost);
        if self.left == 0 {
            return Err(self.naming_lost(error));
        }
        self.left -= 1;
        super::stats()
            .relaunches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.workers.retain(|url| !lost.contains(url));
        tracing::warn!(
            lost = ?lost.iter().map(Url::as_str).collect::<Vec<_>>(),
            remaining = self.workers.len(),
            "a distributed query lost workers before it answered; running it again without them"
        );
        let builder = SessionStateBuilder::new_from_existing(self.state.clone());
        let state = if self.workers.is_empty() {
            // Planned by this node alone (its scans still wrapped, which changes nothing here).
            builder
                .with_query_planner(std::sync::Arc::new(super::scan::WrapScans))
                .build()
        } else {
            let remaining = LiveWorkers::default();
            remaining.set(self.workers.clone());
            builder.with_distributed_worker_resolver(remaining).build()
        };
        self.watchdog = self.cluster.watch(&self.workers);
        datafusion::dataframe::DataFrame::new(state, self.plan.clone())
            .execute_stream()
            .await
    }

    fn naming_lost(&self, error: DataFusionError) -> DataFusionError {
        if self.lost.is_empty() {
            return error;
        }
        let lost: Vec<&str> = self.lost.iter().map(Url::as_str).collect();
        DataFusionError::Context(
            format!("the query lost worker(s) {}", lost.join(", ")),
            Box::new(error),
        )
    }
}
