//! The delete half of a row delta: rows of data files removed in a new snapshot, the way the
//! table's format is meant to be read.
//!
//! - **Format v2**: one position delete file per partition touched, naming its data files
//!   in order ([`super::write_position_deletes`]; `referenced_data_file` set when it is one).
//! - **Format v3**: one deletion vector per data file touched, all in one Puffin file. At most
//!   one vector may name a data file in a snapshot, so a data file that has one already gets a
//!   new vector holding the old positions and the new ones, and the old vector is removed in
//!   the same snapshot: the delete manifest listing it is rewritten with it marked deleted.
//!   A v3 table whose touched data file still has a v2 position delete file (a table upgraded
//!   from v2) is refused by name — compact it first — since a reader may ignore such a file
//!   once a vector names the data file.
//!
//! [`delete_rows`] carries every other manifest of the parent into the snapshot as it is.

use std::collections::{BTreeMap, HashMap, HashSet};

use datafusion::common::{DataFusionError, Result};
use iceberg::puffin::{Blob, CompressionCodec, DELETION_VECTOR_V1, PuffinWriter};
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, FormatVersion, ManifestContentType,
    Snapshot, Struct,
};
use iceberg::table::Table;
use iceberg::writer::file_writer::location_generator::{
    DefaultLocationGenerator, LocationGenerator,
};
use roaring::RoaringTreemap;

use super::SnapshotWriter;
use crate::scan::provider::iceberg_error;

use crate::scan::position_deletes::DV_MAGIC;
/// The field id of a row's position (`_pos`), which a deletion vector's blob names.
const ROW_POSITION_ID: i32 = 2147483645;

/// Rows of one data file to delete.
#[derive(Debug, Clone)]
pub struct Doomed {
    pub data_file: String,
    pub spec_id: i32,
    pub partition: Struct,
    pub positions: Vec<u64>,
}

/// What [`delete_rows`] wrote.
#[derive(Debug, Default)]
pub struct DeletesWritten {
    /// The delete files written (to remove if the snapshot is refused).
    pub paths: Vec<String>,
    /// Rows deleted that no delete of the parent had deleted already.
    pub rows: u64,
}

/// Adds to `snapshot` the parent's manifests and delete files removing `doomed`, in the
/// table's format's way (above).
pub async fn delete_rows(
    table: &Table,
    snapshot: &mut SnapshotWriter<'_>,
    parent: Option<&Snapshot>,
    doomed: Vec<Doomed>,
) -> Result<DeletesWritten> {
    let metadata = table.metadata();
    if doomed.is_empty() || metadata.format_version() != FormatVersion::V3 {
        if let Some(parent) = parent {
            snapshot.carry_all(parent).await.map_err(iceberg_error)?;
        }
        let mut written = DeletesWritten::default();
        // One delete file per partition a commit touches, naming its data files in order:
        // a commit spread over many files of a partition writes one file, not one each.
        let mut by_partition: BTreeMap<String, Vec<&Doomed>> = BTreeMap::new();
        for doomed in &doomed {
            by_partition
                .entry(format!("{}/{:?}", doomed.spec_id, doomed.partition))
                .or_default()
                .push(doomed);
        }
        let mut by_spec: BTreeMap<i32, Vec<DataFile>> = BTreeMap::new();
        for mut group in by_partition.into_values() {
            group.sort_by(|a, b| a.data_file.cmp(&b.data_file));
            let rows: Vec<(&str, &[u64])> = group
                .iter()
                .map(|d| (d.data_file.as_str(), d.positions.as_slice()))
                .collect();
            let (spec_id, partition) = (group[0].spec_id, &group[0].partition);
            let file = super::write_position_deletes(table, spec_id, partition, &rows).await?;
            written.paths.push(file.file_path().to_string());
            written.rows += file.record_count();
            by_spec.entry(spec_id).or_default().push(file);
        }
        add_by_spec(snapshot, by_spec).await?;
        return Ok(written);
    }
    vectors(table, snapshot, parent, doomed).await
}

