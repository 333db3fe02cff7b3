//! Scan planning from the manifests kept per file ([`super::manifests`]): the live data files
//! a filter might match (pruned by their manifests' statistics, [`super::file_pruning`]), each
//! with the delete files that apply to it. A snapshot after a commit is then planned from the
//! manifests that commit added, where iceberg's planner would read every manifest again.
//!
//! Delete files are assigned as iceberg's planner assigns them (and as the spec says):
//!
//! - an equality delete file written with an unpartitioned spec applies to every data file
//!   whose data sequence number is lower than its own; a partitioned one, to the data files of
//!   the same spec and partition whose data sequence number is lower;
//! - a position delete file (a deletion vector too) applies to the data files of the same
//!   spec and partition whose data sequence number is not greater than its own — and, when it
//!   names the data file it refers to, to that file only.

use std::collections::HashMap;

use iceberg::expr::BoundPredicate;
use iceberg::scan::{FileScanTask, FileScanTaskDeleteFile};
use iceberg::spec::{DataContentType, Struct, TableMetadata};

use super::file_pruning::might_match;
use super::manifests::{DataFileEntry, ManifestIndex};

/// Delete files by what they may apply to.
#[derive(Default)]
struct Deletes<'a> {
    global_equality: Vec<&'a DataFileEntry>,
    equality: HashMap<(i32, &'a Struct), Vec<&'a DataFileEntry>>,
    position: HashMap<(i32, &'a Struct), Vec<&'a DataFileEntry>>,
}

impl<'a> Deletes<'a> {
    fn of(index: &'a ManifestIndex) -> Self {
        let mut deletes = Deletes::default();
        for delete in &index.deletes {
            let partition = delete.file.partition();
            let key = (delete.spec_id, partition);
            match delete.file.content_type() {
                DataContentType::EqualityDeletes if partition.fields().is_empty() => {
                    deletes.global_equality.push(delete)
                }
                DataContentType::EqualityDeletes => {
                    deletes.equality.entry(key).or_default().push(delete)
                }
                DataContentType::PositionDeletes => {
                    deletes.position.entry(key).or_default().push(delete)
                }
                DataContentType::Data => {}
            }
        }
        deletes
    }

    /// The delete files that apply to the data file `path` of `data`.
    fn applying(&self, path: &str, data: &DataFileEntry) -> Vec<FileScanTaskDeleteFile> {
        self.entries_applying(path, data)
            .map(|delete| FileScanTaskDeleteFile {
                file_path: delete.file.file_path().to_string(),
                file_size_in_bytes: delete.file.file_size_in_bytes(),
                file_type: delete.file.content_type(),
                partition_spec_id: delete.spec_id,
                equality_ids: delete.file.equality_ids(),
            })
            .collect()
    }

    /// The manifest entries of the delete files that apply to the data file `path` of `data`.
    fn entries_applying<'s>(
        &'s self,
        path: &'s str,
        data: &'s DataFileEntry,
    ) -> impl Iterator<Item = &'s DataFileEntry> + 's {
        // A data file without a sequence number is older than any delete file.
        let later = move |delete: &DataFileEntry| match data.sequence {
            Some(sequence) => delete.sequence > Some(sequence),
            None => true,
        };
        let not_earlier = move |delete: &DataFileEntry| match data.sequence {
            Some(sequence) => delete.sequence >= Some(sequence),
            None => true,
        };
        let key = (data.spec_id, data.file.partition());
        let equality = self
            .global_equality
            .iter()
            .chain(self.equality.get(&key).into_iter().flatten())
            .filter(move |delete| later(delete));
        let position = self
            .position
            .get(&key)
            .into_iter()
            .flatten()
            .filter(move |delete| not_earlier(delete))
            .filter(move |delete| {
                delete
                    .file
                    .referenced_data_file()
                    .is_none_or(|referenced| referenced == path)
            });
        equality.chain(position).copied()
    }
}

/// The live data files of `index` that `filter` might match (every one without a filter), by
/// path in order.
pub(crate) fn matching<'a>(
    index: &'a ManifestIndex,
    filter: Option<&BoundPredicate>,
) -> Vec<&'a String> {
    let mut paths: Vec<&String> = index
        .data
        .iter()
        .filter(|(_, entry)| filter.is_none_or(|filter| might_match(filter, &entry.file)))
        .map(|(path, _)| path)
        .collect();
    paths.sort();
    paths
}

