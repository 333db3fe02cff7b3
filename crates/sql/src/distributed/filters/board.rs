//! Where runtime filters cross stages: a board per statement on its coordinator, the gRPC
//! service workers publish to and wait on (`floe.cluster.v1.RuntimeFilters`, behind the
//! cluster's secret), and the client workers call it with.
//!
//! A board is made when a distributed statement is planned and lives as long as the
//! statement does (the coordinator keeps only a weak reference to it). Once the plan is cut
//! into stages the coordinator tells the board which filters will come
//! ([`Board::expect`]): a filter a worker publishes that the board does not expect is
//! dropped, and a worker waiting for one it does not expect is told at once that it will
//! not come.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use datafusion::common::{DataFusionError, Result};
use tonic::codegen::{BoxFuture, StdError, http};
use url::Url;

use crate::distributed::auth::{ClusterSecret, RequireSecret, SecretChannels};

const SERVICE: &str = "floe.cluster.v1.RuntimeFilters";
const PUBLISH_PATH: &str = "/floe.cluster.v1.RuntimeFilters/Publish";
const AWAIT_PATH: &str = "/floe.cluster.v1.RuntimeFilters/Await";

/// Largest filter one publication carries (its expression and schema).
pub(crate) const MOST_FILTER_BYTES: usize = 16 << 20;
/// Largest total of the filters one board holds.
const MOST_BOARD_BYTES: usize = 64 << 20;
/// Most filters one board expects, and one wait asks for.
const MOST_FILTERS: usize = 1024;
/// Longest one wait is held by the coordinator before it answers with what it has.
const LONGEST_HOLD: Duration = Duration::from_secs(20);

/// A join's filter as published: its expression (DataFusion's `PhysicalExprNode`) over the
/// schema of the join's probe side (DataFusion's `Schema` message).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FilterNode {
    #[prost(uint64, tag = "1")]
    pub(crate) filter: u64,
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) schema: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub(crate) expr: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Publish {
    #[prost(bytes = "vec", tag = "1")]
    board: Vec<u8>,
    #[prost(message, optional, tag = "2")]
    filter: Option<FilterNode>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Published {
    /// Whether the board kept it (it expected it and had none yet).
    #[prost(bool, tag = "1")]
    kept: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Await {
    #[prost(bytes = "vec", tag = "1")]
    board: Vec<u8>,
    #[prost(uint64, repeated, tag = "2")]
    filters: Vec<u64>,
    /// How long the coordinator may hold the call for filters still to come.
    #[prost(uint32, tag = "3")]
    hold_ms: u32,
}

/// What a wait found: the filters published, and those that will not come.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Filters {
    #[prost(message, repeated, tag = "1")]
    pub(crate) published: Vec<FilterNode>,
    #[prost(uint64, repeated, tag = "2")]
    pub(crate) not_coming: Vec<u64>,
}

#[derive(Debug, Default)]
struct State {
    expected: HashSet<u64>,
    published: HashMap<u64, FilterNode>,
    bytes: usize,
}

/// One statement's runtime filters crossing stages.
#[derive(Debug)]
pub(crate) struct Board {
    state: Mutex<State>,
    /// Bumped at each change, for waiters.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Board {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Board {
    /// The filters the statement's plan ships across stages (a plan made again replaces
    /// the list: its filters are new ones).
    pub(crate) fn expect(&self, filters: impl IntoIterator<Item = u64>) {
        let mut state = self.state.lock().expect("filter board");
        state.expected = filters.into_iter().take(MOST_FILTERS).collect();
        let expected = std::mem::take(&mut state.expected);
        state.published.retain(|id, _| expected.contains(id));
        state.bytes = state
            .published
            .values()
            .map(|node| node.schema.len() + node.expr.len())
            .sum();
        state.expected = expected;
        drop(state);
        self.changed.send_modify(|v| *v += 1);
    }

    /// Keeps `node` if it is expected, not published yet and fits.
    fn publish(&self, node: FilterNode) -> bool {
        let size = node.schema.len() + node.expr.len();
        let mut state = self.state.lock().expect("filter board");
        if !state.expected.contains(&node.filter)
            || state.published.contains_key(&node.filter)
            || state.bytes + size > MOST_BOARD_BYTES
        {
            return false;
        }
        state.bytes += size;
        // One that could not travel is published (its scans stop waiting) but not counted.
        let filters = node.expr != super::publish::keeps_everything();
        state.published.insert(node.filter, node);
        drop(state);
        self.changed.send_modify(|v| *v += 1);
        if filters {
            super::super::stats()
                .runtime_filters
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        true
    }

    /// What the board has of `filters` now; `None` while an expected one is still to come.
    fn answer(&self, filters: &[u64], complete_only: bool) -> Option<Filters> {
        let state = self.state.lock().expect("filter board");
        let mut answer = Filters::default();
        let mut asked = HashSet::new();
        for id in filters.iter().filter(|id| asked.insert(**id)) {
            match state.published.get(id) {
                Some(node) => answer.published.push(node.clone()),
                None if !state.expected.contains(id) => answer.not_coming.push(*id),
                None if complete_only => return None,
                None => {}
            }
        }
        Some(answer)
    }

    /// `filters` once each is published or known not to come, or what there is after `hold`.
    async fn wait(&self, filters: &[u64], hold: Duration) -> Filters {
        let mut changes = self.changed.subscribe();
        let waited = tokio::time::timeout(hold, async {
            loop {
                changes.borrow_and_update();
                if let Some(answer) = self.answer(filters, true) {
                    return answer;
                }
                if changes.changed().await.is_err() {
                    return self.answer(filters, false).unwrap_or_default();
                }
            }
        })
        .await;
        waited.unwrap_or_else(|_| self.answer(filters, false).unwrap_or_default())
    }
}

/// The boards of the statements a coordinator is running, by id.
#[derive(Clone, Default)]
pub(crate) struct Boards(Arc<Mutex<HashMap<uuid::Uuid, Weak<Board>>>>);

impl std::fmt::Debug for Boards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Boards({})", self.0.lock().expect("boards").len())
    }
}

