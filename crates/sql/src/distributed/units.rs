//! Work stealing: the files of a distributed scan handed out one at a time, so a slow worker
//! does not set the query's time.
//!
//! When a coordinator cuts a scan into tasks it keeps each task's files in a queue of its
//! own (a [`Feed`], ordered largest first) and sends every task all of the scan's files. A
//! task's partitions then ask the coordinator for their next file ([`UnitClient`]): a task
//! is given its own files first (those rendezvous hashing placed on its worker, whose cache
//! holds them), and once its queue is empty it takes the smallest file left in the fullest
//! queue of another task — work a straggler has not started. Each file is handed out once.
//!
//! The coordinator answers on its Flight SQL listener ([`UnitService`], gRPC service
//! `floe.cluster.v1.WorkUnits`), behind the cluster's secret like the worker service. A
//! feed lives while its query asks for units and an hour after; a scan planned while the
//! feeds hold 2^24 units not handed out keeps its files where they were placed.
//!
//! DataFusion-distributed 3.0 has work-unit feeds of its own, but they push units to the
//! tasks as fast as they are made, so they cannot hand a straggler's work to an idle task.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use datafusion::common::{DataFusionError, Result};
use tonic::codegen::{BoxFuture, StdError, http};
use url::Url;

use super::auth::{ClusterSecret, RequireSecret, SecretChannels};

/// The gRPC path a task asks for its next unit at.
const NEXT_PATH: &str = "/floe.cluster.v1.WorkUnits/Next";

/// Most units one feed holds (the files of one scan).
pub(crate) const MOST_UNITS: usize = 1 << 20;

/// A feed nobody asked for a unit this long is forgotten.
const FEED_IDLE: Duration = Duration::from_secs(3600);

/// Most units not yet handed out that all remembered feeds hold together.
const MOST_REMEMBERED_UNITS: usize = 1 << 24;

/// A task's request for its next unit.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NextUnit {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) feed: Vec<u8>,
    #[prost(uint32, tag = "2")]
    pub(crate) task: u32,
}

/// The answer: a unit (the index of a file group of the task's scan), or none left.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Handout {
    #[prost(bool, tag = "1")]
    pub(crate) done: bool,
    #[prost(uint32, tag = "2")]
    pub(crate) unit: u32,
    /// Whether the unit was another task's.
    #[prost(bool, tag = "3")]
    pub(crate) stolen: bool,
}

/// A task's queue: its units with their bytes (largest first), and the bytes left.
#[derive(Debug, Default)]
struct Queue {
    units: VecDeque<(u32, u64)>,
    bytes: u64,
}

/// The units of one scan, queued per task.
#[derive(Debug)]
pub(crate) struct Feed {
    queues: Mutex<Vec<Queue>>,
    tasks: usize,
}

impl Feed {
    /// A feed of `queues`: per task, its units with their bytes.
    pub(crate) fn new(queues: Vec<Vec<(u32, u64)>>) -> Self {
        let tasks = queues.len();
        let queues = queues
            .into_iter()
            .map(|mut units| {
                units.sort_by_key(|&(unit, bytes)| (std::cmp::Reverse(bytes), unit));
                Queue {
                    bytes: units.iter().map(|&(_, b)| b).sum(),
                    units: units.into(),
                }
            })
            .collect();
        Self {
            queues: Mutex::new(queues),
            tasks,
        }
    }

    /// Task `task`'s next unit: its own largest left, else the smallest of the task with
    /// the most bytes left; `None` when every unit has been handed out.
    pub(crate) fn next(&self, task: usize) -> Option<Handout> {
        let mut queues = self.queues.lock().expect("feed queues");
        let (from, stolen) = if queues.get(task)?.units.is_empty() {
            let fullest = (0..queues.len())
                .filter(|&t| !queues[t].units.is_empty())
                .max_by_key(|&t| queues[t].bytes)?;
            (fullest, true)
        } else {
            (task, false)
        };
        let queue = &mut queues[from];
        let (unit, bytes) = if stolen {
            queue.units.pop_back()?
        } else {
            queue.units.pop_front()?
        };
        queue.bytes -= bytes;
        Some(Handout {
            done: false,
            unit,
            stolen,
        })
    }

