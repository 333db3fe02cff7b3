//! Gray failures: a worker that stops without failing. A stopped process, a machine paused
//! or cut off, a connection left half open: the tasks it runs make no progress and no error
//! ever comes, so a distributed attempt would wait for its statement's deadline.
//!
//! While an attempt runs, a watchdog looks at its workers once a second: a worker that has
//! left the cluster's live list (its heartbeats stopped reaching the catalog), or that has
//! answered no probe for the stall time, is lost. The probe is a call to the worker's service
//! on a connection of its own, apart from the attempt's data streams, whose flow control
//! would hold a probe's answer behind data the coordinator has not read yet. A worker that
//! is merely slow answers its probes and is not lost.
//!
//! The attempt is then abandoned (its streams dropped, which stops its tasks on the workers
//! that still answer) and [`super::Relaunch`] runs the query again without the lost workers,
//! or fails it naming them once the query has begun answering.

use std::collections::HashMap;
use std::time::Duration;

use datafusion_distributed::{ChannelResolver, GetWorkerInfoRequest};
use tokio::sync::watch;
use tokio::time::Instant;
use url::Url;

use super::LiveWorkers;
use super::auth::SecretChannels;

/// How long a worker may answer no probe before it is lost, by default.
pub const DEFAULT_STALL: Duration = Duration::from_secs(10);

/// How often the watchdog looks.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How long a worker has to answer one probe.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the worker at `url` answers a probe on `probes` within [`PROBE_TIMEOUT`].
async fn answers(probes: &SecretChannels, url: &Url) -> bool {
    let answered = tokio::time::timeout(PROBE_TIMEOUT, async {
        let mut client = probes.get_worker_client_for_url(url).await?;
        client.get_worker_info(GetWorkerInfoRequest {}).await
    })
    .await;
    matches!(answered, Ok(Ok(_)))
}

/// Whether each of `workers` answers a probe on `probes`, probed together.
pub(super) async fn replies(probes: &SecretChannels, workers: &[Url]) -> Vec<bool> {
    futures::future::join_all(workers.iter().map(|url| answers(probes, url))).await
}

/// Watches one attempt's workers until it is dropped.
pub(crate) struct Watchdog {
    lost: watch::Receiver<Vec<Url>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watchdog {
    /// Starts watching `workers`, which must stay in `live` and answer probes on `probes`
    /// at least once every `stall`.
    pub(crate) fn start(
        probes: SecretChannels,
        live: LiveWorkers,
        workers: Vec<Url>,
        stall: Duration,
    ) -> Self {
        let (found, lost) = watch::channel(Vec::new());
        let task = tokio::spawn(async move {
            let lost = watch_until_lost(&probes, &live, &workers, stall).await;
            let _ = found.send(lost);
        });
        Self { lost, task }
    }

    /// The workers found lost; pending until some are.
    pub(crate) async fn lost(&mut self) -> Vec<Url> {
        let found = self
            .lost
            .wait_for(|lost| !lost.is_empty())
            .await
            .map(|lost| lost.clone());
        match found {
            Ok(lost) => lost,
            // The watch ended without finding any (it never does): nothing to report.
            Err(_) => std::future::pending().await,
        }
    }
}

/// Looks at `workers` every [`LOOK_EVERY`] until some are lost: not in `live`, or without
/// an answered probe for `stall`.
async fn watch_until_lost(
    probes: &SecretChannels,
    live: &LiveWorkers,
    workers: &[Url],
    stall: Duration,
) -> Vec<Url> {
    let started = Instant::now();
    let mut answered: HashMap<&Url, Instant> = workers.iter().map(|url| (url, started)).collect();
    let mut looks = tokio::time::interval(LOOK_EVERY);
    looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        looks.tick().await;
        let replies = replies(probes, workers).await;
        let now = Instant::now();
        for (url, replied) in workers.iter().zip(replies) {
            if replied {
                answered.insert(url, now);
            }
        }
        let listed = live.get();
        let lost: Vec<Url> = workers
            .iter()
            .filter(|url| !listed.contains(url) || now - answered[url] > stall)
            .cloned()
            .collect();
        if !lost.is_empty() {
            tracing::warn!(
                lost = ?lost.iter().map(Url::as_str).collect::<Vec<_>>(),
                stall_secs = stall.as_secs_f64(),
                "workers of a running distributed query left the live list or answered no \
                 probe for the stall time"
            );
            return lost;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::ClusterSecret;

    /// A worker that never answers: its port takes connections (the kernel completes them)
    /// and nothing reads them, as with a stopped process.
    async fn silent_worker() -> (tokio::net::TcpListener, Url) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
        (listener, url)
    }

    fn probes() -> SecretChannels {
        SecretChannels::new(ClusterSecret::new("test"))
    }

    #[tokio::test]
    async fn a_worker_leaving_the_live_list_is_lost_whatever_the_stall() {
        let (_listener, url) = silent_worker().await;
        let live = LiveWorkers::default();
        live.set(vec![url.clone()]);
        let mut watchdog =
            Watchdog::start(probes(), live.clone(), vec![url.clone()], Duration::MAX / 4);
        // Listed: not lost, though it answers nothing.
        let early = tokio::time::timeout(Duration::from_secs(3), watchdog.lost()).await;
        assert!(early.is_err(), "lost while listed: {early:?}");
        live.set(Vec::new());
        let lost = tokio::time::timeout(Duration::from_secs(10), watchdog.lost())
            .await
            .expect("lost once it left the live list");
        assert_eq!(lost, vec![url]);
    }

    #[tokio::test]
    async fn a_listed_worker_answering_no_probe_is_lost_after_the_stall() {
        let (_listener, url) = silent_worker().await;
        let live = LiveWorkers::default();
        live.set(vec![url.clone()]);
        let started = Instant::now();
        let mut watchdog =
            Watchdog::start(probes(), live, vec![url.clone()], Duration::from_secs(2));
        let lost = tokio::time::timeout(Duration::from_secs(15), watchdog.lost())
            .await
            .expect("lost after the stall");
        assert_eq!(lost, vec![url]);
        assert!(started.elapsed() >= Duration::from_secs(2));
    }
}
