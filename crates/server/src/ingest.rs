//! HTTP ingestion: `POST /ingest/v1/{warehouse}/{namespace}/{table}` appends NDJSON, a JSON
//! array or an Arrow IPC stream to an Iceberg table.
//!
//! A request is checked (authentication, `write-data` on the table, media type, size, every
//! row against the table's schema), written to a write-ahead log as one Arrow IPC file and
//! synced to disk; only then does it get its 2xx. A committer per table gathers what the log
//! holds every commit interval into one append snapshot. The snapshot's summary carries
//! `floe.ingest.<log id>.sequence`, the last log entry it covers, in the same commit — so after
//! a crash the log is replayed from the entry after the last committed one: nothing
//! acknowledged is lost and nothing is written twice. `?wait=commit` answers once the batch is
//! in a committed snapshot.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::json::ReaderBuilder;
use datafusion::datasource::sink::DataSink;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::service::{CatalogService, CreateTable};
use iceberg::{NamespaceIdent, TableIdent};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify, watch};

use crate::AppState;
use crate::error::{ApiError, ApiResult};

/// Media types the endpoint takes.
const NDJSON: &str = "application/x-ndjson";
const JSON: &str = "application/json";
const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// How ingestion behaves.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Where the write-ahead log lives.
    pub dir: PathBuf,
    /// How often pending batches are committed.
    pub commit_interval: Duration,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// How long `?wait=commit` waits before answering 202 anyway.
    pub wait_timeout: Duration,
}

/// The write-ahead log and its committers.
pub struct Ingest {
    config: IngestConfig,
    /// Identifies this log in snapshot summaries (several nodes may ingest into one table).
    log_id: String,
    catalog: Arc<CatalogService>,
    sql: Arc<floe_sql::SqlEngine>,
    tables: Mutex<HashMap<(String, TableIdent), Arc<TableLog>>>,
}

/// What a table's log directory says about itself.
#[derive(Debug, Serialize, Deserialize)]
struct TableMarker {
    warehouse: String,
    namespace: Vec<String>,
    table: String,
}

/// One table's log: entries `<sequence>.arrow`, committed in sequence order.
struct TableLog {
    warehouse: String,
    ident: TableIdent,
    dir: PathBuf,
    state: Mutex<LogState>,
    /// The last sequence a committed snapshot covers.
    committed: watch::Sender<u64>,
    wake: Notify,
    stats: LogStats,
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
}

struct LogState {
    next: u64,
    /// Entries not yet known to be committed, by sequence, with their sizes.
    pending: BTreeMap<u64, u64>,
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
        let ingest = Arc::new(Self {
            config,
            log_id,
            catalog,
            sql,
            tables: Mutex::new(HashMap::new()),
        });
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

    /// Every table this node ingests into: its log and counters.
    pub async fn status(&self) -> Vec<Value> {
        let tables = self.tables.lock().await;
        let mut logs: Vec<_> = tables.values().cloned().collect();
        drop(tables);
        logs.sort_by_key(|l| (l.warehouse.clone(), l.ident.to_string()));
        let mut answer = Vec::new();
        for log in logs {
            let next = log.state.lock().await.next;
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
        let metrics: [MetricLine; 6] = [
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
        text
    }

    /// Largest request body taken.
    pub fn max_body_bytes(&self) -> usize {
        self.config.max_body_bytes
    }

    fn sequence_key(&self) -> String {
        format!("floe.ingest.{}.sequence", self.log_id)
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
        // Sequences continue after both what the log holds and what was committed, so a new
        // entry is never mistaken for one already in the table.
        let committed = self.committed_sequence(warehouse, ident).await?;
        let next = pending
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0)
            .max(committed)
            + 1;
        let (committed_tx, _) = watch::channel(committed);
        let log = Arc::new(TableLog {
            warehouse: warehouse.to_string(),
            ident: ident.clone(),
            dir,
            state: Mutex::new(LogState { next, pending }),
            committed: committed_tx,
            wake: Notify::new(),
            stats: LogStats::default(),
        });
        log.stats.pending.store(
            log.state.lock().await.pending.len() as u64,
            Ordering::Relaxed,
        );
        tables.insert(key, log.clone());
        tokio::spawn(self.clone().commit_loop(log.clone()));
        Ok(log)
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
    fn sequence_in(&self, metadata: &iceberg::spec::TableMetadata) -> u64 {
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

    /// Appends one request's rows to the log, durably; returns its sequence.
    async fn append(&self, log: &TableLog, batches: &[RecordBatch]) -> std::io::Result<u64> {
        let schema = batches
            .first()
            .map(|b| b.schema())
            .unwrap_or_else(|| Arc::new(Schema::empty()));
        let mut bytes = Vec::new();
        {
            let mut writer =
                StreamWriter::try_new(&mut bytes, &schema).map_err(std::io::Error::other)?;
            for batch in batches {
                writer.write(batch).map_err(std::io::Error::other)?;
            }
            writer.finish().map_err(std::io::Error::other)?;
        }
        let mut state = log.state.lock().await;
        let sequence = state.next;
        write_durably(&log.dir.join(format!("{sequence:020}.arrow")), &bytes)?;
        state.next += 1;
        state.pending.insert(sequence, bytes.len() as u64);
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        log.stats
            .accepted_rows
            .fetch_add(rows as u64, Ordering::Relaxed);
        log.stats
            .accepted_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        log.stats
            .pending
            .store(state.pending.len() as u64, Ordering::Relaxed);
        Ok(sequence)
    }

    /// Commits what the log holds, every interval (or sooner when woken), until the process
    /// ends. A failed commit keeps the entries and is tried again later.
    async fn commit_loop(self: Arc<Self>, log: Arc<TableLog>) {
        let mut backoff = self.config.commit_interval;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.config.commit_interval) => {}
                _ = log.wake.notified() => {
                    // Let a burst of requests land in the same snapshot.
                    tokio::time::sleep(self.config.commit_interval / 4).await;
                }
            }
            match self.commit_pending(&log).await {
                Ok(()) => backoff = self.config.commit_interval,
                Err(e) => {
                    tracing::warn!(table = %log.ident, error = %e, "ingest commit failed; will retry");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                }
            }
        }
    }

