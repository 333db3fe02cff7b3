//! The durable log of the sources that cannot replay (HTTP, OTLP, remote write) and its
//! committers: one directory per table under `<data-dir>/ingest-wal`, entries
//! `<sequence>.arrow` (an Arrow IPC stream each) committed in sequence order.
//!
//! An entry is written to a temporary file, synced, renamed into place and its directory
//! synced — off the async runtime, concurrent entries in parallel — before its rows are
//! acknowledged. A committer per table takes the entries that are durable with no entry
//! before them still being written, conforms each to the table's current schema by field id
//! ([`super::conform`]) and appends them through the one commit ([`super::commit`]) in one
//! snapshot whose summary names the last entry it covers: after a crash the log is replayed
//! from the entry after the last committed one, so nothing acknowledged is lost and nothing is
//! written twice. An entry the table can no longer take — a required column added after it
//! was acknowledged, a value that no longer casts, a file that does not read — is moved,
//! durably and before the commit, to the table's `dead-letter/` directory with the reason
//! beside it ([`super::dead_letter`]); the other entries commit. A failed commit is retried:
//! soon when it may succeed ([`IngestError::retryable`]), at the longest backoff when it
//! cannot until the table or the grants change (shown as such in the ingest status). The log
//! stops its committers when its cancellation token fires.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ipc::writer::StreamWriter;
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::CatalogService;
use iceberg::{NamespaceIdent, TableIdent};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify, watch};
use tokio_util::sync::CancellationToken;

use super::conform::{Match, conform};
use floe_catalog::tenants::{Limit, Refused};

use super::{IngestError, commit, dead_letter, upsert};

/// The longest wait between two commit attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Most bytes of entries one commit takes (the rest follow in the next).
const MOST_COMMIT_BYTES: u64 = 256 << 20;

/// How the log behaves.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Where the log lives.
    pub dir: PathBuf,
    /// How often pending entries are committed.
    pub commit_interval: Duration,
    /// Largest request body a door takes.
    pub max_body_bytes: usize,
    /// How long a wait for the commit waits before answering anyway.
    pub wait_timeout: Duration,
    /// Bytes of acknowledged entries not yet committed past which new requests are shed
    /// (503 + `Retry-After`) until the committers catch up.
    pub max_backlog_bytes: u64,
    /// Bytes of request bodies being decoded at once past which new requests are shed.
    pub max_inflight_bytes: u64,
    /// How long committed entries are kept beside the log for replay
    /// ([`super::replay`]); zero deletes them at once.
    pub retain_committed: Duration,
    /// The most bytes of committed entries one table's log keeps for replay (the oldest go
    /// first).
    pub retain_committed_bytes: u64,
}

/// A table's schema as the writer takes it (plain string and binary types, field ids kept);
/// a schema Arrow cannot hold is the table's to fix ([`IngestError::Invalid`]).
pub fn table_arrow_schema(schema: &iceberg::spec::Schema) -> Result<SchemaRef, IngestError> {
    iceberg::arrow::schema_to_arrow_schema(schema)
        .map(Arc::new)
        .map_err(|e| IngestError::Invalid(e.to_string()))
}

/// The durable log and its committers.
pub struct Ingest {
    pub config: IngestConfig,
    /// Identifies this log in snapshot summaries (several nodes may ingest into one table).
    pub(super) log_id: String,
    pub(super) catalog: Arc<CatalogService>,
    pub(super) sql: Arc<floe_sql::SqlEngine>,
    tables: Mutex<HashMap<(String, TableIdent), Arc<TableLog>>>,
    /// Stops the committers.
    cancel: CancellationToken,
    /// Bytes of entries every table keeps in memory for reads ([`super::fresh`]).
    kept: AtomicU64,
    /// Bytes of entries acknowledged and not yet committed, over every table.
    backlog: AtomicU64,
    /// Bytes of request bodies being decoded now ([`Ingest::admit`]).
    inflight: Arc<AtomicU64>,
    /// One replay at a time on this node ([`super::replay`]).
    pub(super) replays: Mutex<()>,
    /// Log entries' rows for dead-letter tables, appended by a task of their own.
    pub(super) letters: tokio::sync::mpsc::UnboundedSender<super::dead_letter::keep::LettersToKeep>,
}

