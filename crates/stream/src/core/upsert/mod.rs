//! Upsert tables: the newest row per key wins, and a delete removes the key.
//!
//! A table is an upsert table when its property `write.upsert.enabled` is `true` (the
//! property Iceberg's Flink writer reads) and its schema has identifier fields (Iceberg's
//! key: required, not floating point). Changes arrive in source order — rows to upsert and
//! keys to delete — and [`commit`] writes them as one row delta:
//!
//! 1. Within the changes, the last change per key wins.
//! 2. The winning rows are written as new data files, and the rows they replace — found in
//!    the table's key index ([`index`]), not by reading the table — are removed in the same
//!    snapshot together with the rows of deleted keys, as the table's format is read
//!    ([`floe_sql::write::delete_rows`]: v2 position delete files, one per partition touched;
//!    v3 deletion vectors, one per data file). An upsert costs O(changes), not O(table).
//! 3. The snapshot (`overwrite` when it writes and deletes, `delete` when it only deletes,
//!    `append` when it only adds) carries every manifest of its parent and the source's
//!    positions, and commits only on the `main` the index described; a lost race catches the
//!    index up and tries again.
//!
//! The index is made ready for each commit at the least cost that is sure ([`ready`]): held
//! in memory when this node made the last commit, caught up from the snapshot it (or the
//! table's checkpoint, [`checkpoint`]) describes when others committed since (compaction,
//! another writer, a restart), built from the table's rows otherwise.
//!
//! Every engine that reads position deletes and deletion vectors (Floe's SQL, PyIceberg,
//! DuckDB, Spark, Trino, Flink) reads the latest row per key. Compaction folds the deletes
//! into new files.

pub(crate) mod checkpoint;
pub(crate) mod index;
mod ready;

use std::collections::{BTreeMap, HashMap};

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogService, TableCommitRequest};
use iceberg::TableIdent;
use iceberg::spec::{Operation, TableMetadata};

use super::IngestError;
use index::{KeyIndex, Slot};

pub(crate) use floe_sql::write::UPSERT_PROPERTY;

/// The metadata key of a log entry's schema that says its rows are keys to delete.
pub(crate) const OP_KEY: &str = "floe.op";
/// [`OP_KEY`]'s value for deletes.
pub(crate) const OP_DELETE: &str = "delete";

/// Whether a log entry's `batches` are keys to delete ([`OP_KEY`] on their schema).
pub(crate) fn deletes(batches: &[RecordBatch]) -> bool {
    batches
        .first()
        .is_some_and(|b| b.schema().metadata().get(OP_KEY).map(String::as_str) == Some(OP_DELETE))
}

/// `schema` marked as the schema of keys to delete ([`OP_KEY`]).
pub(crate) fn marked_for_deletes(schema: &SchemaRef) -> SchemaRef {
    let mut metadata = schema.metadata().clone();
    metadata.insert(OP_KEY.to_string(), OP_DELETE.to_string());
    std::sync::Arc::new(schema.as_ref().clone().with_metadata(metadata))
}

/// Tries of a commit that keeps losing its race.
const ATTEMPTS: usize = 8;

/// The longest key (in its comparable encoding) a change may have: the key index holds every
/// live key in memory.
pub(crate) const MAX_KEY_BYTES: usize = 1024;

/// One change, in source order.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    /// Rows of the table: each replaces the row of its key, if any.
    Upsert(RecordBatch),
    /// Key columns (the table's identifier fields): each key's row is deleted.
    Delete(RecordBatch),
}

/// The identifier field ids of `metadata`'s table (ascending: the key's order) when it is an
/// upsert table, `None` when it is not; an error naming what is wrong when it says it is but
/// cannot be written as one (no key, a key field inside a struct, format v1).
pub(crate) fn key_of(metadata: &TableMetadata) -> Result<Option<Vec<i32>>, IngestError> {
    if !floe_sql::write::upsert_enabled(metadata) {
        return Ok(None);
    }
    let schema = metadata.current_schema();
    let mut ids: Vec<i32> = schema.identifier_field_ids().collect();
    ids.sort_unstable();
    if ids.is_empty() {
        return Err(IngestError::Invalid(format!(
            "the table says {UPSERT_PROPERTY}=true but its schema has no identifier fields: \
             set them (ALTER TABLE … SET IDENTIFIER FIELDS) to say what its key is"
        )));
    }
    if let Some(nested) = ids
        .iter()
        .find(|&&id| !schema.as_struct().fields().iter().any(|f| f.id == id))
    {
        return Err(IngestError::Invalid(format!(
            "identifier field {} lies inside a struct: an upsert table's key must be top-level \
             columns",
            schema.name_by_field_id(*nested).unwrap_or("?")
        )));
    }
    match metadata.format_version() {
        iceberg::spec::FormatVersion::V1 => Err(IngestError::Invalid(
            "a format v1 table cannot hold deletes: upgrade it to format v2 to upsert".into(),
        )),
        _ => Ok(Some(ids)),
    }
}

