//! A pipeline's dead letters sent back to its topics once the cause is fixed (a column
//! widened, a schema registered): each letter's key and value, unchanged, produced to the
//! partition it came from, in offset order, then removed from the dead-letter table. The
//! pipeline reads them again as new records, through the same decoder and mode — whatever it
//! still cannot take becomes a dead letter again, with its new offset.
//!
//! Only letters of this pipeline (`pipeline` names it; `door` is `kafka`, or empty on rows of
//! the earlier form) whose `source` is one of the pipeline's topics are sent: a row someone
//! wrote into the dead-letter table naming another topic is never produced anywhere (one
//! naming the pipeline's own topic is, like any letter: writing a dead-letter table is
//! writing its table, through a redrive). A letter with a key and no record is a tombstone and
//! is sent as one; one with neither (a gap the broker's retention made) is kept. One redrive
//! sends at most 64 MiB of records (`more` says when letters are left), one at a time per
//! pipeline on a node. A crash between sending and removing leaves the letters to be sent
//! once more by the next redrive. Record headers are not kept in a dead letter, so they are
//! not sent back.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use floe_catalog::service::CatalogService;
use floe_sql::SqlEngine;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::Serialize;

use super::PipelineSpec;
use super::client::metadata_consumer;
use crate::core::dead_letter::held::{self, Held};
use crate::{Result, StreamError};

/// The redrives of each pipeline on this node (one at a time).
static RUNNING: std::sync::LazyLock<
    std::sync::Mutex<HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
> = std::sync::LazyLock::new(Default::default);

/// The most bytes of records one redrive reads and sends.
const MOST_BYTES: usize = 64 << 20;

/// How long one record's delivery may take.
const DELIVERY: Duration = Duration::from_secs(30);

/// What a redrive did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Redriven {
    /// The pipeline's letters found.
    pub letters: usize,
    /// Letters sent back to their topics (and removed).
    pub sent: usize,
    /// Letters left as they are, with why.
    pub kept: Vec<String>,
    /// More letters than one redrive sends (64 MiB of records): run it again.
    pub more: bool,
}

/// A letter's place in its topic: (topic, partition, offset).
type Place = (String, i32, i64);

fn place(letter: &Held) -> Option<Place> {
    Some((letter.source.clone()?, letter.partition?, letter.offset?))
}

/// Whether `letter` is a Kafka letter of the pipeline `name`.
fn of_pipeline(letter: &Held, name: &str) -> bool {
    letter.pipeline.as_deref() == Some(name)
        && letter.door.as_deref().is_none_or(|door| door == "kafka")
}

