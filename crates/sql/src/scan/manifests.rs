//! What a snapshot's manifests say about each live file, beyond iceberg's scan tasks: the
//! partition spec a data file was written with, its column bounds and null counts (statistics
//! for DataFusion) and where each deletion vector sits inside its Puffin file.
//!
//! Indexes are kept per manifest list (one per snapshot, never rewritten), so repeated queries
//! on an unchanged table read its manifests once.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{
    DataFile, DataFileFormat, ManifestContentType, ManifestList, Snapshot, SnapshotRef,
    TableMetadata,
};
use iceberg::table::Table;

use crate::scan::cache::Recent;
use crate::scan::provider::iceberg_error;

/// Manifests read at once.
const CONCURRENCY: usize = 8;
/// Indexes kept in memory.
const KEPT: usize = 32;
/// Tables with more live files than this are indexed per query, not kept.
const MAX_KEPT_FILES: usize = 200_000;

/// Where one deletion vector lives inside a Puffin file.
#[derive(Debug, Clone)]
pub struct VectorBlob {
    pub data_file: String,
    pub offset: u64,
    pub length: u64,
}

/// A live data file as its manifest lists it.
#[derive(Debug)]
pub struct DataFileEntry {
    pub spec_id: i32,
    pub file: DataFile,
}

#[derive(Debug, Default)]
pub struct ManifestIndex {
    pub data: HashMap<String, DataFileEntry>,
    /// Deletion vectors by Puffin file.
    pub vectors: HashMap<String, Vec<VectorBlob>>,
}

static KEPT_INDEXES: Recent<String, ManifestIndex> = Recent::new(KEPT);

/// A snapshot's manifest list, read and parsed.
pub async fn manifest_list(table: &Table, snapshot: &Snapshot) -> Result<ManifestList> {
    let bytes = table
        .file_io()
        .new_input(snapshot.manifest_list())
        .map_err(iceberg_error)?
        .read()
        .await
        .map_err(iceberg_error)?;
    ManifestList::parse_with_version(&bytes, table.metadata().format_version())
        .map_err(iceberg_error)
}

/// Snapshot `snapshot_id` of a table, or its current one (none in an empty table).
pub fn snapshot_of(metadata: &TableMetadata, snapshot_id: Option<i64>) -> Option<&SnapshotRef> {
    match snapshot_id {
        Some(id) => metadata.snapshot_by_id(id),
        None => metadata.current_snapshot(),
    }
}

/// The index of `snapshot_id` (or the current snapshot) of `table`.
pub async fn index(table: &Table, snapshot_id: Option<i64>) -> Result<Arc<ManifestIndex>> {
    let Some(snapshot) = snapshot_of(table.metadata(), snapshot_id) else {
        return Ok(Arc::default());
    };
    let key = snapshot.manifest_list().to_string();
    if let Some(found) = KEPT_INDEXES.get(&key) {
        return Ok(found);
    }
    let list = manifest_list(table, snapshot).await?;
    let manifests: Vec<_> = list
        .entries()
        .iter()
        .map(|manifest_file| async move {
            let manifest = manifest_file
                .load_manifest(table.file_io())
                .await
                .map_err(iceberg_error)?;
            Ok::<_, DataFusionError>((manifest_file, manifest))
        })
        .collect();
    let manifests: Vec<_> = futures::stream::iter(manifests)
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await?;

    let mut index = ManifestIndex::default();
    for (manifest_file, manifest) in manifests {
        for entry in manifest.entries() {
            if !entry.is_alive() {
                continue;
            }
            let file = entry.data_file();
            match manifest_file.content {
                ManifestContentType::Data => {
                    index.data.insert(
                        file.file_path().to_string(),
                        DataFileEntry {
                            spec_id: manifest_file.partition_spec_id,
                            file: file.clone(),
                        },
                    );
                }
                ManifestContentType::Deletes => {
                    if file.file_format() != DataFileFormat::Puffin {
                        continue;
                    }
                    let (Some(data_file), Some(offset), Some(length)) = (
                        file.referenced_data_file(),
                        file.content_offset(),
                        file.content_size_in_bytes(),
                    ) else {
                        return Err(DataFusionError::Execution(format!(
                            "deletion vector in {} lacks its referenced data file, offset or size",
                            file.file_path()
                        )));
                    };
                    index
                        .vectors
                        .entry(file.file_path().to_string())
                        .or_default()
                        .push(VectorBlob {
                            data_file,
                            offset: offset as u64,
                            length: length as u64,
                        });
                }
            }
        }
    }
    let index = Arc::new(index);
    if index.data.len() <= MAX_KEPT_FILES {
        KEPT_INDEXES.put(key, index.clone());
    }
    Ok(index)
}
