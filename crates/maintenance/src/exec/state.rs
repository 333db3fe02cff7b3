//! A snapshot's manifests with every entry, and which delete files apply to which data files
//! (the rules of the Iceberg spec, by sequence number, partition and referenced file).

use std::sync::Arc;

use floe_catalog::manifests::load_manifest;
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{
    DataContentType, DataFileFormat, Datum, ManifestEntry, ManifestFile, ManifestList,
    PrimitiveLiteral, Snapshot, Struct, TableMetadata,
};
use iceberg::table::Table;

use super::{Result, io};

/// Manifests read at once.
const CONCURRENCY: usize = 8;
/// Field id of `file_path` in position delete files.
const DELETE_FILE_PATH_ID: i32 = 2147483546;

/// One manifest of a snapshot, with its entries (sequence numbers inherited).
pub struct ManifestState {
    pub file: ManifestFile,
    pub entries: Vec<Arc<ManifestEntry>>,
}

/// Everything a snapshot's manifests list.
pub struct SnapshotState {
    pub snapshot_id: i64,
    pub sequence_number: i64,
    pub manifests: Vec<ManifestState>,
}

/// A live file with the spec its manifest was written for.
#[derive(Clone)]
pub struct LiveFile {
    pub spec_id: i32,
    pub entry: Arc<ManifestEntry>,
}

impl LiveFile {
    pub fn path(&self) -> &str {
        self.entry.data_file().file_path()
    }

    pub fn sequence_number(&self) -> i64 {
        self.entry.sequence_number().unwrap_or(0)
    }

    pub fn partition_key(&self) -> String {
        partition_key(self.spec_id, self.entry.data_file().partition())
    }
}

/// Equal exactly when spec and partition tuple are.
pub fn partition_key(spec_id: i32, partition: &Struct) -> String {
    format!("{spec_id}/{partition:?}")
}

pub async fn read_manifest_list(table: &Table, snapshot: &Snapshot) -> Result<ManifestList> {
    super::require_in_table(table, snapshot.manifest_list(), "manifest list")?;
    let bytes = table
        .file_io()
        .new_input(snapshot.manifest_list())
        .map_err(|e| io("manifest list", e))?
        .read()
        .await
        .map_err(|e| io(format!("read {}", snapshot.manifest_list()), e))?;
    ManifestList::parse_with_version(&bytes, table.metadata().format_version())
        .map_err(|e| io(format!("parse {}", snapshot.manifest_list()), e))
}

/// Reads every manifest of `snapshot`.
pub async fn read_snapshot(table: &Table, snapshot: &Snapshot) -> Result<SnapshotState> {
    let list = read_manifest_list(table, snapshot).await?;
    let file_io = table.file_io();
    let files: Vec<ManifestFile> = list.consume_entries().into_iter().collect();
    let manifests: Vec<ManifestState> = futures::stream::iter(files)
        .map(|file| async move {
            super::require_in_table(table, &file.manifest_path, "manifest")?;
            let manifest = load_manifest(file_io, table.metadata(), &file)
                .await
                .map_err(|e| io(format!("read manifest {}", file.manifest_path), e))?;
            let (entries, _) = manifest.into_parts();
            Ok::<_, super::MaintenanceError>(ManifestState { file, entries })
        })
        .buffered(CONCURRENCY)
        .try_collect()
        .await?;
    Ok(SnapshotState {
        snapshot_id: snapshot.snapshot_id(),
        sequence_number: snapshot.sequence_number(),
        manifests,
    })
}

impl SnapshotState {
    fn live(&self, content: DataContentType) -> impl Iterator<Item = LiveFile> + '_ {
        self.manifests.iter().flat_map(move |m| {
            m.entries
                .iter()
                .filter(move |e| {
                    e.is_alive()
                        && (e.content_type() == DataContentType::Data)
                            == (content == DataContentType::Data)
                })
                .map(|e| LiveFile {
                    spec_id: m.file.partition_spec_id,
                    entry: e.clone(),
                })
        })
    }

    pub fn live_data(&self) -> impl Iterator<Item = LiveFile> + '_ {
        self.live(DataContentType::Data)
    }

    pub fn live_deletes(&self) -> impl Iterator<Item = LiveFile> + '_ {
        self.live(DataContentType::PositionDeletes)
    }
}

