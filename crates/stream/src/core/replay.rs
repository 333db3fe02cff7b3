//! Replay: entries of a table's log taken again after a bad deploy, without duplicating what
//! the table already holds.
//!
//! Committed entries are kept beside the log for `retain_committed`, at most
//! `retain_committed_bytes` a table (`retained/`, oldest dropped first), dead
//! letters until an operator removes them (`dead-letter/`). A replay of sequences `from..=to`
//! takes each such entry that the table does not hold:
//! - a retained entry is held when a snapshot of `main`'s history committed it (each commit's
//!   summary records the first and last sequence it covers): one rolled back or dropped with
//!   a bad commit is not, and is taken again;
//! - a dead letter was never committed, so it is taken again (and goes back to the dead
//!   letters if the table still cannot take it).
//!
//! An entry taken again is appended to the log as a new entry — acknowledged, committed
//! exactly once like any other — and moved to `replayed/`, so a second replay of the same
//! range takes nothing twice; replays on a node run one at a time. (A crash between an
//! entry's append and its move leaves it to be taken once more by the next replay.) A dry
//! run says what it would take.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use iceberg::TableIdent;
use serde::Serialize;

use super::IngestError;
use super::dead_letter;
use super::dead_letter::held::Held;
use super::log::{Ingest, Unfit, read_raw, table_arrow_schema};

/// Committed entries kept for replay, beside the log.
pub(super) const RETAINED: &str = "retained";
/// Entries taken again by a replay.
pub(super) const REPLAYED: &str = "replayed";

/// What a replay did (or would do) with one entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Replayed {
    pub sequence: u64,
    /// `retained` or `dead-letter`.
    pub kept_as: &'static str,
    pub rows: usize,
    /// `replayed`, `would-replay`, `in-table` (the table holds it) or `unreadable`.
    pub outcome: &'static str,
    /// The entry it was appended as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_sequence: Option<u64>,
    /// Why it is `unreadable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Keeps the committed entry `sequence` of the log in `log_dir` for replay (or deletes it
/// when nothing is retained), and forgets retained entries older than `retain`.
pub(super) fn retain(log_dir: &Path, sequence: u64, retain: Duration) {
    let name = format!("{sequence:020}.arrow");
    if retain.is_zero() {
        let _ = std::fs::remove_file(log_dir.join(&name));
        return;
    }
    let dir = log_dir.join(RETAINED);
    if std::fs::create_dir_all(&dir).is_err()
        || std::fs::rename(log_dir.join(&name), dir.join(&name)).is_err()
    {
        let _ = std::fs::remove_file(log_dir.join(&name));
    }
}

/// Forgets entries kept in `dir` older than `retain`, then the oldest while they hold more
/// than `most_bytes`.
pub(super) fn prune(dir: &Path, retain: Duration, most_bytes: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    let mut kept: Vec<(SystemTime, u64, std::path::PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        let modified = meta.modified().unwrap_or(now);
        let old = now.duration_since(modified).is_ok_and(|age| age > retain);
        if old {
            let _ = std::fs::remove_file(entry.path());
        } else {
            kept.push((modified, meta.len(), entry.path()));
        }
    }
    kept.sort();
    let mut total: u64 = kept.iter().map(|(_, size, _)| size).sum();
    for (_, size, path) in kept {
        if total <= most_bytes {
            break;
        }
        let _ = std::fs::remove_file(path);
        total -= size;
    }
}