/// A request's bytes counted as in flight until it is answered.
pub struct InFlight {
    bytes: u64,
    inflight: Arc<AtomicU64>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.inflight.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// What a table's log directory says about itself.
#[derive(Debug, Serialize, Deserialize)]
struct TableMarker {
    warehouse: String,
    namespace: Vec<String>,
    table: String,
}

/// One table's log: entries `<sequence>.arrow`, committed in sequence order.
pub struct TableLog {
    pub(super) warehouse: String,
    pub(super) ident: TableIdent,
    pub(super) dir: PathBuf,
    state: Mutex<LogState>,
    /// The last sequence a committed snapshot covers.
    committed: watch::Sender<u64>,
    wake: Notify,
    stats: LogStats,
    /// The rows of entries acknowledged or committed lately, which reads on this node see.
    pub(super) recent: super::fresh::Recent,
}

impl TableLog {
    /// Whether the entry `sequence` was moved to the dead-letter directory.
    pub(super) async fn dead_lettered(&self, sequence: u64) -> bool {
        self.state.lock().await.dead.contains(&sequence)
    }

    /// The pending entries after `sequence`.
    pub(super) async fn pending_after(&self, sequence: u64) -> Vec<u64> {
        let state = self.state.lock().await;
        state
            .pending
            .range(sequence + 1..)
            .map(|(s, _)| *s)
            .collect()
    }
}

/// An entry acknowledged: where it is, to wait for its commit.
pub struct Receipt {
    pub sequence: u64,
    pub rows: usize,
    log: Arc<TableLog>,
}

impl Receipt {
    /// Whether the entry is in a committed snapshot within `timeout` (its committer is woken
    /// at once); an entry the table could no longer take never is.
    pub async fn committed(&self, timeout: Duration) -> bool {
        let mut committed = self.log.committed.subscribe();
        self.log.wake.notify_one();
        let waited = tokio::time::timeout(timeout, committed.wait_for(|c| *c >= self.sequence))
            .await
            .is_ok_and(|w| w.is_ok());
        waited && !self.log.dead_lettered(self.sequence).await
    }
}

/// A metric's name, kind, help text and how to read it from a table's counters.
type MetricLine = (
    &'static str,
    &'static str,
    &'static str,
    fn(&LogStats) -> f64,
);

/// Counters of one table's ingestion, for `/metrics`.
#[derive(Default)]
struct LogStats {
    accepted_rows: AtomicU64,
    accepted_bytes: AtomicU64,
    commits: AtomicU64,
    committed_rows: AtomicU64,
    commit_micros: AtomicU64,
    pending: AtomicU64,
    dead_letters: AtomicU64,
}

struct LogState {
    next: u64,
    /// Entries not yet known to be committed, by sequence, with their sizes.
    pending: BTreeMap<u64, u64>,
    /// Entries being written: none at or after the first of them is committed yet.
    writing: std::collections::BTreeSet<u64>,
    /// Why the last commit attempt failed, if it did, and whether trying again may help.
    last_error: Option<(String, bool)>,
    /// Entries this process moved to the dead-letter directory.
    dead: std::collections::BTreeSet<u64>,
}

impl std::fmt::Debug for Ingest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ingest({})", self.config.dir.display())
    }
}

