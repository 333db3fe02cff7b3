//! One Kafka-to-Iceberg pipeline: assign every partition of its topics at the offsets the
//! table has committed, batch records, append each batch with its offsets in one snapshot.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogService, CreateTable, LoadedTable};
use floe_sql::SqlEngine;
use iceberg::spec::TableMetadata;
use iceberg::{NamespaceIdent, TableIdent};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::{Result, StreamError, table_error};

/// Where a partition without committed offsets starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartPosition {
    #[default]
    Earliest,
    Latest,
}

/// A pipeline's definition.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PipelineSpec {
    /// Names the pipeline; part of the offset keys in snapshot summaries.
    pub name: String,
    pub warehouse: String,
    pub namespace: Vec<String>,
    pub table: String,
    pub bootstrap_servers: String,
    pub topics: Vec<String>,
    #[serde(default)]
    pub start: StartPosition,
    /// Further librdkafka settings (SASL, TLS, …).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// A batch is committed this often (default 1000 ms)…
    #[serde(default = "default_interval")]
    pub commit_interval_ms: u64,
    /// …or once it holds this many records (default 100,000).
    #[serde(default = "default_max_records")]
    pub max_records: usize,
}

fn default_interval() -> u64 {
    1000
}

fn default_max_records() -> usize {
    100_000
}

impl PipelineSpec {
    pub fn validate(&self) -> Result<()> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Err(StreamError::Invalid(format!(
                "name must be letters, digits, '-' or '_', not {:?}",
                self.name
            )));
        }
        if self.topics.is_empty() || self.topics.iter().any(|t| t.is_empty()) {
            return Err(StreamError::Invalid(
                "topics must name at least one topic".into(),
            ));
        }
        if self.bootstrap_servers.is_empty() {
            return Err(StreamError::Invalid("bootstrap-servers must be set".into()));
        }
        if self.namespace.is_empty() || self.table.is_empty() {
            return Err(StreamError::Invalid(
                "namespace and table must be set".into(),
            ));
        }
        Ok(())
    }

    fn ident(&self) -> Result<TableIdent> {
        let namespace = NamespaceIdent::from_vec(self.namespace.clone())
            .map_err(|e| StreamError::Invalid(format!("namespace: {e}")))?;
        Ok(TableIdent::new(namespace, self.table.clone()))
    }

    /// The summary key holding the next offset of one partition.
    pub fn offset_key(&self, topic: &str, partition: i32) -> String {
        format!("floe.source.{}.{topic}.{partition}", self.name)
    }

    fn key_prefix(&self) -> String {
        format!("floe.source.{}.", self.name)
    }

    /// The next offset of every partition as the newest snapshot carrying this pipeline's
    /// offsets says (main's ancestry, newest first).
    pub fn committed_offsets(&self, metadata: &TableMetadata) -> HashMap<(String, i32), i64> {
        let prefix = self.key_prefix();
        let mut snapshot = metadata.current_snapshot();
        while let Some(current) = snapshot {
            let offsets: HashMap<(String, i32), i64> = current
                .summary()
                .additional_properties
                .iter()
                .filter_map(|(key, value)| {
                    let rest = key.strip_prefix(&prefix)?;
                    let (topic, partition) = rest.rsplit_once('.')?;
                    Some((
                        (topic.to_string(), partition.parse().ok()?),
                        value.parse().ok()?,
                    ))
                })
                .collect();
            if !offsets.is_empty() {
                return offsets;
            }
            snapshot = current
                .parent_snapshot_id()
                .and_then(|id| metadata.snapshot_by_id(id));
        }
        HashMap::new()
    }
}

/// What a pipeline has done since it started.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PipelineStats {
    pub records_committed: u64,
    pub bytes_committed: u64,
    pub commits: u64,
    /// Records that are not JSON objects, put in the dead-letter table.
    pub rejected_records: u64,
    /// Time spent committing (writing files and the snapshot).
    pub commit_seconds: f64,
    /// When the run started (ms since the epoch).
    pub started_at_ms: i64,
}