impl Boards {
    /// A new board, kept here while the caller holds it.
    pub(crate) fn open(&self) -> (uuid::Uuid, Arc<Board>) {
        let mut boards = self.0.lock().expect("boards");
        boards.retain(|_, board| board.strong_count() > 0);
        let id = uuid::Uuid::new_v4();
        let board = Arc::new(Board::default());
        boards.insert(id, Arc::downgrade(&board));
        (id, board)
    }

    fn get(&self, id: &[u8]) -> Result<Arc<Board>, tonic::Status> {
        let id = uuid::Uuid::from_slice(id)
            .map_err(|_| tonic::Status::invalid_argument("a board id is 16 bytes"))?;
        self.0
            .lock()
            .expect("boards")
            .get(&id)
            .and_then(Weak::upgrade)
            .ok_or_else(|| {
                tonic::Status::not_found(format!(
                    "no runtime filters for board {id} here (its statement ended, or another \
                     coordinator planned it)"
                ))
            })
    }
}

/// The coordinator's gRPC service of runtime filters (add it behind the cluster's secret
/// with [`filter_service`]).
#[derive(Clone, Debug)]
pub struct FilterService(Boards);

impl tonic::server::NamedService for FilterService {
    const NAME: &'static str = SERVICE;
}

struct PublishMethod(Boards);

impl tonic::server::UnaryService<Publish> for PublishMethod {
    type Response = Published;
    type Future = BoxFuture<tonic::Response<Published>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<Publish>) -> Self::Future {
        let boards = self.0.clone();
        Box::pin(async move {
            let request = request.into_inner();
            let board = boards.get(&request.board)?;
            let filter = request
                .filter
                .ok_or_else(|| tonic::Status::invalid_argument("a publication has a filter"))?;
            Ok(tonic::Response::new(Published {
                kept: board.publish(filter),
            }))
        })
    }
}

struct AwaitMethod(Boards);

impl tonic::server::UnaryService<Await> for AwaitMethod {
    type Response = Filters;
    type Future = BoxFuture<tonic::Response<Filters>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<Await>) -> Self::Future {
        let boards = self.0.clone();
        Box::pin(async move {
            let request = request.into_inner();
            if request.filters.len() > MOST_FILTERS {
                return Err(tonic::Status::invalid_argument(format!(
                    "a wait asks for at most {MOST_FILTERS} filters"
                )));
            }
            let board = boards.get(&request.board)?;
            let hold = Duration::from_millis(request.hold_ms.into()).min(LONGEST_HOLD);
            Ok(tonic::Response::new(
                board.wait(&request.filters, hold).await,
            ))
        })
    }
}

