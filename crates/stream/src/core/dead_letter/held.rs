//! Letters held in a dead-letter table, found by what they say and removed once taken again:
//! the log's (`floe ingest replay`, by sequence) and a Kafka pipeline's (sent back to its
//! topic). Removing them is a `delete` snapshot of the dead-letter table (position deletes,
//! or deletion vectors on v3) committed on the `main` it read; found again on each attempt,
//! since another writer's commit or a compaction may move them.

use std::collections::{BTreeMap, HashMap};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Int32Type, Int64Type};
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogService, LoadedTable, TableCommitRequest};
use floe_catalog::{CatalogError, ErrorCode};
use iceberg::TableIdent;
use iceberg::spec::{Operation, Struct};

use super::{OF_PROPERTY, ident_of};
use crate::core::IngestError;

/// Attempts at removing letters while other writers commit to their table.
const ATTEMPTS: usize = 8;

/// The columns a held letter is read by.
const COLUMNS: [&str; 7] = [
    "door",
    "source",
    "partition",
    "offset",
    "key",
    "record",
    "pipeline",
];

/// One letter as its dead-letter table holds it, and where.
#[derive(Debug, Clone, Default)]
pub struct Held {
    pub door: Option<String>,
    pub source: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub record: Option<Vec<u8>>,
    pub pipeline: Option<String>,
    file: String,
    spec_id: i32,
    partition_value: Option<Struct>,
    position: u64,
}

impl Held {
    /// A letter of the log (a row, or an upsert table's key to delete when it has no record)
    /// found nowhere in particular.
    #[cfg(test)]
    pub(crate) fn of(row: Vec<u8>, delete: bool) -> Self {
        match delete {
            true => Self {
                key: Some(row),
                ..Self::default()
            },
            false => Self {
                record: Some(row),
                ..Self::default()
            },
        }
    }

    /// The letter of the log `log_id`'s entry it names, as (sequence, JSON row, delete).
    pub(crate) fn of_log(&self, log_id: &str) -> Option<(u64, &[u8], bool)> {
        if self.pipeline.is_some() || self.source.as_deref() != Some(log_id) {
            return None;
        }
        let sequence = u64::try_from(self.offset?).ok()?;
        match (&self.record, &self.key) {
            (Some(row), _) => Some((sequence, row, false)),
            (None, Some(key)) => Some((sequence, key, true)),
            (None, None) => None,
        }
    }
}

/// The letters of the dead-letter table of `target` that `wanted` keeps, and the table as it
/// was read; nothing when `target` has no dead-letter table of Floe's. Read as Floe itself
/// (whoever asked was authorized on `target`).
pub async fn find(
    catalog: &CatalogService,
    sql: &floe_sql::SqlEngine,
    warehouse: &str,
    target: &TableIdent,
    wanted: &(dyn Fn(&Held) -> bool + Sync),
) -> Result<(Option<LoadedTable>, Vec<Held>), IngestError> {
    let caller = Caller::system();
    let loaded = match catalog
        .load_table(&caller, warehouse, &ident_of(target))
        .await
    {
        Ok(loaded) => loaded,
        Err(e) if e.code() == ErrorCode::NotFound => return Ok((None, Vec::new())),
        Err(e) => return Err(e.into()),
    };
    if loaded.metadata.properties().get(OF_PROPERTY) != Some(&target.name().to_string()) {
        return Ok((None, Vec::new()));
    }
    let schema = loaded.metadata.current_schema();
    let Some(ids) = COLUMNS
        .iter()
        .map(|name| schema.field_by_name(name).map(|f| f.id))
        .collect::<Option<Vec<i32>>>()
    else {
        return Ok((None, Vec::new()));
    };
    let access = sql
        .access(&caller, warehouse)
        .await
        .map_err(|e| IngestError::of_sql(&e))?;
    let provider = floe_sql::scan::IcebergTableProvider::try_new(access, loaded.clone())
        .map_err(|e| IngestError::Storage(e.to_string()))?;
    let files = provider
        .live_keys(&ids)
        .await
        .map_err(|e| IngestError::Storage(format!("read the dead letters: {e}")))?;
    let mut held = Vec::new();
    for file in files {
        let columns = typed(&file.keys)?;
        let text = |i: usize, row: usize| {
            let c = columns[i].as_string::<i32>();
            (!c.is_null(row)).then(|| c.value(row).to_string())
        };
        let bytes = |i: usize, row: usize| {
            let c = columns[i].as_binary::<i32>();
            (!c.is_null(row)).then(|| c.value(row).to_vec())
        };
        let partitions = columns[2].as_primitive::<Int32Type>();
        let offsets = columns[3].as_primitive::<Int64Type>();
        for (row, &position) in file.positions.iter().enumerate() {
            let letter = Held {
                door: text(0, row),
                source: text(1, row),
                partition: (!partitions.is_null(row)).then(|| partitions.value(row)),
                offset: (!offsets.is_null(row)).then(|| offsets.value(row)),
                key: bytes(4, row),
                record: bytes(5, row),
                pipeline: text(6, row),
                file: file.data_file.clone(),
                spec_id: file.spec_id,
                partition_value: Some(file.partition.clone()),
                position,
            };
            if wanted(&letter) {
                held.push(letter);
            }
        }
    }
    Ok((Some(loaded), held))
}