/// The one data file a position delete file or deletion vector names, when it names one:
/// its `referenced_data_file`, or equal lower and upper bounds of its `file_path` column.
pub fn referenced_file(delete: &LiveFile) -> Option<String> {
    let file = delete.entry.data_file();
    if let Some(path) = file.referenced_data_file() {
        return Some(path);
    }
    let text = |d: &Datum| match d.literal() {
        PrimitiveLiteral::String(s) => Some(s.clone()),
        _ => None,
    };
    let lower = file
        .lower_bounds()
        .get(&DELETE_FILE_PATH_ID)
        .and_then(text)?;
    let upper = file
        .upper_bounds()
        .get(&DELETE_FILE_PATH_ID)
        .and_then(text)?;
    (lower == upper).then_some(lower)
}

/// Whether `delete` may apply to `data`, by the spec's rules.
pub fn applies(metadata: &TableMetadata, delete: &LiveFile, data: &LiveFile) -> bool {
    let file = delete.entry.data_file();
    let same_partition = delete.partition_key() == data.partition_key();
    match file.content_type() {
        DataContentType::Data => false,
        DataContentType::PositionDeletes => {
            if data.sequence_number() > delete.sequence_number() {
                return false;
            }
            if file.file_format() == DataFileFormat::Puffin {
                return file.referenced_data_file().as_deref() == Some(data.path());
            }
            match referenced_file(delete) {
                Some(path) => path == data.path(),
                None => same_partition,
            }
        }
        DataContentType::EqualityDeletes => {
            if data.sequence_number() >= delete.sequence_number() {
                return false;
            }
            let global = metadata
                .partition_spec_by_id(delete.spec_id)
                .is_none_or(|spec| spec.is_unpartitioned());
            global || same_partition
        }
    }
}

/// Delete files indexed by what they can apply to, so finding the deletes of one data file
/// does not scan every delete file.
pub struct DeleteIndex<'a> {
    metadata: &'a TableMetadata,
    /// Deletion vectors and position deletes naming one file, by that file.
    by_file: std::collections::HashMap<String, Vec<LiveFile>>,
    /// Other position and equality deletes, by partition key.
    by_partition: std::collections::HashMap<String, Vec<LiveFile>>,
    /// Equality deletes of an unpartitioned spec: they apply everywhere.
    global: Vec<LiveFile>,
}

impl<'a> DeleteIndex<'a> {
    pub fn new(metadata: &'a TableMetadata, deletes: impl IntoIterator<Item = LiveFile>) -> Self {
        let mut index = Self {
            metadata,
            by_file: Default::default(),
            by_partition: Default::default(),
            global: Vec::new(),
        };
        for delete in deletes {
            let file = delete.entry.data_file();
            let positional = file.content_type() == DataContentType::PositionDeletes;
            if positional && let Some(path) = referenced_file(&delete) {
                index.by_file.entry(path).or_default().push(delete);
                continue;
            }
            let global = !positional
                && metadata
                    .partition_spec_by_id(delete.spec_id)
                    .is_none_or(|spec| spec.is_unpartitioned());
            if global {
                index.global.push(delete);
            } else {
                index
                    .by_partition
                    .entry(delete.partition_key())
                    .or_default()
                    .push(delete);
            }
        }
        index
    }

    /// The delete files that may apply to `data`.
    pub fn applying<'s>(&'s self, data: &'s LiveFile) -> impl Iterator<Item = &'s LiveFile> + 's {
        let by_file = self.by_file.get(data.path()).into_iter().flatten();
        let by_partition = self
            .by_partition
            .get(&data.partition_key())
            .into_iter()
            .flatten();
        by_file
            .chain(by_partition)
            .chain(self.global.iter())
            .filter(move |d| applies(self.metadata, d, data))
    }
}
