//! One dead-letter form for every door: a record a table cannot take is kept as a row of the
//! table's dead-letter table, `<table>__dead_letters` in the same namespace, with the door it
//! came through, why it was refused, the record as the door had it and where it came from.
//!
//! | column | holds |
//! |---|---|
//! | `received_at` | when Floe set it aside |
//! | `door` | `http`, `otlp`, `remote-write` or `kafka` |
//! | `reason` | why the table could not take it |
//! | `source` | Kafka: the topic; OTLP and remote write: the service; the log: none |
//! | `partition`, `offset` | Kafka: the record's partition and offset; the log: the entry's sequence (`offset`) |
//! | `timestamp` | Kafka: the record's timestamp |
//! | `key` | Kafka: the record's key |
//! | `record` | the record: Kafka's value bytes; OTLP and remote write: the record as JSON; a log entry: its row as JSON |
//! | `pipeline` | Kafka: the pipeline |
//!
//! Who writes them: a Kafka pipeline (records it cannot decode or convert, committed with
//! the offsets they cover, so none is kept twice; [`crate::kafka::redrive`] sends them back
//! to their topic), OTLP and remote write (records refused one by one, through the log), and
//! the log's committer (entries a table can no longer take, one row per row, [`keep`]; the
//! entry itself, exactly as acknowledged, is kept beside the log for `floe ingest replay`,
//! which removes its letters once it has taken it again: [`files`], [`held`]).
//!
//! A dead-letter table is Floe's: it carries `floe.dead-letters-of` naming its table, and
//! Floe keeps letters in no table named so that lacks it (a user's table that happens to be
//! called `x__dead_letters` is never written by a write to `x`). A Kafka dead-letter table
//! of the form before this one (`pipeline, topic, partition, offset, timestamp, key, value,
//! error`) is upgraded in place on its first letter: `topic`, `value` and `error` renamed
//! `source`, `record` and `reason` (their field ids kept, so old rows read under the new
//! names), `received_at` and `door` added.

pub(crate) mod files;
pub(crate) mod held;
pub(crate) mod keep;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{
    BinaryBuilder, Int32Builder, Int64Builder, RecordBatch, StringBuilder,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogService, LoadedTable};
use iceberg::spec::{NestedField, PrimitiveType, TableMetadata, Transform, Type};
use iceberg::{TableIdent, TableUpdate};

pub(crate) use files::{dir, entries_in, move_aside, sequences};

use super::IngestError;
use super::log::table_arrow_schema;
use super::target::{Creation, Layout, ensure_loaded};

/// What a dead-letter table's name adds to its table's.
pub(crate) const SUFFIX: &str = "__dead_letters";
/// The property that makes a table Floe's dead-letter table of the table it names.
pub const OF_PROPERTY: &str = "floe.dead-letters-of";

/// The log entry's schema metadata naming the door its rows came through.
pub(crate) const DOOR_KEY: &str = "floe.door";

/// The door a log entry's rows came through (`http` for entries written before doors were
/// recorded).
pub(crate) fn door_of(batches: &[RecordBatch]) -> Door {
    batches
        .first()
        .and_then(|b| b.schema().metadata().get(DOOR_KEY).cloned())
        .and_then(|name| Door::named(&name))
        .unwrap_or(Door::Http)
}

/// The door a record came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Http,
    Otlp,
    RemoteWrite,
    Kafka,
}

impl Door {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Door::Http => "http",
            Door::Otlp => "otlp",
            Door::RemoteWrite => "remote-write",
            Door::Kafka => "kafka",
        }
    }

    /// The door named `name` ([`Door::as_str`]).
    pub(crate) fn named(name: &str) -> Option<Door> {
        [Door::Http, Door::Otlp, Door::RemoteWrite, Door::Kafka]
            .into_iter()
            .find(|d| d.as_str() == name)
    }
}