    async fn commit_pending(&self, log: &TableLog) -> Result<(), String> {
        let pending: Vec<u64> = log.state.lock().await.pending.keys().copied().collect();
        if pending.is_empty() {
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
            .map_err(|e| e.to_string())?;
        let committed = self.sequence_in(&loaded.metadata);
        let fresh: Vec<u64> = pending.iter().copied().filter(|s| *s > committed).collect();
        if let Some(&last) = fresh.last() {
            let mut batches = Vec::new();
            for sequence in &fresh {
                let file = std::fs::File::open(log.dir.join(format!("{sequence:020}.arrow")))
                    .map_err(|e| format!("read log entry {sequence}: {e}"))?;
                let reader = StreamReader::try_new(std::io::BufReader::new(file), None)
                    .map_err(|e| format!("read log entry {sequence}: {e}"))?;
                for batch in reader {
                    batches.push(batch.map_err(|e| format!("read log entry {sequence}: {e}"))?);
                }
            }
            let access = self
                .sql
                .access(&caller, &log.warehouse)
                .await
                .map_err(|e| e.to_string())?;
            let table = floe_sql::write::table_of(&access, loaded).map_err(|e| e.to_string())?;
            let schema =
                table_arrow_schema(table.metadata().current_schema()).map_err(|e| e.to_string())?;
            let conformed: Vec<RecordBatch> = batches
                .iter()
                .map(|b| conform(b, &schema))
                .collect::<Result<_, _>>()?;
            let stream = RecordBatchStreamAdapter::new(
                schema.clone(),
                futures::stream::iter(conformed.into_iter().map(Ok)),
            );
            let properties = HashMap::from([(self.sequence_key(), last.to_string())]);
            let started = std::time::Instant::now();
            let rows = floe_sql::write::IcebergSink::new(access, table, schema)
                .with_snapshot_properties(properties)
                .write_all(Box::pin(stream), &Arc::new(TaskContext::default()))
                .await
                .map_err(|e| e.to_string())?;
            log.stats.commits.fetch_add(1, Ordering::Relaxed);
            log.stats.committed_rows.fetch_add(rows, Ordering::Relaxed);
            log.stats
                .commit_micros
                .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            log.committed.send_replace(last);
        } else {
            log.committed.send_replace(committed);
        }
        let mut state = log.state.lock().await;
        let done = *log.committed.borrow();
        for sequence in pending.into_iter().filter(|s| *s <= done) {
            state.pending.remove(&sequence);
            let _ = std::fs::remove_file(log.dir.join(format!("{sequence:020}.arrow")));
        }
        log.stats
            .pending
            .store(state.pending.len() as u64, Ordering::Relaxed);
        Ok(())
    }
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
fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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

/// The table's schema as the writer takes it (plain string and binary types).
fn table_arrow_schema(schema: &iceberg::spec::Schema) -> Result<SchemaRef, String> {
    iceberg::arrow::schema_to_arrow_schema(schema)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// A batch with the table's columns, matched by name: missing nullable columns become nulls,
/// types are cast.
fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, String> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| match batch.schema().index_of(field.name()) {
            Ok(index) => {
                let column = batch.column(index);
                if column.data_type() == field.data_type() {
                    Ok(column.clone())
                } else {
                    datafusion::arrow::compute::cast(column, field.data_type()).map_err(|e| {
                        format!(
                            "column {}: cannot be read as {}: {e}",
                            field.name(),
                            field.data_type()
                        )
                    })
                }
            }
            Err(_) if field.is_nullable() => Ok(datafusion::arrow::array::new_null_array(
                field.data_type(),
                batch.num_rows(),
            )),
            Err(_) => Err(format!("required column {} is missing", field.name())),
        })
        .collect::<Result<Vec<_>, String>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct IngestParams {
    /// `commit`: answer once the rows are in a committed snapshot.
    pub wait: Option<String>,
    /// `true`: create the table, with a schema inferred from this request, if it is missing.
    pub create: Option<bool>,
    /// `false`: refuse fields the table lacks instead of adding them as columns.
    pub evolve: Option<bool>,
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError(CatalogError::BadRequest {
        message: message.into(),
    })
}

/// `GET /api/v1/ingest/status`: the tables this node ingests into, with their logs' positions
/// and counters. Needs `manage-pipelines` on the server.
pub async fn status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<axum::Json<Value>> {
    crate::auth::require_server(&caller, Privilege::ManagePipelines)?;
    let tables = match &state.ingest {
        Some(ingest) => ingest.status().await,
        None => Vec::new(),
    };
    Ok(axum::Json(json!({ "tables": tables })))
}

/// `POST /ingest/v1/{warehouse}/{namespace}/{table}`.
pub async fn ingest(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    UrlPath((warehouse, namespace, table)): UrlPath<(String, String, String)>,
    Query(params): Query<IngestParams>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> ApiResult<Response> {
    let Some(ingest) = state.ingest.clone() else {
        return Err(ApiError(CatalogError::Unavailable(
            "HTTP ingestion is not enabled on this server".into(),
        )));
    };
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or(v).trim().to_ascii_lowercase())
        .unwrap_or_default();
    if ![NDJSON, JSON, ARROW_STREAM].contains(&media.as_str()) {
        return Ok(crate::error::error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!(
                "Content-Type {media:?} is not accepted: send {NDJSON} (one JSON object per line), \
                 {JSON} (an array of objects) or {ARROW_STREAM}"
            ),
        ));
    }
    let limit = ingest.config.max_body_bytes;
    let too_large = || {
        ApiError(CatalogError::PayloadTooLarge(format!(
            "the body is larger than the {limit} bytes taken per request (--ingest-max-body-mb)"
        )))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let body: Bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| too_large())?;
    let namespace =
        NamespaceIdent::from_vec(namespace.split('\u{1f}').map(str::to_string).collect())
            .map_err(|e| bad_request(format!("namespace: {e}")))?;
    let ident = TableIdent::new(namespace.clone(), table.clone());

    let existing = state.catalog.load_table(&caller, &warehouse, &ident).await;
    let mut schema = match existing {
        Ok(loaded) => table_arrow_schema(loaded.metadata.current_schema()).map_err(bad_request)?,
        Err(CatalogError::NotFound { .. }) if params.create == Some(true) => {
            let inferred = infer_schema(&media, &body)?;
            let created = state
                .catalog
                .create_table(
                    &caller,
                    &warehouse,
                    &namespace,
                    CreateTable {
                        name: table.clone(),
                        location: None,
                        schema: floe_sql::write::iceberg_schema(&inferred)
                            .map_err(|e| bad_request(format!("inferred schema: {e}")))?,
                        partition_spec: None,
                        write_order: None,
                        stage_create: false,
                        properties: Default::default(),
                    },
                )
                .await;
            let loaded = match created {
                Ok(loaded) => loaded,
                // Another request created it first.
                Err(CatalogError::AlreadyExists { .. }) => {
                    state
                        .catalog
                        .load_table(&caller, &warehouse, &ident)
                        .await?
                }
                Err(e) => return Err(ApiError(e)),
            };
            table_arrow_schema(loaded.metadata.current_schema()).map_err(bad_request)?
        }
        Err(e) => return Err(ApiError(e)),
    };
    state
        .catalog
        .authorize_table(&caller, &warehouse, &ident, Privilege::WriteData)
        .await?;

    let batches = match parse(&media, &body, &schema) {
        Ok(batches) => batches,
        // Fields the table lacks become new optional columns (unless `?evolve=false`).
        Err(refused) if params.evolve != Some(false) => {
            let (additions, known) = new_fields(&media, &body, &schema)?;
            if additions.is_empty() && known.is_empty() {
                return Err(refused);
            }
            schema = evolve(&state, &caller, &warehouse, &ident, &additions, &known).await?;
            parse(&media, &body, &schema)?
        }
        Err(refused) => return Err(refused),
    };
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows == 0 {
        return Ok((StatusCode::OK, axum::Json(json!({"rows": 0}))).into_response());
    }
    let log = ingest.table_log(&warehouse, &ident).await?;
    let mut committed = log.committed.subscribe();
    let sequence = ingest
        .append(&log, &batches)
        .await
        .map_err(|e| ApiError(CatalogError::internal("write the ingest log", e)))?;
    if params.wait.as_deref() == Some("commit") {
        log.wake.notify_one();
        let waited = tokio::time::timeout(
            ingest.config.wait_timeout,
            committed.wait_for(|c| *c >= sequence),
        )
        .await;
        if matches!(waited, Ok(Ok(_))) {
            return Ok((
                StatusCode::OK,
                axum::Json(json!({"rows": rows, "sequence": sequence, "committed": true})),
            )
                .into_response());
        }
    }
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({"rows": rows, "sequence": sequence, "committed": false})),
    )
        .into_response())
}