impl<B> tower::Service<http::Request<B>> for FilterService
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
        let boards = self.0.clone();
        Box::pin(async move {
            match request.uri().path() {
                PUBLISH_PATH => {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
                        .apply_max_message_size_config(Some(MOST_FILTER_BYTES + 1024), Some(64));
                    Ok(grpc.unary(PublishMethod(boards), request).await)
                }
                AWAIT_PATH => {
                    let codec = tonic_prost::ProstCodec::default();
                    let mut grpc = tonic::server::Grpc::new(codec).apply_max_message_size_config(
                        Some(MOST_FILTERS * 11 + 64),
                        Some(MOST_BOARD_BYTES + (1 << 20)),
                    );
                    Ok(grpc.unary(AwaitMethod(boards), request).await)
                }
                _ => Ok(tonic::Status::unimplemented("no such method").into_http()),
            }
        })
    }
}

/// `boards`' service, refusing every call without the cluster's `secret`.
pub(crate) fn filter_service(
    boards: Boards,
    secret: ClusterSecret,
) -> tonic::service::interceptor::InterceptedService<FilterService, RequireSecret> {
    tonic::service::interceptor::InterceptedService::new(
        FilterService(boards),
        RequireSecret(secret),
    )
}

/// A statement's board as its workers reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteBoard {
    pub(crate) coordinator: Url,
    pub(crate) board: uuid::Uuid,
}

/// The header naming a statement's board: its id, a space, the coordinator's URL.
pub(crate) const BOARD_HEADER: &str = "x-floe-runtime-filters";

impl RemoteBoard {
    pub(crate) fn header_value(&self) -> Option<http::HeaderValue> {
        http::HeaderValue::from_str(&format!("{} {}", self.board, self.coordinator)).ok()
    }

    /// The board `headers` name, if they name one that can be read.
    pub(crate) fn from_headers(headers: &http::HeaderMap) -> Option<Self> {
        let value = headers.get(BOARD_HEADER)?.to_str().ok()?;
        let (board, coordinator) = value.split_once(' ')?;
        let coordinator = Url::parse(coordinator).ok()?;
        if !matches!(coordinator.scheme(), "http" | "https") {
            return None;
        }
        Some(Self {
            coordinator,
            board: board.parse().ok()?,
        })
    }
}

/// How long one call to the coordinator may take before it fails (a wait's hold added).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A worker's way to its statements' boards: waits and publications on connections of their
/// own, so a publication never queues behind the waits (each held up to 20 s) for the
/// HTTP/2 streams of one connection, nor do other calls to the coordinator.
#[derive(Clone)]
pub(crate) struct FilterClient {
    waits: SecretChannels,
    publications: SecretChannels,
}

impl std::fmt::Debug for FilterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FilterClient")
    }
}

impl FilterClient {
    pub(crate) fn new(secret: ClusterSecret) -> Self {
        Self {
            waits: SecretChannels::new(secret.clone()),
            publications: SecretChannels::new(secret),
        }
    }

