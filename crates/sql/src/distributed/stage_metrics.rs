//! What each stage of the distributed queries a coordinator ran did, added up for
//! `/metrics`: stages run, rows and bytes they handed to the next stage, and the compute time
//! of their operators, by how their output reached the next stage (a shuffle, a broadcast, or
//! a coalesce into one task or the coordinator).
//!
//! The workers send each task's metrics to the coordinator as the task ends (the same figures
//! `EXPLAIN ANALYZE` shows); once a query has answered, they are laid over its plan and
//! added up here, off the client's path.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::{MetricValue, MetricsSet};
use datafusion_distributed::{DistributedMetricsFormat, rewrite_distributed_plan_with_metrics};

/// How a stage's output reaches the next stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    Shuffle,
    Broadcast,
    Coalesce,
}

impl Exchange {
    pub const ALL: [Exchange; 3] = [Exchange::Shuffle, Exchange::Broadcast, Exchange::Coalesce];

    /// Its label value in `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            Exchange::Shuffle => "shuffle",
            Exchange::Broadcast => "broadcast",
            Exchange::Coalesce => "coalesce",
        }
    }

    fn of(node: &dyn ExecutionPlan) -> Option<Self> {
        match node.name() {
            "NetworkShuffleExec" => Some(Exchange::Shuffle),
            "NetworkBroadcastExec" => Some(Exchange::Broadcast),
            "NetworkCoalesceExec" => Some(Exchange::Coalesce),
            _ => None,
        }
    }
}

/// The totals of the stages whose output reached the next stage one way.
#[derive(Debug, Default)]
pub struct ExchangeTotals {
    /// Stages run.
    pub stages: AtomicU64,
    /// Rows the stages handed to the next stage.
    pub rows: AtomicU64,
    /// Bytes the stages' output took between nodes.
    pub bytes: AtomicU64,
    /// Compute time of the stages' operators, all tasks together, in nanoseconds.
    pub compute_nanos: AtomicU64,
}

/// [`ExchangeTotals`] for each [`Exchange`], and how the adding up of finished queries goes.
#[derive(Debug, Default)]
pub struct StageTotals {
    shuffle: ExchangeTotals,
    broadcast: ExchangeTotals,
    coalesce: ExchangeTotals,
    /// Finished queries whose task metrics are still awaited (their figures are not in the
    /// totals yet).
    pub pending: AtomicU64,
    /// Finished queries whose task metrics never arrived or could not be read (their
    /// figures are missing from the totals for good).
    pub unmeasured: AtomicU64,
}

impl StageTotals {
    pub fn of(&self, exchange: Exchange) -> &ExchangeTotals {
        match exchange {
            Exchange::Shuffle => &self.shuffle,
            Exchange::Broadcast => &self.broadcast,
            Exchange::Coalesce => &self.coalesce,
        }
    }
}

/// Longest the coordinator waits for a finished query's task metrics.
const METRICS_WAIT: Duration = Duration::from_secs(30);

/// Adds up the stages of `plan`, a distributed plan that has run to its end, in the
/// background: counted as pending from this call (before its client has the end of the
/// answer) until its figures are in the totals, or known missing.
pub(crate) fn record(plan: Arc<dyn ExecutionPlan>) {
    let totals = &super::stats().stages;
    totals.pending.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        let measured = tokio::time::timeout(
            METRICS_WAIT,
            rewrite_distributed_plan_with_metrics(plan, DistributedMetricsFormat::Aggregated),
        )
        .await;
        match measured {
            Ok(Ok(plan)) => tally(plan.as_ref(), None, totals),
            Ok(Err(e)) => {
                totals.unmeasured.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "read a distributed query's stage metrics");
            }
            Err(_) => {
                totals.unmeasured.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("a distributed query's stage metrics did not arrive");
            }
        }
        totals.pending.fetch_sub(1, Ordering::Relaxed);
    });
}

/// The bytes an exchange's tasks received from the stage below: datafusion-distributed counts
/// them in a custom metric (`bytes_transferred`), which DataFusion's `sum_by_name` skips.
fn transferred_bytes(metrics: &MetricsSet) -> usize {
    metrics
        .iter()
        .map(|metric| match metric.value() {
            MetricValue::Custom { name, value } if name == "bytes_transferred" => value.as_usize(),
            MetricValue::Count { name, count } if name == "bytes_transferred" => count.value(),
            _ => 0,
        })
        .sum()
}

/// Adds `node` (in a stage whose output goes through `exchange`) and what is below it.
fn tally(node: &dyn ExecutionPlan, exchange: Option<Exchange>, totals: &StageTotals) {
    let metrics = node.metrics().unwrap_or_default();
    let exchange = match Exchange::of(node) {
        Some(boundary) => {
            let totals = totals.of(boundary);
            totals.stages.fetch_add(1, Ordering::Relaxed);
            let rows = metrics.output_rows().unwrap_or(0);
            totals.rows.fetch_add(rows as u64, Ordering::Relaxed);
            let bytes = transferred_bytes(&metrics);
            totals.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            Some(boundary)
        }
        None => {
            if let Some(exchange) = exchange {
                let nanos = metrics.elapsed_compute().unwrap_or(0);
                totals
                    .of(exchange)
                    .compute_nanos
                    .fetch_add(nanos as u64, Ordering::Relaxed);
            }
            exchange
        }
    };
    for child in node.children() {
        tally(child.as_ref(), exchange, totals);
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use datafusion::physical_plan::metrics::{Count, Metric};
    use datafusion_distributed::BytesCounterMetric;

    use super::*;

    #[test]
    fn the_bytes_an_exchange_received_are_counted_from_its_custom_metric() {
        let mut metrics = MetricsSet::new();
        for (task, bytes) in [(0, 1_000), (1, 2_500)] {
            metrics.push(Arc::new(Metric::new(
                MetricValue::Custom {
                    name: Cow::Borrowed("bytes_transferred"),
                    value: Arc::new(BytesCounterMetric::from_value(bytes)),
                },
                Some(task),
            )));
        }
        let rows = Count::new();
        rows.add(7);
        metrics.push(Arc::new(Metric::new(
            MetricValue::Count {
                name: Cow::Borrowed("other"),
                count: rows,
            },
            None,
        )));
        // DataFusion's own sum leaves custom metrics out: the gauge read 0 (issue 42).
        assert!(
            metrics
                .sum_by_name("bytes_transferred")
                .is_none_or(|v| v.as_usize() == 0)
        );
        assert_eq!(transferred_bytes(&metrics), 3_500);
    }
}
