//! Results a client has not read yet.
//!
//! A statement's batches are handed from the query, which runs on the engine's runtime, to
//! the front door that sends them, which reads as fast as its client does. Up to
//! [`ResultLimits::memory`] bytes of them wait in memory. Past that, when the statement runs in
//! a warehouse, the rest are written to that warehouse's object storage as Arrow IPC segments
//! (below [`SPOOL_DIR`], which no table may take as its location) and read back from there
//! in order. So a statement whose client reads slowly still runs to its end and gives back
//! its memory, its workers and its place in line, while its answer waits in storage. Up to
//! [`ResultLimits::spool`] bytes wait there per statement; past that (or without a
//! warehouse) the query waits for its client, until the statement's deadline.
//!
//! Segments are deleted as they are read, and whatever is left once both ends are gone (a
//! client that disconnects, a query that fails). Segments a crashed process left behind are
//! deleted by the next process to spool into that warehouse once they are a day old.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::CompressionType;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use datafusion::common::{DataFusionError, Result};
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// Where a warehouse's spooled results live, below its root. Table and view locations may
/// not lie below it (the catalog refuses them), so no table's files are among them.
pub const SPOOL_DIR: &str = ".floe/results";

/// How much of a statement's unread answer is held, and where.
#[derive(Debug, Clone, Copy)]
pub struct ResultLimits {
    /// Bytes of batches held in memory.
    pub memory: usize,
    /// Bytes written to the warehouse's object storage (0: none).
    pub spool: u64,
}

impl Default for ResultLimits {
    fn default() -> Self {
        Self {
            memory: 16 << 20,
            spool: 4 << 30,
        }
    }
}

/// A segment is written once it holds this many bytes of encoded batches.
const SEGMENT_BYTES: usize = 8 << 20;

/// Spooled segments older than this, found in a warehouse, were left by a crashed process.
const LEFT_BEHIND: Duration = Duration::from_secs(24 * 3600);

enum Item {
    Batch(RecordBatch, usize),
    Segment(Path, u64),
}

#[derive(Default)]
struct State {
    items: VecDeque<Item>,
    /// Bytes of the batches held in `items`.
    memory: usize,
    /// Bytes of the segments written and not yet read.
    spooled: u64,
    ended: bool,
    failure: Option<DataFusionError>,
    /// The consumer went away, or the statement's deadline passed.
    gone: bool,
    /// A segment was written to the spool.
    wrote: bool,
}

/// What the two ends share; when both are gone, what is left of the spool is deleted.
struct Shared {
    state: Mutex<State>,
    changed: tokio::sync::Notify,
    spool: Option<Spool>,
}

#[derive(Clone)]
struct Spool {
    store: Arc<dyn ObjectStore>,
    dir: Path,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let wrote = self.state.lock().expect("results").wrote;
        if let (Some(spool), true) = (self.spool.clone(), wrote)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { delete_below(&spool.store, &spool.dir).await });
        }
    }
}

async fn delete_below(store: &Arc<dyn ObjectStore>, dir: &Path) {
    let listed: Vec<_> = store.list(Some(dir)).collect().await;
    for meta in listed.into_iter().flatten() {
        if let Err(e) = store.delete(&meta.location).await {
            tracing::warn!(error = %e, path = %meta.location, "delete a spooled result segment");
        }
    }
}

impl Shared {
    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.state.lock().expect("results"));
        self.changed.notify_waiters();
    }
}

/// The query's end: hands batches over, spooling past the memory limit.
pub(crate) struct Producer {
    shared: Arc<Shared>,
    limits: ResultLimits,
    schema: SchemaRef,
    /// The segment being written: while it is open, every batch goes to it (the order is
    /// kept).
    segment: Option<StreamWriter<Vec<u8>>>,
    segments: usize,
}

/// The front door's end: the batches in order, then how the query ended.
pub(crate) struct Consumer {
    shared: Arc<Shared>,
    pending: VecDeque<RecordBatch>,
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.shared.update(|state| state.gone = true);
    }
}