/// The key columns' names of `metadata`'s current schema, in the key's order.
pub(crate) fn key_names(metadata: &TableMetadata, ids: &[i32]) -> Vec<String> {
    let schema = metadata.current_schema();
    ids.iter()
        .filter_map(|&id| schema.name_by_field_id(id).map(str::to_string))
        .collect()
}

/// `schema` (the table's Arrow schema) narrowed to the key columns `names`: what a delete
/// carries.
pub(crate) fn key_schema(schema: &SchemaRef, names: &[String]) -> SchemaRef {
    let fields: Vec<_> = names
        .iter()
        .filter_map(|name| schema.field_with_name(name).ok().cloned())
        .collect();
    std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(fields))
}

/// Whether two lists of key columns name the same key (in any order).
pub fn same_key(a: &[String], b: &[String]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort();
    b.sort();
    a == b
}

/// An SQL write's or read's error in an upsert: what the table's contents refuse (a `Plan`
/// error: equality deletes, a v2 delete file in a v3 table) is the table's to fix, not worth
/// retrying soon; the rest as any write's.
fn refused(e: datafusion::error::DataFusionError) -> IngestError {
    match e {
        datafusion::error::DataFusionError::Plan(m)
        | datafusion::error::DataFusionError::NotImplemented(m) => IngestError::Invalid(m),
        other => IngestError::of_write(&other),
    }
}

/// What a row delta wrote.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Upserted {
    pub files: usize,
    /// Rows written (the winning version of each upserted key).
    pub rows: u64,
    pub sequence_number: i64,
}

/// Data files written, each with the key columns of its rows in the order written.
type Written = Vec<(iceberg::spec::DataFile, RecordBatch)>;

/// The changes' net effect: per key, its winning row (an index into `rows`) or its deletion.
struct Net {
    /// The winning rows, one per upserted key.
    rows: Option<RecordBatch>,
    /// Keys (encoded) to delete from the table, with the winning row where there is one.
    keys: Vec<(Box<[u8]>, Option<usize>)>,
}