/// The columns of [`COLUMNS`] in `keys` as text, 32- and 64-bit integers and binary.
fn typed(keys: &RecordBatch) -> Result<Vec<ArrayRef>, IngestError> {
    let types = [
        DataType::Utf8,
        DataType::Utf8,
        DataType::Int32,
        DataType::Int64,
        DataType::Binary,
        DataType::Binary,
        DataType::Utf8,
    ];
    types
        .iter()
        .enumerate()
        .map(|(i, to)| {
            datafusion::arrow::compute::cast(keys.column(i), to)
                .map_err(|e| IngestError::Invalid(format!("dead-letter column: {e}")))
        })
        .collect()
}

/// Removes the letters of `target`'s dead-letter table that `wanted` keeps.
pub async fn remove(
    catalog: &CatalogService,
    sql: &floe_sql::SqlEngine,
    warehouse: &str,
    target: &TableIdent,
    wanted: &(dyn Fn(&Held) -> bool + Sync),
) -> Result<(), IngestError> {
    let caller = Caller::system();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (Some(loaded), held) = find(catalog, sql, warehouse, target, wanted).await? else {
            return Ok(());
        };
        if held.is_empty() {
            return Ok(());
        }
        let mut doomed: BTreeMap<String, floe_sql::write::Doomed> = BTreeMap::new();
        for letter in held {
            doomed
                .entry(letter.file.clone())
                .or_insert_with(|| floe_sql::write::Doomed {
                    data_file: letter.file,
                    spec_id: letter.spec_id,
                    partition: letter.partition_value.unwrap_or_else(Struct::empty),
                    positions: Vec::new(),
                })
                .positions
                .push(letter.position);
        }
        let doomed: Vec<_> = doomed
            .into_values()
            .map(|mut d| {
                d.positions.sort_unstable();
                d.positions.dedup();
                d
            })
            .collect();
        let access = sql
            .access(&caller, warehouse)
            .await
            .map_err(|e| IngestError::of_sql(&e))?;
        let metadata = loaded.metadata.clone();
        let ident = loaded.ident.clone();
        let table = floe_sql::write::table_of(&access, loaded)
            .map_err(|e| IngestError::Storage(e.to_string()))?;
        let current = metadata.current_snapshot().map(|s| s.snapshot_id());
        let parent = metadata.current_snapshot().cloned();
        let mut snapshot = floe_sql::write::SnapshotWriter::new(&table);
        let written =
            floe_sql::write::delete_rows(&table, &mut snapshot, parent.as_deref(), doomed)
                .await
                .map_err(|e| IngestError::Storage(format!("delete dead letters: {e}")))?;
        let updates = snapshot
            .finish(parent.as_deref(), Operation::Delete, HashMap::new())
            .await
            .map_err(|e| IngestError::Storage(format!("write the snapshot: {e}")))?;
        let committed = catalog
            .commit_table(
                &caller,
                warehouse,
                TableCommitRequest {
                    ident: ident.clone(),
                    requirements: floe_sql::write::on_main(&metadata, current),
                    updates,
                },
            )
            .await;
        match committed {
            Ok(_) => return Ok(()),
            Err(CatalogError::CommitFailed(_)) if attempt < ATTEMPTS => {
                // Refused, so never committed: its delete files go.
                for path in &written.paths {
                    let _ = table.file_io().delete(path).await;
                }
                tracing::info!(table = %ident, attempt, "retry removing dead letters");
            }
            Err(e) => return Err(e.into()),
        }
    }
}