/// The two ends of one statement's results, spooling to `store` (a warehouse's, rooted at
/// its root) when given.
pub(crate) fn channel(
    schema: SchemaRef,
    limits: ResultLimits,
    store: Option<Arc<dyn ObjectStore>>,
) -> (Producer, Consumer) {
    let spool = store.filter(|_| limits.spool > 0).map(|store| {
        sweep_once(&store);
        Spool {
            store,
            dir: Path::from(format!("{SPOOL_DIR}/{}", uuid::Uuid::new_v4())),
        }
    });
    let shared = Arc::new(Shared {
        state: Mutex::default(),
        changed: tokio::sync::Notify::new(),
        spool,
    });
    (
        Producer {
            shared: shared.clone(),
            limits,
            schema,
            segment: None,
            segments: 0,
        },
        Consumer {
            shared,
            pending: VecDeque::new(),
        },
    )
}

impl Producer {
    /// Hands `batch` over, or spools it; waits while neither has room. `false` once the
    /// consumer went away.
    pub(crate) async fn push(&mut self, batch: RecordBatch) -> Result<bool> {
        enum Next {
            Gone,
            Held,
            Spool { idle: bool },
            Wait,
        }
        let size = batch.get_array_memory_size();
        let shared = self.shared.clone();
        let mut batch = Some(batch);
        loop {
            let notified = shared.changed.notified();
            let next = {
                let mut state = shared.state.lock().expect("results");
                let fits = state.memory == 0 || state.memory + size <= self.limits.memory;
                let spool_room = shared.spool.is_some()
                    && (state.spooled == 0 || state.spooled < self.limits.spool);
                if state.gone {
                    Next::Gone
                } else if self.segment.is_none() && fits {
                    state.memory += size;
                    let batch = batch.take().expect("pushed once");
                    state.items.push_back(Item::Batch(batch, size));
                    Next::Held
                } else if spool_room {
                    // A reader with nothing left to read gets the segment at once.
                    Next::Spool {
                        idle: state.items.is_empty(),
                    }
                } else {
                    Next::Wait
                }
            };
            match next {
                Next::Gone => return Ok(false),
                Next::Held => {
                    shared.changed.notify_waiters();
                    return Ok(true);
                }
                Next::Spool { idle } => {
                    self.spool(batch.take().expect("pushed once"), idle).await?;
                    return Ok(true);
                }
                Next::Wait => notified.await,
            }
        }
    }

    async fn spool(&mut self, batch: RecordBatch, idle: bool) -> Result<()> {
        if self.segment.is_none() {
            let options = IpcWriteOptions::default()
                .try_with_compression(Some(CompressionType::LZ4_FRAME))
                .unwrap_or_default();
            self.segment = Some(StreamWriter::try_new_with_options(
                Vec::new(),
                &self.schema,
                options,
            )?);
        }
        let writer = self.segment.as_mut().expect("made just now");
        writer.write(&batch)?;
        if idle || writer.get_ref().len() >= SEGMENT_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes the open segment to the spool and queues it.
    async fn flush(&mut self) -> Result<()> {
        let (Some(writer), Some(spool)) = (self.segment.take(), &self.shared.spool) else {
            return Ok(());
        };
        let bytes = writer.into_inner()?;
        let size = bytes.len() as u64;
        let path = spool
            .dir
            .clone()
            .join(format!("{:08}.arrows", self.segments));
        self.segments += 1;
        spool
            .store
            .put(&path, bytes.into())
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        self.shared.update(|state| {
            state.spooled += size;
            state.wrote = true;
            state.items.push_back(Item::Segment(path, size));
        });
        Ok(())
    }

    /// The query ended, with `failure` if it failed: what is still open is written, and the
    /// consumer hears the end after every batch. What is left waits for the consumer
    /// ([`Unread`]).
    #[cfg(test)]
    pub(crate) async fn finish(self, failure: Option<DataFusionError>) -> Unread {
        self.finish_releasing(failure, ()).await
    }

    /// [`Producer::finish`], giving up `held` (the statement's place in line) before the
    /// consumer hears the end: a client that reads the end and sends its next statement at
    /// once finds the place free.
    pub(crate) async fn finish_releasing<T>(
        mut self,
        failure: Option<DataFusionError>,
        held: T,
    ) -> Unread {
        let failure = match self.flush().await {
            Ok(()) => failure,
            Err(e) => Some(failure.unwrap_or(e)),
        };
        drop(held);
        self.shared.update(|state| {
            state.ended = true;
            state.failure = failure;
        });
        Unread(self.shared.clone())
    }
}

/// A producer dropped before it finished (its task unwound) ends the answer with an error,
/// so that the consumer is told rather than left waiting.
impl Drop for Producer {
    fn drop(&mut self) {
        let Ok(mut state) = self.shared.state.lock() else {
            return;
        };
        if state.ended {
            return;
        }
        state.ended = true;
        state.failure = Some(DataFusionError::Execution(
            "the statement's task stopped before it finished (an internal error)".into(),
        ));
        drop(state);
        self.shared.changed.notify_waiters();
    }
}

/// An ended statement's answer, while its consumer has not read it all.
pub(crate) struct Unread(Arc<Shared>);

impl Unread {
    /// Resolves once the consumer has read everything or gone away.
    pub(crate) async fn read(&self) {
        loop {
            let notified = self.0.changed.notified();
            {
                let state = self.0.state.lock().expect("results");
                if state.gone || state.items.is_empty() {
                    return;
                }
            }
            notified.await;
        }
    }

