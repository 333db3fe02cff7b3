//! One Kafka-to-Iceberg pipeline: assign every partition of its topics at the offsets the
//! table has committed, batch records, append each batch with its offsets in one snapshot.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogService, CreateTable, LoadedTable};
use floe_sql::SqlEngine;
use iceberg::spec::TableMetadata;
use iceberg::{NamespaceIdent, TableIdent};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::format::Decoder;
use crate::registry::{HttpRegistry, SchemaSource};
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
    /// The Kafka consumer group (default `floe-<name>`). The table's snapshot summaries hold
    /// the authoritative offsets; after each commit they are also committed to this group, so
    /// Kafka's own tools show the pipeline's position and lag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_group: Option<String>,
    /// Further librdkafka settings (SASL, TLS, …).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// A batch is committed this often (default 1000 ms)…
    #[serde(default = "default_interval")]
    pub commit_interval_ms: u64,
    /// …or once it holds this many records (default 100,000)…
    #[serde(default = "default_max_records")]
    pub max_records: usize,
    /// …or this many bytes of record values (default 64 MiB).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
    /// How record values are encoded (default JSON).
    #[serde(default)]
    pub format: Format,
    /// The Confluent-compatible schema registry the Avro, Protobuf and JSON Schema formats
    /// look schema ids up in; unset means Floe's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_registry_url: Option<String>,
    /// Kafka coordinates kept as columns next to the record's fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metadata_columns: Vec<MetadataColumn>,
    /// The partition spec of a table the pipeline creates (`day(ts)`, `bucket(16, id)`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_by: Vec<String>,
    /// The sort order of a table the pipeline creates (`ts`, `id desc`, `name asc nulls last`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sort_by: Vec<String>,
}

impl Default for PipelineSpec {
    fn default() -> Self {
        Self {
            name: String::new(),
            warehouse: String::new(),
            namespace: Vec::new(),
            table: String::new(),
            bootstrap_servers: String::new(),
            topics: Vec::new(),
            start: StartPosition::default(),
            consumer_group: None,
            properties: BTreeMap::new(),
            commit_interval_ms: default_interval(),
            max_records: default_max_records(),
            max_bytes: default_max_bytes(),
            format: Format::default(),
            schema_registry_url: None,
            metadata_columns: Vec::new(),
            partition_by: Vec::new(),
            sort_by: Vec::new(),
        }
    }
}

/// How a topic's record values are encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// A JSON object per record; the table's schema is inferred and evolved.
    #[default]
    Json,
    /// Avro in the Confluent wire format (magic byte, schema id, body).
    Avro,
    /// JSON in the Confluent wire format, described by a JSON Schema in the registry.
    JsonSchema,
    /// Protobuf in the Confluent wire format (with message indexes).
    Protobuf,
    /// The value's bytes as they are, in a `value` column.
    Raw,
}

/// A Kafka coordinate kept as a column (`_kafka_<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetadataColumn {
    /// `_kafka_key` (binary).
    Key,
    /// `_kafka_topic` (string).
    Topic,
    /// `_kafka_partition` (int).
    Partition,
    /// `_kafka_offset` (long).
    Offset,
    /// `_kafka_timestamp` (timestamptz).
    Timestamp,
    /// `_kafka_headers` (list of struct<key string, value binary>, in record order).
    Headers,
}

impl MetadataColumn {
    pub const ALL: [MetadataColumn; 6] = [
        MetadataColumn::Key,
        MetadataColumn::Topic,
        MetadataColumn::Partition,
        MetadataColumn::Offset,
        MetadataColumn::Timestamp,
        MetadataColumn::Headers,
    ];

    pub fn column(self) -> &'static str {
        match self {
            MetadataColumn::Key => "_kafka_key",
            MetadataColumn::Topic => "_kafka_topic",
            MetadataColumn::Partition => "_kafka_partition",
            MetadataColumn::Offset => "_kafka_offset",
            MetadataColumn::Timestamp => "_kafka_timestamp",
            MetadataColumn::Headers => "_kafka_headers",
        }
    }

    fn of_column(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.column() == name)
    }

    /// The column's Arrow field (optional: a record may lack a key or a timestamp).
    fn field(self) -> Field {
        use datafusion::arrow::datatypes::{DataType, TimeUnit};
        let data_type = match self {
            MetadataColumn::Key => DataType::Binary,
            MetadataColumn::Topic => DataType::Utf8,
            MetadataColumn::Partition => DataType::Int32,
            MetadataColumn::Offset => DataType::Int64,
            MetadataColumn::Timestamp => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
            }
            MetadataColumn::Headers => DataType::List(Arc::new(Field::new(
                "element",
                DataType::Struct(
                    vec![
                        Field::new("key", DataType::Utf8, false),
                        Field::new("value", DataType::Binary, true),
                    ]
                    .into(),
                ),
                false,
            ))),
        };
        Field::new(self.column(), data_type, true)
    }
}

fn default_interval() -> u64 {
    1000
}

fn default_max_records() -> usize {
    100_000
}