/// Applies `changes` (in source order) to upsert table `ident` of `warehouse` as `caller`, in
/// one snapshot whose summary carries what `positions` makes of the table's metadata as the
/// commit finds it. `expected_key`, when given, must be the table's key (a pipeline reads
/// its tombstones' keys by it).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn commit(
    catalog: &CatalogService,
    sql: &floe_sql::SqlEngine,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
    changes: Vec<Change>,
    expected_key: Option<&[String]>,
    positions: impl Fn(&TableMetadata) -> Result<HashMap<String, String>, IngestError>,
) -> Result<Upserted, IngestError> {
    let access = sql
        .access(caller, warehouse)
        .await
        .map_err(|e| IngestError::of_sql(&e))?;
    // Taken before the table is loaded, so a commit waiting for another's sees its result.
    let held = index::of_table(&format!("{warehouse}\u{1f}{ident}"));
    let mut guard = held.lock().await;
    // The net change and the files written for it, with the schema and spec they were made
    // for: made again if either changed under a retry.
    let mut made: Option<(i32, i32, Net, Written)> = None;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let loaded = catalog
            .load_table(caller, warehouse, ident)
            .await
            .map_err(IngestError::of_catalog)?;
        let metadata = loaded.metadata.clone();
        let properties = positions(&metadata)?;
        let key_ids = key_of(&metadata)?.ok_or_else(|| {
            IngestError::Invalid(format!(
                "table {ident} is not an upsert table ({UPSERT_PROPERTY} is not true)"
            ))
        })?;
        let names = key_names(&metadata, &key_ids);
        if let Some(expected) = expected_key
            && !same_key(expected, &names)
        {
            return Err(IngestError::Invalid(format!(
                "table {ident} has the key {}, not {}",
                names.join(", "),
                expected.join(", ")
            )));
        }
        let schema = super::log::table_arrow_schema(metadata.current_schema())?;
        let keys = key_schema(&schema, &names);
        let current = metadata.current_snapshot().map(|s| s.snapshot_id());
        let described = index::Described {
            table: metadata.uuid(),
            key_ids: key_ids.clone(),
            types: keys
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect(),
            snapshot_id: current,
        };
        let table = floe_sql::write::table_of(&access, loaded.clone())
            .map_err(|e| IngestError::Storage(e.to_string()))?;
        if guard
            .as_ref()
            .is_none_or(|index| index.described != described)
        {
            let held = guard.take();
            *guard = Some(ready::ready(&access, loaded, held, described).await?);
        }
        let index = guard.as_mut().expect("made ready");
        let (schema_id, spec_id) = (
            metadata.current_schema_id(),
            metadata.default_partition_spec_id(),
        );
        if made
            .as_ref()
            .is_some_and(|(s, p, _, _)| (*s, *p) != (schema_id, spec_id))
        {
            made = None;
        }
        let (_, _, net, files) = match &mut made {
            Some(made) => made,
            None => {
                let net = resolve(index, &schema, &keys, &changes)?;
                let files = write_rows(&table, net.rows.as_ref(), &keys).await?;
                made.insert((schema_id, spec_id, net, files))
            }
        };
        // The rows each deleted or replaced key has in the table, by data file.
        let mut doomed: BTreeMap<u32, (Slot, Vec<u64>)> = BTreeMap::new();
        for (key, _) in &net.keys {
            for (id, slot, position) in index.get(key) {
                doomed
                    .entry(id)
                    .or_insert_with(|| (slot.clone(), Vec::new()))
                    .1
                    .push(position);
            }
        }
        let data_files: Vec<_> = files.iter().map(|(f, _)| f.clone()).collect();
        let rows: u64 = data_files.iter().map(|f| f.record_count()).sum();
        let adds = !data_files.is_empty();
        let mut snapshot = floe_sql::write::SnapshotWriter::new(&table);
        let snapshot_id = snapshot.snapshot_id();
        let failed = |e: iceberg::Error| IngestError::Storage(format!("write the snapshot: {e}"));
        let parent = metadata.current_snapshot().cloned();
        let doomed = doomed
            .into_values()
            .map(|(slot, mut positions)| {
                positions.sort_unstable();
                positions.dedup();
                floe_sql::write::Doomed {
                    data_file: slot.path,
                    spec_id: slot.spec_id,
                    partition: slot.partition,
                    positions,
                }
            })
            .collect();
        let written =
            floe_sql::write::delete_rows(&table, &mut snapshot, parent.as_deref(), doomed)
                .await
                .map_err(refused)?;
        let (deleted, delete_paths) = (written.rows, written.paths);
        if adds {
            snapshot
                .add_files(spec_id, data_files)
                .await
                .map_err(failed)?;
        }
        let operation = match (deleted > 0, adds) {
            (true, false) => Operation::Delete,
            (true, true) => Operation::Overwrite,
            (false, _) => Operation::Append,
        };
        let updates = snapshot
            .finish(parent.as_deref(), operation, properties)
            .await
            .map_err(failed)?;
        let committed = catalog
            .commit_table(
                caller,
                warehouse,
                TableCommitRequest {
                    ident: ident.clone(),
                    requirements: floe_sql::write::on_main(&metadata, current),
                    updates,
                },
            )
            .await;
        match committed {
            Ok(response) => {
                // The index moves along with this commit: deleted and replaced keys out,
                // the written rows in.
                for (key, _) in &net.keys {
                    index.remove(key);
                }
                for (file, keys) in files.iter() {
                    let positions: Vec<u64> = (0..keys.num_rows() as u64).collect();
                    index.insert_file(
                        Slot {
                            path: file.file_path().to_string(),
                            spec_id,
                            partition: file.partition().clone(),
                        },
                        keys,
                        &positions,
                    )?;
                }
                index.described.snapshot_id = Some(snapshot_id);
                checkpoint::maybe_write(&access, metadata.location(), index);
                return Ok(Upserted {
                    files: files.len(),
                    rows,
                    sequence_number: response.metadata.last_sequence_number(),
                });
            }
            Err(e) => {
                // The index still describes the snapshot this commit was made on: the next
                // try catches it up to whatever `main` is then (this commit's own snapshot
                // included, had it landed after all).
                let error = IngestError::of_catalog(e);
                // Only a refused commit is known not to have happened: after a timeout or an
                // unknown state the snapshot may hold these files, so they stay (orphan
                // cleanup takes them if it does not).
                if matches!(error, IngestError::Conflict(_)) {
                    for path in &delete_paths {
                        if let Err(e) = table.file_io().delete(path).await {
                            tracing::warn!(file = %path, error = %e, "delete an uncommitted delete file");
                        }
                    }
                }
                match error {
                    IngestError::Conflict(_) if attempt < ATTEMPTS => {
                        tracing::info!(table = %ident, attempt, "retry an upsert commit");
                    }
                    error => return Err(error),
                }
            }
        }
    }
}