/// One record a table could not take.
#[derive(Debug, Clone)]
pub(crate) struct Letter {
    pub door: Door,
    pub reason: String,
    pub record: Option<Vec<u8>>,
    pub source: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub timestamp_ms: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub pipeline: Option<String>,
}

impl Letter {
    /// A letter of `door` with only its reason and record.
    pub fn new(door: Door, reason: impl Into<String>, record: Option<Vec<u8>>) -> Self {
        Self {
            door,
            reason: reason.into(),
            record,
            source: None,
            partition: None,
            offset: None,
            timestamp_ms: None,
            key: None,
            pipeline: None,
        }
    }
}

/// The dead-letter table of `target`.
pub fn ident_of(target: &TableIdent) -> TableIdent {
    TableIdent::new(
        target.namespace().clone(),
        format!("{}{SUFFIX}", target.name()),
    )
}

/// Whether `ident` names a dead-letter table (whose own refusals have nowhere further to go).
pub(crate) fn is_dead_letters(ident: &TableIdent) -> bool {
    ident.name().ends_with(SUFFIX)
}

fn utc() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
}

/// The columns of a dead-letter table.
pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("received_at", utc(), true),
        Field::new("door", DataType::Utf8, true),
        Field::new("reason", DataType::Utf8, true),
        Field::new("source", DataType::Utf8, true),
        Field::new("partition", DataType::Int32, true),
        Field::new("offset", DataType::Int64, true),
        Field::new("timestamp", utc(), true),
        Field::new("key", DataType::Binary, true),
        Field::new("record", DataType::Binary, true),
        Field::new("pipeline", DataType::Utf8, true),
    ]))
}

/// How the dead-letter table of `target` is made: by day of `received_at`, zstd, marked as
/// Floe's.
pub(crate) fn layout(target: &TableIdent) -> Layout {
    Layout {
        schema: schema(),
        partition: vec![("received_at".to_string(), Transform::Day)],
        order: Vec::new(),
        properties: HashMap::from([
            (
                "write.parquet.compression-codec".to_string(),
                "zstd".to_string(),
            ),
            (OF_PROPERTY.to_string(), target.name().to_string()),
        ]),
        key: Vec::new(),
    }
}

/// `letters` as rows of a dead-letter table, received at `now_us` (microseconds).
pub(crate) fn batch(letters: &[Letter], now_us: i64) -> RecordBatch {
    let mut received = TimestampMicrosecondBuilder::new().with_timezone("+00:00");
    let mut door = StringBuilder::new();
    let mut reason = StringBuilder::new();
    let mut source = StringBuilder::new();
    let mut partition = Int32Builder::new();
    let mut offset = Int64Builder::new();
    let mut timestamp = TimestampMicrosecondBuilder::new().with_timezone("+00:00");
    let mut key = BinaryBuilder::new();
    let mut record = BinaryBuilder::new();
    let mut pipeline = StringBuilder::new();
    for l in letters {
        received.append_value(now_us);
        door.append_value(l.door.as_str());
        reason.append_value(&l.reason);
        source.append_option(l.source.as_deref());
        partition.append_option(l.partition);
        offset.append_option(l.offset);
        timestamp.append_option(l.timestamp_ms.and_then(|ms| ms.checked_mul(1000)));
        key.append_option(l.key.as_deref());
        record.append_option(l.record.as_deref());
        pipeline.append_option(l.pipeline.as_deref());
    }
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(received.finish()),
            Arc::new(door.finish()),
            Arc::new(reason.finish()),
            Arc::new(source.finish()),
            Arc::new(partition.finish()),
            Arc::new(offset.finish()),
            Arc::new(timestamp.finish()),
            Arc::new(key.finish()),
            Arc::new(record.finish()),
            Arc::new(pipeline.finish()),
        ],
    )
    .expect("the builders follow the dead-letter schema")
}