fn default_max_bytes() -> usize {
    64 << 20
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
        if self.max_records == 0 || self.max_bytes == 0 {
            return Err(StreamError::Invalid(
                "max-records and max-bytes must be above zero".into(),
            ));
        }
        for item in &self.partition_by {
            floe_sql::write::partition_field(item)
                .map_err(|e| StreamError::Invalid(format!("partition-by: {e}")))?;
        }
        for item in &self.sort_by {
            parse_sort_field(item)?;
        }
        Ok(())
    }

    fn ident(&self) -> Result<TableIdent> {
        let namespace = NamespaceIdent::from_vec(self.namespace.clone())
            .map_err(|e| StreamError::Invalid(format!("namespace: {e}")))?;
        Ok(TableIdent::new(namespace, self.table.clone()))
    }

    /// The definition with its secrets masked (`***`): librdkafka settings whose names
    /// speak of passwords, secrets, tokens, JAAS configurations or private keys, and the
    /// password in the registry URL. What the API answers and shows.
    pub fn redacted(&self) -> PipelineSpec {
        const MASK: &str = "***";
        let secret = |key: &str| {
            let key = key.to_ascii_lowercase();
            ["password", "secret", "token", "jaas", "key.pem", "private"]
                .iter()
                .any(|word| key.contains(word))
        };
        let mut spec = self.clone();
        for (key, value) in spec.properties.iter_mut() {
            if secret(key) {
                *value = MASK.into();
            }
        }
        if let Some(url) = &spec.schema_registry_url
            && let Ok(mut parsed) = reqwest::Url::parse(url)
            && parsed.password().is_some()
            && parsed.set_password(Some(MASK)).is_ok()
        {
            spec.schema_registry_url = Some(parsed.to_string());
        }
        spec
    }

    /// The Kafka consumer group offsets are mirrored to.
    pub fn group(&self) -> String {
        self.consumer_group
            .clone()
            .unwrap_or_else(|| format!("floe-{}", self.name))
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

/// Partition high watermarks as librdkafka's statistics report them (every 5 s).
#[derive(Clone, Default)]
pub struct Watermarks(Arc<std::sync::Mutex<HashMap<(String, i32), i64>>>);

impl rdkafka::client::ClientContext for Watermarks {
    fn stats(&self, statistics: rdkafka::Statistics) {
        let mut marks = self.0.lock().expect("watermarks");
        for (topic, found) in statistics.topics {
            for (partition, state) in found.partitions {
                if partition >= 0 && state.hi_offset >= 0 {
                    marks.insert((topic.clone(), partition), state.hi_offset);
                }
            }
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Watermarks {}

type PipelineConsumer = StreamConsumer<Watermarks>;

/// One partition's position: the next offset committed to the table, the broker's high
/// watermark when last reported, and the lag between them.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PartitionProgress {
    pub topic: String,
    pub partition: i32,
    pub next_offset: i64,
    pub high_watermark: Option<i64>,
    pub lag: Option<i64>,
}

/// What a pipeline has done since it started.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct PipelineStats {
    pub records_committed: u64,
    pub bytes_committed: u64,
    pub commits: u64,
    /// Records the table could not take (dead letters, gaps included).
    pub rejected_records: u64,
    /// Rows written to the dead-letter table.
    pub dead_letters: u64,
    /// Records the broker's retention deleted before the pipeline read them.
    pub records_lost: u64,
    /// Data files written by committed snapshots.
    pub files_written: u64,
    /// Time spent committing (writing files and the snapshot).
    pub commit_seconds: f64,
    /// The last commit: how long it took, how many files it wrote, when it ended.
    pub last_commit_seconds: f64,
    pub last_commit_files: u64,
    pub last_commit_at_ms: i64,
    /// When the run started (ms since the epoch).
    pub started_at_ms: i64,
    /// The partitions this run reads.
    pub partitions: Vec<PartitionProgress>,
}

/// A running pipeline.
pub struct Pipeline {
    spec: PipelineSpec,
    catalog: Arc<CatalogService>,
    sql: Arc<SqlEngine>,
    /// Where schema ids are looked up (Avro, Protobuf, JSON Schema).
    registry: Option<Arc<dyn SchemaSource>>,
    stats: std::sync::Mutex<PipelineStats>,
    /// The next offset of each partition this run reads, as committed to the table.
    committed: std::sync::Mutex<HashMap<(String, i32), i64>>,
    watermarks: Watermarks,
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
    /// Fields the records' registry schemas give (Avro, Protobuf, JSON Schema): the table
    /// follows them instead of inferring from the rows.
    fields: Vec<Field>,
}

/// Where a record came from.
struct Source {
    topic: String,
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    key: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    /// The value as received, when the row is a conversion of it.
    original: Option<Vec<u8>>,
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

impl Batch {
    /// Takes a record whose value decoded to `row` (one JSON object, no newline).
    fn push(&mut self, source: Source, row: &[u8]) {
        self.rows.extend_from_slice(row);
        self.rows.push(b'\n');
        self.ends.push(self.rows.len());
        self.sources.push(source);
        self.records += 1;
    }

    /// Dead-letters a record unless an earlier run did (its offset lies below what the
    /// dead-letter table has committed for the partition).
    fn reject(&mut self, letter: DeadLetter, dead_committed: &HashMap<(String, i32), i64>) {
        self.rejected += 1;
        let done = dead_committed
            .get(&(letter.topic.clone(), letter.partition))
            .is_some_and(|next| letter.offset < *next);
        if !done {
            self.dead.push(letter);
        }
    }
}

impl Pipeline {
    pub fn new(
        spec: PipelineSpec,
        catalog: Arc<CatalogService>,
        sql: Arc<SqlEngine>,
    ) -> Result<Self> {
        spec.validate()?;
        let registry: Option<Arc<dyn SchemaSource>> = match &spec.schema_registry_url {
            Some(url) => Some(Arc::new(HttpRegistry::new(url)?)),
            None => None,
        };
        Ok(Self {
            spec,
            catalog,
            sql,
            registry,
            stats: Default::default(),
            committed: Default::default(),
            watermarks: Watermarks::default(),
        })
    }

    /// Looks schema ids up in `registry` (Floe's own) unless the spec names another.
    pub fn with_registry(mut self, registry: Arc<dyn SchemaSource>) -> Self {
        if self.spec.schema_registry_url.is_none() {
            self.registry = Some(registry);
        }
        self
    }

    /// What this pipeline has done since it was made.
    pub fn stats(&self) -> PipelineStats {
        let mut stats = self.stats.lock().expect("pipeline stats").clone();
        let marks = self.watermarks.0.lock().expect("watermarks").clone();
        let committed = self.committed.lock().expect("pipeline offsets");
        stats.partitions = committed
            .iter()
            .map(|((topic, partition), next)| {
                let high = marks.get(&(topic.clone(), *partition)).copied();
                PartitionProgress {
                    topic: topic.clone(),
                    partition: *partition,
                    next_offset: *next,
                    high_watermark: high,
                    lag: high.map(|h| (h - next).max(0)),
                }
            })
            .collect();
        stats
            .partitions
            .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        stats
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

    fn consumer(&self) -> Result<PipelineConsumer> {
        let settings = [
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "false"),
            // When the prefetch queue is full, fetch again soon after it drains rather than
            // after librdkafka's default second: a backlog is read at the pipeline's pace.
            ("fetch.queue.backoff.ms", "20"),
            // A position the broker no longer holds is an error the pipeline answers (it
            // records the gap), never a silent jump.
            ("auto.offset.reset", "error"),
            // High watermarks for the lag in status and metrics.
            ("statistics.interval.ms", "5000"),
        ];
        Ok(client_config(&self.spec, &self.spec.group(), &settings)
            .create_with_context(self.watermarks.clone())?)
    }

    /// Every partition of the pipeline's topics with the offset to read next: the table's
    /// committed offset, else the log's start or end (resolved now, so a restart before the
    /// first commit reads the same records).
    fn positions(
        &self,
        consumer: &PipelineConsumer,
        committed: &HashMap<(String, i32), i64>,
        only: Option<&BTreeSet<(String, i32)>>,
    ) -> Result<HashMap<(String, i32), i64>> {
        let mut positions = HashMap::new();
        for key in topic_partitions(consumer, &self.spec)? {
            if only.is_some_and(|only| !only.contains(&key)) {
                continue;
            }
            let offset = match committed.get(&key) {
                Some(offset) => *offset,
                None => {
                    let (low, high) =
                        consumer.fetch_watermarks(&key.0, key.1, Duration::from_secs(10))?;
                    match self.spec.start {
                        StartPosition::Earliest => low,
                        StartPosition::Latest => high,
                    }
                }
            };
            positions.insert(key, offset);
        }
        Ok(positions)
    }

    /// Reads every partition of the pipeline's topics and commits until `shutdown`; returns
    /// what it did.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<PipelineStats> {
        self.run_on(shutdown, None).await
    }

    /// Reads `only` these partitions (all when `None`) and commits until `shutdown`. Runs on
    /// several nodes may share a pipeline when their partitions do not overlap: each commit
    /// carries every partition's offsets (the table's, with this run's own updated), and is
    /// fenced by this run's own partitions only.
    pub async fn run_on(
        &self,
        shutdown: CancellationToken,
        only: Option<&BTreeSet<(String, i32)>>,
    ) -> Result<PipelineStats> {
        let consumer = self.consumer()?;
        let mut next = match self.load().await? {
            Some(loaded) => self.spec.committed_offsets(&loaded.metadata),
            None => HashMap::new(),
        };
        // The next offset of every partition as far as this run has read.
        let mut pending = self.positions(&consumer, &next, only)?;
        next.retain(|partition, _| pending.contains_key(partition));
        *self.committed.lock().expect("pipeline offsets") = pending.clone();
        assign(&consumer, &pending)?;

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
        let mut decoder = Decoder::new(self.spec.format, self.registry.clone());
        let headers = self
            .spec
            .metadata_columns
            .contains(&MetadataColumn::Headers);
        let mut batch = Batch::default();
        let mut deadline = tokio::time::Instant::now() + interval;
        // One stream for the whole run: a `recv()` future dropped by the timer branch could
        // miss the queue's wake-up and stall the pipeline.
        let mut messages = consumer.stream();
        loop {
            let received = tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(deadline) => None,
                received = futures::StreamExt::next(&mut messages) => match received {
                    Some(received) => Some(received),
                    None => break,
                },
            };
            let flush = match received {
                None => true,
                Some(Ok(message)) => {
                    let payload = message.payload().unwrap_or_default();
                    let source = Source {
                        topic: message.topic().to_string(),
                        partition: message.partition(),
                        offset: message.offset(),
                        timestamp_ms: message.timestamp().to_millis(),
                        key: message.key().map(<[u8]>::to_vec),
                        headers: if headers {
                            record_headers(&message)
                        } else {
                            Vec::new()
                        },
                        // Rows of registry formats are converted: a dead letter keeps the
                        // original bytes.
                        original: (self.spec.format != Format::Json).then(|| payload.to_vec()),
                    };
                    pending.insert((source.topic.clone(), source.partition), source.offset + 1);
                    match decoder.decode(payload, &mut batch.fields).await? {
                        Ok(row) => batch.push(source, &row),
                        Err(error) => batch.reject(
                            DeadLetter {
                                topic: source.topic,
                                partition: source.partition,
                                offset: source.offset,
                                timestamp_ms: source.timestamp_ms,
                                key: source.key,
                                value: source.original.unwrap_or_else(|| payload.to_vec()),
                                error,
                            },
                            &dead_committed,
                        ),
                    }
                    batch.records >= self.spec.max_records
                        || batch.rows.len() >= self.spec.max_bytes
                }
                Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset))) => {
                    stats.records_lost +=
                        self.skip_gaps(&consumer, &mut pending, &mut batch, &dead_committed)?;
                    assign(&consumer, &pending)?;
                    false
                }
                Some(Err(e @ KafkaError::MessageConsumptionFatal(_))) => return Err(e.into()),
                Some(Err(e)) => {
                    // Transport trouble and the like: librdkafka retries on its own.
                    tracing::warn!(pipeline = %self.spec.name, error = %e, "kafka consumer");
                    false
                }
            };
            if flush {
                if batch.records > 0 || !batch.dead.is_empty() {
                    let started = std::time::Instant::now();
                    let decoded = self.prepare(&mut batch, &dead_committed).await?;
                    if !batch.dead.is_empty() {
                        // Dead letters first: a crash before the table's commit re-reads the
                        // records, and those below the dead-letter table's offsets are not
                        // dead-lettered twice.
                        self.commit_dead_letters(&batch.dead, &pending).await?;
                        dead_committed = pending.clone();
                        stats.dead_letters += batch.dead.len() as u64;
                    }
                    let rows = decoded.as_ref().map_or(0, |b| b.num_rows());
                    let files = self.commit(decoded, &next, &pending).await?;
                    let elapsed = started.elapsed().as_secs_f64();
                    stats.commit_seconds += elapsed;
                    stats.last_commit_seconds = elapsed;
                    stats.records_committed += rows as u64;
                    stats.rejected_records += batch.rejected;
                    if rows > 0 {
                        // The table now says `pending`; a batch of only dead letters left it
                        // where it was, and its offsets move with the next rows.
                        stats.bytes_committed += batch.rows.len() as u64;
                        stats.commits += 1;
                        stats.files_written += files as u64;
                        stats.last_commit_files = files as u64;
                        stats.last_commit_at_ms = now_ms();
                        next = pending.clone();
                        *self.committed.lock().expect("pipeline offsets") = pending.clone();
                        mirror_offsets(&consumer, &next);
                    }
                    *self.stats.lock().expect("pipeline stats") = stats.clone();
                    batch = Batch::default();
                }
                deadline = tokio::time::Instant::now() + interval;
            }
        }
        Ok(stats)
    }

    /// Answers the broker's "offset out of range": each partition whose next offset lies
    /// below the log's start lost records to the broker's retention before the pipeline
    /// read them. The gap is recorded as a dead letter (offset = its first offset, the
    /// error says how many) and the partition moves to the log's start. Returns how many
    /// records were lost. A next offset beyond the log's end (the topic was recreated) is
    /// an error: the pipeline stops rather than guess.
    fn skip_gaps(
        &self,
        consumer: &PipelineConsumer,
        pending: &mut HashMap<(String, i32), i64>,
        batch: &mut Batch,
        dead_committed: &HashMap<(String, i32), i64>,
    ) -> Result<u64> {
        let mut lost = 0;
        for ((topic, partition), at) in pending.iter_mut() {
            let (low, high) =
                consumer.fetch_watermarks(topic, *partition, Duration::from_secs(10))?;
            if *at > high {
                return Err(StreamError::Invalid(format!(
                    "partition {partition} of topic {topic:?} ends at offset {high}, before the \
                     pipeline's next offset {at}: the topic was probably recreated; drop the \
                     pipeline's table or define a new pipeline"
                )));
            }
            if *at < low {
                let count = low - *at;
                tracing::error!(
                    pipeline = %self.spec.name, %topic, partition, from = *at, to = low - 1,
                    "records were deleted by the broker's retention before the pipeline read them"
                );
                batch.reject(
                    DeadLetter {
                        topic: topic.clone(),
                        partition: *partition,
                        offset: *at,
                        timestamp_ms: None,
                        key: None,
                        value: Vec::new(),
                        error: format!(
                            "offsets {at} to {} ({count} records) were deleted by the broker's \
                             retention before the pipeline read them",
                            low - 1
                        ),
                    },
                    dead_committed,
                );
                lost += count as u64;
                *at = low;
            }
        }
        Ok(lost)
    }

    /// Appends `batch` with `offsets` in one snapshot, retrying lost races; returns the
    /// number of data files written. The files are written once; a lost race re-reads the
    /// table and commits them again. The table must still say `from` — what this run last
    /// committed — for every partition: if another node committed meanwhile (it took the
    /// pipeline over), this one is fenced and stops. The check and the commit see the same
    /// snapshot (the commit requires `main` unchanged), so two nodes never both commit the
    /// same records.
    async fn commit(
        &self,
        batch: Option<RecordBatch>,
        from: &HashMap<(String, i32), i64>,
        offsets: &HashMap<(String, i32), i64>,
    ) -> Result<usize> {
        // Nothing to write (only dead letters): the offsets move with the next rows.
        let Some(batch) = batch else { return Ok(0) };
        self.append(&self.spec.ident()?, batch, offsets, Some(from))
            .await
    }

    /// Appends `batch` to table `ident` in one snapshot carrying `offsets`, fenced by `from`
    /// when given (see [`Self::commit`]); returns the number of data files written.
    async fn append(
        &self,
        ident: &TableIdent,
        batch: RecordBatch,
        offsets: &HashMap<(String, i32), i64>,
        from: Option<&HashMap<(String, i32), i64>>,
    ) -> Result<usize> {
        let appended = crate::core::commit::append(
            &self.catalog,
            &self.sql,
            &Caller::system(),
            &self.spec.warehouse,
            ident,
            batch,
            |metadata| {
                let mut merged = self.spec.committed_offsets(metadata);
                if from.is_some_and(|from| {
                    from.iter()
                        .any(|(partition, offset)| merged.get(partition) != Some(offset))
                }) {
                    return Err(crate::core::IngestError::Fenced(self.spec.name.clone()));
                }
                // Every partition's offsets: what the table says, with this run's own updated.
                merged.extend(offsets.iter().map(|(k, v)| (k.clone(), *v)));
                Ok(self.offset_properties(&merged))
            },
        )
        .await?;
        Ok(appended.files)
    }

    /// Evolves the table to take the batch: fields it lacks (from the records' registry
    /// schemas, else inferred from every row) become optional columns, columns whose values
    /// now carry more (nested fields, a wider type) are evolved. Fields of a kind no column
    /// can hold are left out of the rows and logged.
    async fn evolve(&self, batch: &Batch, loaded: &mut LoadedTable) -> Result<()> {
        let mut seen = if batch.fields.is_empty() {
            crate::core::infer::infer_ndjson(&batch.rows).unwrap_or_default()
        } else {
            batch.fields.clone()
        };
        seen.extend(self.metadata_fields());
        match crate::core::evolve::evolve(
            &self.catalog,
            &Caller::system(),
            &self.spec.warehouse,
            &self.spec.ident()?,
            &seen,
        )
        .await
        {
            Ok(evolved) => *loaded = evolved,
            Err(e) => tracing::warn!(pipeline = %self.spec.name, error = %e, "evolve columns"),
        }
        Ok(())
    }

    /// The metadata columns the pipeline keeps.
    fn metadata_fields(&self) -> Vec<Field> {
        self.spec
            .metadata_columns
            .iter()
            .map(|c| c.field())
            .collect()
    }

    /// Makes the batch ready to commit: the table exists (created from the records' schema),
    /// new top-level fields have become optional columns, and the rows are decoded into one
    /// batch of the table's schema (metadata columns filled in, sorted by the table's sort
    /// order). Rows that do not fit the table (a text where a number belongs, say) join the
    /// dead letters with the reason; the rest flow on.
    async fn prepare(
        &self,
        batch: &mut Batch,
        dead_committed: &HashMap<(String, i32), i64>,
    ) -> Result<Option<RecordBatch>> {
        if batch.rows.is_empty() {
            return Ok(None);
        }
        let mut loaded = match self.load().await? {
            Some(loaded) => loaded,
            None => self.create_table(batch).await?,
        };
        let (mut schema, mut data_schema) = table_schemas(&loaded)?;
        let rows = batch.sources.len();
        // The fast path for JSON: every row decodes strictly (no field the table lacks, every
        // value of its column's type) into the table as it is.
        let metadata_present = self
            .metadata_fields()
            .iter()
            .all(|f| schema.field_with_name(f.name()).is_ok());
        let fast = if batch.fields.is_empty() && metadata_present {
            decode(&batch.rows, &data_schema, true)
                .ok()
                .filter(|d| d.num_rows() == rows)
        } else {
            None
        };
        let whole = match fast {
            Some(decoded) => Some(decoded),
            None => {
                self.evolve(batch, &mut loaded).await?;
                (schema, data_schema) = table_schemas(&loaded)?;
                decode(&batch.rows, &data_schema, false)
                    .ok()
                    .filter(|d| d.num_rows() == rows)
            }
        };
        let (decoded, kept) = match whole {
            Some(decoded) => (decoded, (0..rows).collect::<Vec<_>>()),
            None => {
                // Some row does not fit: decode row by row and dead-letter the misfits.
                let mut parts = Vec::new();
                let mut kept = Vec::new();
                let mut start = 0;
                let ends = std::mem::take(&mut batch.ends);
                for (i, end) in ends.iter().enumerate() {
                    let row = &batch.rows[start..*end];
                    start = *end;
                    let decoded = decode(row, &data_schema, false).and_then(|d| {
                        if d.num_rows() == 1 {
                            Ok(d)
                        } else {
                            Err(table_error(
                                "a record",
                                format!("holds {} rows, not one", d.num_rows()),
                            ))
                        }
                    });
                    match decoded {
                        Ok(decoded) => {
                            parts.push(decoded);
                            kept.push(i);
                        }
                        Err(e) => {
                            let source = &batch.sources[i];
                            let letter = DeadLetter {
                                topic: source.topic.clone(),
                                partition: source.partition,
                                offset: source.offset,
                                timestamp_ms: source.timestamp_ms,
                                key: source.key.clone(),
                                value: source.original.clone().unwrap_or_else(|| {
                                    row.strip_suffix(b"\n").unwrap_or(row).to_vec()
                                }),
                                error: crate::format::object_error(row)
                                    .unwrap_or_else(|| format!("does not fit the table: {e}")),
                            };
                            batch.reject(letter, dead_committed);
                        }
                    }
                }
                batch.ends = ends;
                let decoded = datafusion::arrow::compute::concat_batches(&data_schema, &parts)
                    .map_err(|e| table_error("decode records", e))?;
                (decoded, kept)
            }
        };
        if kept.is_empty() {
            return Ok(None);
        }
        let assembled = assemble(&schema, &decoded, &kept, &batch.sources)?;
        Ok(Some(assembled))
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

    /// Creates a table of the pipeline's warehouse.
    async fn create(
        &self,
        ident: &TableIdent,
        schema: iceberg::spec::Schema,
        partition_spec: Option<iceberg::spec::UnboundPartitionSpec>,
        write_order: Option<iceberg::spec::SortOrder>,
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
                    partition_spec,
                    write_order,
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
        if self.load_dead_letters().await?.is_none() {
            let iceberg_schema = floe_sql::write::iceberg_schema(&schema)
                .map_err(|e| table_error("dead-letter schema", e))?;
            match self.create(&ident, iceberg_schema, None, None).await {
                Ok(_) | Err(StreamError::Catalog(CatalogError::AlreadyExists { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        self.append(&ident, batch, offsets, None).await?;
        Ok(())
    }

    /// Creates the target table with the schema the batch's records give (their registry
    /// schema, else inferred from the first rows), the metadata columns, and the spec's
    /// partition spec and sort order.
    async fn create_table(&self, batch: &Batch) -> Result<LoadedTable> {
        let mut fields = if batch.fields.is_empty() {
            crate::core::infer::infer_ndjson(first_lines(&batch.rows, 1000))
                .map_err(|e| table_error("infer the table schema", e))?
        } else {
            batch.fields.clone()
        };
        fields.extend(self.metadata_fields());
        let schema = floe_sql::write::iceberg_schema(&Schema::new(fields))
            .map_err(|e| table_error("infer the table schema", e))?;
        let mut partition = Vec::new();
        for item in &self.spec.partition_by {
            partition.push(
                floe_sql::write::partition_field(item)
                    .map_err(|e| StreamError::Invalid(e.to_string()))?,
            );
        }
        let partition_spec = if partition.is_empty() {
            None
        } else {
            Some(
                floe_sql::write::partition_spec(&schema, &partition).map_err(|e| {
                    StreamError::Invalid(format!(
                        "partition-by: {e} (the records' fields are: {})",
                        field_names(&schema)
                    ))
                })?,
            )
        };
        let write_order = sort_order(&self.spec.sort_by, &schema)?;
        let ident = self.spec.ident()?;
        match self
            .create(&ident, schema, partition_spec, write_order)
            .await
        {
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

/// Commits `offsets` to the pipeline's Kafka consumer group, for Kafka's tools; the table
/// holds the authoritative ones, so a failure here is only logged.
fn mirror_offsets(consumer: &PipelineConsumer, offsets: &HashMap<(String, i32), i64>) {
    let committed = partition_list(offsets)
        .and_then(|list| Ok(consumer.commit(&list, rdkafka::consumer::CommitMode::Async)?));
    if let Err(e) = committed {
        tracing::debug!(error = %e, "mirror offsets to the consumer group");
    }
}

/// Assigns every partition at its offset.
fn assign(consumer: &PipelineConsumer, positions: &HashMap<(String, i32), i64>) -> Result<()> {
    consumer.assign(&partition_list(positions)?)?;
    Ok(())
}

/// Partitions at offsets, as librdkafka takes them.
fn partition_list(offsets: &HashMap<(String, i32), i64>) -> Result<TopicPartitionList> {
    let mut list = TopicPartitionList::new();
    for ((topic, partition), offset) in offsets {
        list.add_partition_offset(topic, *partition, Offset::Offset(*offset))?;
    }
    Ok(list)
}

/// A record's headers in order (a header without a value keeps `None`).
fn record_headers(
    message: &rdkafka::message::BorrowedMessage<'_>,
) -> Vec<(String, Option<Vec<u8>>)> {
    use rdkafka::message::Headers;
    message
        .headers()
        .map(|headers| {
            headers
                .iter()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect()
        })
        .unwrap_or_default()
}

fn field_names(schema: &iceberg::spec::Schema) -> String {
    schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks `sort-by` entries: `column [asc|desc] [nulls first|last]`.
fn parse_sort_field(item: &str) -> Result<(String, bool, Option<bool>)> {
    let words: Vec<String> = item
        .split_whitespace()
        .map(|w| w.to_ascii_lowercase())
        .collect();
    let bad = || {
        StreamError::Invalid(format!(
            "sort-by entry {item:?}: use `column [asc|desc] [nulls first|nulls last]`"
        ))
    };
    let column = item.split_whitespace().next().ok_or_else(bad)?.to_string();
    let (descending, rest) = match words.get(1).map(String::as_str) {
        Some("asc") => (false, &words[2..]),
        Some("desc") => (true, &words[2..]),
        _ => (false, &words[1..]),
    };
    let nulls_first = match rest {
        [] => None,
        [n, f] if n == "nulls" && f == "first" => Some(true),
        [n, l] if n == "nulls" && l == "last" => Some(false),
        _ => return Err(bad()),
    };
    Ok((column, descending, nulls_first))
}

/// The sort order `sort-by` describes over `schema` (none when empty).
fn sort_order(
    items: &[String],
    schema: &iceberg::spec::Schema,
) -> Result<Option<iceberg::spec::SortOrder>> {
    use iceberg::spec::{NullOrder, SortDirection, SortField, SortOrder, Transform};
    if items.is_empty() {
        return Ok(None);
    }
    let mut builder = SortOrder::builder();
    builder.with_order_id(1);
    for item in items {
        let (column, descending, nulls_first) = parse_sort_field(item)?;
        let field = schema.field_by_name(&column).ok_or_else(|| {
            StreamError::Invalid(format!(
                "sort-by names {column:?}, which is not a field of the records (they have: {})",
                field_names(schema)
            ))
        })?;
        // Iceberg's defaults: nulls first ascending, nulls last descending.
        let nulls_first = nulls_first.unwrap_or(!descending);
        builder.with_sort_field(
            SortField::builder()
                .source_id(field.id)
                .transform(Transform::Identity)
                .direction(if descending {
                    SortDirection::Descending
                } else {
                    SortDirection::Ascending
                })
                .null_order(if nulls_first {
                    NullOrder::First
                } else {
                    NullOrder::Last
                })
                .build(),
        );
    }
    Ok(Some(builder.build(schema).map_err(|e| {
        StreamError::Invalid(format!("sort-by: {e}"))
    })?))
}

/// The decoded rows (`kept` of `sources`, in order) with the table's metadata columns
/// filled in from their Kafka coordinates, as a batch of `schema`.
fn assemble(
    schema: &SchemaRef,
    decoded: &RecordBatch,
    kept: &[usize],
    sources: &[Source],
) -> Result<RecordBatch> {
    use datafusion::arrow::array::{
        ArrayRef, BinaryArray, BinaryBuilder, Int32Array, Int64Array, ListArray, StringArray,
        StringBuilder, StructArray, TimestampMicrosecondArray,
    };
    use datafusion::arrow::buffer::OffsetBuffer;
    use datafusion::arrow::datatypes::DataType;
    let kept: Vec<&Source> = kept.iter().map(|i| &sources[*i]).collect();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let Some(column) = MetadataColumn::of_column(field.name()) else {
            let values = decoded
                .column_by_name(field.name())
                .ok_or_else(|| table_error("assemble a batch", field.name()))?;
            columns.push(values.clone());
            continue;
        };
        let values: ArrayRef = match column {
            MetadataColumn::Key => Arc::new(BinaryArray::from(
                kept.iter().map(|s| s.key.as_deref()).collect::<Vec<_>>(),
            )),
            MetadataColumn::Topic => Arc::new(StringArray::from_iter_values(
                kept.iter().map(|s| s.topic.as_str()),
            )),
            MetadataColumn::Partition => Arc::new(Int32Array::from_iter_values(
                kept.iter().map(|s| s.partition),
            )),
            MetadataColumn::Offset => {
                Arc::new(Int64Array::from_iter_values(kept.iter().map(|s| s.offset)))
            }
            MetadataColumn::Timestamp => Arc::new(
                TimestampMicrosecondArray::from(
                    // A producer's timestamp beyond microseconds' range (year 294,247) is none.
                    kept.iter()
                        .map(|s| s.timestamp_ms.and_then(|ms| ms.checked_mul(1000)))
                        .collect::<Vec<_>>(),
                )
                .with_timezone("+00:00"),
            ),
            MetadataColumn::Headers => {
                let DataType::List(element) = field.data_type() else {
                    return Err(table_error("_kafka_headers", "the column is not a list"));
                };
                let DataType::Struct(entry) = element.data_type() else {
                    return Err(table_error("_kafka_headers", "the list is not of structs"));
                };
                let mut keys = StringBuilder::new();
                let mut header_values = BinaryBuilder::new();
                let mut lengths = Vec::with_capacity(kept.len());
                for source in &kept {
                    lengths.push(source.headers.len());
                    for (key, value) in &source.headers {
                        keys.append_value(key);
                        header_values.append_option(value.as_deref());
                    }
                }
                let children: Vec<ArrayRef> = [
                    Arc::new(keys.finish()) as ArrayRef,
                    Arc::new(header_values.finish()),
                ]
                .iter()
                .zip(entry.iter())
                .map(|(values, field)| {
                    datafusion::arrow::compute::cast(values, field.data_type())
                        .map_err(|e| table_error("_kafka_headers", e))
                })
                .collect::<Result<_>>()?;
                let entries = StructArray::try_new(entry.clone(), children, None)
                    .map_err(|e| table_error("_kafka_headers", e))?;
                Arc::new(
                    ListArray::try_new(
                        element.clone(),
                        OffsetBuffer::from_lengths(lengths),
                        Arc::new(entries),
                        None,
                    )
                    .map_err(|e| table_error("_kafka_headers", e))?,
                )
            }
        };
        let values = if values.data_type() == field.data_type() {
            values
        } else {
            datafusion::arrow::compute::cast(&values, field.data_type())
                .map_err(|e| table_error(field.name().as_str(), e))?
        };
        columns.push(values);
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(kept.len())),
    )
    .map_err(|e| table_error("assemble a batch", e))
}

/// The first `count` lines of NDJSON `rows`.
fn first_lines(rows: &[u8], count: usize) -> &[u8] {
    let end = rows
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(count.saturating_sub(1))
        .map_or(rows.len(), |(i, _)| i + 1);
    &rows[..end]
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// The table's Arrow schema, and the part of it records fill (all but metadata columns).
fn table_schemas(loaded: &LoadedTable) -> Result<(SchemaRef, SchemaRef)> {
    let schema: SchemaRef = Arc::new(
        iceberg::arrow::schema_to_arrow_schema(loaded.metadata.current_schema())
            .map_err(|e| table_error("table schema", e))?,
    );
    let data_schema = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .filter(|f| MetadataColumn::of_column(f.name()).is_none())
            .cloned()
            .collect::<Vec<_>>(),
    ));
    Ok((schema, data_schema))
}

/// NDJSON rows decoded against the table's schema as one batch; `strict` refuses fields
/// the schema lacks (at any depth) rather than ignoring them.
fn decode(rows: &[u8], schema: &SchemaRef, strict: bool) -> Result<RecordBatch> {
    let reader = datafusion::arrow::json::ReaderBuilder::new(schema.clone())
        .with_batch_size(1 << 20)
        .with_strict_mode(strict)
        .build(std::io::Cursor::new(rows))
        .map_err(|e| table_error("decode records", e))?;
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| table_error("decode records", e))?;
    datafusion::arrow::compute::concat_batches(schema, &batches)
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
        .map(|d| d.timestamp_ms.and_then(|ms| ms.checked_mul(1000)))
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

/// The broker, consumer group and `settings`, then the spec's own librdkafka settings (SASL,
/// TLS, …), which win.
fn client_config(spec: &PipelineSpec, group: &str, settings: &[(&str, &str)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &spec.bootstrap_servers)
        .set("group.id", group);
    for (key, value) in settings {
        config.set(*key, *value);
    }
    for (key, value) in &spec.properties {
        config.set(key, value);
    }
    config
}

/// A short-lived consumer for metadata and watermarks.
fn metadata_consumer(spec: &PipelineSpec) -> Result<rdkafka::consumer::BaseConsumer> {
    Ok(client_config(spec, &format!("floe-{}-metadata", spec.name), &[]).create()?)
}

/// Every partition of the pipeline's topics, sorted; a topic the broker does not list (or
/// lists without partitions) is an error naming it.
fn topic_partitions<C: rdkafka::consumer::ConsumerContext>(
    consumer: &impl Consumer<C>,
    spec: &PipelineSpec,
) -> Result<Vec<(String, i32)>> {
    let mut partitions = Vec::new();
    for topic in &spec.topics {
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
        let before = partitions.len();
        for found in metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
        {
            for partition in found.partitions() {
                partitions.push((topic.clone(), partition.id()));
            }
        }
        if partitions.len() == before {
            return Err(StreamError::Invalid(format!(
                "topic {topic:?} has no partitions on {} (does it exist?)",
                spec.bootstrap_servers
            )));
        }
    }
    partitions.sort();
    Ok(partitions)
}

/// Every partition of the pipeline's topics, sorted. Blocking: call it off the async
/// runtime.
pub fn partitions(spec: &PipelineSpec) -> Result<Vec<(String, i32)>> {
    topic_partitions(&metadata_consumer(spec)?, spec)
}

/// Each partition's high watermark and lag behind it, for `committed` offsets (partitions
/// without committed offsets count from the low watermark). Blocking: call it off the
/// async runtime.
pub fn lag(
    spec: &PipelineSpec,
    committed: &HashMap<(String, i32), i64>,
) -> Result<Vec<PartitionLag>> {
    let consumer = metadata_consumer(spec)?;
    let mut lags = Vec::new();
    for (topic, partition) in topic_partitions(&consumer, spec)? {
        let (low, high) = consumer.fetch_watermarks(&topic, partition, Duration::from_secs(5))?;
        let next = committed
            .get(&(topic.clone(), partition))
            .copied()
            .unwrap_or(low);
        lags.push(PartitionLag {
            topic,
            partition,
            next_offset: next,
            high_watermark: high,
            lag: (high - next).max(0),
        });
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
