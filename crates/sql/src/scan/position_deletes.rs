//! Position deletes and deletion vectors, applied inside DataFusion's Parquet scan.
//!
//! A data file's deleted row positions — from Parquet position delete files (format v2, as
//! PyIceberg and Spark write them) or from deletion vectors in Puffin files (format v3) — are
//! gathered into one bitmap at planning time and turned into a [`ParquetAccessPlan`]: row groups
//! with nothing deleted are scanned whole, row groups with everything deleted are skipped, the
//! rest are read through a row selection. The file then goes through the same native scan as
//! files without deletes, keeping page and row-group pruning, byte-range splits and exact row
//! counts.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, RowGroupAccess};
use futures::{StreamExt, TryStreamExt};
use iceberg::scan::FileScanTask;
use iceberg::spec::DataContentType;
use object_store::ObjectStoreExt;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetObjectReader};
use roaring::RoaringTreemap;

use crate::scan::manifests::{ManifestIndex, VectorBlob};
use crate::scan::provider::TableFiles;

/// How many delete files or data file footers are read at once while planning.
const CONCURRENCY: usize = 16;

/// The magic bytes that open a deletion vector blob (`deletion-vector-v1`).
pub(crate) const DV_MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];

/// A data file's deletes in the form the Parquet scan takes.
#[derive(Debug, Clone)]
pub struct FileDeletes {
    pub plan: ParquetAccessPlan,
    /// Rows left after deletes (of the rows the file has).
    pub live_rows: u64,
}

/// True when every delete file attached to the task is a position delete (Parquet or
/// deletion vector), so the task can be read by the native scan.
pub fn positional_only(task: &FileScanTask) -> bool {
    task.deletes
        .iter()
        .all(|d| d.file_type == DataContentType::PositionDeletes)
}

/// Delete files (or Puffin blobs' files) read since the process started.
static DELETE_FILES_READ: AtomicU64 = AtomicU64::new(0);

/// Counts one delete file read (equality delete files are read by [`super::equality_deletes`]).
pub(crate) fn count_delete_file_read() {
    DELETE_FILES_READ.fetch_add(1, Ordering::Relaxed);
}

/// How many delete files queries have read (a file read for several data files counts once).
pub fn delete_files_read() -> u64 {
    DELETE_FILES_READ.load(Ordering::Relaxed)
}

/// Access plans kept across queries, by data file and the delete files applying to it: both
/// never change once written, so neither does the plan. A query repeated on a table with
/// deletes reads no delete file again.
mod kept {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex};

    use super::FileDeletes;

    /// Plans kept; the least recently used tenth goes when full.
    const KEPT: usize = 50_000;

    #[derive(Default)]
    struct Kept {
        clock: u64,
        plans: HashMap<String, (u64, Arc<FileDeletes>)>,
    }

    static PLANS: LazyLock<Mutex<Kept>> = LazyLock::new(Mutex::default);

    pub fn get(key: &str) -> Option<Arc<FileDeletes>> {
        let mut kept = PLANS.lock().expect("delete plan cache lock");
        kept.clock += 1;
        let clock = kept.clock;
        let entry = kept.plans.get_mut(key)?;
        entry.0 = clock;
        Some(entry.1.clone())
    }

    pub fn put(key: String, plan: Arc<FileDeletes>) {
        let mut kept = PLANS.lock().expect("delete plan cache lock");
        kept.clock += 1;
        let clock = kept.clock;
        if kept.plans.len() >= KEPT {
            let mut uses: Vec<u64> = kept.plans.values().map(|(used, _)| *used).collect();
            uses.sort_unstable();
            let cut = uses[KEPT / 10];
            kept.plans.retain(|_, (used, _)| *used > cut);
        }
        kept.plans.insert(key, (clock, plan));
    }
}

/// What a data file's access plan depends on: the file and its delete files.
fn plan_key(task: &FileScanTask) -> String {
    let mut deletes: Vec<&str> = task.deletes.iter().map(|d| d.file_path.as_str()).collect();
    deletes.sort_unstable();
    format!("{}\u{1f}{}", task.data_file_path, deletes.join("\u{1f}"))
}

/// Works out the access plan of every task's data file from its position deletes; plans
/// worked out before are reused.
pub(crate) async fn plan_deletes(
    index: &ManifestIndex,
    files: &TableFiles,
    tasks: &[FileScanTask],
) -> Result<HashMap<String, FileDeletes>> {
    let mut found = HashMap::new();
    let mut missing = Vec::new();
    let mut keys = HashMap::new();
    for task in tasks {
        let key = plan_key(task);
        match kept::get(&key) {
            Some(plan) => {
                found.insert(task.data_file_path.clone(), plan.as_ref().clone());
            }
            None => {
                keys.insert(task.data_file_path.clone(), key);
                missing.push(task.clone());
            }
        }
    }
    for (path, plan) in read_deletes(index, files, &missing).await? {
        if let Some(key) = keys.remove(&path) {
            kept::put(key, Arc::new(plan.clone()));
        }
        found.insert(path, plan);
    }
    Ok(found)
}