/// The rows of a body, as the table's schema; unknown fields and values that do not fit are
/// refused naming them.
fn parse(media: &str, body: &[u8], schema: &SchemaRef) -> ApiResult<Vec<RecordBatch>> {
    match media {
        ARROW_STREAM => {
            let reader = StreamReader::try_new(std::io::Cursor::new(body), None)
                .map_err(|e| bad_request(format!("not an Arrow IPC stream: {e}")))?;
            let mut batches = Vec::new();
            for batch in reader {
                let batch = batch.map_err(|e| bad_request(format!("Arrow IPC stream: {e}")))?;
                for field in batch.schema().fields() {
                    if schema.field_with_name(field.name()).is_err() {
                        return Err(bad_request(format!(
                            "column {} is not in the table",
                            field.name()
                        )));
                    }
                }
                batches.push(conform(&batch, schema).map_err(bad_request)?);
            }
            Ok(batches)
        }
        NDJSON => {
            // Arrow's JSON decoder straight over the bytes; only a body it refuses is parsed
            // again row by row, to name the line at fault.
            if let Ok(batches) = decode_ndjson(body, schema) {
                return Ok(batches);
            }
            let mut values = Vec::new();
            let mut lines = Vec::new();
            for (number, line) in body.split(|b| *b == b'\n').enumerate() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let value: serde_json::Value = serde_json::from_slice(line)
                    .map_err(|e| bad_request(format!("line {}: not JSON: {e}", number + 1)))?;
                values.push(value);
                lines.push(number + 1);
            }
            decode_rows(&values, schema, |i| format!("line {}", lines[i]))
        }
        _ => {
            let values: Vec<serde_json::Value> = serde_json::from_slice(body)
                .map_err(|e| bad_request(format!("not a JSON array of objects: {e}")))?;
            decode_rows(&values, schema, |i| format!("element {i}"))
        }
    }
}