    /// Units not handed out yet.
    fn left(&self) -> usize {
        let queues = self.queues.lock().expect("feed queues");
        queues.iter().map(|q| q.units.len()).sum()
    }
}

/// The feeds of the queries a coordinator is running, each with when it was last asked.
/// A feed is never dropped while asked for; one idle for [`FEED_IDLE`] is forgotten.
#[derive(Clone, Default)]
pub(crate) struct Feeds(Arc<Mutex<HashMap<uuid::Uuid, Kept>>>);

/// A feed and when it was last asked.
type Kept = (Arc<Feed>, Instant);

impl std::fmt::Debug for Feeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Feeds({})", self.0.lock().expect("feeds").len())
    }
}

impl Feeds {
    /// Keeps `feed` under a new id, which the scan's tasks ask with; `None` when the feeds
    /// kept already hold [`MOST_REMEMBERED_UNITS`] units not handed out (the scan then
    /// keeps its files where they were placed).
    pub(crate) fn open(&self, feed: Feed) -> Option<uuid::Uuid> {
        let mut feeds = self.0.lock().expect("feeds");
        let now = Instant::now();
        feeds.retain(|_, (_, asked)| now.duration_since(*asked) < FEED_IDLE);
        let held: usize = feeds.values().map(|(f, _)| f.left()).sum();
        if held + feed.left() > MOST_REMEMBERED_UNITS {
            return None;
        }
        let id = uuid::Uuid::new_v4();
        feeds.insert(id, (Arc::new(feed), now));
        Some(id)
    }

    fn get(&self, id: &uuid::Uuid) -> Option<Arc<Feed>> {
        let mut feeds = self.0.lock().expect("feeds");
        let (feed, asked) = feeds.get_mut(id)?;
        *asked = Instant::now();
        Some(feed.clone())
    }

    fn next(&self, request: &NextUnit) -> Result<Handout, tonic::Status> {
        let id = uuid::Uuid::from_slice(&request.feed)
            .map_err(|_| tonic::Status::invalid_argument("a feed id is 16 bytes"))?;
        let feed = self.get(&id).ok_or_else(|| {
            tonic::Status::not_found(format!(
                "no work units for feed {id} here (its query ended, or another coordinator \
                 planned it)"
            ))
        })?;
        let task = request.task as usize;
        if task >= feed.tasks {
            return Err(tonic::Status::invalid_argument(format!(
                "feed {id} has {} tasks, not a task {task}",
                feed.tasks
            )));
        }
        let handout = feed.next(task).unwrap_or(Handout {
            done: true,
            unit: 0,
            stolen: false,
        });
        if !handout.done {
            let stats = super::stats();
            stats.units.fetch_add(1, Ordering::Relaxed);
            if handout.stolen {
                stats.stolen_units.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(handout)
    }
}

/// The coordinator's gRPC service handing out work units (add it behind the cluster's
/// secret with [`unit_service`]).
#[derive(Clone, Debug)]
pub struct UnitService(Feeds);

impl tonic::server::NamedService for UnitService {
    const NAME: &'static str = "floe.cluster.v1.WorkUnits";
}

struct NextMethod(Feeds);

impl tonic::server::UnaryService<NextUnit> for NextMethod {
    type Response = Handout;
    type Future = BoxFuture<tonic::Response<Handout>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<NextUnit>) -> Self::Future {
        let answer = self.0.next(request.get_ref()).map(tonic::Response::new);
        Box::pin(async move { answer })
    }
}

impl<B> tower::Service<http::Request<B>> for UnitService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let feeds = self.0.clone();
        Box::pin(async move {
            if request.uri().path() != NEXT_PATH {
                return Ok(tonic::Status::unimplemented("no such method").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
                .apply_max_message_size_config(Some(1024), Some(1024));
            Ok(grpc.unary(NextMethod(feeds), request).await)
        })
    }
}

/// `feeds`' service, refusing every call without the cluster's `secret`.
pub(crate) fn unit_service(
    feeds: Feeds,
    secret: ClusterSecret,
) -> tonic::service::interceptor::InterceptedService<UnitService, RequireSecret> {
    tonic::service::interceptor::InterceptedService::new(UnitService(feeds), RequireSecret(secret))
}

/// Where a stealing scan task takes its units: the coordinator's service, the feed and the
/// task's number in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnitSource {
    pub(crate) coordinator: Url,
    pub(crate) feed: uuid::Uuid,
    pub(crate) task: u32,
}