    /// The statement's deadline passed: what the consumer has not read is dropped (and its
    /// segments deleted), and it hears `failure` next.
    pub(crate) fn expire(self, failure: DataFusionError) {
        let mut wrote = false;
        self.0.update(|state| {
            state.items.clear();
            state.memory = 0;
            state.failure = Some(failure);
            wrote = state.wrote;
        });
        if let (Some(spool), true) = (self.0.spool.clone(), wrote) {
            tokio::spawn(async move { delete_below(&spool.store, &spool.dir).await });
        }
    }
}

impl Consumer {
    /// The next batch, `None` at the end, or the query's failure.
    pub(crate) async fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(batch) = self.pending.pop_front() {
                return Some(Ok(batch));
            }
            let notified = self.shared.changed.notified();
            let item = {
                let mut state = self.shared.state.lock().expect("results");
                match state.items.pop_front() {
                    Some(item) => Some(item),
                    None if state.ended => return state.failure.take().map(Err),
                    None => None,
                }
            };
            match item {
                Some(Item::Batch(batch, size)) => {
                    self.shared.update(|state| state.memory -= size);
                    return Some(Ok(batch));
                }
                Some(Item::Segment(path, size)) => {
                    let read = self.read(&path).await;
                    self.shared.update(|state| state.spooled -= size);
                    match read {
                        Ok(batches) => self.pending = batches.into(),
                        Err(e) => return Some(Err(e)),
                    }
                }
                None => notified.await,
            }
        }
    }

    /// A segment's batches; the segment is deleted once read.
    async fn read(&self, path: &Path) -> Result<Vec<RecordBatch>> {
        let spool = self
            .shared
            .spool
            .as_ref()
            .expect("segments come from a spool");
        let failed = |e: &dyn std::fmt::Display| {
            DataFusionError::Execution(format!("read back the spooled result segment {path}: {e}"))
        };
        let bytes = spool
            .store
            .get(path)
            .await
            .map_err(|e| failed(&e))?
            .bytes()
            .await
            .map_err(|e| failed(&e))?;
        let batches = StreamReader::try_new(std::io::Cursor::new(bytes), None)
            .map_err(|e| failed(&e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| failed(&e))?;
        if let Err(e) = spool.store.delete(path).await {
            tracing::warn!(error = %e, %path, "delete a spooled result segment");
        }
        Ok(batches)
    }
}

