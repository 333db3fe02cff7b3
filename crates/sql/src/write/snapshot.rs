//! Snapshots whose manifests Floe writes itself, for the commits iceberg's transactions do not
//! make: compaction's `replace` (files removed and added in one snapshot, manifests merged)
//! and an upsert's row delta (data files and the position deletes of the rows they replace,
//! in one `overwrite`).
//!
//! A [`SnapshotWriter`] gathers the new snapshot's manifests — carried over from the parent as
//! they are, rewritten by the caller through [`SnapshotWriter::manifest_writer`], or made of
//! added files by [`SnapshotWriter::add_files`] — and [`SnapshotWriter::finish`] writes the
//! manifest list and returns the table updates that add the snapshot and point `main` at it.
//! The caller commits those with the requirement that `main` is still the parent.

use std::collections::HashMap;

use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, ManifestFile, ManifestList, ManifestListWriter,
    ManifestWriter, ManifestWriterBuilder, Operation, PartitionSpecRef, Snapshot,
    SnapshotReference, SnapshotRetention, SnapshotSummaryCollector, Summary, TableMetadata,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, TableUpdate};

/// The manifests of one new snapshot of `table`, each written at a fresh path.
pub struct SnapshotWriter<'a> {
    table: &'a Table,
    snapshot_id: i64,
    commit: uuid::Uuid,
    counter: usize,
    /// What the snapshot adds and removes, for its summary.
    pub summary: SnapshotSummaryCollector,
    manifests: Vec<ManifestFile>,
}

impl<'a> SnapshotWriter<'a> {
    pub fn new(table: &'a Table) -> Self {
        Self {
            table,
            snapshot_id: new_snapshot_id(table.metadata()),
            commit: uuid::Uuid::now_v7(),
            counter: 0,
            summary: SnapshotSummaryCollector::default(),
            manifests: Vec::new(),
        }
    }

    pub fn snapshot_id(&self) -> i64 {
        self.snapshot_id
    }

    /// A manifest of the parent kept as it is.
    pub fn carry(&mut self, manifest: ManifestFile) {
        self.manifests.push(manifest);
    }

    /// Every manifest of `parent` carried over as it is (a snapshot that only adds).
    pub async fn carry_all(&mut self, parent: &Snapshot) -> iceberg::Result<()> {
        let list = manifest_list(self.table, parent).await?;
        self.manifests.extend(list);
        Ok(())
    }

    /// A writer of a new manifest of data files or of delete files for partition spec
    /// `spec_id`; [`SnapshotWriter::close`] adds it to the snapshot.
    pub fn manifest_writer(
        &mut self,
        spec_id: i32,
        deletes: bool,
    ) -> iceberg::Result<ManifestWriter> {
        let metadata = self.table.metadata();
        self.counter += 1;
        let path = format!(
            "{}/metadata/{}-m{}.avro",
            metadata.location().trim_end_matches('/'),
            self.commit,
            self.counter
        );
        let output = self.table.file_io().new_output(&path)?;
        let spec = spec_of(metadata, spec_id)?;
        let builder = ManifestWriterBuilder::new(
            output,
            Some(self.snapshot_id),
            metadata.current_schema().clone(),
            spec.as_ref().clone(),
        );
        Ok(match (metadata.format_version(), deletes) {
            (FormatVersion::V3, false) => builder.build_v3_data(),
            (FormatVersion::V3, true) => builder.build_v3_deletes(),
            (_, false) => builder.build_v2_data(),
            (_, true) => builder.build_v2_deletes(),
        })
    }

    /// Writes the manifest `writer` holds and adds it to the snapshot.
    pub async fn close(&mut self, writer: ManifestWriter) -> iceberg::Result<()> {
        let manifest = writer.write_manifest_file().await?;
        self.manifests.push(manifest);
        Ok(())
    }

    /// New files of this snapshot, all of partition spec `spec_id` — data files, delete files
    /// or both — in one manifest per kind, their sequence number the snapshot's.
    pub async fn add_files(&mut self, spec_id: i32, files: Vec<DataFile>) -> iceberg::Result<()> {
        let metadata = self.table.metadata();
        let schema = metadata.current_schema().clone();
        let spec = spec_of(metadata, spec_id)?;
        let (deletes, data): (Vec<DataFile>, Vec<DataFile>) = files
            .into_iter()
            .partition(|f| f.content_type() != DataContentType::Data);
        for (kind, files) in [(false, data), (true, deletes)] {
            if files.is_empty() {
                continue;
            }
            let mut writer = self.manifest_writer(spec_id, kind)?;
            for file in files {
                self.summary.add_file(&file, schema.clone(), spec.clone());
                // A negative sequence number leaves it to be inherited: the snapshot's.
                writer.add_file(file, -1)?;
            }
            self.close(writer).await?;
        }
        Ok(())
    }