/// The net effect of `changes`: the last change per key wins.
fn resolve(
    index: &KeyIndex,
    schema: &SchemaRef,
    keys: &SchemaRef,
    changes: &[Change],
) -> Result<Net, IngestError> {
    let upserts: Vec<&RecordBatch> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Upsert(rows) => Some(rows),
            Change::Delete(_) => None,
        })
        .collect();
    let rows = if upserts.is_empty() {
        None
    } else {
        Some(
            concat_batches(schema, upserts)
                .map_err(|e| IngestError::Invalid(format!("gather the rows: {e}")))?,
        )
    };
    // Per key, its last change: a row of `rows` or a deletion; keys in first-seen order.
    let mut last: HashMap<Box<[u8]>, Option<usize>> = HashMap::new();
    let mut order: Vec<Box<[u8]>> = Vec::new();
    let mut row_base = 0usize;
    for change in changes {
        let (batch, upsert) = match change {
            Change::Upsert(batch) => (batch, true),
            Change::Delete(batch) => (batch, false),
        };
        let columns = key_columns(batch, keys)?;
        let encoded = index.encode(&columns)?;
        for (i, key) in encoded.iter().enumerate() {
            if key.as_ref().len() > MAX_KEY_BYTES {
                return Err(IngestError::Invalid(format!(
                    "a key of {} bytes is longer than the {MAX_KEY_BYTES} an upsert table's key \
                     may be",
                    key.as_ref().len()
                )));
            }
            let key: Box<[u8]> = key.as_ref().into();
            let winner = upsert.then_some(row_base + i);
            if last.insert(key.clone(), winner).is_none() {
                order.push(key);
            }
        }
        if upsert {
            row_base += batch.num_rows();
        }
    }
    let keys: Vec<(Box<[u8]>, Option<usize>)> = order
        .into_iter()
        .map(|key| {
            let winner = last[&key];
            (key, winner)
        })
        .collect();
    // Only the winning rows, in their keys' first-seen order.
    let rows = match rows {
        None => None,
        Some(rows) => {
            let picked: Vec<u64> = keys
                .iter()
                .filter_map(|(_, winner)| winner.map(|i| i as u64))
                .collect();
            let indices = datafusion::arrow::array::UInt64Array::from(picked);
            Some(
                take_record_batch(&rows, &indices)
                    .map_err(|e| IngestError::Invalid(format!("pick the newest rows: {e}")))?,
            )
        }
    };
    Ok(Net { rows, keys })
}

/// The key columns of `batch`, found by name, refusing nulls (a key is required).
fn key_columns(batch: &RecordBatch, keys: &SchemaRef) -> Result<Vec<ArrayRef>, IngestError> {
    keys.fields()
        .iter()
        .map(|field| {
            let column = batch.column_by_name(field.name()).ok_or_else(|| {
                IngestError::Invalid(format!(
                    "a change has no value for the key {}",
                    field.name()
                ))
            })?;
            if column.null_count() > 0 {
                return Err(IngestError::Invalid(format!(
                    "a change has a null key {}: a key column is required",
                    field.name()
                )));
            }
            Ok(column.clone())
        })
        .collect()
}

