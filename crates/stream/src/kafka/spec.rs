use super::*;

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
    /// How records change the table (default: appended).
    #[serde(default, skip_serializing_if = "Mode::is_append")]
    pub mode: Mode,
    /// The key of an `upsert` or `debezium` pipeline's table: fields of the record value (of
    /// Debezium's `after`/`before`), which become its required identifier fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
}

/// How a pipeline's records change its table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Every record is a new row.
    #[default]
    Append,
    /// A record replaces the row of its key; a tombstone (a record with a key and no value)
    /// deletes it. The key's values come from the record's value, or for a tombstone from
    /// the record's key (a JSON object of the key fields, or the one key field's value).
    Upsert,
    /// Debezium change events (`op` c, r, u: `after` replaces the row of its key; d: the
    /// key of `before` is deleted; tombstones are skipped), JSON with or without its
    /// `schema`/`payload` wrapper, or Avro through the registry.
    Debezium,
}

impl Mode {
    fn is_append(&self) -> bool {
        *self == Mode::Append
    }
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
            mode: Mode::Append,
            key: Vec::new(),
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

    pub(crate) fn column(self) -> &'static str {
        match self {
            MetadataColumn::Key => "_kafka_key",
            MetadataColumn::Topic => "_kafka_topic",
            MetadataColumn::Partition => "_kafka_partition",
            MetadataColumn::Offset => "_kafka_offset",
            MetadataColumn::Timestamp => "_kafka_timestamp",
            MetadataColumn::Headers => "_kafka_headers",
        }
    }

    pub(super) fn of_column(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.column() == name)
    }

    /// The column's Arrow field (optional: a record may lack a key or a timestamp).
    pub(super) fn field(self) -> Field {
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

pub(super) fn default_interval() -> u64 {
    1000
}

pub(super) fn default_max_records() -> usize {
    100_000
}

pub(super) fn default_max_bytes() -> usize {
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
        match (self.mode, self.key.is_empty()) {
            (Mode::Append, false) => {
                return Err(StreamError::Invalid(
                    "key is for mode upsert or debezium: an append pipeline has none".into(),
                ));
            }
            (Mode::Upsert | Mode::Debezium, true) => {
                return Err(StreamError::Invalid(
                    "mode upsert and debezium need a key: the fields that identify a row".into(),
                ));
            }
            _ => {}
        }
        if self.key.iter().any(|k| k.is_empty()) {
            return Err(StreamError::Invalid("key names an empty field".into()));
        }
        for item in &self.sort_by {
            crate::core::target::sort_field(item)
                .map_err(|e| StreamError::Invalid(format!("sort-by: {e}")))?;
        }
        Ok(())
    }

    pub fn ident(&self) -> Result<TableIdent> {
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
    pub(crate) fn group(&self) -> String {
        self.consumer_group
            .clone()
            .unwrap_or_else(|| format!("floe-{}", self.name))
    }

    /// The summary key holding the next offset of one partition.
    pub(crate) fn offset_key(&self, topic: &str, partition: i32) -> String {
        format!("floe.source.{}.{topic}.{partition}", self.name)
    }

    pub(super) fn key_prefix(&self) -> String {
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
