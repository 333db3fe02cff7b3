//! One Kafka-to-Iceberg pipeline: assign every partition of its topics at the offsets the
//! table has committed, batch records, append each batch with its offsets in one snapshot.
//!
//! - [`spec`]: what a pipeline is (topics, format, table, partitioning, sort order, start);
//! - [`client`]: the Kafka client — consumers, partitions, watermarks and lag;
//! - [`connect`]: Kafka Connect's JSON with schemas, typed as its schema says;
//! - [`batch`]: records read and not committed yet, decoded into the table's rows, and the
//!   dead letters among them;
//! - [`table`]: the pipeline's table — made on first write, evolved, appended to with the
//!   offsets in the same snapshot — and its dead-letter table;
//! - [`supervisor`]: the partitions of every pipeline dealt over the nodes, and this node's
//!   share run;
//! - [`redrive`]: the pipeline's dead letters sent back to its topics;
//! - this module: the run loop.

mod batch;
mod changes;
mod client;
mod connect;
mod redrive;
mod spec;
mod supervisor;
mod table;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogService, LoadedTable};
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
use crate::{Refusal, Result, StreamError, table_error};

use batch::*;
use client::*;
pub use client::{PartitionLag, lag};
pub(crate) use client::{Watermarks, partitions};
pub use redrive::{Redriven, redrive};
pub use spec::{Format, MetadataColumn, Mode, PipelineSpec, StartPosition};
pub use supervisor::Pipelines;

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
    pub(crate) async fn run_on(
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
            started_at_ms: floe_catalog::clock::now_ms(),
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
                    let value = message.payload();
                    let payload = value.unwrap_or_default();
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
                        // Rows of registry formats, Connect's JSON, change events and
                        // upserts are converted: a dead letter keeps the bytes received (a
                        // tombstone none).
                        original: (value.is_some()
                            && (self.spec.format != Format::Json
                                || self.spec.mode != Mode::Append
                                || connect::looks_wrapped(payload)))
                        .then(|| payload.to_vec()),
                    };
                    pending.insert((source.topic.clone(), source.partition), source.offset + 1);
                    let change = self
                        .change(
                            &mut decoder,
                            value,
                            source.key.as_deref(),
                            &mut batch.fields,
                        )
                        .await?;
                    match change {
                        Ok(changes::Change::Upsert(row)) => batch.push(source, &row),
                        Ok(changes::Change::Delete(key)) => batch.push_delete(source, &key),
                        // Its offset moves with the batch's commit.
                        Ok(changes::Change::Skip) => {}
                        Err(refusal) => batch.reject(
                            DeadLetter {
                                topic: source.topic,
                                partition: source.partition,
                                offset: source.offset,
                                timestamp_ms: source.timestamp_ms,
                                key: source.key,
                                value: value.map(|v| source.original.unwrap_or_else(|| v.to_vec())),
                                error: refusal.to_string(),
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
                    let files = self.commit(decoded, &batch, &next, &pending).await?;
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
                        stats.last_commit_at_ms = floe_catalog::clock::now_ms();
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

    /// The change a record of value `value` (none: a tombstone) and key `key` makes, as the
    /// pipeline's mode reads it; or why the record cannot change the table.
    async fn change(
        &self,
        decoder: &mut Decoder,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
        fields: &mut Vec<Field>,
    ) -> Result<std::result::Result<changes::Change, Refusal>> {
        use changes::Change;
        // A key the registry serialized (magic byte 0, schema id) is decoded to its object.
        let registered = !matches!(self.spec.format, Format::Json | Format::Raw);
        let decoded_key;
        let key = match key {
            Some(k) if registered && self.spec.mode != Mode::Append && k.first() == Some(&0) => {
                match decoder.decode(k, &mut Vec::new()).await? {
                    Ok(row) => {
                        decoded_key = row;
                        Some(decoded_key.as_slice())
                    }
                    Err(error) => return Ok(Err(error.context("the record key"))),
                }
            }
            other => other,
        };
        let value = match (self.spec.mode, value) {
            (Mode::Upsert, None) => {
                return Ok(changes::key_of_record(key, &self.spec.key).map(Change::Delete));
            }
            // A tombstone follows a delete event for log compaction: the delete did the work.
            (Mode::Debezium, None) => return Ok(Ok(Change::Skip)),
            (_, value) => value.unwrap_or_default(),
        };
        let row = match decoder.decode(value, fields).await? {
            Ok(row) => row,
            Err(error) => return Ok(Err(error)),
        };
        // Kafka Connect's JSON with its schema: the payload, typed as the schema says.
        let row = match self.spec.format {
            Format::Json => match connect::typed(&row) {
                Ok(Some(typed)) => {
                    let mut typed_fields = typed.fields;
                    // A change event's columns are its `after` row's; one without a row (a
                    // message, a delete) brings none.
                    if self.spec.mode == Mode::Debezium && !changes::row_fields(&mut typed_fields) {
                        typed_fields.clear();
                    }
                    for field in typed_fields {
                        if !fields.iter().any(|f| f.name() == field.name()) {
                            fields.push(field);
                        }
                    }
                    typed.row
                }
                Ok(None) => row,
                Err(error) => return Ok(Err(error)),
            },
            _ => row,
        };
        Ok(match self.spec.mode {
            Mode::Append | Mode::Upsert => Ok(Change::Upsert(row)),
            Mode::Debezium => {
                changes::row_fields(fields);
                changes::debezium(&row, key, &self.spec.key)
            }
        })
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
                        value: None,
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
}