/// Format v3: the touched data files' vectors, merged with their current ones, which go.
async fn vectors(
    table: &Table,
    snapshot: &mut SnapshotWriter<'_>,
    parent: Option<&Snapshot>,
    doomed: Vec<Doomed>,
) -> Result<DeletesWritten> {
    let metadata = table.metadata();
    let touched: HashSet<&str> = doomed.iter().map(|d| d.data_file.as_str()).collect();
    // The parent's live delete files naming a touched data file, by manifest.
    let mut current: HashMap<String, DataFile> = HashMap::new();
    let mut rewrite = Vec::new();
    if let Some(parent) = parent {
        for manifest in super::snapshot::manifest_list(table, parent)
            .await
            .map_err(iceberg_error)?
        {
            if manifest.content != ManifestContentType::Deletes {
                snapshot.carry(manifest);
                continue;
            }
            let entries =
                floe_catalog::manifests::load_manifest(table.file_io(), metadata, &manifest)
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
            let mut holds = false;
            for entry in entries.entries().iter().filter(|e| e.is_alive()) {
                let file = entry.data_file();
                let Some(named) = file.referenced_data_file() else {
                    continue;
                };
                if !touched.contains(named.as_str()) {
                    continue;
                }
                if file.file_format() != DataFileFormat::Puffin {
                    return Err(DataFusionError::Plan(format!(
                        "data file {named} of this format v3 table has a position delete file \
                         ({}): compact the table before upserting into it",
                        file.file_path()
                    )));
                }
                holds = true;
                current.insert(named, file.clone());
            }
            if holds {
                rewrite.push((manifest, entries));
            } else {
                snapshot.carry(manifest);
            }
        }
    }
    // Each touched file's vector: its current one (read back) and the new positions.
    let mut blobs = Vec::with_capacity(doomed.len());
    let mut added = 0u64;
    for doomed in &doomed {
        let mut positions = match current.get(&doomed.data_file) {
            Some(vector) => read_vector(table, vector).await?,
            None => RoaringTreemap::new(),
        };
        let before = positions.len();
        positions.extend(doomed.positions.iter().copied());
        added += positions.len() - before;
        blobs.push((doomed, positions));
    }
    let location = DefaultLocationGenerator::new(metadata)
        .map_err(iceberg_error)?
        .generate_location(
            None,
            &format!("floe-{}-deletes.puffin", uuid::Uuid::now_v7()),
        );
    let output = table
        .file_io()
        .new_output(&location)
        .map_err(iceberg_error)?;
    let mut writer = PuffinWriter::new(&output, HashMap::new(), false)
        .await
        .map_err(iceberg_error)?;
    // The header's 4 magic bytes, then the blobs one after another, uncompressed.
    let mut offset = 4u64;
    let mut described = Vec::with_capacity(blobs.len());
    for (doomed, positions) in &blobs {
        let data = vector_bytes(positions)?;
        let length = data.len() as u64;
        let blob = Blob::builder()
            .r#type(DELETION_VECTOR_V1.to_string())
            .fields(vec![ROW_POSITION_ID])
            .snapshot_id(-1)
            .sequence_number(-1)
            .data(data)
            .properties(HashMap::from([
                ("referenced-data-file".to_string(), doomed.data_file.clone()),
                ("cardinality".to_string(), positions.len().to_string()),
            ]))
            .build();
        writer
            .add(blob, CompressionCodec::None)
            .await
            .map_err(iceberg_error)?;
        described.push((doomed, positions.len(), offset, length));
        offset += length;
    }
    writer.close().await.map_err(iceberg_error)?;
    let size = table
        .file_io()
        .new_input(&location)
        .map_err(iceberg_error)?
        .metadata()
        .await
        .map_err(iceberg_error)?
        .size;
    let mut by_spec: BTreeMap<i32, Vec<DataFile>> = BTreeMap::new();
    for (doomed, cardinality, offset, length) in described {
        let file = DataFileBuilder::default()
            .content(DataContentType::PositionDeletes)
            .file_path(location.clone())
            .file_format(DataFileFormat::Puffin)
            .partition(doomed.partition.clone())
            .partition_spec_id(doomed.spec_id)
            .record_count(cardinality)
            .file_size_in_bytes(size)
            .referenced_data_file(Some(doomed.data_file.clone()))
            .content_offset(Some(offset as i64))
            .content_size_in_bytes(Some(length as i64))
            .build()
            .map_err(|e| DataFusionError::Internal(format!("describe a deletion vector: {e}")))?;
        by_spec.entry(doomed.spec_id).or_default().push(file);
    }
    // The manifests that list a replaced vector, with it marked deleted.
    let schema = metadata.current_schema().clone();
    for (manifest, entries) in rewrite {
        let spec = super::spec_of(metadata, manifest.partition_spec_id).map_err(iceberg_error)?;
        let mut writer = snapshot
            .manifest_writer(manifest.partition_spec_id, true)
            .map_err(iceberg_error)?;
        for entry in entries.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            let replaced = file
                .referenced_data_file()
                .is_some_and(|named| current.get(&named).is_some_and(|v| same_blob(v, file)));
            if replaced {
                snapshot
                    .summary
                    .remove_file(file, schema.clone(), spec.clone());
                writer
                    .add_delete_file(
                        file.clone(),
                        entry.sequence_number().unwrap_or(0),
                        entry.file_sequence_number,
                    )
                    .map_err(iceberg_error)?;
            } else {
                writer
                    .add_existing_file(
                        file.clone(),
                        entry.snapshot_id().unwrap_or_default(),
                        entry.sequence_number().unwrap_or(0),
                        entry.file_sequence_number,
                    )
                    .map_err(iceberg_error)?;
            }
        }
        snapshot.close(writer).await.map_err(iceberg_error)?;
    }
    add_by_spec(snapshot, by_spec).await?;
    Ok(DeletesWritten {
        paths: vec![location],
        rows: added,
    })
}

