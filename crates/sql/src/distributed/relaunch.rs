//! A distributed query that loses a worker before it answered runs again on the workers that
//! still answer (at most [`RELAUNCHES`] times; on this node alone when none does), then fails
//! with an error naming the workers it lost. Only queries are distributed, so running one
//! again writes nothing twice.

use std::time::Duration;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion_distributed::{ChannelResolver, DistributedExt, GetWorkerInfoRequest};
use url::Url;

use super::{Cluster, LiveWorkers};

/// Runs again a query may get after losing workers.
pub const RELAUNCHES: usize = 2;

/// How long a worker has to answer whether it lives.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A distributed query's session and plan, to run it again.
pub(crate) struct Relaunch {
    cluster: Cluster,
    state: SessionState,
    plan: LogicalPlan,
    /// The workers the running attempt was given.
    workers: Vec<Url>,
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
            lost: Vec::new(),
            left: RELAUNCHES,
        }
    }

    /// The workers among `urls` that do not answer.
    async fn unreachable(&self, urls: &[Url]) -> Vec<Url> {
        let probes = urls.iter().map(|url| async move {
            let answered = tokio::time::timeout(PROBE_TIMEOUT, async {
                let mut client = self.cluster.channels.get_worker_client_for_url(url).await?;
                client.get_worker_info(GetWorkerInfoRequest {}).await
            })
            .await;
            match answered {
                Ok(Ok(_)) => None,
                _ => Some(url.clone()),
            }
        });
        futures::future::join_all(probes)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// After the running attempt failed with `error` before answering: the query started
    /// again without the workers that no longer answer, or the error to report (naming the
    /// workers lost, if any were).
    pub(crate) async fn after(
        &mut self,
        error: DataFusionError,
    ) -> Result<SendableRecordBatchStream> {
        let lost = self.unreachable(&self.workers).await;
        if lost.is_empty() {
            return Err(self.naming_lost(error));
        }
        self.lost.extend(lost.iter().cloned());
        super::stats()
            .lost_workers
            .fetch_add(lost.len() as u64, std::sync::atomic::Ordering::Relaxed);
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
