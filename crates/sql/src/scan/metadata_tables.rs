//! Time travel and metadata tables, named with suffixes DataFusion parses as plain quoted
//! identifiers:
//!
//! - `"orders@snapshot=<id>"`, `"orders@ts=<RFC 3339 time or epoch milliseconds>"` and
//!   `"orders@ref=<branch or tag>"` read the table as of that snapshot, with that snapshot's
//!   schema;
//! - `"orders$snapshots"`, `"orders$history"`, `"orders$refs"`, `"orders$manifests"` and
//!   `"orders$files"` and `"orders$partitions"` are its metadata tables.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::datasource::MemTable;
use futures::TryStreamExt;
use iceberg::spec::{Literal, PartitionField, Struct, TableMetadata, Transform};
use iceberg::table::Table;

use crate::scan::provider::iceberg_error;

/// What a table name asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Suffix {
    Current,
    Snapshot(i64),
    Timestamp(i64),
    Ref(String),
    Metadata(String),
}

/// Splits `orders@snapshot=1` / `orders$files` into the table name and what it asks for.
pub fn parse(name: &str) -> Result<(&str, Suffix)> {
    if let Some((table, kind)) = name.rsplit_once('$')
        && !table.is_empty()
    {
        return match kind {
            "snapshots" | "history" | "refs" | "manifests" | "files" | "partitions" => {
                Ok((table, Suffix::Metadata(kind.to_string())))
            }
            other => plan_err!(
                "unknown metadata table {other:?}; known: snapshots, history, refs, manifests, files, partitions"
            ),
        };
    }
    let Some((table, spec)) = name.rsplit_once('@') else {
        return Ok((name, Suffix::Current));
    };
    let Some((key, value)) = spec.split_once('=') else {
        return plan_err!(
            "time travel is written table@snapshot=<id>, table@ts=<time> or table@ref=<name>, got {name:?}"
        );
    };
    let suffix = match key {
        "snapshot" => Suffix::Snapshot(value.parse().map_err(|_| {
            DataFusionError::Plan(format!("snapshot id {value:?} is not a number"))
        })?),
        "ts" => Suffix::Timestamp(parse_time(value)?),
        "ref" => Suffix::Ref(value.to_string()),
        other => return plan_err!("unknown time travel key {other:?}; use snapshot, ts or ref"),
    };
    Ok((table, suffix))
}

fn parse_time(value: &str) -> Result<i64> {
    if let Ok(ms) = value.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(t.timestamp_millis());
    }
    for format in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S",
    ] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(value, format) {
            return Ok(t.and_utc().timestamp_millis());
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d") {
        return Ok(d
            .and_hms_opt(0, 0, 0)
            .expect("midnight exists")
            .and_utc()
            .timestamp_millis());
    }
    plan_err!(
        "time {value:?} is neither RFC 3339, 'YYYY-MM-DD[ HH:MM:SS]' (UTC) nor epoch milliseconds"
    )
}

/// The snapshot a time-travel suffix names.
pub fn snapshot_for(metadata: &TableMetadata, suffix: &Suffix, table: &str) -> Result<i64> {
    match suffix {
        Suffix::Snapshot(id) => match metadata.snapshot_by_id(*id) {
            Some(_) => Ok(*id),
            None => plan_err!("table {table} has no snapshot {id}"),
        },
        Suffix::Timestamp(ms) => metadata
            .history()
            .iter()
            .rev()
            .find(|entry| entry.timestamp_ms <= *ms)
            .map(|entry| entry.snapshot_id)
            .ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "table {table} had no snapshot at or before {ms} ms"
                ))
            }),
        Suffix::Ref(name) => metadata
            .snapshot_for_ref(name)
            .map(|s| s.snapshot_id())
            .ok_or_else(|| DataFusionError::Plan(format!("table {table} has no ref {name:?}"))),
        _ => plan_err!("not a time-travel suffix"),
    }
}

/// A metadata table, computed now.
pub async fn metadata_table(table: &Table, kind: &str) -> Result<Arc<dyn TableProvider>> {
    let batch = match kind {
        "snapshots" => return from_stream(table.inspect().snapshots().scan().await).await,
        "manifests" => return from_stream(table.inspect().manifests().scan().await).await,
        "history" => history(table.metadata())?,
        "refs" => refs(table.metadata())?,
        "files" => files(table).await?,
        "partitions" => partitions(table).await?,
        other => return plan_err!("unknown metadata table {other}"),
    };
    Ok(Arc::new(MemTable::try_new(
        batch.schema(),
        vec![vec![batch]],
    )?))
}