    /// Writes the manifest list of the snapshot on top of `parent` (none in an empty table)
    /// and returns the updates that add it and point `main` at it. Its summary: the files it
    /// adds and removes with the table's totals, `properties`, and the parent's `floe.*`
    /// properties it does not set (writers' positions stay on the newest snapshot, so expiring
    /// the snapshots that wrote them never loses them).
    pub async fn finish(
        self,
        parent: Option<&Snapshot>,
        operation: Operation,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Vec<TableUpdate>> {
        let metadata = self.table.metadata();
        let snapshot_id = self.snapshot_id;
        let parent_id = parent.map(|p| p.snapshot_id());
        let list_path = format!(
            "{}/metadata/snap-{snapshot_id}-1-{}.avro",
            metadata.location().trim_end_matches('/'),
            self.commit
        );
        let output = self
            .table
            .file_io()
            .new_output(&list_path)?
            .writer()
            .await?;
        let sequence_number = metadata.next_sequence_number();
        let first_row_id = metadata.next_row_id();
        let mut list = match metadata.format_version() {
            FormatVersion::V3 => ManifestListWriter::v3(
                output,
                snapshot_id,
                parent_id,
                sequence_number,
                Some(first_row_id),
            ),
            _ => ManifestListWriter::v2(output, snapshot_id, parent_id, sequence_number),
        };
        list.add_manifests(self.manifests.into_iter())?;
        let next_row_id = list.next_row_id();
        list.close().await?;

        // The table's totals, counted from the parent's (from zero in an empty table).
        let mut summary = floe_catalog::commit::summary_with_totals(
            self.summary.build(),
            parent.map(|p| p.summary()),
        );
        summary.extend(properties);
        if let Some(parent) = parent {
            for (key, value) in &parent.summary().additional_properties {
                if key.starts_with("floe.") {
                    summary.entry(key.clone()).or_insert_with(|| value.clone());
                }
            }
        }
        let builder = Snapshot::builder()
            .with_manifest_list(list_path)
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(parent_id)
            .with_sequence_number(sequence_number)
            .with_summary(Summary {
                operation,
                additional_properties: summary,
            })
            .with_schema_id(metadata.current_schema_id())
            .with_timestamp_ms(floe_catalog::clock::now_ms());
        let snapshot = match next_row_id {
            Some(next) => builder
                .with_row_range(first_row_id, next - first_row_id)
                .build(),
            None => builder.build(),
        };
        Ok(vec![
            TableUpdate::AddSnapshot { snapshot },
            TableUpdate::SetSnapshotRef {
                ref_name: "main".into(),
                reference: main_ref(metadata, snapshot_id),
            },
        ])
    }
}

/// The manifests of `snapshot` of `table`.
pub async fn manifest_list(
    table: &Table,
    snapshot: &Snapshot,
) -> iceberg::Result<Vec<ManifestFile>> {
    let bytes = table
        .file_io()
        .new_input(snapshot.manifest_list())?
        .read()
        .await?;
    let list = ManifestList::parse_with_version(&bytes, table.metadata().format_version())?;
    Ok(list.entries().to_vec())
}

/// What a commit of a hand-built snapshot requires: the same table, its `main` still at
/// `main` (none: an empty table).
pub fn on_main(metadata: &TableMetadata, main: Option<i64>) -> Vec<iceberg::TableRequirement> {
    vec![
        iceberg::TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        iceberg::TableRequirement::RefSnapshotIdMatch {
            r#ref: "main".into(),
            snapshot_id: main,
        },
    ]
}

/// `main` pointing at `snapshot_id`, keeping its retention settings.
pub fn main_ref(metadata: &TableMetadata, snapshot_id: i64) -> SnapshotReference {
    let kept = floe_catalog::metadata::table_refs(metadata)
        .ok()
        .and_then(|mut refs| refs.remove("main"));
    match kept {
        Some(mut reference) => {
            reference.snapshot_id = snapshot_id;
            reference
        }
        None => SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None)),
    }
}

/// Partition spec `spec_id` of the table.
pub fn spec_of(metadata: &TableMetadata, spec_id: i32) -> iceberg::Result<PartitionSpecRef> {
    metadata
        .partition_spec_by_id(spec_id)
        .cloned()
        .ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("partition spec {spec_id} is missing"),
            )
        })
}

fn new_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let id = (rand::random::<u64>() >> 1) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}