impl Ingest {
    /// Replays entries `from..=to` of table `ident`'s log on this node (see the module).
    pub async fn replay(
        self: &Arc<Self>,
        warehouse: &str,
        ident: &TableIdent,
        from: u64,
        to: u64,
        dry_run: bool,
    ) -> Result<Vec<Replayed>, IngestError> {
        let _one_at_a_time = self.replays.lock().await;
        let log_dir = self.log_dir(warehouse, ident).await?;
        let metadata = self.table_metadata(warehouse, ident).await?;
        let mut candidates: Vec<(u64, &'static str, std::path::PathBuf)> = Vec::new();
        for (kept_as, dir) in [
            ("retained", log_dir.join(RETAINED)),
            ("dead-letter", dead_letter::dir(&log_dir)),
        ] {
            for sequence in dead_letter::entries_in(&dir) {
                if (from..=to).contains(&sequence) {
                    candidates.push((sequence, kept_as, dir.clone()));
                }
            }
        }
        candidates.sort_by_key(|(sequence, _, _)| *sequence);
        let mut report = self
            .replay_letters(warehouse, ident, &metadata, from..=to, dry_run)
            .await?;
        for (sequence, kept_as, dir) in candidates {
            let mut line = Replayed {
                sequence,
                kept_as,
                rows: 0,
                outcome: "in-table",
                new_sequence: None,
                reason: None,
            };
            let batches = match read_raw(&dir, sequence) {
                Ok(batches) => batches,
                Err(Unfit::Misfit(_)) | Err(Unfit::Io(_)) => {
                    line.outcome = "unreadable";
                    report.push(line);
                    continue;
                }
            };
            line.rows = batches.iter().map(|b| b.num_rows()).sum();
            let held = kept_as == "retained" && self.holds(&metadata, sequence);
            if held {
                report.push(line);
                continue;
            }
            if dry_run {
                line.outcome = "would-replay";
                report.push(line);
                continue;
            }
            let receipt = self.append(warehouse, ident, &batches).await?;
            line.new_sequence = Some(receipt.sequence);
            line.outcome = "replayed";
            let replayed = log_dir.join(REPLAYED);
            let name = format!("{sequence:020}.arrow");
            std::fs::create_dir_all(&replayed)
                .and_then(|_| std::fs::rename(dir.join(&name), replayed.join(&name)))
                .map_err(|e| IngestError::Storage(format!("set entry {sequence} aside: {e}")))?;
            let _ = std::fs::remove_file(dir.join(format!("{sequence:020}.json")));
            report.push(line);
        }
        report.sort_by_key(|line| line.sequence);
        Ok(report)
    }

    /// The dead letters of this node's log with sequences in `range` in table `ident`'s
    /// dead-letter table, each entry's rows taken again as one new entry (decoded as a
    /// client's NDJSON would be, against the table as it is now; an upsert table's deletes
    /// as keys to delete), then removed from the dead-letter table. An entry whose rows the
    /// table still cannot take stays, reported `unreadable` with the reason.
    async fn replay_letters(
        self: &Arc<Self>,
        warehouse: &str,
        ident: &TableIdent,
        metadata: &iceberg::spec::TableMetadata,
        range: std::ops::RangeInclusive<u64>,
        dry_run: bool,
    ) -> Result<Vec<Replayed>, IngestError> {
        let log_id = self.log_id.clone();
        let ours = move |letter: &Held| {
            letter
                .of_log(&log_id)
                .is_some_and(|(sequence, _, _)| range.contains(&sequence))
        };
        let (_, found) =
            dead_letter::held::find(&self.catalog, &self.sql, warehouse, ident, &ours).await?;
        let mut held: std::collections::BTreeMap<u64, Vec<Held>> = Default::default();
        for letter in found {
            if let Some((sequence, _, _)) = letter.of_log(&self.log_id) {
                held.entry(sequence).or_default().push(letter);
            }
        }
        let schema = table_arrow_schema(metadata.current_schema()).map_err(IngestError::Invalid)?;
        let key =
            super::upsert::key_of(metadata)?.map(|ids| super::upsert::key_names(metadata, &ids));
        let mut report = Vec::new();
        let mut taken = BTreeSet::new();
        for (sequence, letters) in held {
            let mut line = Replayed {
                sequence,
                kept_as: "dead-letter",
                rows: letters.len(),
                outcome: "would-replay",
                new_sequence: None,
                reason: None,
            };
            let batches = match rows_of(&letters, &schema, key.as_deref()) {
                Ok(batches) => batches,
                Err(reason) => {
                    line.outcome = "unreadable";
                    line.reason = Some(reason);
                    report.push(line);
                    continue;
                }
            };
            if !dry_run {
                let receipt = self.append(warehouse, ident, &batches).await?;
                line.new_sequence = Some(receipt.sequence);
                line.outcome = "replayed";
                taken.insert(sequence);
            }
            report.push(line);
        }
        if !taken.is_empty() {
            let log_id = self.log_id.clone();
            let taken_again = |letter: &Held| {
                letter
                    .of_log(&log_id)
                    .is_some_and(|(sequence, _, _)| taken.contains(&sequence))
            };
            dead_letter::held::remove(&self.catalog, &self.sql, warehouse, ident, &taken_again)
                .await
                .map_err(|e| {
                    IngestError::Storage(format!(
                        "entries {taken:?} were taken again, but their dead letters could not \
                         be removed (a replay would take them once more): {e}"
                    ))
                })?;
        }
        Ok(report)
    }
}

/// One entry's letters as rows of a table of `schema` (keys of `key`, when they are deletes of
/// an upsert table's rows), or why they cannot be.
fn rows_of(
    letters: &[Held],
    schema: &SchemaRef,
    key: Option<&[String]>,
) -> Result<Vec<RecordBatch>, String> {
    // Rows of the log's letters: `of_log` with any log id holds for these.
    let rows: Vec<(&[u8], bool)> = letters
        .iter()
        .filter_map(|l| match (&l.record, &l.key) {
            (Some(row), _) => Some((&row[..], false)),
            (None, Some(key)) => Some((&key[..], true)),
            (None, None) => None,
        })
        .collect();
    let deletes = rows.first().is_some_and(|(_, delete)| *delete);
    if rows.iter().any(|(_, delete)| *delete != deletes) {
        return Err("the entry's letters are both rows and deletes".into());
    }
    let target = match (deletes, key) {
        (false, _) => schema.clone(),
        (true, Some(key)) => {
            super::upsert::marked_for_deletes(&super::upsert::key_schema(schema, key))
        }
        (true, None) => return Err("the letters delete keys, but the table has no key".into()),
    };
    let mut body = Vec::new();
    for (row, _) in rows {
        body.extend_from_slice(row);
        body.push(b'\n');
    }
    let budget = body.len().saturating_mul(64).max(1 << 20);
    let batches = crate::decode::rows::parse(
        crate::decode::rows::NDJSON,
        &bytes::Bytes::from(body),
        &target,
        budget,
    )
    .map_err(|e| e.to_string())?;
    batches
        .iter()
        .map(|b| super::conform(b, &target, super::Match::Name))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{
        ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float64Array,
        Int32Array, Int64Array, ListBuilder, StringArray, StringBuilder, StructArray,
        TimestampMicrosecondArray,
    };
    use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, TimeUnit};