/// The rows of `batches` as JSON objects, one per row (a log entry's rows as letters), or
/// refused once they would hold more than `most` bytes.
pub(crate) fn rows_as_json(
    batches: &[RecordBatch],
    most: usize,
) -> Result<Vec<Vec<u8>>, IngestError> {
    use datafusion::arrow::json::{LineDelimitedWriter, WriterBuilder, writer::LineDelimited};
    let mut lines = Vec::new();
    let mut total = 0usize;
    for batch in batches {
        // A slice of rows at a time, so that the size is checked as it grows.
        let mut start = 0;
        while start < batch.num_rows() {
            let rows = batch.slice(start, (batch.num_rows() - start).min(1024));
            start += rows.num_rows();
            let mut bytes = Vec::new();
            {
                let mut writer: LineDelimitedWriter<_> = WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, LineDelimited>(&mut bytes);
                writer
                    .write(&rows)
                    .and_then(|_| writer.finish())
                    .map_err(|e| IngestError::Invalid(format!("rows as JSON: {e}")))?;
            }
            total += bytes.len();
            if total > most {
                return Err(IngestError::TooLarge(format!(
                    "the entry's rows take more than {most} bytes as JSON"
                )));
            }
            // JSON text holds no raw newline: each line is one row.
            lines.extend(
                bytes
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(<[u8]>::to_vec),
            );
        }
    }
    Ok(lines)
}

/// The dead-letter table of `target` in `warehouse`, ready to take letters from `caller`
/// (who needs `write-data` on it, and `create-table` on the namespace the first time): made
/// on first use, a Kafka one of the earlier form upgraded, a table of that name that is not
/// Floe's refused. Its ident and Arrow schema.
pub(crate) async fn ready(
    catalog: &CatalogService,
    caller: &Caller,
    warehouse: &str,
    target: &TableIdent,
) -> Result<(TableIdent, SchemaRef), IngestError> {
    let ident = ident_of(target);
    let layout = layout(target);
    let loaded = ensure_loaded(
        catalog,
        caller,
        warehouse,
        &ident,
        Creation::InNamespace(&layout),
    )
    .await?;
    let loaded = match loaded.metadata.properties().get(OF_PROPERTY) {
        Some(of) if of == target.name() => loaded,
        None if earlier_form(&loaded.metadata) => {
            upgrade(catalog, caller, warehouse, &ident, target, &loaded).await?
        }
        _ => {
            return Err(IngestError::Invalid(format!(
                "table {ident} is not the dead-letter table of {target} (it lacks \
                 {OF_PROPERTY}={}): Floe keeps no dead letters in it",
                target.name()
            )));
        }
    };
    let schema = table_arrow_schema(loaded.metadata.current_schema())?;
    Ok((ident, schema))
}

/// The columns of a Kafka dead-letter table of the earlier form.
const EARLIER: [&str; 8] = [
    "pipeline",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "key",
    "value",
    "error",
];

fn earlier_form(metadata: &TableMetadata) -> bool {
    let names: HashSet<&str> = metadata
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    names == EARLIER.into_iter().collect()
}