/// Reads the delete files of `tasks` and works out their data files' access plans.
async fn read_deletes(
    index: &ManifestIndex,
    files: &TableFiles,
    tasks: &[FileScanTask],
) -> Result<HashMap<String, FileDeletes>> {
    if tasks.is_empty() {
        return Ok(HashMap::new());
    }
    let mut deleted = deleted_positions(index, files, tasks).await?;
    let plans: Vec<_> = tasks
        .iter()
        .map(|task| {
            let positions = deleted.remove(&task.data_file_path).unwrap_or_default();
            let (path, size) = (task.data_file_path.clone(), task.file_size_in_bytes);
            async move {
                let deletes = access_plan(files, &path, size, &positions).await?;
                Ok::<_, DataFusionError>((path, deletes))
            }
        })
        .collect();
    futures::stream::iter(plans)
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
}

/// The deleted row positions of `tasks`' data files, from their position delete files and
/// deletion vectors (each delete file read once), by data file.
pub(crate) async fn deleted_positions(
    index: &ManifestIndex,
    files: &TableFiles,
    tasks: &[FileScanTask],
) -> Result<HashMap<String, RoaringTreemap>> {
    let wanted: Arc<HashSet<String>> =
        Arc::new(tasks.iter().map(|t| t.data_file_path.clone()).collect());
    let delete_files: HashMap<String, u64> = tasks
        .iter()
        .flat_map(|t| t.deletes.iter())
        .map(|d| (d.file_path.clone(), d.file_size_in_bytes))
        .collect();

    // Every delete file once, whatever number of data files it covers.
    let loads = delete_files.into_iter().map(|(path, size)| {
        let wanted = wanted.clone();
        let blobs = index.vectors.get(&path).cloned();
        async move {
            count_delete_file_read();
            match blobs {
                Some(blobs) => read_vectors(files, &path, &blobs).await,
                None => read_position_file(files, &path, size, &wanted).await,
            }
        }
    });
    let mut deleted: HashMap<String, RoaringTreemap> = HashMap::new();
    let mut loaded = futures::stream::iter(loads).buffer_unordered(CONCURRENCY);
    while let Some(found) = loaded.next().await {
        for (data_file, positions) in found? {
            *deleted.entry(data_file).or_default() |= positions;
        }
    }
    Ok(deleted)
}

/// Reads deletion vectors: a 4-byte big-endian length, the magic bytes, a portable 64-bit
/// Roaring bitmap, and a big-endian CRC-32 of magic and bitmap.
async fn read_vectors(
    files: &TableFiles,
    puffin: &str,
    blobs: &[VectorBlob],
) -> Result<Vec<(String, RoaringTreemap)>> {
    let path = files.path(puffin)?.into();
    let mut found = Vec::with_capacity(blobs.len());
    for blob in blobs {
        let bytes = files
            .store
            .get_range(&path, blob.offset..blob.offset + blob.length)
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let bitmap = parse_vector(&bytes).map_err(|why| {
            DataFusionError::Execution(format!(
                "deletion vector at offset {} of {puffin}: {why}",
                blob.offset
            ))
        })?;
        found.push((blob.data_file.clone(), bitmap));
    }
    Ok(found)
}

pub(crate) fn parse_vector(bytes: &[u8]) -> std::result::Result<RoaringTreemap, String> {
    if bytes.len() < 12 {
        return Err(format!("{} bytes is too short", bytes.len()));
    }
    let declared = u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
    if declared + 8 != bytes.len() {
        return Err(format!(
            "declares {declared} bytes but the blob holds {}",
            bytes.len() - 8
        ));
    }
    let body = &bytes[4..4 + declared];
    if body[..4] != DV_MAGIC {
        return Err("does not start with the deletion-vector magic bytes".into());
    }
    let stored = u32::from_be_bytes(bytes[4 + declared..].try_into().expect("4 bytes"));
    if crc32fast::hash(body) != stored {
        return Err("checksum mismatch".into());
    }
    RoaringTreemap::deserialize_from(&body[4..]).map_err(|e| format!("bad bitmap: {e}"))
}

/// Reads a Parquet position delete file (`file_path`, `pos`), keeping the positions of the
/// data files this scan reads.
async fn read_position_file(
    files: &TableFiles,
    location: &str,
    size: u64,
    wanted: &HashSet<String>,
) -> Result<Vec<(String, RoaringTreemap)>> {
    let reader = crate::scan::bounded_footer::Bounded::new(
        ParquetObjectReader::new(files.store.clone(), files.path(location)?.into())
            .with_file_size(size),
        location.to_string(),
        size,
    );
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let columns = ["file_path", "pos"].map(|name| {
        builder.schema().index_of(name).map_err(|_| {
            DataFusionError::Execution(format!(
                "position delete file {location} has no {name} column"
            ))
        })
    });
    let [file_column, pos_column] = columns;
    let (file_column, pos_column) = (file_column?, pos_column?);
    let mask =
        parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), [file_column, pos_column]);
    let mut stream = builder.with_projection(mask).build()?;
    let mut found: HashMap<String, RoaringTreemap> = HashMap::new();
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let files = datafusion::arrow::compute::cast(batch.column(0), &DataType::Utf8)?;
        let files = files.as_string::<i32>();
        let positions = batch
            .column(1)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| {
                DataFusionError::Execution(format!(
                    "pos in position delete file {location} is not a long"
                ))
            })?;
        for row in 0..batch.num_rows() {
            if files.is_null(row) || positions.is_null(row) {
                continue;
            }
            let file = files.value(row);
            if !wanted.contains(file) {
                continue;
            }
            let position = positions.value(row);
            if position >= 0 {
                found
                    .entry(file.to_string())
                    .or_default()
                    .insert(position as u64);
            }
        }
    }
    Ok(found.into_iter().collect())
}