/// How long asking for a unit may take before the task fails.
const ASK_TIMEOUT: Duration = Duration::from_secs(30);

/// A worker's way to the coordinators that feed its tasks (a session configuration
/// extension on workers).
#[derive(Clone)]
pub(crate) struct UnitClient(pub(crate) SecretChannels);

impl std::fmt::Debug for UnitClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UnitClient")
    }
}

impl UnitClient {
    /// The next unit of `source`, or `None` when all are handed out.
    pub(crate) async fn next(&self, source: &UnitSource) -> Result<Option<Handout>> {
        let failed = |why: String| {
            DataFusionError::Execution(format!(
                "could not take a work unit from the coordinator at {} (serve's \
                 --coordinator-advertise): {why}",
                source.coordinator
            ))
        };
        let channel = self.0.with_secret(&source.coordinator)?;
        let ask = async {
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.map_err(|e| failed(e.to_string()))?;
            let mut request = tonic::Request::new(NextUnit {
                feed: source.feed.as_bytes().to_vec(),
                task: source.task,
            });
            request.set_timeout(ASK_TIMEOUT);
            grpc.unary(
                request,
                http::uri::PathAndQuery::from_static(NEXT_PATH),
                tonic_prost::ProstCodec::<NextUnit, Handout>::default(),
            )
            .await
            .map_err(|status| failed(status.message().to_string()))
        };
        let answer = tokio::time::timeout(ASK_TIMEOUT, ask)
            .await
            .map_err(|_| failed(format!("no answer within {ASK_TIMEOUT:?}")))??
            .into_inner();
        Ok((!answer.done).then_some(answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_takes_its_own_units_first_then_the_stragglers_smallest() {
        let feed = Feed::new(vec![vec![(0, 10), (1, 30)], vec![(2, 50), (3, 5), (4, 20)]]);
        let take = |task| feed.next(task).map(|h| (h.unit, h.stolen));
        assert_eq!(take(0), Some((1, false)));
        assert_eq!(take(0), Some((0, false)));
        // Task 0 is done with its own; task 1 has 75 bytes left: its smallest goes.
        assert_eq!(take(0), Some((3, true)));
        assert_eq!(take(1), Some((2, false)));
        assert_eq!(take(1), Some((4, false)));
        assert_eq!(take(1), None);
        assert_eq!(take(0), None);
        assert!(feed.next(2).is_none(), "no task 2");
    }

    #[test]
    fn every_unit_is_handed_out_once_under_contention() {
        let queues: Vec<Vec<(u32, u64)>> = (0..4)
            .map(|t| (0..250).map(|i| (t * 250 + i, u64::from(i % 7))).collect())
            .collect();
        let feeds = Feeds::default();
        let id = feeds.open(Feed::new(queues)).unwrap();
        let seen = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for task in 0..4u32 {
                let (feeds, seen) = (&feeds, &seen);
                s.spawn(move || {
                    let request = NextUnit {
                        feed: id.as_bytes().to_vec(),
                        task,
                    };
                    loop {
                        let handout = feeds.next(&request).unwrap();
                        if handout.done {
                            break;
                        }
                        seen.lock().unwrap().push(handout.unit);
                    }
                });
            }
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn unknown_feeds_and_tasks_are_refused() {
        let feeds = Feeds::default();
        let id = feeds.open(Feed::new(vec![vec![(0, 1)]])).unwrap();
        let ask = |feed: Vec<u8>, task| feeds.next(&NextUnit { feed, task });
        let unknown = ask(uuid::Uuid::new_v4().as_bytes().to_vec(), 0).unwrap_err();
        assert_eq!(unknown.code(), tonic::Code::NotFound);
        assert_eq!(
            ask(vec![1, 2, 3], 0).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let no_task = ask(id.as_bytes().to_vec(), 1).unwrap_err();
        assert_eq!(no_task.code(), tonic::Code::InvalidArgument);
        assert_eq!(ask(id.as_bytes().to_vec(), 0).unwrap().unit, 0);
        assert!(ask(id.as_bytes().to_vec(), 0).unwrap().done);
    }
}