/// A dead-letter table of the earlier form made this one: renames keep field ids (old rows
/// read under the new names), every column optional, `received_at` and `door` added, and the
/// table marked as `target`'s. One commit; a concurrent change is met by reading it again.
async fn upgrade(
    catalog: &CatalogService,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
    target: &TableIdent,
    loaded: &LoadedTable,
) -> Result<LoadedTable, IngestError> {
    let metadata = &loaded.metadata;
    let current = metadata.current_schema();
    fn renamed(name: &str) -> &str {
        match name {
            "topic" => "source",
            "value" => "record",
            "error" => "reason",
            other => other,
        }
    }
    let mut fields: Vec<Arc<NestedField>> = current
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            Arc::new(NestedField::optional(
                f.id,
                renamed(&f.name),
                f.field_type.as_ref().clone(),
            ))
        })
        .collect();
    let mut next = metadata.last_column_id();
    for (name, kind) in [
        ("received_at", PrimitiveType::Timestamptz),
        ("door", PrimitiveType::String),
    ] {
        next += 1;
        fields.push(Arc::new(NestedField::optional(
            next,
            name,
            Type::Primitive(kind),
        )));
    }
    // A schema id no schema of the table has (one past the largest: after a rollback the
    // current one need not be the newest).
    let schema_id = metadata
        .schemas_iter()
        .map(|s| s.schema_id())
        .max()
        .unwrap_or(0)
        + 1;
    let schema = iceberg::spec::Schema::builder()
        .with_schema_id(schema_id)
        .with_fields(fields)
        .build()
        .map_err(|e| IngestError::Invalid(format!("upgrade dead-letter table {ident}: {e}")))?;
    let request = floe_sql::write::schema_change(
        ident,
        metadata,
        schema,
        vec![TableUpdate::SetProperties {
            updates: HashMap::from([(OF_PROPERTY.to_string(), target.name().to_string())]),
        }],
    );
    match catalog.commit_table(caller, warehouse, request).await {
        Ok(committed) => {
            tracing::info!(table = %ident, "upgraded a dead-letter table to the one form");
            Ok(committed)
        }
        // Another node upgraded it first: take the table as it now is.
        Err(floe_catalog::CatalogError::CommitFailed(_)) => {
            let again = catalog.load_table(caller, warehouse, ident).await?;
            match again.metadata.properties().get(OF_PROPERTY) {
                Some(of) if of == target.name() => Ok(again),
                _ => Err(IngestError::Conflict(format!(
                    "dead-letter table {ident} changed while it was upgraded"
                ))),
            }
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, BinaryArray, Int64Array, StringArray};

    #[test]
    fn letters_of_every_door_are_rows_of_one_schema() {
        let mut kafka = Letter::new(Door::Kafka, "not JSON", Some(b"\x00\x01".to_vec()));
        kafka.source = Some("orders".into());
        kafka.partition = Some(3);
        kafka.offset = Some(42);
        kafka.timestamp_ms = Some(1_700_000_000_000);
        kafka.pipeline = Some("orders".into());
        let otlp = Letter::new(Door::Otlp, "no value", Some(br#"{"name":"x"}"#.to_vec()));
        let rows = batch(&[kafka, otlp], 7);
        assert_eq!(rows.schema(), schema());
        let doors = rows
            .column_by_name("door")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!((doors.value(0), doors.value(1)), ("kafka", "otlp"));
        let offsets = rows
            .column_by_name("offset")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(offsets.value(0), 42);
        assert!(offsets.is_null(1));
        let records = rows
            .column_by_name("record")
            .unwrap()
            .as_any()
            .downcast_ref::<BinaryArray>()
            .unwrap();
        assert_eq!(records.value(0), b"\x00\x01");
    }

    #[test]
    fn a_log_entrys_rows_become_one_json_object_each() {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("name", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a\nb"), None])),
            ],
        )
        .unwrap();
        let lines = rows_as_json(std::slice::from_ref(&batch), 1 << 20).unwrap();
        // Past its bound, refused (the entry is then kept beside the log only).
        assert!(rows_as_json(&[batch], 10).is_err());
        let values: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(
            values,
            [
                serde_json::json!({"id": 1, "name": "a\nb"}),
                serde_json::json!({"id": 2, "name": null})
            ]
        );
    }

    #[test]
    fn names_and_doors() {
        let t = TableIdent::from_strs(["ns", "events"]).unwrap();
        assert_eq!(ident_of(&t).name(), "events__dead_letters");
        assert!(is_dead_letters(&ident_of(&t)) && !is_dead_letters(&t));
        for d in [Door::Http, Door::Otlp, Door::RemoteWrite, Door::Kafka] {
            assert_eq!(Door::named(d.as_str()), Some(d));
        }
    }
}
