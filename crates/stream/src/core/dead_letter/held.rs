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

/// Attempts at removing letters while other writers commit to their table (each found
/// again; a dead-letter table taking letters steadily conflicts now and then).
const ATTEMPTS: usize = 20;

/// The columns a letter is found by, read for every live row (the small ones).
const FOUND_BY: [&str; 5] = ["door", "source", "partition", "offset", "pipeline"];
/// The columns a letter's record is in, read only for letters found.
const HELD: [&str; 2] = ["key", "record"];

/// One letter as its dead-letter table holds it, and where.
#[derive(Debug, Clone, Default)]
pub struct Held {
    pub door: Option<String>,
    pub source: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub pipeline: Option<String>,
    /// Read only when asked for ([`find`]'s `records`).
    pub key: Option<Vec<u8>>,
    pub record: Option<Vec<u8>>,
    file: String,
    spec_id: i32,
    partition_value: Option<Struct>,
    position: u64,
}

/// A letter's key and record.
type KeyAndRecord = (Option<Vec<u8>>, Option<Vec<u8>>);

/// What [`find`] found.
pub struct Found {
    /// The dead-letter table as it was read; none when `target` has no dead-letter table of
    /// Floe's.
    pub table: Option<LoadedTable>,
    pub letters: Vec<Held>,
    /// More letters were wanted than fit the bound on records asked for.
    pub more: bool,
}

/// The letters of the dead-letter table of `target` that `wanted` keeps (it sees the columns
/// letters are found by), read as Floe itself (whoever asked was authorized). With `records`,
/// their keys and records too, in (source, partition, offset) order, for at most that many
/// bytes of them (the letters past it are left out, and `more` says so). Files written before a column was added read it as null.
/// Memory: the small columns of the letters wanted, and the records of one file at a time.
pub async fn find(
    catalog: &CatalogService,
    sql: &floe_sql::SqlEngine,
    warehouse: &str,
    target: &TableIdent,
    wanted: &(dyn Fn(&Held) -> bool + Send + Sync),
    records: Option<usize>,
) -> Result<Found, IngestError> {
    let nothing = Found {
        table: None,
        letters: Vec::new(),
        more: false,
    };
    let caller = Caller::system();
    let loaded = match catalog
        .load_table(&caller, warehouse, &ident_of(target))
        .await
    {
        Ok(loaded) => loaded,
        Err(e) if e.code() == ErrorCode::NotFound => return Ok(nothing),
        Err(e) => return Err(e.into()),
    };
    if loaded.metadata.properties().get(OF_PROPERTY) != Some(&target.name().to_string()) {
        return Ok(nothing);
    }
    let schema = loaded.metadata.current_schema();
    let ids = |names: &[&str]| {
        names
            .iter()
            .map(|name| schema.field_by_name(name).map(|f| f.id))
            .collect::<Option<Vec<i32>>>()
    };
    let (Some(found_by), Some(held_in)) = (ids(&FOUND_BY), ids(&HELD)) else {
        return Ok(nothing);
    };
    let access = sql
        .access(&caller, warehouse)
        .await
        .map_err(|e| IngestError::of_sql(&e))?;
    let provider = floe_sql::scan::IcebergTableProvider::try_new(access, loaded.clone())
        .map_err(|e| IngestError::Storage(e.to_string()))?;
    let keep = |columns: &RecordBatch| -> Vec<bool> {
        match views(columns) {
            Ok(views) => views.iter().map(wanted).collect(),
            Err(_) => vec![false; columns.num_rows()],
        }
    };
    let reading = floe_sql::scan::Reading {
        missing_as_null: true,
        only: None,
        keep: Some(&keep),
    };
    let files = provider
        .live_columns(&found_by, reading)
        .await
        .map_err(|e| IngestError::Storage(format!("read the dead letters: {e}")))?;
    let mut letters = Vec::new();
    for file in files {
        for (mut letter, &position) in views(&file.keys)?.into_iter().zip(&file.positions) {
            letter.file = file.data_file.clone();
            letter.spec_id = file.spec_id;
            letter.partition_value = Some(file.partition.clone());
            letter.position = position;
            letters.push(letter);
        }
    }
    let Some(most) = records else {
        return Ok(Found {
            table: Some(loaded),
            letters,
            more: false,
        });
    };
    // The records in the letters' order (topic, partition, offset: the order they came in),
    // up to `most` bytes, each file's read when its first letter comes.
    letters.sort_by(|a, b| {
        (&a.source, a.partition, a.offset).cmp(&(&b.source, b.partition, b.offset))
    });
    let mut taken = Vec::new();
    let mut bytes = 0usize;
    let mut more = false;
    let mut current: Option<(String, HashMap<u64, KeyAndRecord>)> = None;
    for mut letter in letters {
        if current
            .as_ref()
            .is_none_or(|(file, _)| *file != letter.file)
        {
            current = Some((
                letter.file.clone(),
                records_of(&provider, &held_in, &letter.file).await?,
            ));
        }
        let (_, at) = current.as_mut().expect("read just now");
        let Some((key, record)) = at.remove(&letter.position) else {
            continue;
        };
        let size = key.as_ref().map_or(0, Vec::len) + record.as_ref().map_or(0, Vec::len);
        if bytes + size > most && !taken.is_empty() {
            more = true;
            break;
        }
        bytes += size;
        letter.key = key;
        letter.record = record;
        taken.push(letter);
    }
    Ok(Found {
        table: Some(loaded),
        letters: taken,
        more,
    })
}