/// Row groups of the data file with the deleted positions taken out.
async fn access_plan(
    files: &TableFiles,
    data_file: &str,
    size: u64,
    deleted: &RoaringTreemap,
) -> Result<FileDeletes> {
    let mut reader = crate::scan::bounded_footer::Bounded::new(
        ParquetObjectReader::new(files.store.clone(), files.path(data_file)?.into())
            .with_file_size(size),
        data_file.to_string(),
        size,
    );
    let metadata = reader.get_metadata(None).await?;
    let counts: Vec<u64> = metadata
        .row_groups()
        .iter()
        .map(|g| g.num_rows() as u64)
        .collect();
    Ok(plan_from_positions(&counts, deleted))
}

/// The pure part of [`access_plan`]: row-group row counts and deleted positions in, an access
/// plan out.
fn plan_from_positions(row_group_rows: &[u64], deleted: &RoaringTreemap) -> FileDeletes {
    let total: u64 = row_group_rows.iter().sum();
    let mut positions = deleted.iter().peekable();
    let mut groups = Vec::with_capacity(row_group_rows.len());
    let mut start = 0u64;
    let mut removed = 0u64;
    for &rows in row_group_rows {
        let end = start + rows;
        let mut selectors: Vec<RowSelector> = Vec::new();
        let mut cursor = start;
        let mut in_group = 0u64;
        while let Some(&position) = positions.peek() {
            if position >= end {
                break;
            }
            positions.next();
            if position < cursor {
                continue;
            }
            if position > cursor {
                push(
                    &mut selectors,
                    RowSelector::select((position - cursor) as usize),
                );
            }
            push(&mut selectors, RowSelector::skip(1));
            cursor = position + 1;
            in_group += 1;
        }
        removed += in_group;
        groups.push(if in_group == 0 {
            RowGroupAccess::Scan
        } else if in_group == rows {
            RowGroupAccess::Skip
        } else {
            if cursor < end {
                push(&mut selectors, RowSelector::select((end - cursor) as usize));
            }
            RowGroupAccess::Selection(RowSelection::from(selectors))
        });
        start = end;
    }
    FileDeletes {
        plan: ParquetAccessPlan::new(groups),
        live_rows: total - removed,
    }
}

/// Appends a selector, merging it into the last one when both skip or both select.
fn push(selectors: &mut Vec<RowSelector>, next: RowSelector) {
    match selectors.last_mut() {
        Some(last) if last.skip == next.skip => last.row_count += next.row_count,
        _ => selectors.push(next),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selected(access: &RowGroupAccess) -> Vec<(bool, usize)> {
        match access {
            RowGroupAccess::Selection(selection) => {
                selection.iter().map(|s| (!s.skip, s.row_count)).collect()
            }
            other => panic!("expected a selection, got {other:?}"),
        }
    }

    #[test]
    fn positions_become_row_group_selections() {
        let deleted: RoaringTreemap = [0u64, 1, 5, 10, 11, 12, 13, 14, 29, 40]
            .into_iter()
            .collect();
        let plan = plan_from_positions(&[10, 5, 15, 5], &deleted);
        assert_eq!(plan.live_rows, 35 - 9);
        let groups = plan.plan.inner();
        assert_eq!(
            selected(&groups[0]),
            vec![(false, 2), (true, 3), (false, 1), (true, 4)]
        );
        assert!(matches!(groups[1], RowGroupAccess::Skip));
        assert_eq!(selected(&groups[2]), vec![(true, 14), (false, 1)]);
        // Position 40 lies past the end of the file and deletes nothing.
        assert!(matches!(groups[3], RowGroupAccess::Scan));
    }

    #[test]
    fn deletion_vectors_are_checked() {
        let bitmap: RoaringTreemap = [3u64, 7, 1 << 33].into_iter().collect();
        let mut body = DV_MAGIC.to_vec();
        bitmap.serialize_into(&mut body).unwrap();
        let mut blob = (body.len() as u32).to_be_bytes().to_vec();
        blob.extend_from_slice(&body);
        blob.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
        assert_eq!(parse_vector(&blob).unwrap(), bitmap);

        let mut corrupt = blob.clone();
        corrupt[10] ^= 1;
        assert!(parse_vector(&corrupt).unwrap_err().contains("checksum"));
        assert!(
            parse_vector(&blob[..blob.len() - 1])
                .unwrap_err()
                .contains("declares")
        );
    }
}
