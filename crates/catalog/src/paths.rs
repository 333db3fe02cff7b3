//! What a table's metadata may point at: nothing outside the table.
//!
//! A table owns the files below its location and nothing else. Metadata a client commits
//! (or registers) names files Floe will read with the warehouse's credentials and, when
//! snapshots expire, delete: manifest lists, statistics and partition statistics files, the
//! metadata log, and the directories new data and metadata files are written to. Every one
//! of them must lie below the table's location, so a commit cannot aim Floe's reads or
//! deletes at another table or outside the warehouse. The check is pure; it runs on the
//! metadata a commit produces, before anything is written.
//!
//! Manifests and the data and delete files they list are not in the metadata file: reading
//! them at every commit would cost a read of each new manifest per commit (and Iceberg's own
//! catalog tests commit data files under `/path/to/…`). They are held to the same rule where
//! Floe uses them instead: every table file Floe reads, writes or deletes goes through a
//! storage handle that reaches only the table's location
//! ([`floe_storage::WarehouseStorage::for_table`]), which refuses anything else by name.

use std::collections::HashSet;

use floe_storage::Location;
use iceberg::spec::TableMetadata;

use crate::{CatalogError, Result};

/// Table properties that name where files are written.
pub const WRITE_PATH_PROPERTIES: [&str; 4] = [
    "write.data.path",
    "write.folder-storage.path",
    "write.object-storage.path",
    crate::metadata::METADATA_PATH_PROPERTY,
];

/// Checks that every path `metadata` names lies below its location. With `base` (the
/// metadata committed before) at the same location, only what the commit adds is checked;
/// a table that moved has every snapshot's and statistics file checked against its new
/// location. Without `base` (a create or a registration) the metadata log is checked too.
pub fn check_table_paths(metadata: &TableMetadata, base: Option<&TableMetadata>) -> Result<()> {
    let location = parse(metadata.location(), "table location")?;
    let base_metadata = base;
    let base = base.filter(|b| Location::parse(b.location()).is_ok_and(|l| l == location));
    let inside = |path: &str, what: &str| -> Result<()> {
        let parsed = parse(path, what)?;
        if parsed.is_within(&location) {
            Ok(())
        } else {
            Err(CatalogError::bad_request(format!(
                "{what} {path} lies outside the table's location {}",
                metadata.location()
            )))
        }
    };
    for key in WRITE_PATH_PROPERTIES {
        if let Some(path) = metadata.properties().get(key).filter(|p| !p.is_empty()) {
            inside(path, &format!("property {key}:"))?;
        }
    }
    let known_snapshots: HashSet<i64> = base
        .map(|b| b.snapshots().map(|s| s.snapshot_id()).collect())
        .unwrap_or_default();
    for snapshot in metadata.snapshots() {
        if !known_snapshots.contains(&snapshot.snapshot_id()) {
            inside(
                snapshot.manifest_list(),
                &format!("the manifest list of snapshot {}", snapshot.snapshot_id()),
            )?;
        }
    }
    let known_statistics: HashSet<&str> = base
        .into_iter()
        .flat_map(|b| b.statistics_iter().map(|s| s.statistics_path.as_str()))
        .collect();
    for statistics in metadata.statistics_iter() {
        if !known_statistics.contains(&statistics.statistics_path.as_str()) {
            inside(&statistics.statistics_path, "statistics file")?;
        }
    }
    let known_partition_statistics: HashSet<&str> = base
        .into_iter()
        .flat_map(|b| {
            b.partition_statistics_iter()
                .map(|s| s.statistics_path.as_str())
        })
        .collect();
    for statistics in metadata.partition_statistics_iter() {
        if !known_partition_statistics.contains(&statistics.statistics_path.as_str()) {
            inside(&statistics.statistics_path, "partition statistics file")?;
        }
    }
    // Commits cannot write the metadata log (the catalog appends its own files to it), but
    // registered metadata brings one along. A moved table's log rightly names files at its
    // old location, which nothing deletes from outside the table it is now.
    if base_metadata.is_none() {
        for entry in metadata.metadata_log() {
            inside(&entry.metadata_file, "metadata log entry")?;
        }
    }
    Ok(())
}