async fn from_stream(
    stream: iceberg::Result<iceberg::scan::ArrowRecordBatchStream>,
) -> Result<Arc<dyn TableProvider>> {
    let batches: Vec<RecordBatch> = stream
        .map_err(iceberg_error)?
        .try_collect()
        .await
        .map_err(iceberg_error)?;
    let schema = match batches.first() {
        Some(b) => b.schema(),
        None => Arc::new(Schema::empty()),
    };
    Ok(Arc::new(MemTable::try_new(schema, vec![batches])?))
}

fn utc_ms() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
}

fn history(metadata: &TableMetadata) -> Result<RecordBatch> {
    // Ancestors of the current snapshot, to mark rolled-back entries.
    let mut ancestors = std::collections::HashSet::new();
    let mut next = metadata.current_snapshot().map(|s| s.snapshot_id());
    while let Some(id) = next {
        ancestors.insert(id);
        next = metadata
            .snapshot_by_id(id)
            .and_then(|s| s.parent_snapshot_id());
    }
    let log = metadata.history();
    let schema = Arc::new(Schema::new(vec![
        Field::new("made_current_at", utc_ms(), false),
        Field::new("snapshot_id", DataType::Int64, false),
        Field::new("parent_id", DataType::Int64, true),
        Field::new("is_current_ancestor", DataType::Boolean, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            TimestampMillisecondArray::from(log.iter().map(|e| e.timestamp_ms).collect::<Vec<_>>())
                .with_timezone("UTC"),
        ),
        Arc::new(Int64Array::from(
            log.iter().map(|e| e.snapshot_id).collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            log.iter()
                .map(|e| {
                    metadata
                        .snapshot_by_id(e.snapshot_id)
                        .and_then(|s| s.parent_snapshot_id())
                })
                .collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            log.iter()
                .map(|e| ancestors.contains(&e.snapshot_id))
                .collect::<Vec<_>>(),
        )),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn refs(metadata: &TableMetadata) -> Result<RecordBatch> {
    // iceberg 0.10 keeps the refs map private (and drops it from v1 metadata).
    let refs = floe_catalog::metadata::table_refs(metadata)
        .map_err(|e| DataFusionError::External(e.into()))?;
    let mut rows: Vec<(String, serde_json::Value)> = refs
        .into_iter()
        .map(|(name, reference)| Ok((name, serde_json::to_value(reference)?)))
        .collect::<Result<_, serde_json::Error>>()
        .map_err(|e| DataFusionError::External(e.into()))?;
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let int = |v: &serde_json::Value, key: &str| v.get(key).and_then(|x| x.as_i64());
    let schema = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("type", DataType::Utf8, false),
        Field::new("snapshot_id", DataType::Int64, false),
        Field::new("max_reference_age_in_ms", DataType::Int64, true),
        Field::new("min_snapshots_to_keep", DataType::Int32, true),
        Field::new("max_snapshot_age_in_ms", DataType::Int64, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|(n, _)| n.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, v)| {
            v["type"].as_str().unwrap_or("branch").to_ascii_uppercase()
        }))),
        Arc::new(Int64Array::from_iter_values(
            rows.iter()
                .map(|(_, v)| int(v, "snapshot-id").unwrap_or_default()),
        )),
        Arc::new(Int64Array::from(
            rows.iter()
                .map(|(_, v)| int(v, "max-ref-age-ms"))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Int32Array::from(
            rows.iter()
                .map(|(_, v)| int(v, "min-snapshots-to-keep").map(|x| x as i32))
                .collect::<Vec<_>>(),
        )),
        Arc::new(Int64Array::from(
            rows.iter()
                .map(|(_, v)| int(v, "max-snapshot-age-ms"))
                .collect::<Vec<_>>(),
        )),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Live data and delete files of the current snapshot.
/// One live file of the current snapshot, as the manifests list it.
struct LiveFile {
    content: i32,
    path: String,
    format: String,
    spec_id: i32,
    partition: String,
    records: i64,
    size: i64,
    /// The sort order the writer says the file's rows are in.
    sort_order_id: Option<i32>,
    /// The snapshot that added the file.
    snapshot_id: Option<i64>,
}

async fn live_files(table: &Table) -> Result<Vec<LiveFile>> {
    let metadata = table.metadata();
    let mut files = Vec::new();
    let Some(snapshot) = metadata.current_snapshot() else {
        return Ok(files);
    };
    let list = crate::scan::manifests::manifest_list(table, snapshot).await?;
    for manifest_file in list.entries() {
        let manifest =
            floe_catalog::manifests::load_manifest(table.file_io(), metadata, manifest_file)
                .await
                .map_err(iceberg_error)?;
        let spec = metadata.partition_spec_by_id(manifest_file.partition_spec_id);
        for entry in manifest.entries() {
            if !entry.is_alive() {
                continue;
            }
            let file = entry.data_file();
            files.push(LiveFile {
                content: file.content_type() as i32,
                path: file.file_path().to_string(),
                format: format!("{:?}", file.file_format()).to_ascii_uppercase(),
                spec_id: manifest_file.partition_spec_id,
                partition: match spec {
                    Some(spec) => partition_text(spec.fields(), file.partition()),
                    None => format!("{:?}", file.partition()),
                },
                records: file.record_count() as i64,
                size: file.file_size_in_bytes() as i64,
                sort_order_id: file.sort_order_id(),
                snapshot_id: entry.snapshot_id(),
            });
        }
    }
    Ok(files)
}

/// A partition tuple as people read it: `{day=2026-01-02, region=eu}`, with time transforms'
/// values shown as dates and hours rather than counts since 1970.
pub fn partition_text(fields: &[PartitionField], values: &Struct) -> String {
    let shown: Vec<String> = fields
        .iter()
        .zip(values.iter())
        .map(|(field, value)| {
            format!(
                "{}={}",
                field.name,
                partition_value(&field.transform, value)
            )
        })
        .collect();
    format!("{{{}}}", shown.join(", "))
}

fn partition_value(transform: &Transform, value: Option<&Literal>) -> String {
    use iceberg::spec::PrimitiveLiteral as L;
    let Some(Literal::Primitive(value)) = value else {
        return "null".into();
    };
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("valid date");
    match (transform, value) {
        (Transform::Year, L::Int(years)) => format!("{}", 1970 + years),
        (Transform::Month, L::Int(months)) => {
            let months = 1970 * 12 + *months;
            format!(
                "{:04}-{:02}",
                months.div_euclid(12),
                months.rem_euclid(12) + 1
            )
        }
        (Transform::Day, L::Int(days)) => (epoch + chrono::Duration::days(*days as i64))
            .format("%Y-%m-%d")
            .to_string(),
        (Transform::Hour, L::Int(hours)) => (epoch.and_hms_opt(0, 0, 0).expect("midnight")
            + chrono::Duration::hours(*hours as i64))
        .format("%Y-%m-%d-%H")
        .to_string(),
        (_, L::Boolean(v)) => v.to_string(),
        (_, L::Int(v)) => v.to_string(),
        (_, L::Long(v)) => v.to_string(),
        (_, L::Float(v)) => v.to_string(),
        (_, L::Double(v)) => v.to_string(),
        (_, L::String(v)) => v.clone(),
        (_, L::Int128(v)) => v.to_string(),
        (_, other) => format!("{other:?}"),
    }
}

async fn files(table: &Table) -> Result<RecordBatch> {
    let files = live_files(table).await?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("content", DataType::Int32, false),
        Field::new("file_path", DataType::Utf8, false),
        Field::new("file_format", DataType::Utf8, false),
        Field::new("spec_id", DataType::Int32, false),
        Field::new("partition", DataType::Utf8, false),
        Field::new("record_count", DataType::Int64, false),
        Field::new("file_size_in_bytes", DataType::Int64, false),
        Field::new("sort_order_id", DataType::Int32, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from_iter_values(
            files.iter().map(|f| f.content),
        )),
        Arc::new(StringArray::from_iter_values(files.iter().map(|f| &f.path))),
        Arc::new(StringArray::from_iter_values(
            files.iter().map(|f| &f.format),
        )),
        Arc::new(Int32Array::from_iter_values(
            files.iter().map(|f| f.spec_id),
        )),
        Arc::new(StringArray::from_iter_values(
            files.iter().map(|f| &f.partition),
        )),
        Arc::new(Int64Array::from_iter_values(
            files.iter().map(|f| f.records),
        )),
        Arc::new(Int64Array::from_iter_values(files.iter().map(|f| f.size))),
        Arc::new(Int32Array::from_iter(files.iter().map(|f| f.sort_order_id))),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Per partition of the current snapshot: its data and delete files, rows, bytes and the last
/// snapshot that added a file to it.
async fn partitions(table: &Table) -> Result<RecordBatch> {
    #[derive(Default)]
    struct Totals {
        records: i64,
        files: i32,
        bytes: i64,
        position_delete_records: i64,
        position_delete_files: i32,
        equality_delete_records: i64,
        equality_delete_files: i32,
        last_snapshot: Option<i64>,
        last_at: Option<i64>,
    }
    let metadata = table.metadata();
    let mut by_partition: std::collections::BTreeMap<(String, i32), Totals> = Default::default();
    for file in live_files(table).await? {
        let totals = by_partition
            .entry((file.partition.clone(), file.spec_id))
            .or_default();
        match file.content {
            0 => {
                totals.records += file.records;
                totals.files += 1;
                totals.bytes += file.size;
            }
            1 => {
                totals.position_delete_records += file.records;
                totals.position_delete_files += 1;
            }
            _ => {
                totals.equality_delete_records += file.records;
                totals.equality_delete_files += 1;
            }
        }
        let at = file
            .snapshot_id
            .and_then(|id| metadata.snapshot_by_id(id))
            .map(|s| s.timestamp_ms());
        if at > totals.last_at {
            totals.last_at = at;
            totals.last_snapshot = file.snapshot_id;
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("partition", DataType::Utf8, false),
        Field::new("spec_id", DataType::Int32, false),
        Field::new("record_count", DataType::Int64, false),
        Field::new("file_count", DataType::Int32, false),
        Field::new("total_data_file_size_in_bytes", DataType::Int64, false),
        Field::new("position_delete_record_count", DataType::Int64, false),
        Field::new("position_delete_file_count", DataType::Int32, false),
        Field::new("equality_delete_record_count", DataType::Int64, false),
        Field::new("equality_delete_file_count", DataType::Int32, false),
        Field::new("last_updated_at", utc_ms(), true),
        Field::new("last_updated_snapshot_id", DataType::Int64, true),
    ]));
    let rows: Vec<(&(String, i32), &Totals)> = by_partition.iter().collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|(k, _)| &k.0),
        )),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|(k, _)| k.1))),
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|(_, t)| t.records),
        )),
        Arc::new(Int32Array::from_iter_values(
            rows.iter().map(|(_, t)| t.files),
        )),
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|(_, t)| t.bytes),
        )),
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|(_, t)| t.position_delete_records),
        )),
        Arc::new(Int32Array::from_iter_values(
            rows.iter().map(|(_, t)| t.position_delete_files),
        )),
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|(_, t)| t.equality_delete_records),
        )),
        Arc::new(Int32Array::from_iter_values(
            rows.iter().map(|(_, t)| t.equality_delete_files),
        )),
        Arc::new(
            TimestampMillisecondArray::from(
                rows.iter().map(|(_, t)| t.last_at).collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(Int64Array::from(
            rows.iter()
                .map(|(_, t)| t.last_snapshot)
                .collect::<Vec<_>>(),
        )),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_parse() {
        assert_eq!(parse("orders").unwrap(), ("orders", Suffix::Current));
        assert_eq!(
            parse("orders@snapshot=42").unwrap(),
            ("orders", Suffix::Snapshot(42))
        );
        assert_eq!(
            parse("orders@ref=audit").unwrap(),
            ("orders", Suffix::Ref("audit".into()))
        );
        assert_eq!(
            parse("orders@ts=2026-01-02T00:00:00Z").unwrap(),
            ("orders", Suffix::Timestamp(1_767_312_000_000))
        );
        assert_eq!(
            parse("orders@ts=2026-01-02").unwrap().1,
            Suffix::Timestamp(1_767_312_000_000)
        );
        assert_eq!(
            parse("orders$files").unwrap(),
            ("orders", Suffix::Metadata("files".into()))
        );
        assert!(parse("orders$nope").is_err());
        assert!(parse("orders@snapshot=x").is_err());
        assert!(parse("orders@yesterday").is_err());
    }
}