impl Ingest {
    /// Opens (or creates) the log under `config.dir` and replays what it holds: every table
    /// with entries gets its committer back.
    pub async fn open(
        config: IngestConfig,
        catalog: Arc<CatalogService>,
        sql: Arc<floe_sql::SqlEngine>,
        cancel: CancellationToken,
    ) -> std::io::Result<Arc<Self>> {
        std::fs::create_dir_all(&config.dir)?;
        let id_file = config.dir.join("log-id");
        let log_id = match std::fs::read_to_string(&id_file) {
            Ok(id) => id.trim().to_string(),
            Err(_) => {
                let id = uuid::Uuid::now_v7().simple().to_string();
                write_durably(&id_file, id.as_bytes())?;
                id
            }
        };
        let (letters, to_keep) = tokio::sync::mpsc::unbounded_channel();
        let ingest = Arc::new(Self {
            config,
            log_id,
            catalog,
            sql,
            tables: Mutex::new(HashMap::new()),
            cancel,
            kept: AtomicU64::new(0),
            backlog: AtomicU64::new(0),
            inflight: Arc::default(),
            replays: Mutex::new(()),
            letters,
        });
        super::dead_letter::keep::start(&ingest, to_keep);
        for entry in std::fs::read_dir(&ingest.config.dir)? {
            let dir = entry?.path();
            let Ok(marker) = std::fs::read(dir.join("table.json")) else {
                continue;
            };
            let Ok(marker) = serde_json::from_slice::<TableMarker>(&marker) else {
                tracing::warn!(dir = %dir.display(), "ingest log directory with an unreadable table.json");
                continue;
            };
            let Ok(namespace) = NamespaceIdent::from_vec(marker.namespace) else {
                continue;
            };
            let ident = TableIdent::new(namespace, marker.table);
            match ingest.table_log(&marker.warehouse, &ident).await {
                Ok(log) if !log.state.lock().await.pending.is_empty() => {
                    tracing::info!(table = %ident, "replaying ingest log");
                    log.wake.notify_one();
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(table = %ident, error = %e, "ingest log not replayed yet"),
            }
        }
        Ok(ingest)
    }

    /// Room for one request of `bytes` (its body as received) from `tenant`, held while it is
    /// decoded and logged: refused as [`Limit::Overload`] while the acknowledged backlog or
    /// the bytes in flight are past their bounds, so the server sheds new work before its
    /// disk or memory runs out and what it admitted completes.
    pub(crate) fn admit(&self, bytes: u64, tenant: &str) -> Result<InFlight, Refused> {
        let shed = |value: u64| Refused {
            tenant: tenant.to_string(),
            limit: Limit::Overload,
            value,
            retry_after: Some((self.config.commit_interval * 2).max(Duration::from_secs(1))),
        };
        if self.backlog.load(Ordering::Relaxed) > self.config.max_backlog_bytes {
            return Err(shed(self.config.max_backlog_bytes));
        }
        let before = self.inflight.fetch_add(bytes, Ordering::Relaxed);
        let admitted = InFlight {
            bytes,
            inflight: self.inflight.clone(),
        };
        // One request alone is always admitted, however large (its size has its own limit).
        if before > 0 && before + bytes > self.config.max_inflight_bytes {
            return Err(shed(self.config.max_inflight_bytes));
        }
        Ok(admitted)
    }

    /// Every table this node ingests into: its log and counters.
    pub async fn status(&self) -> Vec<Value> {
        let tables = self.tables.lock().await;
        let mut logs: Vec<_> = tables.values().cloned().collect();
        drop(tables);
        logs.sort_by_key(|l| (l.warehouse.clone(), l.ident.to_string()));
        let mut answer = Vec::new();
        for log in logs {
            let (next, last_error) = {
                let state = log.state.lock().await;
                (state.next, state.last_error.clone())
            };
            let stats = &log.stats;
            answer.push(json!({
                "warehouse": log.warehouse,
                "namespace": log.ident.namespace().clone().inner(),
                "table": log.ident.name(),
                "log-id": self.log_id,
                "committed-sequence": *log.committed.borrow(),
                "next-sequence": next,
                "pending-entries": stats.pending.load(Ordering::Relaxed),
                "accepted-rows": stats.accepted_rows.load(Ordering::Relaxed),
                "accepted-bytes": stats.accepted_bytes.load(Ordering::Relaxed),
                "commits": stats.commits.load(Ordering::Relaxed),
                "committed-rows": stats.committed_rows.load(Ordering::Relaxed),
                "commit-seconds": stats.commit_micros.load(Ordering::Relaxed) as f64 / 1e6,
                "dead-letter-entries": dead_letter::sequences(&log.dir).len(),
                "dead-letter-dir": dead_letter::dir(&log.dir).display().to_string(),
                "last-error": last_error.map(|(message, retryable)| json!({
                    "message": message,
                    "retryable": retryable,
                })),
            }));
        }
        answer
    }

    /// Per-table counters in Prometheus text.
    pub async fn render_metrics(&self) -> String {
        let tables = self.tables.lock().await;
        let mut logs: Vec<_> = tables.values().cloned().collect();
        drop(tables);
        logs.sort_by_key(|l| (l.warehouse.clone(), l.ident.to_string()));
        let metrics: [MetricLine; 7] = [
            (
                "floe_ingest_rows_total",
                "counter",
                "Rows acknowledged by /ingest/v1",
                |s| s.accepted_rows.load(Ordering::Relaxed) as f64,
            ),
            (
                "floe_ingest_bytes_total",
                "counter",
                "Bytes written to the ingest log",
                |s| s.accepted_bytes.load(Ordering::Relaxed) as f64,
            ),
            (
                "floe_ingest_commits_total",
                "counter",
                "Snapshots committed from the ingest log",
                |s| s.commits.load(Ordering::Relaxed) as f64,
            ),
            (
                "floe_ingest_committed_rows_total",
                "counter",
                "Rows committed from the ingest log",
                |s| s.committed_rows.load(Ordering::Relaxed) as f64,
            ),
            (
                "floe_ingest_commit_seconds_total",
                "counter",
                "Time spent writing and committing ingested rows",
                |s| s.commit_micros.load(Ordering::Relaxed) as f64 / 1e6,
            ),
            (
                "floe_ingest_dead_letters_total",
                "counter",
                "Ingest log entries moved to the dead-letter directory",
                |s| s.dead_letters.load(Ordering::Relaxed) as f64,
            ),
            (
                "floe_ingest_pending_entries",
                "gauge",
                "Ingest log entries not yet committed",
                |s| s.pending.load(Ordering::Relaxed) as f64,
            ),
        ];
        let mut text = String::new();
        for (name, kind, help, value) in metrics {
            text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for log in &logs {
                let table = format!("{}.{}", log.warehouse, log.ident)
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"");
                text.push_str(&format!(
                    "{name}{{table=\"{table}\"}} {}\n",
                    value(&log.stats)
                ));
            }
        }
        text.push_str(&super::upsert::index::render_metrics());
        text
    }