/// For each of `paths` (live data files of `index`), the positions in `index.deletes` of the
/// delete files that apply to it.
pub(crate) fn deletes_applying(index: &ManifestIndex, paths: &[&str]) -> Vec<Vec<usize>> {
    let deletes = Deletes::of(index);
    let position: HashMap<*const DataFileEntry, usize> = index
        .deletes
        .iter()
        .enumerate()
        .map(|(i, entry)| (entry as *const DataFileEntry, i))
        .collect();
    paths
        .iter()
        .map(|path| match index.data.get(*path) {
            Some(entry) => deletes
                .entries_applying(path, entry)
                .filter_map(|delete| position.get(&(delete as *const DataFileEntry)).copied())
                .collect(),
            None => Vec::new(),
        })
        .collect()
}

/// A scan task per live data file of `index` that `filter` might match (every one without a
/// filter), by path, with the delete files that apply to it.
pub(crate) fn tasks(
    index: &ManifestIndex,
    metadata: &TableMetadata,
    filter: Option<&BoundPredicate>,
) -> Vec<FileScanTask> {
    let schema = metadata.current_schema().clone();
    let field_ids: Vec<i32> = schema.as_struct().fields().iter().map(|f| f.id).collect();
    let deletes = Deletes::of(index);
    matching(index, filter)
        .into_iter()
        .map(|path| {
            let entry = &index.data[path];
            let file = &entry.file;
            FileScanTask {
                file_size_in_bytes: file.file_size_in_bytes(),
                start: 0,
                length: file.file_size_in_bytes(),
                record_count: Some(file.record_count()),
                data_file_path: path.clone(),
                data_file_format: file.file_format(),
                schema: schema.clone(),
                project_field_ids: field_ids.clone(),
                predicate: None,
                deletes: deletes.applying(path, entry),
                partition: Some(file.partition().clone()),
                partition_spec: metadata.partition_spec_by_id(entry.spec_id).cloned(),
                name_mapping: None,
                case_sensitive: true,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{DataFileBuilder, DataFileFormat, Literal};

    use super::*;

    fn entry(
        content: DataContentType,
        path: &str,
        partition: Option<i32>,
        sequence: i64,
        referenced: Option<&str>,
    ) -> DataFileEntry {
        let partition = match partition {
            Some(p) => Struct::from_iter([Some(Literal::int(p))]),
            None => Struct::empty(),
        };
        let file = DataFileBuilder::default()
            .content(content)
            .file_path(path.to_string())
            .file_format(DataFileFormat::Parquet)
            .partition(partition)
            .record_count(1)
            .file_size_in_bytes(1)
            .equality_ids((content == DataContentType::EqualityDeletes).then(|| vec![1]))
            .referenced_data_file(referenced.map(str::to_string))
            .build()
            .unwrap();
        DataFileEntry {
            spec_id: 0,
            sequence: Some(sequence),
            file,
        }
    }

    fn applying(deletes: &Deletes, data: &DataFileEntry) -> Vec<String> {
        let mut paths: Vec<String> = deletes
            .applying(data.file.file_path(), data)
            .into_iter()
            .map(|d| d.file_path)
            .collect();
        paths.sort();
        paths
    }

    #[test]
    fn delete_files_apply_by_partition_sequence_and_reference_as_iceberg_assigns_them() {
        use DataContentType::{EqualityDeletes, PositionDeletes};
        let index = ManifestIndex {
            deletes: vec![
                // Global (unpartitioned) equality deletes: to older data files anywhere.
                entry(EqualityDeletes, "eq-global-5", None, 5, None),
                // Equality deletes of partition 1: to strictly older data files there.
                entry(EqualityDeletes, "eq-p1-3", Some(1), 3, None),
                entry(EqualityDeletes, "eq-p1-4", Some(1), 4, None),
                // Position deletes of partition 1: to data files no newer.
                entry(PositionDeletes, "pos-p1-3", Some(1), 3, None),
                entry(PositionDeletes, "pos-p1-2", Some(1), 2, None),
                // A deletion vector for one data file only.
                entry(PositionDeletes, "dv-p1-9", Some(1), 9, Some("data-p1-3")),
                entry(PositionDeletes, "pos-p2-9", Some(2), 9, None),
            ],
            ..ManifestIndex::default()
        };
        let deletes = Deletes::of(&index);
        let data = entry(DataContentType::Data, "data-p1-3", Some(1), 3, None);
        assert_eq!(
            applying(&deletes, &data),
            ["dv-p1-9", "eq-global-5", "eq-p1-4", "pos-p1-3"]
        );
        let other = entry(DataContentType::Data, "data-p1-1", Some(1), 1, None);
        assert_eq!(
            applying(&deletes, &other),
            ["eq-global-5", "eq-p1-3", "eq-p1-4", "pos-p1-2", "pos-p1-3"]
        );
        let newest = entry(DataContentType::Data, "data-p2-9", Some(2), 9, None);
        assert_eq!(applying(&deletes, &newest), ["pos-p2-9"]);
    }
}
