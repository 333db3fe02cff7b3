//! The change-event publisher: reads the catalog's outbox ([`floe_catalog::events`]) in
//! order and delivers each event, as a CloudEvent, to every configured sink — a Kafka topic
//! ([`kafka`]) and/or an HTTPS webhook ([`webhook`]).
//!
//! Each sink has its own task, its own progress in the catalog database (the last event it
//! delivered) and a lease there, so one node of a cluster publishes to it at a time. A sink
//! that fails is retried from its progress with a growing pause (up to 30 s); nothing it has
//! not acknowledged is marked delivered, so a crash between a commit and its delivery loses
//! nothing. A crash between a delivery and its mark sends the event again: the Kafka sink reads
//! its topic's partitions when it takes the lease and skips what already arrived, so a Kafka
//! consumer sees each event once; a webhook receiver sees the same CloudEvent `id` again and
//! drops it.

pub mod kafka;
pub mod webhook;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use floe_catalog::events::{EventStore, StoredEvent};
use tokio_util::sync::CancellationToken;

/// Where events go.
#[async_trait]
pub trait Sink: Send + Sync {
    /// Its name in the catalog database's progress records and in `/metrics`.
    fn name(&self) -> &str;
    /// Called on taking the lease: the events already delivered past `seq` (the progress
    /// recorded) are found, and the progress to resume from returned.
    async fn resume(&self, seq: i64) -> Result<i64, String>;
    /// Delivers `events` (in order); Ok once the sink has acknowledged every one. An error
    /// names what failed.
    async fn deliver(&self, events: &[StoredEvent], source: &str) -> Result<(), String>;
}

/// How the publisher runs.
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// The CloudEvents `source` of this catalog's events.
    pub source: String,
    /// Who holds the sinks' leases (this node).
    pub holder: String,
    /// Events per read of the outbox.
    pub batch: usize,
    /// How long to wait for new events when the outbox is drained.
    pub poll: Duration,
    /// Events older than this are removed from the outbox even if a sink never took them.
    pub retention: Duration,
}

/// What a sink's task did, for `/metrics`.
#[derive(Debug, Default)]
pub struct SinkStats {
    pub delivered: AtomicU64,
    pub failures: AtomicU64,
    /// The last event it delivered.
    pub delivered_seq: AtomicI64,
}

/// The sinks' figures by name.
pub type Stats = Vec<(String, Arc<SinkStats>)>;

/// How long a lease lasts; renewed every round.
const LEASE: Duration = Duration::from_secs(15);
/// The longest pause after failures.
const MOST_BACKOFF: Duration = Duration::from_secs(30);

/// Starts a task per sink (and one that prunes the outbox); they stop with `stop`.
pub fn spawn(
    store: Arc<dyn EventStore>,
    sinks: Vec<Arc<dyn Sink>>,
    config: PublisherConfig,
    stop: CancellationToken,
) -> Stats {
    let names: Vec<String> = sinks.iter().map(|s| s.name().to_string()).collect();
    let mut stats = Vec::new();
    for sink in sinks {
        let figures = Arc::new(SinkStats::default());
        stats.push((sink.name().to_string(), figures.clone()));
        tokio::spawn(run(
            store.clone(),
            sink,
            config.clone(),
            figures,
            stop.clone(),
        ));
    }
    tokio::spawn(prune(store, names, config.retention, stop));
    stats
}

async fn run(
    store: Arc<dyn EventStore>,
    sink: Arc<dyn Sink>,
    config: PublisherConfig,
    stats: Arc<SinkStats>,
    stop: CancellationToken,
) {
    let name = sink.name().to_string();
    // The progress this task works from while it holds the lease; None until it has
    // resumed under a fresh lease.
    let mut cursor: Option<i64> = None;
    let mut backoff = Duration::from_millis(200);
    loop {
        if stop.is_cancelled() {
            return;
        }
        let pause = match round(&*store, &*sink, &config, &stats, &mut cursor).await {
            Ok(true) => {
                backoff = Duration::from_millis(200);
                Duration::ZERO
            }
            Ok(false) => config.poll,
            Err(e) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(sink = %name, error = %e, "deliver change events");
                // Resume again (re-reading the sink's state) after a failure.
                cursor = None;
                backoff = (backoff * 2).min(MOST_BACKOFF);
                backoff
            }
        };
        if !pause.is_zero() {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// One round: the lease, then one batch. Ok(true) when it delivered something.
async fn round(
    store: &dyn EventStore,
    sink: &dyn Sink,
    config: &PublisherConfig,
    stats: &SinkStats,
    cursor: &mut Option<i64>,
) -> Result<bool, String> {
    let name = sink.name();
    let held = store
        .lease_event_sink(name, &config.holder, LEASE.as_millis() as i64)
        .await
        .map_err(|e| format!("lease: {e}"))?;
    if !held {
        *cursor = None;
        return Ok(false);
    }
    let from = match *cursor {
        Some(seq) => seq,
        None => {
            let recorded = store
                .event_cursor(name)
                .await
                .map_err(|e| format!("progress: {e}"))?;
            let resumed = sink.resume(recorded).await?;
            if resumed > recorded {
                store
                    .set_event_cursor(name, resumed)
                    .await
                    .map_err(|e| format!("progress: {e}"))?;
            }
            *cursor = Some(resumed);
            resumed
        }
    };
    let events = store
        .events_after(from, config.batch)
        .await
        .map_err(|e| format!("outbox: {e}"))?;
    let Some(last) = events.last().map(|e| e.seq) else {
        return Ok(false);
    };
    sink.deliver(&events, &config.source).await?;
    store
        .set_event_cursor(name, last)
        .await
        .map_err(|e| format!("progress: {e}"))?;
    *cursor = Some(last);
    stats
        .delivered
        .fetch_add(events.len() as u64, Ordering::Relaxed);
    stats.delivered_seq.store(last, Ordering::Relaxed);
    Ok(true)
}

/// Removes delivered events (and those past the retention) every minute.
async fn prune(
    store: Arc<dyn EventStore>,
    sinks: Vec<String>,
    retention: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
        let older = floe_catalog::clock::now_ms() - retention.as_millis() as i64;
        if let Err(e) = store.prune_events(&sinks, older).await {
            tracing::warn!(error = %e, "prune the change-event outbox");
        }
    }
}
