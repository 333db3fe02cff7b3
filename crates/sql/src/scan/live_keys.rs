//! A table's live rows as key columns and positions: for every live data file of a snapshot,
//! the values of some columns (found by Iceberg field id) of each row no position delete or
//! deletion vector removes, with the row's position in its file. An upsert table's key index
//! is built from this (in floe-stream's upsert core): the position is what a later delete of
//! that row names.
//!
//! Only the key columns are read. Equality deletes are not applied here: a table with any is
//! refused by name (an upsert writer never writes them; compaction folds another writer's).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::compute::{cast, concat_batches, take};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use futures::{StreamExt, TryStreamExt};
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataContentType, Struct};
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::async_reader::ParquetObjectReader;
use roaring::RoaringTreemap;

use super::field_ids::{FieldIds, field_id};
use super::manifests::ManifestIndex;
use super::position_deletes::deleted_positions;
use super::provider::TableFiles;

/// Data files read at once.
const CONCURRENCY: usize = 8;

/// The live rows of one data file.
#[derive(Debug, Clone)]
pub struct FileKeys {
    pub data_file: String,
    /// The spec and partition tuple of the data file (a delete of its rows has the same).
    pub spec_id: i32,
    pub partition: Struct,
    /// The key columns of its live rows, in the table's current types and column names.
    pub keys: RecordBatch,
    /// Each live row's position in the file, ascending.
    pub positions: Vec<u64>,
}

/// A live data file of a snapshot: what an upsert table's key index compares with the files
/// of the snapshot it describes.
#[derive(Debug, Clone)]
pub struct LiveFile {
    pub data_file: String,
    pub spec_id: i32,
    pub partition: Struct,
    /// Its rows, deleted or not.
    pub record_count: u64,
    /// Its data sequence number (none when its manifest gives none).
    pub sequence: Option<i64>,
    /// Whether an equality delete applies to it.
    pub equality_deletes: bool,
}

/// A snapshot's live data files, and the rows that delete files newer than a given sequence
/// number remove from them.
#[derive(Debug, Default)]
pub struct LiveFiles {
    pub files: Vec<LiveFile>,
    /// By data file: the positions removed by the position delete files and deletion vectors
    /// of a data sequence number above the one asked about (a delete file whose manifest
    /// gives none counts as newer).
    pub deleted_since: HashMap<String, RoaringTreemap>,
}

/// The live data files of `tasks` (a snapshot's plan) as `index` lists them, with the rows
/// that delete files of a data sequence number above `sequence` remove.
pub(crate) async fn live_files(
    index: &ManifestIndex,
    files: &TableFiles,
    tasks: Vec<FileScanTask>,
    sequence: i64,
) -> Result<LiveFiles> {
    let newer: HashSet<&str> = index
        .deletes
        .iter()
        .filter(|d| d.sequence.is_none_or(|s| s > sequence))
        .map(|d| d.file.file_path())
        .collect();
    let mut seen = HashSet::new();
    let mut live = Vec::new();
    let mut changed = Vec::new();
    for task in tasks {
        if !seen.insert(task.data_file_path.clone()) {
            continue;
        }
        let entry = index.data.get(&task.data_file_path).ok_or_else(|| {
            DataFusionError::Internal(format!(
                "data file {} is not in the snapshot's manifests",
                task.data_file_path
            ))
        })?;
        live.push(LiveFile {
            data_file: task.data_file_path.clone(),
            spec_id: entry.spec_id,
            partition: entry.file.partition().clone(),
            record_count: entry.file.record_count(),
            sequence: entry.sequence,
            equality_deletes: task
                .deletes
                .iter()
                .any(|d| d.file_type == DataContentType::EqualityDeletes),
        });
        let mut task = task;
        task.deletes.retain(|d| {
            d.file_type == DataContentType::PositionDeletes && newer.contains(d.file_path.as_str())
        });
        if !task.deletes.is_empty() {
            changed.push(task);
        }
    }
    Ok(LiveFiles {
        files: live,
        deleted_since: deleted_positions(index, files, &changed).await?,
    })
}

/// Which rows a read keeps: each file's rows (its columns as read) to a keep-or-not per row.
pub type Keep<'a> = dyn Fn(&RecordBatch) -> Vec<bool> + Send + Sync + 'a;

/// How a read goes beyond an upsert index's needs (the default: every live row of every file,
/// a file without one of the columns refused).
#[derive(Default, Clone, Copy)]
pub struct Reading<'a> {
    /// A column a file does not have (it was written before the column was added) reads as
    /// nulls, as Iceberg's schema evolution says.
    pub missing_as_null: bool,
    /// Only these data files.
    pub only: Option<&'a HashSet<String>>,
    /// Only the rows this keeps, decided as each file is read (so that what is not kept is
    /// never held all at once).
    pub keep: Option<&'a Keep<'a>>,
}