fn parse(path: &str, what: &str) -> Result<Location> {
    Location::parse(path)
        .map_err(|e| CatalogError::bad_request(format!("{what} {path} is not usable: {e}")))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use iceberg::spec::{
        NestedField, PrimitiveType, Schema, Snapshot, StatisticsFile, Summary, Type,
    };
    use iceberg::{TableCreation, TableUpdate};

    use super::*;
    use crate::commit::{Applied, apply_table_updates};

    fn table(location: &str, properties: HashMap<String, String>) -> TableMetadata {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        let creation = TableCreation::builder()
            .name("t".into())
            .location(location.into())
            .schema(schema)
            .properties(properties)
            .build();
        iceberg::spec::TableMetadataBuilder::from_table_creation(creation)
            .unwrap()
            .build()
            .unwrap()
            .metadata
    }

    fn snapshot(id: i64, manifest_list: &str) -> Snapshot {
        Snapshot::builder()
            .with_snapshot_id(id)
            .with_sequence_number(1)
            .with_timestamp_ms(crate::clock::now_ms() + 60_000)
            .with_manifest_list(manifest_list)
            .with_schema_id(0)
            .with_summary(Summary {
                operation: iceberg::spec::Operation::Append,
                additional_properties: HashMap::new(),
            })
            .build()
    }

    fn committed(base: &TableMetadata, updates: Vec<TableUpdate>) -> Result<TableMetadata> {
        let current = format!("{}/metadata/00000.metadata.json", base.location());
        match apply_table_updates(base, &current, updates)? {
            Applied::Changed(new) => Ok(new.metadata),
            Applied::Unchanged => Ok(base.clone()),
        }
    }

    #[test]
    fn paths_inside_the_table_pass() {
        let base = table("file:///wh/ns/t", HashMap::new());
        check_table_paths(&base, None).unwrap();
        let new = committed(
            &base,
            vec![TableUpdate::AddSnapshot {
                snapshot: snapshot(1, "file:/wh/ns//t/metadata/snap-1.avro"),
            }],
        )
        .unwrap();
        check_table_paths(&new, Some(&base)).unwrap();
    }

    #[test]
    fn every_kind_of_path_outside_the_table_is_refused_by_name() {
        let base = table("file:///wh/ns/t", HashMap::new());
        let statistics = |path: &str| TableUpdate::SetStatistics {
            statistics: StatisticsFile {
                snapshot_id: 1,
                statistics_path: path.into(),
                file_size_in_bytes: 1,
                file_footer_size_in_bytes: 1,
                key_metadata: None,
                blob_metadata: Vec::new(),
            },
        };
        let property = |key: &str, value: &str| TableUpdate::SetProperties {
            updates: HashMap::from([(key.to_string(), value.to_string())]),
        };
        let cases: Vec<(Vec<TableUpdate>, &str)> = vec![
            (
                vec![TableUpdate::AddSnapshot {
                    snapshot: snapshot(1, "file:///wh/ns/victim/metadata/snap.avro"),
                }],
                "file:///wh/ns/victim/metadata/snap.avro",
            ),
            (
                vec![
                    TableUpdate::AddSnapshot {
                        snapshot: snapshot(1, "file:///wh/ns/t/metadata/snap.avro"),
                    },
                    statistics("file:///tmp/x"),
                ],
                "file:///tmp/x",
            ),
            (
                vec![property("write.data.path", "file:///wh/ns/t2/data")],
                "file:///wh/ns/t2/data",
            ),
            (
                vec![property("write.metadata.path", "s3://bucket/elsewhere")],
                "s3://bucket/elsewhere",
            ),
            (vec![property("write.object-storage.path", "/etc")], "/etc"),
            (
                vec![TableUpdate::AddSnapshot {
                    snapshot: snapshot(1, "file:///wh/ns/t/../victim/snap.avro"),
                }],
                "..",
            ),
        ];
        for (updates, named) in cases {
            let new = committed(&base, updates).unwrap();
            let err = check_table_paths(&new, Some(&base)).unwrap_err();
            assert!(
                matches!(err, CatalogError::BadRequest { .. }) && err.to_string().contains(named),
                "{err}"
            );
        }
    }

    #[test]
    fn a_moved_table_has_every_path_checked_again() {
        let base = table("file:///wh/ns/t", HashMap::new());
        let with_data = committed(
            &base,
            vec![TableUpdate::AddSnapshot {
                snapshot: snapshot(1, "file:///wh/ns/t/metadata/snap-1.avro"),
            }],
        )
        .unwrap();
        let moved = committed(
            &with_data,
            vec![TableUpdate::SetLocation {
                location: "file:///wh/ns/elsewhere".into(),
            }],
        )
        .unwrap();
        let err = check_table_paths(&moved, Some(&with_data)).unwrap_err();
        assert!(err.to_string().contains("snap-1.avro"), "{err}");
        // Only what a commit adds is checked while the table stays where it is.
        let legacy = committed(
            &base,
            vec![TableUpdate::AddSnapshot {
                snapshot: snapshot(1, "file:///legacy/snap.avro"),
            }],
        )
        .unwrap();
        let next = committed(
            &legacy,
            vec![TableUpdate::SetProperties {
                updates: HashMap::from([("k".to_string(), "v".to_string())]),
            }],
        )
        .unwrap();
        check_table_paths(&next, Some(&legacy)).unwrap();
    }
}