/// Deletes, once per warehouse store per process, the segments crashed processes left.
fn sweep_once(store: &Arc<dyn ObjectStore>) {
    static SWEPT: std::sync::LazyLock<Mutex<HashSet<String>>> =
        std::sync::LazyLock::new(Mutex::default);
    let key = store.to_string();
    if !SWEPT.lock().expect("swept").insert(key) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let store = store.clone();
    runtime.spawn(async move {
        let cutoff = chrono::Utc::now() - LEFT_BEHIND;
        let listed: Vec<_> = store.list(Some(&Path::from(SPOOL_DIR))).collect().await;
        for meta in listed.into_iter().flatten() {
            if meta.last_modified < cutoff {
                let _ = store.delete(&meta.location).await;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use object_store::memory::InMemory;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
    }

    fn batch(from: i64) -> RecordBatch {
        let values: Int64Array = (from..from + 1000).collect();
        RecordBatch::try_new(schema(), vec![Arc::new(values)]).unwrap()
    }

    async fn listed(store: &Arc<dyn ObjectStore>) -> usize {
        store
            .list(Some(&Path::from(SPOOL_DIR)))
            .collect::<Vec<_>>()
            .await
            .len()
    }

    #[test]
    fn the_spool_lies_in_floes_own_directory() {
        let within = SPOOL_DIR.strip_prefix(floe_storage::FLOE_DIR);
        assert!(within.is_some_and(|rest| rest.starts_with('/')));
    }

    #[tokio::test]
    async fn a_slow_reader_gets_every_batch_in_order_from_memory_then_the_spool() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let limits = ResultLimits {
            memory: 20_000,
            spool: 1 << 30,
        };
        let (mut producer, mut consumer) = channel(schema(), limits, Some(store.clone()));
        // The query runs to its end with nobody reading.
        for i in 0..200 {
            assert!(producer.push(batch(i * 1000)).await.unwrap());
        }
        producer.finish(None).await;
        assert!(listed(&store).await > 0, "past 20 kB, batches were spooled");
        let mut next = 0;
        while let Some(batch) = consumer.next().await {
            let batch = batch.unwrap();
            let values = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            assert_eq!(values.value(0), next);
            next += 1000;
        }
        assert_eq!(next, 200_000);
        assert_eq!(
            listed(&store).await,
            0,
            "segments are deleted as they are read"
        );
    }

    #[tokio::test]
    async fn a_failure_comes_after_the_batches_and_a_gone_reader_leaves_nothing() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let limits = ResultLimits {
            memory: 1,
            spool: 1 << 30,
        };
        let (mut producer, mut consumer) = channel(schema(), limits, Some(store.clone()));
        for i in 0..3 {
            producer.push(batch(i)).await.unwrap();
        }
        producer
            .finish(Some(DataFusionError::Execution("boom".into())))
            .await;
        for _ in 0..3 {
            assert!(consumer.next().await.unwrap().is_ok());
        }
        assert!(consumer.next().await.unwrap().is_err());
        assert!(consumer.next().await.is_none());

        let (mut producer, consumer) = channel(schema(), limits, Some(store.clone()));
        for i in 0..50 {
            producer.push(batch(i)).await.unwrap();
        }
        producer.flush().await.unwrap();
        assert!(listed(&store).await > 0);
        drop(consumer);
        assert!(
            !producer.push(batch(0)).await.unwrap(),
            "the reader is gone"
        );
        drop(producer);
        for _ in 0..100 {
            if listed(&store).await == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the spool of a statement nobody reads was left behind");
    }

    #[tokio::test]
    async fn without_a_spool_the_query_waits_for_its_reader() {
        let limits = ResultLimits {
            memory: 1,
            spool: 0,
        };
        let (mut producer, mut consumer) =
            channel(schema(), limits, Some(Arc::new(InMemory::new())));
        assert!(producer.push(batch(0)).await.unwrap());
        let second = tokio::spawn(async move {
            producer.push(batch(1)).await.unwrap();
            producer
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!second.is_finished(), "the second batch waits for room");
        assert!(consumer.next().await.unwrap().is_ok());
        let producer = second.await.unwrap();
        producer.finish(None).await;
        assert!(consumer.next().await.unwrap().is_ok());
        assert!(consumer.next().await.is_none());
    }
}