    /// The log of table `ident` of `warehouse`, when this node has one.
    pub(super) async fn existing_log(
        &self,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Option<Arc<TableLog>> {
        let key = (warehouse.to_string(), ident.clone());
        self.tables.lock().await.get(&key).cloned()
    }

    /// Largest request body taken.
    pub fn max_body_bytes(&self) -> usize {
        self.config.max_body_bytes
    }

    fn sequence_key(&self) -> String {
        format!("floe.ingest.{}.sequence", self.log_id)
    }

    fn first_sequence_key(&self) -> String {
        format!("floe.ingest.{}.first-sequence", self.log_id)
    }

    /// Whether `main`'s history of the table holds log entry `sequence`: a snapshot of it
    /// committed the entries from its first to its last sequence (a snapshot written before
    /// first sequences were recorded holds every entry up to its last).
    pub(super) fn holds(&self, metadata: &iceberg::spec::TableMetadata, sequence: u64) -> bool {
        let (key, first_key) = (self.sequence_key(), self.first_sequence_key());
        let mut snapshot = metadata.current_snapshot();
        let mut steps = metadata.snapshots().count();
        while let Some(current) = snapshot {
            if steps == 0 {
                break;
            }
            steps -= 1;
            let summary = &current.summary().additional_properties;
            let number = |k: &str| summary.get(k).and_then(|v| v.parse::<u64>().ok());
            if let Some(last) = number(&key) {
                match number(&first_key) {
                    Some(first) if (first..=last).contains(&sequence) => return true,
                    None if sequence <= last => return true,
                    _ => {}
                }
            }
            snapshot = current
                .parent_snapshot_id()
                .and_then(|id| metadata.snapshot_by_id(id));
        }
        false
    }

    /// The log of a table, created (and its committer started) on first use.
    async fn table_log(
        self: &Arc<Self>,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<Arc<TableLog>, CatalogError> {
        let key = (warehouse.to_string(), ident.clone());
        let mut tables = self.tables.lock().await;
        if let Some(log) = tables.get(&key) {
            return Ok(log.clone());
        }
        let dir = self.config.dir.join(dir_name(warehouse, ident));
        std::fs::create_dir_all(&dir).map_err(|e| CatalogError::internal("ingest log", e))?;
        let marker = TableMarker {
            warehouse: warehouse.to_string(),
            namespace: ident.namespace().clone().inner(),
            table: ident.name().to_string(),
        };
        write_durably(
            &dir.join("table.json"),
            &serde_json::to_vec(&marker).expect("marker serializes"),
        )
        .map_err(|e| CatalogError::internal("ingest log", e))?;
        let mut pending = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| CatalogError::internal("ingest log", e))? {
            let path = entry
                .map_err(|e| CatalogError::internal("ingest log", e))?
                .path();
            if let Some(sequence) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".arrow"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                pending.insert(sequence, size);
            }
        }
        // Sequences continue after what the log holds, what it dead-lettered, retained and
        // replayed, and what was committed, so a new entry is never mistaken for one already
        // in the table nor takes the name of one kept beside the log.
        let committed = self.committed_sequence(warehouse, ident).await?;
        let kept = [
            dead_letter::sequences(&dir),
            dead_letter::entries_in(&dir.join(super::replay::RETAINED)),
            dead_letter::entries_in(&dir.join(super::replay::REPLAYED)),
        ];
        let next = pending
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0)
            .max(
                kept.iter()
                    .filter_map(|k| k.last().copied())
                    .max()
                    .unwrap_or(0),
            )
            .max(committed)
            + 1;
        // Counted once the log is installed (a failed attempt above counts nothing).
        self.backlog
            .fetch_add(pending.values().sum::<u64>(), Ordering::Relaxed);
        let (committed_tx, _) = watch::channel(committed);
        let log = Arc::new(TableLog {
            warehouse: warehouse.to_string(),
            ident: ident.clone(),
            dir,
            state: Mutex::new(LogState {
                next,
                pending,
                writing: Default::default(),
                last_error: None,
                dead: Default::default(),
            }),
            committed: committed_tx,
            wake: Notify::new(),
            stats: LogStats::default(),
            recent: Default::default(),
        });
        log.stats.pending.store(
            log.state.lock().await.pending.len() as u64,
            Ordering::Relaxed,
        );
        tables.insert(key, log.clone());
        tokio::spawn(self.clone().commit_loop(log.clone()));
        Ok(log)
    }

    /// The directory of table `ident`'s log on this node.
    pub(super) async fn log_dir(
        self: &Arc<Self>,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<PathBuf, IngestError> {
        Ok(self
            .table_log(warehouse, ident)
            .await
            .map_err(IngestError::of_catalog)?
            .dir
            .clone())
    }

    /// The table's metadata now, as the system.
    pub(super) async fn table_metadata(
        &self,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<Arc<iceberg::spec::TableMetadata>, IngestError> {
        Ok(self
            .catalog
            .load_table(&Caller::system(), warehouse, ident)
            .await
            .map_err(IngestError::of_catalog)?
            .metadata)
    }

    /// The last log sequence a snapshot of the table says it covers (0 when none does).
    async fn committed_sequence(
        &self,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<u64, CatalogError> {
        let loaded = self
            .catalog
            .load_table(&Caller::system(), warehouse, ident)
            .await?;
        Ok(self.sequence_in(&loaded.metadata))
    }

    /// The last log sequence the table's current snapshot or an ancestor says it covers.
    pub(super) fn sequence_in(&self, metadata: &iceberg::spec::TableMetadata) -> u64 {
        let key = self.sequence_key();
        let mut snapshot = metadata.current_snapshot();
        // Newest first; the first snapshot carrying our key has the highest sequence.
        while let Some(current) = snapshot {
            if let Some(value) = current.summary().additional_properties.get(&key) {
                return value.parse().unwrap_or(0);
            }
            snapshot = current
                .parent_snapshot_id()
                .and_then(|id| metadata.snapshot_by_id(id));
        }
        0
    }

    /// Appends one request's rows for table `ident` of `warehouse` to the log, durably (the
    /// rows of the table's schema as it was when they were taken, field ids kept); once this
    /// returns they may be acknowledged.
    pub(crate) async fn append(
        self: &Arc<Self>,
        warehouse: &str,
        ident: &TableIdent,
        batches: &[RecordBatch],
    ) -> Result<Receipt, IngestError> {
        let log = self
            .table_log(warehouse, ident)
            .await
            .map_err(IngestError::of_catalog)?;
        let schema = batches
            .first()
            .map(|b| b.schema())
            .unwrap_or_else(|| Arc::new(Schema::empty()));
        let mut bytes = Vec::new();
        {
            let failed = |e| IngestError::Invalid(format!("encode the rows for the log: {e}"));
            let mut writer = StreamWriter::try_new(&mut bytes, &schema).map_err(failed)?;
            for batch in batches {
                writer.write(batch).map_err(failed)?;
            }
            writer.finish().map_err(failed)?;
        }
        // From here to the entry's bookkeeping is one unit on a task of its own: a caller
        // dropped halfway (a client that hung up) would leave its sequence marked as being
        // written, and the table's committer waits for every such sequence before it commits
        // anything after it.
        let this = self.clone();
        let batches = batches.to_vec();
        tokio::spawn(async move { this.write_entry(log, bytes, batches).await })
            .await
            .map_err(|e| IngestError::Storage(format!("write the ingest log: {e}")))?
    }

    /// Writes one encoded entry to `log` durably and records it as pending.
    async fn write_entry(
        self: Arc<Self>,
        log: Arc<TableLog>,
        bytes: Vec<u8>,
        batches: Vec<RecordBatch>,
    ) -> Result<Receipt, IngestError> {
        let size = bytes.len() as u64;
        let sequence = {
            let mut state = log.state.lock().await;
            let sequence = state.next;
            state.next += 1;
            state.writing.insert(sequence);
            sequence
        };
        let path = log.dir.join(format!("{sequence:020}.arrow"));
        let written = tokio::task::spawn_blocking(move || write_durably(&path, &bytes))
            .await
            .map_err(|e| IngestError::Storage(format!("write the ingest log: {e}")))
            .and_then(|w| {
                w.map_err(|e| IngestError::Storage(format!("write the ingest log: {e}")))
            });
        let mut state = log.state.lock().await;
        state.writing.remove(&sequence);
        written?;
        state.pending.insert(sequence, size);
        self.backlog.fetch_add(size, Ordering::Relaxed);
        log.recent.keep(sequence, &batches, size, &self.kept);
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        log.stats
            .accepted_rows
            .fetch_add(rows as u64, Ordering::Relaxed);
        log.stats.accepted_bytes.fetch_add(size, Ordering::Relaxed);
        log.stats
            .pending
            .store(state.pending.len() as u64, Ordering::Relaxed);
        drop(state);
        Ok(Receipt {
            sequence,
            rows,
            log,
        })
    }

    /// Commits what the log holds, every interval (or sooner when woken), until the process
    /// ends. A failed commit keeps the entries and is tried again later: soon when it may
    /// succeed, at the longest backoff when it cannot until the table or grants change.
    async fn commit_loop(self: Arc<Self>, log: Arc<TableLog>) {
        let mut backoff = self.config.commit_interval;
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(self.config.commit_interval) => {}
                _ = log.wake.notified() => {
                    // Let a burst of requests land in the same snapshot.
                    tokio::time::sleep(self.config.commit_interval / 4).await;
                }
            }
            let outcome = unpanicked(self.commit_pending(&log)).await;
            log.state.lock().await.last_error = outcome
                .as_ref()
                .err()
                .map(|e| (e.to_string(), e.retryable()));
            let pause = match outcome {
                Ok(()) => {
                    backoff = self.config.commit_interval;
                    continue;
                }
                Err(e) if e.retryable() => {
                    tracing::warn!(table = %log.ident, error = %e, "retry ingest commit");
                    let pause = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    pause
                }
                Err(IngestError::Catalog(e)) if e.code() == floe_catalog::ErrorCode::NotFound => {
                    // The table (or its warehouse) is gone: its entries become dead letters,
                    // so they neither wait forever nor count against the server's backlog.
                    self.set_aside_all(&log, &format!("the table is gone: {e}"))
                        .await;
                    backoff = MAX_BACKOFF;
                    backoff
                }
                Err(e) => {
                    tracing::error!(
                        table = %log.ident,
                        error = %e,
                        "ingest commit cannot succeed until the table or its grants change"
                    );
                    backoff = MAX_BACKOFF;
                    backoff
                }
            };
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Moves every durable pending entry of `log` to its dead letters with `reason`.
    async fn set_aside_all(&self, log: &TableLog, reason: &str) {
        // Listed, then set aside without the lock (this committer is the only one to remove
        // pending entries; requests may append meanwhile).
        let durable: Vec<u64> = {
            let state = log.state.lock().await;
            state
                .pending
                .keys()
                .copied()
                .filter(|s| !state.writing.contains(s))
                .collect()
        };
        for sequence in durable {
            if let Err(e) = self.set_aside(log, sequence, None, reason).await {
                tracing::warn!(table = %log.ident, sequence, error = %e, "dead-letter a log entry");
                continue;
            }
            log.recent.forget(sequence, &self.kept);
            let mut state = log.state.lock().await;
            if let Some(size) = state.pending.remove(&sequence) {
                self.backlog.fetch_sub(size, Ordering::Relaxed);
            }
            state.dead.insert(sequence);
            log.stats
                .pending
                .store(state.pending.len() as u64, Ordering::Relaxed);
            log.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
        }
        tracing::warn!(table = %log.ident, reason, "set the ingest log's entries aside");
    }

    async fn commit_pending(&self, log: &TableLog) -> Result<(), IngestError> {
        // Durable entries with none before them still being written, up to a commit's bytes.
        let pending: Vec<u64> = {
            let state = log.state.lock().await;
            let before = state.writing.first().copied().unwrap_or(u64::MAX);
            let mut bytes = 0;
            state
                .pending
                .iter()
                .take_while(|(sequence, size)| {
                    bytes += **size;
                    **sequence < before && (bytes <= MOST_COMMIT_BYTES || bytes == **size)
                })
                .map(|(sequence, _)| *sequence)
                .collect()
        };
        if pending.is_empty() {
            let committed = *log.committed.borrow();
            log.recent.committed_through(committed, None, &self.kept);
            return Ok(());
        }
        // One read of the table serves both the check and the commit: entries a snapshot
        // already covers (a crash or lost answer after the commit) are dropped, not written
        // again.
        let caller = Caller::system();
        let loaded = self
            .catalog
            .load_table(&caller, &log.warehouse, &log.ident)
            .await
            .map_err(IngestError::of_catalog)?;
        let committed = self.sequence_in(&loaded.metadata);
        let fresh: Vec<u64> = pending.iter().copied().filter(|s| *s > committed).collect();
        let mut done = committed;
        let mut number = None;
        if let Some(&last) = fresh.last() {
            let schema = table_arrow_schema(loaded.metadata.current_schema())?;
            let key = upsert::key_of(&loaded.metadata)?;
            let key_schema = key
                .as_ref()
                .map(|ids| upsert::key_schema(&schema, &upsert::key_names(&loaded.metadata, ids)));
            let mut conformed = Vec::new();
            let mut changes = Vec::new();
            let mut dead = Vec::new();
            for &sequence in &fresh {
                // From memory when the entry is kept there, else from its file.
                let raw = match log.recent.get(sequence) {
                    Some(batches) => Ok(batches.as_ref().clone()),
                    None => read_raw(&log.dir, sequence),
                };
                let raw = match raw {
                    Ok(raw) => raw,
                    Err(Unfit::Misfit(reason)) => {
                        dead.push((sequence, reason, None));
                        continue;
                    }
                    Err(Unfit::Io(e)) => {
                        return Err(IngestError::Storage(format!(
                            "read log entry {sequence}: {e}"
                        )));
                    }
                };
                let entry = {
                    let deletes = upsert::deletes(&raw);
                    match (&key_schema, deletes) {
                        (None, true) => Err(Unfit::Misfit(format!(
                            "the entry deletes keys, but table {} is no longer an upsert table",
                            log.ident
                        ))),
                        (Some(keys), true) => conform_entry(&raw, keys).map(|b| (b, true)),
                        (_, false) => conform_entry(&raw, &schema).map(|b| (b, false)),
                    }
                };
                match entry {
                    Ok((batches, deletes)) if key.is_some() => {
                        changes.extend(batches.into_iter().map(|batch| match deletes {
                            true => upsert::Change::Delete(batch),
                            false => upsert::Change::Upsert(batch),
                        }));
                    }
                    Ok((batches, _)) => conformed.extend(batches),
                    Err(Unfit::Misfit(reason)) => dead.push((sequence, reason, Some(raw))),
                    Err(Unfit::Io(e)) => {
                        return Err(IngestError::Storage(format!(
                            "read log entry {sequence}: {e}"
                        )));
                    }
                }
            }
            // Moved aside before the commit: once a snapshot covers `last`, whatever is
            // still in the log up to it is taken for committed.
            for (sequence, reason, raw) in &dead {
                self.set_aside(log, *sequence, raw.as_deref(), reason)
                    .await
                    .map_err(|e| {
                        IngestError::Storage(format!("dead-letter log entry {sequence}: {e}"))
                    })?;
                tracing::error!(
                    table = %log.ident,
                    sequence,
                    reason = %reason,
                    "set an ingest log entry aside as dead letters"
                );
                log.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
                log.recent.forget(*sequence, &self.kept);
                let mut state = log.state.lock().await;
                if let Some(size) = state.pending.remove(sequence) {
                    self.backlog.fetch_sub(size, Ordering::Relaxed);
                }
                state.dead.insert(*sequence);
                log.stats
                    .pending
                    .store(state.pending.len() as u64, Ordering::Relaxed);
            }
            let key = self.sequence_key();
            // The first sequence too, so a replay knows which entries this commit holds.
            let first_key = self.first_sequence_key();
            let first = fresh.first().copied().unwrap_or(last);
            let positions = |metadata: &iceberg::spec::TableMetadata| {
                // Another of this log's commits cannot have raced it; a snapshot already past
                // `last` would mean the log was copied elsewhere.
                if self.sequence_in(metadata) >= last {
                    return Err(IngestError::Conflict(format!(
                        "the table already covers log entry {last}"
                    )));
                }
                Ok(HashMap::from([
                    (key.clone(), last.to_string()),
                    (first_key.clone(), first.to_string()),
                ]))
            };
            let started = std::time::Instant::now();
            // Every fresh entry dead-lettered: nothing to write, the table is as it was.
            let rows: usize = conformed.iter().map(|b| b.num_rows()).sum();
            let committed = if !changes.is_empty() {
                let upserted = upsert::commit(
                    &self.catalog,
                    &self.sql,
                    &caller,
                    &log.warehouse,
                    &log.ident,
                    changes,
                    None,
                    positions,
                )
                .await?;
                Some((upserted.rows, upserted.sequence_number))
            } else if rows > 0 {
                let batch = datafusion::arrow::compute::concat_batches(&schema, &conformed)
                    .map_err(|e| IngestError::Invalid(format!("gather the log's rows: {e}")))?;
                drop(conformed);
                let appended = commit::append(
                    &self.catalog,
                    &self.sql,
                    &caller,
                    &log.warehouse,
                    &log.ident,
                    batch,
                    positions,
                )
                .await?;
                Some((appended.rows, appended.sequence_number))
            } else {
                None
            };
            if let Some((rows, sequence_number)) = committed {
                number = Some(sequence_number);
                log.stats.commits.fetch_add(1, Ordering::Relaxed);
                log.stats.committed_rows.fetch_add(rows, Ordering::Relaxed);
                log.stats
                    .commit_micros
                    .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
            done = last;
        }
        log.recent.committed_through(done, number, &self.kept);
        log.committed.send_replace(done);
        let mut state = log.state.lock().await;
        let mut retained = false;
        for sequence in pending.into_iter().filter(|s| *s <= done) {
            if let Some(size) = state.pending.remove(&sequence) {
                self.backlog.fetch_sub(size, Ordering::Relaxed);
            }
            super::replay::retain(&log.dir, sequence, self.config.retain_committed);
            retained = true;
        }
        if retained {
            for kept in [super::replay::RETAINED, super::replay::REPLAYED] {
                super::replay::prune(
                    &log.dir.join(kept),
                    self.config.retain_committed,
                    self.config.retain_committed_bytes,
                );
            }
        }
        log.stats
            .pending
            .store(state.pending.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// `work`, a panic inside it turned into an error naming it: a table's committer outlives a
/// bug that panics in one of its commits (the table's ingest status shows it; the entries
/// wait, acknowledged and durable, for the fix).
async fn unpanicked<T>(
    work: impl std::future::Future<Output = Result<T, IngestError>>,
) -> Result<T, IngestError> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(work).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = floe_sql::panic_said(panic.as_ref());
            tracing::error!(panic = %message, "an ingest commit panicked");
            Err(IngestError::Invalid(format!(
                "the commit failed inside Floe ({message}): a bug, kept until it is fixed"
            )))
        }
    }
}

/// Why a log entry is not written: it cannot be, or it could not be read now.
pub(super) enum Unfit {
    Misfit(String),
    Io(std::io::Error),
}

/// An entry's batches conformed to the table's current schema (`schema`).
fn conform_entry(batches: &[RecordBatch], schema: &SchemaRef) -> Result<Vec<RecordBatch>, Unfit> {
    let misfit = |e: crate::Refusal| Unfit::Misfit(e.to_string());
    batches
        .iter()
        .map(|batch| conform(batch, schema, Match::for_entry(&batch.schema())).map_err(misfit))
        .collect()
}

/// A log entry's batches as they were written.
pub(super) fn read_raw(dir: &Path, sequence: u64) -> Result<Vec<RecordBatch>, Unfit> {
    let bytes = std::fs::read(dir.join(format!("{sequence:020}.arrow"))).map_err(Unfit::Io)?;
    // Floe's own file, but decoded like any stream: a damaged one is a dead letter, not a
    // panic that would stop the committer for good.
    let decoded = crate::decode::ipc::decode_stream(&bytes::Bytes::from(bytes), usize::MAX)
        .map_err(|e| Unfit::Misfit(format!("the entry does not read: {e}")))?;
    Ok(decoded.batches)
}

/// A directory name for a table's log that any warehouse, namespace and table name map to.
fn dir_name(warehouse: &str, ident: &TableIdent) -> String {
    let key = format!(
        "{warehouse}\u{1f}{}\u{1f}{}",
        ident.namespace().clone().inner().join("\u{1e}"),
        ident.name()
    );
    key.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Writes `path` through a temporary file, synced, renamed into place and the directory
/// synced: after this returns, a crash leaves either nothing or the whole file.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("log files live in a directory");
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry")
    ));
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_commit_that_panics_is_an_error_not_a_dead_committer() {
        let failed = super::unpanicked(async {
            if std::hint::black_box(true) {
                panic!("index out of bounds in a writer");
            }
            Ok::<(), super::IngestError>(())
        })
        .await
        .unwrap_err();
        assert!(!failed.retryable());
        assert!(
            failed
                .to_string()
                .contains("index out of bounds in a writer"),
            "{failed}"
        );
        assert!(
            super::unpanicked(async { Ok::<_, super::IngestError>(7) })
                .await
                .is_ok()
        );
    }
}