/// Sends `spec`'s dead letters back to its topics (see the module); a dry run only counts
/// them.
pub async fn redrive(
    spec: &PipelineSpec,
    catalog: &CatalogService,
    sql: &SqlEngine,
    dry_run: bool,
) -> Result<Redriven> {
    // One redrive of a pipeline at a time on a node: two would send the same letters.
    let one = {
        let mut running = RUNNING.lock().expect("redrives");
        running
            .entry(spec.name.clone())
            .or_insert_with(|| std::sync::Arc::new(tokio::sync::Mutex::new(())))
            .clone()
    };
    let _one_at_a_time = one.lock().await;
    let target = spec.ident()?;
    // First what the pipeline's letters are (their small columns), then the records of those
    // that can be sent, in the order they came in.
    let name = spec.name.clone();
    let ours = move |letter: &Held| of_pipeline(letter, &name);
    let all = held::find(catalog, sql, &spec.warehouse, &target, &ours, None).await?;
    if all
        .table
        .as_ref()
        .is_some_and(|t| t.metadata.format_version() == iceberg::spec::FormatVersion::V1)
    {
        return Err(StreamError::Invalid(format!(
            "the dead-letter table of {target} is of format v1, which holds no deletes: its \
             letters could be sent but never removed (upgrade it to v2)"
        )));
    }
    let mut done = Redriven {
        letters: all.letters.len(),
        ..Redriven::default()
    };
    for letter in &all.letters {
        let Some((topic, partition, offset)) = place(letter) else {
            done.kept
                .push("a letter without its topic, partition and offset".into());
            continue;
        };
        if !spec.topics.contains(&topic) {
            done.kept.push(format!(
                "{topic}/{partition}@{offset}: {topic:?} is not a topic of the pipeline"
            ));
        }
    }
    let name = spec.name.clone();
    let topics = spec.topics.clone();
    let sendable_letter = move |letter: &Held| {
        of_pipeline(letter, &name)
            && place(letter).is_some_and(|(topic, _, _)| topics.contains(&topic))
    };
    let found = held::find(
        catalog,
        sql,
        &spec.warehouse,
        &target,
        &sendable_letter,
        Some(MOST_BYTES),
    )
    .await?;
    done.more = found.more;
    let mut sendable = Vec::new();
    for letter in found.letters {
        if letter.record.is_none() && letter.key.is_none() {
            // A gap of records the broker deleted, not a record.
            let (topic, partition, offset) = place(&letter).expect("sendable letters have one");
            done.kept.push(format!(
                "{topic}/{partition}@{offset}: the letter holds no record"
            ));
        } else {
            sendable.push(letter);
        }
    }
    if dry_run || sendable.is_empty() {
        return Ok(done);
    }
    let partitions = {
        let spec = spec.clone();
        tokio::task::spawn_blocking(move || partition_counts(&spec))
            .await
            .map_err(|e| StreamError::Invalid(format!("read the topics' partitions: {e}")))??
    };
    let producer = producer(spec)?;
    let mut sent: BTreeSet<Place> = BTreeSet::new();
    let mut failure = None;
    for letter in &sendable {
        let (topic, partition, offset) = place(letter).expect("sendable letters have a place");
        // A letter with a key and no record is a tombstone: sent as one (a null value).
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic);
        if let Some(value) = &letter.record {
            record = record.payload(value);
        }
        if let Some(key) = &letter.key {
            record = record.key(key);
        }
        // The partition it came from while the topic has it, else where its key goes.
        if partitions.get(&topic).is_some_and(|n| partition < *n) {
            record = record.partition(partition);
        }
        match producer.send(record, DELIVERY).await {
            Ok(_) => {
                sent.insert((topic, partition, offset));
            }
            Err((e, _)) => {
                failure = Some(format!("send {topic}/{partition}@{offset} back: {e}"));
                break;
            }
        }
    }
    done.sent = sent.len();
    if !sent.is_empty() {
        let name = spec.name.clone();
        let taken = move |letter: &Held| {
            of_pipeline(letter, &name) && place(letter).is_some_and(|p| sent.contains(&p))
        };
        held::remove(catalog, sql, &spec.warehouse, &target, &taken)
            .await
            .map_err(|e| {
                StreamError::Invalid(format!(
                    "{} letters were sent back, but could not be removed from the dead-letter \
                     table (a redrive would send them once more): {e}",
                    done.sent
                ))
            })?;
    }
    match failure {
        Some(failure) => Err(StreamError::Invalid(format!(
            "{failure} ({} letters sent back and removed before it)",
            done.sent
        ))),
        None => Ok(done),
    }
}

/// A producer to the pipeline's broker, with its own librdkafka settings (SASL, TLS, …),
/// idempotent so that a retried send is not doubled.
fn producer(spec: &PipelineSpec) -> Result<FutureProducer> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &spec.bootstrap_servers)
        .set("enable.idempotence", "true");
    for (key, value) in &spec.properties {
        config.set(key, value);
    }
    Ok(config.create()?)
}

/// How many partitions each of the pipeline's topics has. Blocking.
fn partition_counts(spec: &PipelineSpec) -> Result<HashMap<String, i32>> {
    let consumer = metadata_consumer(spec)?;
    let mut counts: HashMap<String, i32> = HashMap::new();
    for (topic, _) in super::client::topic_partitions(&consumer, spec)? {
        *counts.entry(topic).or_default() += 1;
    }
    Ok(counts)
}