/// A running pipeline.
pub struct Pipeline {
    spec: PipelineSpec,
    catalog: Arc<CatalogService>,
    sql: Arc<SqlEngine>,
    stats: std::sync::Mutex<PipelineStats>,
}

/// Records read and not committed yet.
#[derive(Default)]
struct Batch {
    /// Rows as NDJSON; row `i` ends at `ends[i]` and came from `sources[i]`.
    rows: Vec<u8>,
    ends: Vec<usize>,
    sources: Vec<Source>,
    records: usize,
    rejected: u64,
    dead: Vec<DeadLetter>,
}

/// Where a record came from.
struct Source {
    topic: String,
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    key: Option<Vec<u8>>,
}

/// A record the table could not take, kept with its source coordinates and the reason.
struct DeadLetter {
    topic: String,
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    error: String,
}

impl Pipeline {
    pub fn new(
        spec: PipelineSpec,
        catalog: Arc<CatalogService>,
        sql: Arc<SqlEngine>,
    ) -> Result<Self> {
        spec.validate()?;
        Ok(Self {
            spec,
            catalog,
            sql,
            stats: Default::default(),
        })
    }

    /// What this pipeline has done since it was made.
    pub fn stats(&self) -> PipelineStats {
        self.stats.lock().expect("pipeline stats").clone()
    }

    pub fn spec(&self) -> &PipelineSpec {
        &self.spec
    }

    /// The pipeline's target table, if it exists.
    async fn load(&self) -> Result<Option<LoadedTable>> {
        self.load_ident(&self.spec.ident()?).await
    }