/// NDJSON as batches of the table's schema, by Arrow's JSON decoder (fields the table lacks
/// are refused).
fn decode_ndjson(
    body: &[u8],
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>, datafusion::arrow::error::ArrowError> {
    let mut decoder = ReaderBuilder::new(schema.clone())
        .with_strict_mode(true)
        .with_batch_size(16 * 1024)
        .build_decoder()?;
    let mut batches = Vec::new();
    let mut offset = 0;
    while offset < body.len() {
        let read = decoder.decode(&body[offset..])?;
        offset += read;
        let flushed = decoder.flush()?;
        if read == 0 && flushed.is_none() {
            break;
        }
        batches.extend(flushed);
    }
    batches.extend(decoder.flush()?);
    if !body[offset..].iter().all(u8::is_ascii_whitespace) {
        return Err(datafusion::arrow::error::ArrowError::JsonError(
            "the decoder stopped before the end of the body".into(),
        ));
    }
    Ok(batches)
}

/// JSON rows as batches of the table's schema. A row that does not fit is named by
/// `where_is` (its line or position) in the error.
fn decode_rows(
    values: &[serde_json::Value],
    schema: &SchemaRef,
    where_is: impl Fn(usize) -> String,
) -> ApiResult<Vec<RecordBatch>> {
    const CHUNK: usize = 8192;
    let decoder = || {
        ReaderBuilder::new(schema.clone())
            .with_strict_mode(true)
            .build_decoder()
            .map_err(|e| bad_request(e.to_string()))
    };
    for (i, value) in values.iter().enumerate() {
        known_fields(value, schema).map_err(|e| bad_request(format!("{}: {e}", where_is(i))))?;
    }
    let mut batches = Vec::new();
    for (chunk_index, chunk) in values.chunks(CHUNK).enumerate() {
        let mut all = decoder()?;
        let decoded = all.serialize(chunk).and_then(|_| all.flush());
        match decoded {
            Ok(batch) => batches.extend(batch),
            Err(_) => {
                // Find the row at fault, to name it.
                for (offset, value) in chunk.iter().enumerate() {
                    let mut one = decoder()?;
                    if let Err(e) = one
                        .serialize(std::slice::from_ref(value))
                        .and_then(|_| one.flush())
                    {
                        let at = where_is(chunk_index * CHUNK + offset);
                        return Err(bad_request(format!("{at}: {e}")));
                    }
                }
                return Err(bad_request("rows do not fit the table's schema"));
            }
        }
    }
    Ok(batches)
}

/// Checks that a row is an object whose fields are all columns of the table.
fn known_fields(value: &serde_json::Value, schema: &SchemaRef) -> Result<(), String> {
    let object = value
        .as_object()
        .ok_or_else(|| "a row must be a JSON object".to_string())?;
    for name in object.keys() {
        if schema.field_with_name(name).is_err() {
            return Err(format!("field {name:?} is not a column of the table"));
        }
    }
    Ok(())
}

/// The request's top-level fields with the types their values suggest: those the table
/// lacks, and those it has (which may bring nested fields or wider types).
type Seen = Vec<datafusion::arrow::datatypes::Field>;

fn new_fields(media: &str, body: &[u8], schema: &SchemaRef) -> ApiResult<(Seen, Seen)> {
    let seen = infer_schema(media, body)?;
    Ok(seen
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .partition(|f| schema.field_with_name(f.name()).is_err()))
}

/// Adds `additions` to the table's schema as optional columns and evolves the columns
/// `known` names (nested fields added, types widened) — as the caller, so the caller's
/// privileges apply; returns the schema rows are then read with.
async fn evolve(
    state: &AppState,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
    additions: &[datafusion::arrow::datatypes::Field],
    known: &[datafusion::arrow::datatypes::Field],
) -> ApiResult<SchemaRef> {
    let loaded =
        floe_sql::write::evolve_columns(&state.catalog, caller, warehouse, ident, additions, known)
            .await?;
    table_arrow_schema(loaded.metadata.current_schema()).map_err(bad_request)
}

/// A schema for a new table, from the request's rows (JSON) or its stream's schema (Arrow).
fn infer_schema(media: &str, body: &[u8]) -> ApiResult<Schema> {
    match media {
        ARROW_STREAM => {
            let reader = StreamReader::try_new(std::io::Cursor::new(body), None)
                .map_err(|e| bad_request(format!("not an Arrow IPC stream: {e}")))?;
            Ok(reader.schema().as_ref().clone())
        }
        NDJSON => {
            let values: Vec<serde_json::Value> = body
                .split(|b| *b == b'\n')
                .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                .enumerate()
                .map(|(i, l)| {
                    serde_json::from_slice(l)
                        .map_err(|e| bad_request(format!("line {}: not JSON: {e}", i + 1)))
                })
                .collect::<ApiResult<_>>()?;
            infer_json(&values)
        }
        _ => {
            let values: Vec<serde_json::Value> = serde_json::from_slice(body)
                .map_err(|e| bad_request(format!("not a JSON array of objects: {e}")))?;
            infer_json(&values)
        }
    }
}

fn infer_json(values: &[serde_json::Value]) -> ApiResult<Schema> {
    if values.is_empty() {
        return Err(bad_request("no rows to infer the new table's schema from"));
    }
    datafusion::arrow::json::reader::infer_json_schema_from_iterator(values.iter().map(Ok))
        .map_err(|e| bad_request(format!("cannot infer a schema: {e}")))
}