/// New delete files, by the partition spec of the data files they name, added to `snapshot`.
async fn add_by_spec(
    snapshot: &mut SnapshotWriter<'_>,
    by_spec: BTreeMap<i32, Vec<DataFile>>,
) -> Result<()> {
    for (spec_id, files) in by_spec {
        snapshot
            .add_files(spec_id, files)
            .await
            .map_err(iceberg_error)?;
    }
    Ok(())
}

fn same_blob(a: &DataFile, b: &DataFile) -> bool {
    a.file_path() == b.file_path() && a.content_offset() == b.content_offset()
}

/// A vector's blob: its length (big-endian), the magic bytes, the portable 64-bit Roaring
/// bitmap, and a big-endian CRC-32 of magic and bitmap.
fn vector_bytes(positions: &RoaringTreemap) -> Result<Vec<u8>> {
    let mut body = Vec::with_capacity(positions.serialized_size() + 4);
    body.extend_from_slice(&DV_MAGIC);
    positions
        .serialize_into(&mut body)
        .map_err(|e| DataFusionError::Internal(format!("serialize a deletion vector: {e}")))?;
    let length = u32::try_from(body.len())
        .map_err(|_| DataFusionError::Plan("a deletion vector over 4 GiB".into()))?;
    let mut blob = Vec::with_capacity(body.len() + 8);
    blob.extend_from_slice(&length.to_be_bytes());
    blob.extend_from_slice(&body);
    blob.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    Ok(blob)
}

/// The positions a table's deletion vector holds.
async fn read_vector(table: &Table, vector: &DataFile) -> Result<RoaringTreemap> {
    let (Some(offset), Some(length)) = (vector.content_offset(), vector.content_size_in_bytes())
    else {
        return Err(DataFusionError::Execution(format!(
            "deletion vector in {} has no offset or length",
            vector.file_path()
        )));
    };
    let (offset, length) = (offset.max(0) as u64, length.max(0) as u64);
    let bytes = table
        .file_io()
        .new_input(vector.file_path())
        .map_err(iceberg_error)?
        .reader()
        .await
        .map_err(iceberg_error)?
        .read(offset..offset + length)
        .await
        .map_err(iceberg_error)?;
    crate::scan::position_deletes::parse_vector(&bytes).map_err(|why| {
        DataFusionError::Execution(format!(
            "deletion vector at offset {offset} of {}: {why}",
            vector.file_path()
        ))
    })
}