/// The live rows of `tasks`' data files, as `key_ids` (columns of `schema`, the table's
/// current schema, whose ids `ids` gives) and positions, as `reading` says.
pub(crate) async fn read(
    index: &ManifestIndex,
    files: &TableFiles,
    tasks: Vec<FileScanTask>,
    schema: &SchemaRef,
    ids: &FieldIds,
    key_ids: &[i32],
    reading: Reading<'_>,
) -> Result<Vec<FileKeys>> {
    let mut seen = HashSet::new();
    let tasks: Vec<FileScanTask> = tasks
        .into_iter()
        .filter(|t| {
            reading
                .only
                .is_none_or(|only| only.contains(&t.data_file_path))
        })
        .filter(|t| seen.insert(t.data_file_path.clone()))
        .collect();
    if let Some(task) = tasks.iter().find(|t| {
        t.deletes
            .iter()
            .any(|d| d.file_type == DataContentType::EqualityDeletes)
    }) {
        return Err(DataFusionError::Plan(format!(
            "data file {} has equality deletes, which an upsert table's key index does not \
             apply: compact the table first",
            task.data_file_path
        )));
    }
    let key_fields: Vec<(i32, Field)> = key_ids
        .iter()
        .map(|&id| {
            let name = ids.name_of(id).ok_or_else(|| {
                DataFusionError::Execution(format!("the key field id {id} is not a column"))
            })?;
            let field = schema.field_with_name(name)?.clone();
            Ok((id, field))
        })
        .collect::<Result<_>>()?;
    let key_schema = Arc::new(Schema::new(
        key_fields
            .iter()
            .map(|(_, f)| f.clone())
            .collect::<Vec<_>>(),
    ));
    let with_deletes: Vec<FileScanTask> = tasks
        .iter()
        .filter(|t| !t.deletes.is_empty())
        .cloned()
        .collect();
    let mut deleted = deleted_positions(index, files, &with_deletes).await?;
    let reads = tasks.into_iter().map(|task| {
        let removed = deleted.remove(&task.data_file_path).unwrap_or_default();
        let entry = index.data.get(&task.data_file_path);
        let located = entry.map(|e| (e.spec_id, e.file.partition().clone()));
        let key_fields = &key_fields;
        let key_schema = key_schema.clone();
        async move {
            let (spec_id, partition) = located.ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "data file {} is not in the snapshot's manifests",
                    task.data_file_path
                ))
            })?;
            let (keys, positions) = read_file(
                files,
                &task,
                key_fields,
                &key_schema,
                &removed,
                reading.missing_as_null,
            )
            .await?;
            let (keys, positions) = match reading.keep {
                None => (keys, positions),
                Some(keep) => {
                    let kept = keep(&keys);
                    let mask = datafusion::arrow::array::BooleanArray::from(kept.clone());
                    let keys = datafusion::arrow::compute::filter_record_batch(&keys, &mask)?;
                    let positions = positions
                        .into_iter()
                        .zip(kept)
                        .filter_map(|(p, k)| k.then_some(p))
                        .collect();
                    (keys, positions)
                }
            };
            Ok::<_, DataFusionError>(FileKeys {
                data_file: task.data_file_path,
                spec_id,
                partition,
                keys,
                positions,
            })
        }
    });
    let read: Vec<FileKeys> = futures::stream::iter(reads)
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await?;
    Ok(read
        .into_iter()
        .filter(|f| reading.keep.is_none() || !f.positions.is_empty())
        .collect())
}

/// The key columns and positions of one data file's rows not in `removed`.
async fn read_file(
    files: &TableFiles,
    task: &FileScanTask,
    key_fields: &[(i32, Field)],
    key_schema: &SchemaRef,
    removed: &RoaringTreemap,
    missing_as_null: bool,
) -> Result<(RecordBatch, Vec<u64>)> {
    let location = &task.data_file_path;
    let size = task.file_size_in_bytes;
    let reader = super::bounded_footer::Bounded::new(
        ParquetObjectReader::new(files.store.clone(), files.path(location)?.into())
            .with_file_size(size),
        location.clone(),
        size,
    );
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let file_schema = builder.schema().clone();
    let has_ids = file_schema.fields().iter().any(|f| field_id(f).is_some());
    // Each key column's root in the file: by id, or by name in a file written without ids.
    let roots: Vec<Option<usize>> = key_fields
        .iter()
        .map(|(id, field)| {
            let root = file_schema.fields().iter().position(|f| {
                if has_ids {
                    field_id(f) == Some(*id)
                } else {
                    f.name() == field.name()
                }
            });
            match root {
                Some(root) => Ok(Some(root)),
                None if missing_as_null => Ok(None),
                None => Err(DataFusionError::Execution(format!(
                    "data file {location} has no column for the key {}",
                    field.name()
                ))),
            }
        })
        .collect::<Result<_>>()?;
    let mut sorted: Vec<usize> = roots.iter().flatten().copied().collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), sorted.clone());
    let mut stream = builder.with_projection(mask).build()?;
    let mut batches = Vec::new();
    let mut positions = Vec::new();
    let mut offset = 0u64;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let rows = batch.num_rows() as u64;
        let live: Vec<u64> = (offset..offset + rows)
            .filter(|p| !removed.contains(*p))
            .collect();
        let indices = UInt64Array::from_iter_values(live.iter().map(|p| p - offset));
        let columns: Vec<ArrayRef> = roots
            .iter()
            .zip(key_fields)
            .map(|(root, (_, field))| match root {
                Some(root) => {
                    let at = sorted.binary_search(root).expect("projected");
                    let values = take(batch.column(at), &indices, None)?;
                    Ok(cast(&values, field.data_type())?)
                }
                None => Ok(datafusion::arrow::array::new_null_array(
                    field.data_type(),
                    indices.len(),
                )),
            })
            .collect::<Result<_>>()?;
        batches.push(RecordBatch::try_new(key_schema.clone(), columns)?);
        positions.extend(live);
        offset += rows;
    }
    Ok((concat_batches(key_schema, &batches)?, positions))
}
