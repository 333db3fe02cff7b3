//! Time travel and metadata tables, named with suffixes DataFusion parses as plain quoted
//! identifiers:
//!
//! - `"orders@snapshot=<id>"`, `"orders@ts=<RFC 3339 time or epoch milliseconds>"` and
//!   `"orders@ref=<branch or tag>"` read the table as of that snapshot, with that snapshot's
//!   schema;
//! - `"orders$snapshots"`, `"orders$history"`, `"orders$refs"`, `"orders$manifests"` and
//!   `"orders$files"` are its metadata tables.

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
use iceberg::spec::{ManifestList, TableMetadata};
use iceberg::table::Table;

use crate::provider::iceberg_error;

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
            "snapshots" | "history" | "refs" | "manifests" | "files" => {
                Ok((table, Suffix::Metadata(kind.to_string())))
            }
            other => plan_err!(
                "unknown metadata table {other:?}; known: snapshots, history, refs, manifests, files"
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
    // iceberg 0.10 keeps the refs map private; its JSON form is public.
    let json = serde_json::to_value(metadata).map_err(|e| DataFusionError::External(e.into()))?;
    let mut rows: Vec<(String, serde_json::Value)> = json["refs"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
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
async fn files(table: &Table) -> Result<RecordBatch> {
    let metadata = table.metadata();
    let mut content = Vec::new();
    let mut path = Vec::new();
    let mut format = Vec::new();
    let mut spec_id = Vec::new();
    let mut partition = Vec::new();
    let mut records = Vec::new();
    let mut size = Vec::new();
    if let Some(snapshot) = metadata.current_snapshot() {
        let bytes = table
            .file_io()
            .new_input(snapshot.manifest_list())
            .map_err(iceberg_error)?
            .read()
            .await
            .map_err(iceberg_error)?;
        let list = ManifestList::parse_with_version(&bytes, metadata.format_version())
            .map_err(iceberg_error)?;
        for manifest_file in list.entries() {
            let manifest = manifest_file
                .load_manifest(table.file_io())
                .await
                .map_err(iceberg_error)?;
            for entry in manifest.entries() {
                if !entry.is_alive() {
                    continue;
                }
                let file = entry.data_file();
                content.push(file.content_type() as i32);
                path.push(file.file_path().to_string());
                format.push(format!("{:?}", file.file_format()).to_ascii_uppercase());
                spec_id.push(manifest_file.partition_spec_id);
                partition.push(format!("{:?}", file.partition()));
                records.push(file.record_count() as i64);
                size.push(file.file_size_in_bytes() as i64);
            }
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("content", DataType::Int32, false),
        Field::new("file_path", DataType::Utf8, false),
        Field::new("file_format", DataType::Utf8, false),
        Field::new("spec_id", DataType::Int32, false),
        Field::new("partition", DataType::Utf8, false),
        Field::new("record_count", DataType::Int64, false),
        Field::new("file_size_in_bytes", DataType::Int64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(content)),
        Arc::new(StringArray::from(path)),
        Arc::new(StringArray::from(format)),
        Arc::new(Int32Array::from(spec_id)),
        Arc::new(StringArray::from(partition)),
        Arc::new(Int64Array::from(records)),
        Arc::new(Int64Array::from(size)),
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
