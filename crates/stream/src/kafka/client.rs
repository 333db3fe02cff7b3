use super::*;

/// Partition high watermarks as librdkafka's statistics report them (every 5 s).
#[derive(Clone, Default)]
pub struct Watermarks(pub(super) Arc<std::sync::Mutex<HashMap<(String, i32), i64>>>);

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

pub(super) type PipelineConsumer = StreamConsumer<Watermarks>;

/// Commits `offsets` to the pipeline's Kafka consumer group, for Kafka's tools; the table
/// holds the authoritative ones, so a failure here is only logged.
pub(super) fn mirror_offsets(consumer: &PipelineConsumer, offsets: &HashMap<(String, i32), i64>) {
    let committed = partition_list(offsets)
        .and_then(|list| Ok(consumer.commit(&list, rdkafka::consumer::CommitMode::Async)?));
    if let Err(e) = committed {
        tracing::debug!(error = %e, "mirror offsets to the consumer group");
    }
}

/// Assigns every partition at its offset.
pub(super) fn assign(
    consumer: &PipelineConsumer,
    positions: &HashMap<(String, i32), i64>,
) -> Result<()> {
    consumer.assign(&partition_list(positions)?)?;
    Ok(())
}

/// Partitions at offsets, as librdkafka takes them.
pub(super) fn partition_list(offsets: &HashMap<(String, i32), i64>) -> Result<TopicPartitionList> {
    let mut list = TopicPartitionList::new();
    for ((topic, partition), offset) in offsets {
        list.add_partition_offset(topic, *partition, Offset::Offset(*offset))?;
    }
    Ok(list)
}

/// A record's headers in order (a header without a value keeps `None`).
pub(super) fn record_headers(
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

/// The broker, consumer group and `settings`, then the spec's own librdkafka settings (SASL,
/// TLS, …), which win.
pub(super) fn client_config(
    spec: &PipelineSpec,
    group: &str,
    settings: &[(&str, &str)],
) -> ClientConfig {
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
pub(super) fn metadata_consumer(spec: &PipelineSpec) -> Result<rdkafka::consumer::BaseConsumer> {
    Ok(client_config(spec, &format!("floe-{}-metadata", spec.name), &[]).create()?)
}

/// Every partition of the pipeline's topics, sorted; a topic the broker does not list (or
/// lists without partitions) is an error naming it.
pub(super) fn topic_partitions<C: rdkafka::consumer::ConsumerContext>(
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