/// The keys and records of data file `file`'s live rows, by position.
async fn records_of(
    provider: &floe_sql::scan::IcebergTableProvider,
    held_in: &[i32],
    file: &str,
) -> Result<HashMap<u64, KeyAndRecord>, IngestError> {
    let only = std::collections::HashSet::from([file.to_string()]);
    let reading = floe_sql::scan::Reading {
        missing_as_null: true,
        only: Some(&only),
        keep: None,
    };
    let read = provider
        .live_columns(held_in, reading)
        .await
        .map_err(|e| IngestError::Storage(format!("read the dead letters: {e}")))?;
    let mut at = HashMap::new();
    for read in read {
        let keys = cast(read.keys.column(0), DataType::Binary)?;
        let records = cast(read.keys.column(1), DataType::Binary)?;
        let (keys, records) = (keys.as_binary::<i32>(), records.as_binary::<i32>());
        for (row, position) in read.positions.iter().enumerate() {
            let value = |c: &datafusion::arrow::array::BinaryArray| {
                (!c.is_null(row)).then(|| c.value(row).to_vec())
            };
            at.insert(*position, (value(keys), value(records)));
        }
    }
    Ok(at)
}

fn cast(array: &ArrayRef, to: DataType) -> Result<ArrayRef, IngestError> {
    datafusion::arrow::compute::cast(array, &to)
        .map_err(|e| IngestError::Invalid(format!("dead-letter column: {e}")))
}

/// The letters of `columns` ([`FOUND_BY`]'s, in order) as they read.
fn views(columns: &RecordBatch) -> Result<Vec<Held>, IngestError> {
    let door = cast(columns.column(0), DataType::Utf8)?;
    let source = cast(columns.column(1), DataType::Utf8)?;
    let partition = cast(columns.column(2), DataType::Int32)?;
    let offset = cast(columns.column(3), DataType::Int64)?;
    let pipeline = cast(columns.column(4), DataType::Utf8)?;
    let text = |c: &ArrayRef, row: usize| {
        let c = c.as_string::<i32>();
        (!c.is_null(row)).then(|| c.value(row).to_string())
    };
    let (partitions, offsets) = (
        partition.as_primitive::<Int32Type>(),
        offset.as_primitive::<Int64Type>(),
    );
    Ok((0..columns.num_rows())
        .map(|row| Held {
            door: text(&door, row),
            source: text(&source, row),
            partition: (!partitions.is_null(row)).then(|| partitions.value(row)),
            offset: (!offsets.is_null(row)).then(|| offsets.value(row)),
            pipeline: text(&pipeline, row),
            ..Held::default()
        })
        .collect())
}

/// Removes the letters of `target`'s dead-letter table that `wanted` keeps.
pub async fn remove(
    catalog: &CatalogService,
    sql: &floe_sql::SqlEngine,
    warehouse: &str,
    target: &TableIdent,
    wanted: &(dyn Fn(&Held) -> bool + Send + Sync),
) -> Result<(), IngestError> {
    let caller = Caller::system();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let found = find(catalog, sql, warehouse, target, wanted, None).await?;
        let (Some(loaded), held) = (found.table, found.letters) else {
            return Ok(());
        };
        if held.is_empty() {
            return Ok(());
        }
        if loaded.metadata.format_version() == iceberg::spec::FormatVersion::V1 {
            return Err(IngestError::Invalid(format!(
                "dead-letter table {} is of format v1, which holds no deletes: its letters stay",
                loaded.ident
            )));
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
                tokio::time::sleep(std::time::Duration::from_millis(20 * attempt as u64)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