    async fn call<Q, A>(
        &self,
        channels: &SecretChannels,
        remote: &RemoteBoard,
        path: &'static str,
        message: Q,
        hold: Duration,
    ) -> Result<A>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        let failed = |why: String| {
            DataFusionError::Execution(format!(
                "could not reach the runtime filters of the coordinator at {}: {why}",
                remote.coordinator
            ))
        };
        let channel = channels.with_secret(&remote.coordinator)?;
        let timeout = CALL_TIMEOUT + hold;
        let ask = async {
            let mut grpc = tonic::client::Grpc::new(channel)
                .max_decoding_message_size(MOST_BOARD_BYTES + (1 << 20))
                .max_encoding_message_size(MOST_FILTER_BYTES + 1024);
            grpc.ready().await.map_err(|e| failed(e.to_string()))?;
            let mut request = tonic::Request::new(message);
            request.set_timeout(timeout);
            grpc.unary(
                request,
                http::uri::PathAndQuery::from_static(path),
                tonic_prost::ProstCodec::<Q, A>::default(),
            )
            .await
            .map_err(|status| failed(status.message().to_string()))
        };
        Ok(tokio::time::timeout(timeout, ask)
            .await
            .map_err(|_| failed(format!("no answer within {timeout:?}")))??
            .into_inner())
    }

    /// Publishes `filter` on `remote` (tried three times); whether the board kept it.
    pub(crate) async fn publish(&self, remote: &RemoteBoard, filter: FilterNode) -> Result<bool> {
        let message = Publish {
            board: remote.board.as_bytes().to_vec(),
            filter: Some(filter),
        };
        let mut pause = Duration::from_millis(100);
        let mut attempts = 3;
        loop {
            attempts -= 1;
            let answer: Result<Published> = self
                .call(
                    &self.publications,
                    remote,
                    PUBLISH_PATH,
                    message.clone(),
                    Duration::ZERO,
                )
                .await;
            match answer {
                Ok(answer) => return Ok(answer.kept),
                Err(e) if attempts == 0 => return Err(e),
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause *= 4;
                }
            }
        }
    }

    /// `filters` of `remote` as soon as each is published or known not to come, or what
    /// there is after `hold`.
    pub(crate) async fn wait(
        &self,
        remote: &RemoteBoard,
        filters: &[u64],
        hold: Duration,
    ) -> Result<Filters> {
        let hold = hold.min(LONGEST_HOLD);
        let message = Await {
            board: remote.board.as_bytes().to_vec(),
            filters: filters.to_vec(),
            hold_ms: u32::try_from(hold.as_millis()).unwrap_or(u32::MAX),
        };
        self.call(&self.waits, remote, AWAIT_PATH, message, hold)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(filter: u64) -> FilterNode {
        FilterNode {
            filter,
            schema: vec![1],
            expr: vec![2],
        }
    }

    #[tokio::test]
    async fn a_board_keeps_expected_filters_once_and_says_which_will_not_come() {
        let board = Board::default();
        board.expect([1, 2]);
        assert!(!board.publish(node(3)), "not expected");
        assert!(board.publish(node(1)));
        assert!(!board.publish(node(1)), "published already");
        let answer = board.wait(&[1, 3], Duration::from_secs(5)).await;
        assert_eq!(answer.published, vec![node(1)]);
        assert_eq!(answer.not_coming, vec![3]);
        // Filter 2 has not come: the wait answers after its hold with what there is.
        let answer = board.wait(&[1, 2], Duration::from_millis(20)).await;
        assert_eq!(answer.published.len(), 1);
        assert!(answer.not_coming.is_empty());
    }

    #[tokio::test]
    async fn a_plan_made_again_drops_the_old_filters_and_a_wait_asks_once_per_filter() {
        let board = Board::default();
        board.expect([1]);
        assert!(board.publish(node(1)));
        board.expect([2]);
        assert!(board.state.lock().unwrap().published.is_empty());
        assert_eq!(board.state.lock().unwrap().bytes, 0);
        assert!(board.publish(node(2)));
        let answer = board.wait(&[2, 2, 2], Duration::from_secs(1)).await;
        assert_eq!(answer.published.len(), 1);
    }

    #[tokio::test]
    async fn a_waiter_hears_of_a_filter_published_while_it_waits() {
        let board = Arc::new(Board::default());
        board.expect([7]);
        let waiting = tokio::spawn({
            let board = board.clone();
            async move { board.wait(&[7], Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(board.publish(node(7)));
        let answer = waiting.await.unwrap();
        assert_eq!(answer.published, vec![node(7)]);
    }

    #[test]
    fn boards_live_as_long_as_their_statement_and_ids_are_checked() {
        let boards = Boards::default();
        let (id, board) = boards.open();
        assert!(boards.get(id.as_bytes()).is_ok());
        drop(board);
        assert_eq!(
            boards.get(id.as_bytes()).unwrap_err().code(),
            tonic::Code::NotFound
        );
        assert_eq!(
            boards.get(&[1, 2, 3]).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn the_board_header_names_a_board_or_nothing() {
        let remote = RemoteBoard {
            coordinator: Url::parse("http://127.0.0.1:50051").unwrap(),
            board: uuid::Uuid::new_v4(),
        };
        let mut headers = http::HeaderMap::new();
        headers.insert(BOARD_HEADER, remote.header_value().unwrap());
        assert_eq!(RemoteBoard::from_headers(&headers), Some(remote));
        for forged in [
            "nonsense",
            "not-a-uuid http://x",
            "00000000-0000-0000-0000-000000000000 file:///etc",
        ] {
            headers.insert(BOARD_HEADER, forged.parse().unwrap());
            assert_eq!(RemoteBoard::from_headers(&headers), None, "{forged}");
        }
    }
}