    /// A table of the pipeline's warehouse, if it exists.
    async fn load_ident(&self, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        match self
            .catalog
            .load_table(&Caller::system(), &self.spec.warehouse, ident)
            .await
        {
            Ok(loaded) => Ok(Some(loaded)),
            Err(CatalogError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn consumer(&self) -> Result<StreamConsumer> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.spec.bootstrap_servers)
            .set("group.id", format!("floe-{}", self.spec.name))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false");
        for (key, value) in &self.spec.properties {
            config.set(key, value);
        }
        Ok(config.create()?)
    }

    /// Reads and commits until `shutdown`; returns what it did.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<PipelineStats> {
        let consumer = self.consumer()?;
        let mut next = match self.load().await? {
            Some(loaded) => self.spec.committed_offsets(&loaded.metadata),
            None => HashMap::new(),
        };
        let mut assignment = TopicPartitionList::new();
        for topic in &self.spec.topics {
            let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
            for found in metadata.topics().iter().filter(|t| t.name() == topic) {
                for partition in found.partitions() {
                    let offset = match next.get(&(topic.clone(), partition.id())) {
                        Some(offset) => Offset::Offset(*offset),
                        None if self.spec.start == StartPosition::Latest => Offset::End,
                        None => Offset::Beginning,
                    };
                    assignment.add_partition_offset(topic, partition.id(), offset)?;
                }
            }
        }
        consumer.assign(&assignment)?;

        let interval = Duration::from_millis(self.spec.commit_interval_ms.max(10));
        let mut stats = PipelineStats {
            started_at_ms: now_ms(),
            ..Default::default()
        };
        *self.stats.lock().expect("pipeline stats") = stats.clone();
        let mut dead_committed = match self.load_dead_letters().await? {
            Some(loaded) => self.spec.committed_offsets(&loaded.metadata),
            None => HashMap::new(),
        };
        let mut batch = Batch::default();
        let mut pending = next.clone();
        let mut deadline = tokio::time::Instant::now() + interval;
        // One stream for the whole run: a `recv()` future dropped by the timer branch could
        // miss the queue's wake-up and stall the pipeline.
        let mut messages = consumer.stream();
        loop {
            let flush = tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(deadline) => true,
                received = futures::StreamExt::next(&mut messages) => {
                    let Some(received) = received else { break };
                    let message = received?;
                    let payload = message.payload().unwrap_or_default();
                    match object_error(payload) {
                        None => {
                            batch.rows.extend_from_slice(payload);
                            batch.rows.push(b'\n');
                            batch.ends.push(batch.rows.len());
                            batch.sources.push(Source {
                                topic: message.topic().to_string(),
                                partition: message.partition(),
                                offset: message.offset(),
                                timestamp_ms: message.timestamp().to_millis(),
                                key: message.key().map(<[u8]>::to_vec),
                            });
                            batch.records += 1;
                        }
                        Some(error) => {
                            batch.rejected += 1;
                            let coordinates = (message.topic().to_string(), message.partition());
                            // Dead-lettered already, before a crash between the two commits.
                            let done = dead_committed
                                .get(&coordinates)
                                .is_some_and(|next| message.offset() < *next);
                            if !done {
                                batch.dead.push(DeadLetter {
                                    topic: coordinates.0,
                                    partition: coordinates.1,
                                    offset: message.offset(),
                                    timestamp_ms: message.timestamp().to_millis(),
                                    key: message.key().map(<[u8]>::to_vec),
                                    value: payload.to_vec(),
                                    error,
                                });
                            }
                        }
                    }
                    pending.insert(
                        (message.topic().to_string(), message.partition()),
                        message.offset() + 1,
                    );
                    batch.records >= self.spec.max_records
                }
            };
            if flush {
                if batch.records > 0 || !batch.dead.is_empty() {
                    let started = std::time::Instant::now();
                    let (schema, decoded) = self.prepare(&mut batch, &dead_committed).await?;
                    if !batch.dead.is_empty() {
                        // Dead letters first: a crash before the table's commit re-reads the
                        // records, and those below the dead-letter table's offsets are not
                        // dead-lettered twice.
                        self.commit_dead_letters(&batch.dead, &pending).await?;
                        dead_committed = pending.clone();
                    }
                    let rows: usize = decoded.iter().map(|b| b.num_rows()).sum();
                    self.commit(schema, decoded, &next, &pending).await?;
                    stats.commit_seconds += started.elapsed().as_secs_f64();
                    stats.records_committed += rows as u64;
                    stats.rejected_records += batch.rejected;
                    if rows > 0 {
                        // The table now says `pending`; a batch of only dead letters left it
                        // where it was, and its offsets move with the next rows.
                        stats.bytes_committed += batch.rows.len() as u64;
                        stats.commits += 1;
                        next = pending.clone();
                    }
                    *self.stats.lock().expect("pipeline stats") = stats.clone();
                    batch = Batch::default();
                }
                deadline = tokio::time::Instant::now() + interval;
            }
        }
        Ok(stats)
    }

    /// Appends `batch` with `offsets` in one snapshot, retrying lost races. The table must
    /// still say `from` — what this run last committed — for every partition: if another
    /// node committed meanwhile (it took the pipeline over), this one is fenced and stops.
    /// The check and the commit see the same snapshot (the commit requires `main` unchanged),
    /// so two nodes never both commit the same records.
    async fn commit(
        &self,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        from: &HashMap<(String, i32), i64>,
        offsets: &HashMap<(String, i32), i64>,
    ) -> Result<()> {
        if batches.is_empty() {
            // Nothing to write (only dead letters): the offsets move with the next rows.
            return Ok(());
        }
        let properties = self.offset_properties(offsets);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let Some(loaded) = self.load().await? else {
                return Err(table_error(
                    "commit a pipeline batch",
                    "the table was dropped",
                ));
            };
            let committed = self.spec.committed_offsets(&loaded.metadata);
            if from
                .iter()
                .any(|(partition, offset)| committed.get(partition) != Some(offset))
            {
                return Err(StreamError::Fenced(self.spec.name.clone()));
            }
            match self
                .append(loaded, schema.clone(), batches.clone(), &properties)
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) if attempt < 8 && is_conflict(&e) => {
                    tracing::info!(pipeline = %self.spec.name, attempt, "retry a pipeline commit");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Makes the batch ready to commit: the table exists (created from the batch's inferred
    /// schema), new top-level fields have become optional columns, and the rows are decoded.
    /// Rows that do not fit the table (a text where a number belongs, say) join the dead
    /// letters with the reason; the rest flow on.
    async fn prepare(
        &self,
        batch: &mut Batch,
        dead_committed: &HashMap<(String, i32), i64>,
    ) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let mut loaded = match self.load().await? {
            Some(loaded) => loaded,
            None if batch.rows.is_empty() => return Ok((Arc::new(Schema::empty()), Vec::new())),
            None => self.create_table(&batch.rows).await?,
        };
        let arrow = |loaded: &LoadedTable| -> Result<SchemaRef> {
            Ok(Arc::new(
                iceberg::arrow::schema_to_arrow_schema(loaded.metadata.current_schema())
                    .map_err(|e| table_error("table schema", e))?,
            ))
        };
        let mut schema = arrow(&loaded)?;
        if !batch.rows.is_empty()
            && let Ok((seen, _)) = datafusion::arrow::json::reader::infer_json_schema(
                std::io::Cursor::new(&batch.rows),
                Some(10_000),
            )
        {
            let missing: Vec<Field> = seen
                .fields()
                .iter()
                .filter(|f| schema.field_with_name(f.name()).is_err())
                .map(|f| f.as_ref().clone())
                .collect();
            if !missing.is_empty() {
                let ident = self.spec.ident()?;
                match floe_sql::write::add_columns(
                    &self.catalog,
                    &Caller::system(),
                    &self.spec.warehouse,
                    &ident,
                    &missing,
                )
                .await
                {
                    Ok(evolved) => {
                        loaded = evolved;
                        schema = arrow(&loaded)?;
                    }
                    // Fields of a kind that cannot be added are left out of the rows.
                    Err(e) => {
                        tracing::warn!(pipeline = %self.spec.name, error = %e, "add columns")
                    }
                }
            }
        }
        if let Ok(batches) = decode(&batch.rows, &schema) {
            return Ok((schema, batches));
        }
        // Some row does not fit: decode row by row and dead-letter the misfits.
        let mut batches = Vec::new();
        let mut start = 0;
        for (end, source) in batch.ends.iter().zip(&batch.sources) {
            let row = &batch.rows[start..*end];
            start = *end;
            match decode(row, &schema) {
                Ok(decoded) => batches.extend(decoded),
                Err(e) => {
                    batch.rejected += 1;
                    let done = dead_committed
                        .get(&(source.topic.clone(), source.partition))
                        .is_some_and(|next| source.offset < *next);
                    if !done {
                        batch.dead.push(DeadLetter {
                            topic: source.topic.clone(),
                            partition: source.partition,
                            offset: source.offset,
                            timestamp_ms: source.timestamp_ms,
                            key: source.key.clone(),
                            value: row.strip_suffix(b"\n").unwrap_or(row).to_vec(),
                            error: format!("does not fit the table: {e}"),
                        });
                    }
                }
            }
        }
        Ok((schema, batches))
    }

    /// The summary entries recording `offsets`.
    fn offset_properties(&self, offsets: &HashMap<(String, i32), i64>) -> HashMap<String, String> {
        offsets
            .iter()
            .map(|((topic, partition), offset)| {
                (self.spec.offset_key(topic, *partition), offset.to_string())
            })
            .collect()
    }

    /// Appends `batches` to a loaded table in one snapshot carrying `properties`.
    async fn append(
        &self,
        loaded: LoadedTable,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        properties: &HashMap<String, String>,
    ) -> Result<()> {
        let access = self
            .sql
            .access(&Caller::system(), &self.spec.warehouse)
            .await
            .map_err(|e| table_error("storage access", e.message))?;
        let table =
            floe_sql::write::table_of(&access, loaded).map_err(|e| table_error("table", e))?;
        let stream = RecordBatchStreamAdapter::new(
            schema.clone(),
            futures::stream::iter(batches.into_iter().map(Ok)),
        );
        floe_sql::write::IcebergSink::new(access, table, schema)
            .with_snapshot_properties(properties.clone())
            .write_all(Box::pin(stream), &Arc::new(TaskContext::default()))
            .await
            .map(|_| ())
            .map_err(|e| table_error("commit a pipeline batch", e))
    }

    /// Creates an unpartitioned table of the pipeline's warehouse.
    async fn create(
        &self,
        ident: &TableIdent,
        schema: iceberg::spec::Schema,
    ) -> Result<LoadedTable> {
        Ok(self
            .catalog
            .create_table(
                &Caller::system(),
                &self.spec.warehouse,
                ident.namespace(),
                CreateTable {
                    name: ident.name().to_string(),
                    location: None,
                    schema,
                    partition_spec: None,
                    write_order: None,
                    stage_create: false,
                    properties: HashMap::new(),
                },
            )
            .await?)
    }

    /// The dead-letter table: the pipeline's target with `__dead_letters` appended.
    fn dead_letter_ident(&self) -> Result<TableIdent> {
        let target = self.spec.ident()?;
        Ok(TableIdent::new(
            target.namespace().clone(),
            format!("{}__dead_letters", self.spec.table),
        ))
    }

    async fn load_dead_letters(&self) -> Result<Option<LoadedTable>> {
        self.load_ident(&self.dead_letter_ident()?).await
    }

    /// Appends dead letters (creating their table on first use) with the batch's offsets.
    async fn commit_dead_letters(
        &self,
        dead: &[DeadLetter],
        offsets: &HashMap<(String, i32), i64>,
    ) -> Result<()> {
        let (schema, batch) = dead_letter_batch(&self.spec.name, dead)?;
        let ident = self.dead_letter_ident()?;
        let properties = self.offset_properties(offsets);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let loaded = match self.load_dead_letters().await? {
                Some(loaded) => loaded,
                None => {
                    let iceberg_schema = floe_sql::write::iceberg_schema(&schema)
                        .map_err(|e| table_error("dead-letter schema", e))?;
                    match self.create(&ident, iceberg_schema).await {
                        Ok(loaded) => loaded,
                        Err(StreamError::Catalog(CatalogError::AlreadyExists { .. })) => continue,
                        Err(e) => return Err(e),
                    }
                }
            };
            match self
                .append(loaded, schema.clone(), vec![batch.clone()], &properties)
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) if attempt < 8 && is_conflict(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates the target table with the schema the batch's records suggest.
    async fn create_table(&self, rows: &[u8]) -> Result<LoadedTable> {
        let (schema, _) = datafusion::arrow::json::reader::infer_json_schema(
            std::io::Cursor::new(rows),
            Some(1000),
        )
        .map_err(|e| table_error("infer the table schema", e))?;
        let schema = floe_sql::write::iceberg_schema(&schema)
            .map_err(|e| table_error("infer the table schema", e))?;
        let ident = self.spec.ident()?;
        let created = self.create(&ident, schema).await;
        match created {
            Ok(loaded) => Ok(loaded),
            // Created meanwhile by someone else: use theirs.
            Err(StreamError::Catalog(CatalogError::AlreadyExists { .. })) => self
                .load()
                .await?
                .ok_or_else(|| table_error("create the table", "it vanished")),
            Err(e) => Err(e),
        }
    }
}

/// Why a record cannot go into the table, if it cannot.
fn object_error(payload: &[u8]) -> Option<String> {
    let kind = match serde_json::from_slice::<serde_json::Value>(payload) {
        Ok(serde_json::Value::Object(_)) => return None,
        Ok(serde_json::Value::Array(_)) => "an array",
        Ok(serde_json::Value::String(_)) => "a string",
        Ok(serde_json::Value::Number(_)) => "a number",
        Ok(serde_json::Value::Bool(_)) => "a boolean",
        Ok(serde_json::Value::Null) => "null",
        Err(e) => return Some(format!("not JSON: {e}")),
    };
    Some(format!("a record must be a JSON object, not {kind}"))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// NDJSON rows decoded against the table's schema (unknown fields ignored).
fn decode(rows: &[u8], schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let reader = datafusion::arrow::json::ReaderBuilder::new(schema.clone())
        .with_batch_size(8192)
        .build(std::io::Cursor::new(rows))
        .map_err(|e| table_error("decode records", e))?;
    reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| table_error("decode records", e))
}

/// The dead letters as one Arrow batch: pipeline, topic, partition, offset, timestamp, key,
/// value, error.
fn dead_letter_batch(pipeline: &str, dead: &[DeadLetter]) -> Result<(SchemaRef, RecordBatch)> {
    use datafusion::arrow::array::{
        BinaryArray, Int32Array, Int64Array, StringArray, TimestampMicrosecondArray,
    };
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let schema = Arc::new(Schema::new(vec![
        Field::new("pipeline", DataType::Utf8, false),
        Field::new("topic", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("offset", DataType::Int64, false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            true,
        ),
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, false),
        Field::new("error", DataType::Utf8, false),
    ]));
    let timestamps: Vec<Option<i64>> = dead
        .iter()
        .map(|d| d.timestamp_ms.map(|ms| ms * 1000))
        .collect();
    let keys: Vec<Option<&[u8]>> = dead.iter().map(|d| d.key.as_deref()).collect();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec![pipeline; dead.len()])),
            Arc::new(StringArray::from_iter_values(
                dead.iter().map(|d| d.topic.as_str()),
            )),
            Arc::new(Int32Array::from_iter_values(
                dead.iter().map(|d| d.partition),
            )),
            Arc::new(Int64Array::from_iter_values(dead.iter().map(|d| d.offset))),
            Arc::new(TimestampMicrosecondArray::from(timestamps).with_timezone("+00:00")),
            Arc::new(BinaryArray::from(keys)),
            Arc::new(BinaryArray::from_iter_values(
                dead.iter().map(|d| d.value.as_slice()),
            )),
            Arc::new(StringArray::from_iter_values(
                dead.iter().map(|d| d.error.as_str()),
            )),
        ],
    )
    .map_err(|e| table_error("build dead letters", e))?;
    Ok((schema, batch))
}

