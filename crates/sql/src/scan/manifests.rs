//! What a snapshot's manifests say about each live file, beyond iceberg's scan tasks: the
//! partition spec a data file was written with, its column bounds and null counts (statistics
//! for DataFusion) and where each deletion vector sits inside its Puffin file.
//!
//! Indexes are kept per manifest list (one per snapshot, never rewritten), so repeated queries
//! on an unchanged table read its manifests once. Manifests are kept too, per file: a manifest
//! is never rewritten either, and a commit's new snapshot lists the manifests of the one
//! before plus its own, so the first statement after a commit reads only the manifests the
//! commit added (an `INSERT` after 1,000 one-row commits used to read 1,000 manifests).
//! A manifest is kept under its table's location as well as its path, so a table whose
//! manifest list names another table's manifest still reads it through its own storage
//! handle, whose reach refuses it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use datafusion::common::{DataFusionError, Result};
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{
    DataFile, DataFileFormat, Manifest, ManifestContentType, ManifestFile, ManifestList, Snapshot,
    SnapshotRef, TableMetadata,
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

/// A live data or delete file as its manifest lists it.
#[derive(Debug)]
pub struct DataFileEntry {
    pub spec_id: i32,
    /// Its data sequence number (inherited from its manifest when the entry has none).
    pub sequence: Option<i64>,
    pub file: DataFile,
}

#[derive(Debug, Default)]
pub struct ManifestIndex {
    pub data: HashMap<String, DataFileEntry>,
    /// Live delete files of any kind (position, equality, deletion vectors).
    pub deletes: Vec<DataFileEntry>,
    /// How many of them there are.
    pub delete_files: usize,
    /// Deletion vectors by Puffin file.
    pub vectors: HashMap<String, Vec<VectorBlob>>,
}

static KEPT_INDEXES: Recent<String, ManifestIndex> = Recent::new(KEPT);

/// Manifest entries kept in memory, over all tables (some 1–2 KiB each with their column
/// statistics).
const KEPT_MANIFEST_ENTRIES: u64 = 256 * 1024;

/// A manifest as kept: the table's location, the manifest's path and its length.
type ManifestKey = (String, String, i64);

static KEPT_MANIFESTS: LazyLock<moka::future::Cache<ManifestKey, Arc<Manifest>>> =
    LazyLock::new(|| {
        moka::future::Cache::builder()
            .max_capacity(KEPT_MANIFEST_ENTRIES)
            .weigher(|_, manifest: &Arc<Manifest>| {
                u32::try_from(manifest.entries().len() + 1).unwrap_or(u32::MAX)
            })
            .build()
    });

/// Forgets every manifest and index kept, so the next statements read them again (for
/// benchmarks comparing with and without them).
pub fn forget_manifests() {
    KEPT_MANIFESTS.invalidate_all();
    KEPT_INDEXES.clear();
}

/// `manifest_file` of `table`, read once and then kept.
async fn load_manifest(table: &Table, manifest_file: &ManifestFile) -> Result<Arc<Manifest>> {
    let key = (
        table.metadata().location().to_string(),
        manifest_file.manifest_path.clone(),
        manifest_file.manifest_length,
    );
    KEPT_MANIFESTS
        .try_get_with(key, async {
            floe_catalog::manifests::load_manifest(table.file_io(), table.metadata(), manifest_file)
                .await
                .map(Arc::new)
                .map_err(iceberg_error)
        })
        .await
        .map_err(DataFusionError::Shared)
}

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
    // Under the table's location too: a table whose metadata names another's manifest list
    // reads it through its own storage handle, which refuses it.
    let key = format!(
        "{}\u{1f}{}",
        table.metadata().location(),
        snapshot.manifest_list()
    );
    if let Some(found) = KEPT_INDEXES.get(&key) {
        return Ok(found);
    }
    let list = manifest_list(table, snapshot).await?;
    let manifests: Vec<_> = list
        .entries()
        .iter()
        .map(|manifest_file| async move {
            let manifest = load_manifest(table, manifest_file).await?;
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
                            sequence: entry.sequence_number(),
                            file: file.clone(),
                        },
                    );
                }
                ManifestContentType::Deletes => {
                    index.delete_files += 1;
                    index.deletes.push(DataFileEntry {
                        spec_id: manifest_file.partition_spec_id,
                        sequence: entry.sequence_number(),
                        file: file.clone(),
                    });
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
