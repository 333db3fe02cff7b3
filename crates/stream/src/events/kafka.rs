//! The Kafka sink: each event a structured-mode CloudEvent (the record's value, JSON), keyed
//! by its subject, in the partition its subject hashes to, so a table's events keep their
//! order; sent by an idempotent producer, acknowledged by every in-sync replica.
//!
//! Exactly once across crashes: an idempotent producer keeps each partition's records in the
//! order sent, with no gaps, so a partition's last record holds the highest event it has. On
//! taking the lease (and after any failure) the sink reads every partition's last record, and
//! skips an event its partition already holds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use floe_catalog::events::StoredEvent;
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::Sink;

type Result<T> = std::result::Result<T, String>;

const DELIVERY: Duration = Duration::from_secs(30);
const READ: Duration = Duration::from_secs(10);

/// Publishes to `topic` on `brokers`.
pub struct KafkaSink {
    name: String,
    topic: String,
    config: ClientConfig,
    producer: FutureProducer,
    /// The topic's partition count and each partition's highest event, as last read.
    held: Mutex<(i32, HashMap<i32, i64>)>,
}

impl KafkaSink {
    /// `properties` are extra librdkafka settings (TLS, SASL, …).
    pub fn new(brokers: &str, topic: &str, properties: &[(String, String)]) -> Result<Self> {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", brokers);
        for (key, value) in properties {
            config.set(key, value);
        }
        let mut producing = config.clone();
        producing
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "30000");
        let producer = producing
            .create()
            .map_err(|e| format!("kafka producer: {e}"))?;
        Ok(Self {
            name: "kafka".into(),
            topic: topic.to_string(),
            config,
            producer,
            held: Mutex::new((0, HashMap::new())),
        })
    }

    /// The partition count and each partition's highest event, read from the topic.
    fn read_partitions(&self) -> Result<(i32, HashMap<i32, i64>)> {
        let mut config = self.config.clone();
        config
            .set("group.id", "floe-change-events-resume")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false");
        let consumer: BaseConsumer = config.create().map_err(|e| format!("kafka: {e}"))?;
        let metadata = consumer
            .fetch_metadata(Some(&self.topic), READ)
            .map_err(|e| format!("kafka metadata of {}: {e}", self.topic))?;
        let partitions = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic)
            .map(|t| t.partitions().len() as i32)
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("kafka topic {} does not exist", self.topic))?;
        let mut highest = HashMap::new();
        for partition in 0..partitions {
            let (low, high) = consumer
                .fetch_watermarks(&self.topic, partition, READ)
                .map_err(|e| format!("kafka watermarks of {}/{partition}: {e}", self.topic))?;
            if high <= low {
                continue;
            }
            let mut list = TopicPartitionList::new();
            list.add_partition_offset(&self.topic, partition, rdkafka::Offset::Offset(high - 1))
                .map_err(|e| format!("kafka: {e}"))?;
            consumer.assign(&list).map_err(|e| format!("kafka: {e}"))?;
            let deadline = std::time::Instant::now() + READ;
            loop {
                let Some(polled) = consumer.poll(Duration::from_millis(200)) else {
                    if std::time::Instant::now() > deadline {
                        return Err(format!(
                            "kafka: the last record of {}/{partition} did not arrive",
                            self.topic
                        ));
                    }
                    continue;
                };
                let message = polled.map_err(|e| format!("kafka read: {e}"))?;
                if message.partition() != partition {
                    continue;
                }
                let seq = message
                    .payload()
                    .and_then(|p| serde_json::from_slice::<serde_json::Value>(p).ok())
                    .and_then(|v| v["floeseq"].as_i64());
                if let Some(seq) = seq {
                    highest.insert(partition, seq);
                }
                break;
            }
        }
        Ok((partitions, highest))
    }
}

/// The partition of `subject` among `partitions` (FNV-1a: stable across builds and nodes).
fn partition_of(subject: &str, partitions: i32) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in subject.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash % partitions.max(1) as u32) as i32
}

#[async_trait]
impl Sink for KafkaSink {
    fn name(&self) -> &str {
        &self.name
    }

    async fn resume(&self, seq: i64) -> Result<i64> {
        let read = tokio::task::block_in_place(|| self.read_partitions())?;
        *self.held.lock().expect("kafka sink state") = read;
        Ok(seq)
    }

    async fn deliver(&self, events: &[StoredEvent], source: &str) -> Result<()> {
        let (partitions, highest) = self.held.lock().expect("kafka sink state").clone();
        let mut sending = Vec::new();
        for event in events {
            let partition = partition_of(&event.subject, partitions);
            if highest.get(&partition).is_some_and(|&h| h >= event.seq) {
                continue;
            }
            let value = event.cloud_event(source).to_string();
            let headers = OwnedHeaders::new().insert(Header {
                key: "content-type",
                value: Some("application/cloudevents+json"),
            });
            let record = FutureRecord::to(&self.topic)
                .payload(&value)
                .key(&event.subject)
                .partition(partition)
                .headers(headers);
            let delivery = self
                .producer
                .send_result(record)
                .map_err(|(e, _)| format!("kafka send of event {}: {e}", event.seq))?;
            sending.push((event.seq, partition, delivery));
        }
        let mut failure = None;
        let mut delivered = Vec::new();
        for (seq, partition, delivery) in sending {
            match tokio::time::timeout(DELIVERY, delivery).await {
                Ok(Ok(Ok(_))) => delivered.push((partition, seq)),
                Ok(Ok(Err((e, _)))) => {
                    failure.get_or_insert(format!("kafka delivery of event {seq}: {e}"));
                }
                Ok(Err(_)) => {
                    failure.get_or_insert(format!("kafka delivery of event {seq} was cancelled"));
                }
                Err(_) => {
                    failure.get_or_insert(format!("kafka delivery of event {seq} timed out"));
                }
            }
        }
        let mut held = self.held.lock().expect("kafka sink state");
        for (partition, seq) in delivered {
            let entry = held.1.entry(partition).or_insert(seq);
            *entry = (*entry).max(seq);
        }
        failure.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_always_goes_to_one_partition() {
        let first = partition_of("default/sales.orders", 3);
        for _ in 0..10 {
            assert_eq!(partition_of("default/sales.orders", 3), first);
        }
        assert!((0..3).contains(&first));
        assert_eq!(partition_of("anything", 1), 0);
    }
}