fn is_conflict(e: &StreamError) -> bool {
    e.to_string().to_lowercase().contains("conflict")
}

/// Each partition's high watermark and lag behind it, for `committed` offsets (partitions
/// without committed offsets count from the low watermark). Blocking: call it off the
/// async runtime.
pub fn lag(
    spec: &PipelineSpec,
    committed: &HashMap<(String, i32), i64>,
) -> Result<Vec<PartitionLag>> {
    use rdkafka::consumer::BaseConsumer;
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &spec.bootstrap_servers)
        .set("group.id", format!("floe-{}-lag", spec.name));
    for (key, value) in &spec.properties {
        config.set(key, value);
    }
    let consumer: BaseConsumer = config.create()?;
    let mut lags = Vec::new();
    for topic in &spec.topics {
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(5))?;
        for found in metadata.topics().iter().filter(|t| t.name() == topic) {
            for partition in found.partitions() {
                let (low, high) =
                    consumer.fetch_watermarks(topic, partition.id(), Duration::from_secs(5))?;
                let next = committed
                    .get(&(topic.clone(), partition.id()))
                    .copied()
                    .unwrap_or(low);
                lags.push(PartitionLag {
                    topic: topic.clone(),
                    partition: partition.id(),
                    next_offset: next,
                    high_watermark: high,
                    lag: (high - next).max(0),
                });
            }
        }
    }
    Ok(lags)
}

/// One partition's position against the broker's.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// The next offset the table has committed (where the pipeline resumes).
    pub next_offset: i64,
    pub high_watermark: i64,
    pub lag: i64,
}