    use super::*;
    use crate::core::dead_letter::rows_as_json;

    fn held(rows: Vec<Vec<u8>>, delete: bool) -> Vec<Held> {
        rows.into_iter().map(|row| Held::of(row, delete)).collect()
    }

    /// A row of every kind of column Floe writes: what a log entry's letters hold.
    fn every_type() -> RecordBatch {
        let point = Fields::from(vec![
            Field::new("x", DataType::Float64, true),
            Field::new("label", DataType::Utf8, true),
        ]);
        let mut tags = ListBuilder::new(StringBuilder::new());
        tags.values().append_value("a");
        tags.values().append_value("ü%_");
        tags.append(true);
        tags.append(false);
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("l", DataType::Int64, true),
            Field::new("d", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
            Field::new("day", DataType::Date32, true),
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                true,
            ),
            Field::new("amount", DataType::Decimal128(12, 2), true),
            Field::new("raw", DataType::Binary, true),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                true,
            ),
            Field::new("point", DataType::Struct(point.clone()), true),
            Field::new("attributes", crate::otlp::layout::text_map(), true),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![Some(-7), None])),
            Arc::new(Int64Array::from(vec![Some(i64::MAX), Some(0)])),
            Arc::new(Float64Array::from(vec![Some(0.1), Some(-2.5e300)])),
            Arc::new(StringArray::from(vec![Some("line\nbreak \"q\""), None])),
            Arc::new(BooleanArray::from(vec![Some(true), Some(false)])),
            Arc::new(Date32Array::from(vec![Some(19_000), None])),
            Arc::new(
                TimestampMicrosecondArray::from(vec![Some(1_700_000_000_123_456), None])
                    .with_timezone("+00:00"),
            ),
            Arc::new(
                Decimal128Array::from(vec![Some(12_345), Some(-1)])
                    .with_precision_and_scale(12, 2)
                    .unwrap(),
            ),
            Arc::new(BinaryArray::from(vec![Some(&b"\x00\xff"[..]), None])),
            Arc::new(tags.finish()),
            Arc::new(StructArray::new(
                point,
                vec![
                    Arc::new(Float64Array::from(vec![Some(1.5), None])),
                    Arc::new(StringArray::from(vec![Some("p"), None])),
                ],
                None,
            )),
            attributes(),
        ];
        RecordBatch::try_new(schema, columns).unwrap()
    }

    /// OpenTelemetry's map of text: `{a: 1, b: null}` and an empty map.
    fn attributes() -> ArrayRef {
        use datafusion::arrow::array::MapBuilder;
        let mut map = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        map.keys().append_value("a");
        map.values().append_value("1");
        map.keys().append_value("b");
        map.values().append_null();
        map.append(true).unwrap();
        map.append(true).unwrap();
        let built = map.finish();
        // The layout's field names.
        let DataType::Map(entries, sorted) = crate::otlp::layout::text_map() else {
            unreachable!("a map")
        };
        let (_, offsets, entries_array, nulls, _) = built.into_parts();
        let (_, columns, entry_nulls) = entries_array.into_parts();
        let DataType::Struct(fields) = entries.data_type() else {
            unreachable!("a struct")
        };
        Arc::new(datafusion::arrow::array::MapArray::new(
            entries.clone(),
            offsets,
            StructArray::new(fields.clone(), columns, entry_nulls),
            nulls,
            sorted,
        ))
    }

    #[test]
    fn a_log_entrys_letters_come_back_as_the_rows_they_were() {
        let entry = every_type();
        let letters = held(rows_as_json(std::slice::from_ref(&entry)).unwrap(), false);
        let back = rows_of(&letters, &entry.schema(), None).unwrap();
        let back = datafusion::arrow::compute::concat_batches(&entry.schema(), &back).unwrap();
        assert_eq!(back.num_rows(), 2);
        for (i, field) in entry.schema().fields().iter().enumerate() {
            assert_eq!(
                back.column(i).as_ref(),
                entry.column(i).as_ref(),
                "column {}",
                field.name()
            );
        }
    }

    #[test]
    fn deletes_come_back_as_keys_to_delete_and_only_into_an_upsert_table() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let letters = held(vec![br#"{"id": 4}"#.to_vec()], true);
        let keys = rows_of(&letters, &schema, Some(&["id".to_string()])).unwrap();
        assert!(crate::core::upsert::deletes(&keys));
        assert_eq!(keys[0].num_columns(), 1);
        let refused = rows_of(&letters, &schema, None).unwrap_err();
        assert!(refused.contains("no key"), "{refused}");
        let mut mixed = letters.clone();
        mixed.extend(held(vec![br#"{"id": 5, "name": "x"}"#.to_vec()], false));
        assert!(rows_of(&mixed, &schema, Some(&["id".to_string()])).is_err());
    }

    #[test]
    fn a_letter_the_table_still_cannot_take_says_why() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let letters = held(vec![br#"{"id": "seven"}"#.to_vec()], false);
        let refused = rows_of(&letters, &schema, None).unwrap_err();
        assert!(refused.contains("id"), "{refused}");
    }
}