/// Writes the winning rows of `rows` (sorted by the table's order) as data files: each file
/// with the key columns of its rows in the order written, row i at position i.
async fn write_rows(
    table: &iceberg::table::Table,
    rows: Option<&RecordBatch>,
    keys: &SchemaRef,
) -> Result<Written, IngestError> {
    let Some(rows) = rows else {
        return Ok(Vec::new());
    };
    if rows.num_rows() == 0 {
        return Ok(Vec::new());
    }
    let sorted = super::commit::sort_batch(table.metadata(), rows.clone())?;
    let parts = floe_sql::write::write_batch_parts(table, &sorted)
        .await
        .map_err(|e| IngestError::of_write(&e))?;
    let mut written = Vec::new();
    for (files, part) in parts {
        let part_keys = RecordBatch::try_new(keys.clone(), key_columns(&part, keys)?)
            .map_err(|e| IngestError::Invalid(format!("key columns: {e}")))?;
        let mut offset = 0usize;
        for file in files {
            let count = file.record_count() as usize;
            if offset + count > part_keys.num_rows() {
                return Err(IngestError::Storage(format!(
                    "data file {} says it holds more rows than were written",
                    file.file_path()
                )));
            }
            written.push((file, part_keys.slice(offset, count)));
            offset += count;
        }
        if offset != part_keys.num_rows() {
            return Err(IngestError::Storage(
                "the written data files hold fewer rows than were written".into(),
            ));
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{AsArray, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    fn rows(pairs: &[(i64, &str)]) -> Change {
        Change::Upsert(
            RecordBatch::try_new(
                schema(),
                vec![
                    Arc::new(Int64Array::from_iter_values(pairs.iter().map(|p| p.0))),
                    Arc::new(StringArray::from_iter_values(pairs.iter().map(|p| p.1))),
                ],
            )
            .unwrap(),
        )
    }

    fn deletes(ids: &[i64]) -> Change {
        let keys = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        Change::Delete(
            RecordBatch::try_new(keys, vec![Arc::new(Int64Array::from(ids.to_vec()))]).unwrap(),
        )
    }

    #[test]
    fn the_last_change_per_key_wins_within_a_batch() {
        let keys = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let index = KeyIndex::new(index::Described {
            table: uuid::Uuid::nil(),
            key_ids: vec![1],
            types: vec![DataType::Int64],
            snapshot_id: None,
        })
        .unwrap();
        let changes = [
            rows(&[(1, "a"), (2, "b"), (1, "a2")]),
            deletes(&[2, 3]),
            rows(&[(3, "c"), (4, "d")]),
            deletes(&[4]),
        ];
        let net = resolve(&index, &schema(), &keys, &changes).unwrap();
        // Keys in first-seen order; 2 and 4 end deleted, 3 deleted then written again.
        let winners: Vec<Option<usize>> = net.keys.iter().map(|(_, w)| *w).collect();
        assert_eq!(winners, vec![Some(2), None, Some(3), None]);
        let written = net.rows.unwrap();
        let ids: Vec<i64> = written
            .column(0)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec();
        let names: Vec<&str> = written
            .column(1)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        assert_eq!((ids, names), (vec![1, 3], vec!["a2", "c"]));
    }

    #[test]
    fn a_null_or_missing_key_is_refused_by_name() {
        let keys = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let index = KeyIndex::new(index::Described {
            table: uuid::Uuid::nil(),
            key_ids: vec![1],
            types: vec![DataType::Int64],
            snapshot_id: None,
        })
        .unwrap();
        let nullable = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
        let null_key = Change::Delete(
            RecordBatch::try_new(
                nullable,
                vec![Arc::new(Int64Array::from(vec![Some(1), None]))],
            )
            .unwrap(),
        );
        let error = resolve(&index, &schema(), &keys, &[null_key])
            .err()
            .unwrap();
        assert!(error.to_string().contains("null key id"), "{error}");
        let other = Arc::new(Schema::new(vec![Field::new(
            "other",
            DataType::Int64,
            false,
        )]));
        let no_key = Change::Delete(
            RecordBatch::try_new(other, vec![Arc::new(Int64Array::from(vec![1]))]).unwrap(),
        );
        let error = resolve(&index, &schema(), &keys, &[no_key]).err().unwrap();
        assert!(
            error.to_string().contains("no value for the key id"),
            "{error}"
        );
    }
}
