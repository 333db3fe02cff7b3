//! One write and commit for every door: rows sorted by the table's sort order, written once as
//! data files of its partitioning, appended in one snapshot whose summary carries the source's
//! positions.
//!
//! The positions are made from the table's metadata as the commit finds it, and the commit
//! requires the table to be exactly that (`main` unchanged): the check a source makes of the
//! positions it finds (a pipeline fenced by another node's commit) and the positions it writes
//! commit in one catalog transaction. A commit that loses its race reads the table again and
//! commits the same files again, a few times; each failure is an [`IngestError`] by kind.
//!
//! The files are written through a store that keeps their bytes; once the commit succeeds
//! they enter this node's hot tier (`SqlEngine::admit_hot`), so queries over the recent
//! window read them from local disk. Object storage has them before the hot tier does.

use std::collections::HashMap;

use datafusion::arrow::array::RecordBatch;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::CatalogService;
use iceberg::TableIdent;
use iceberg::spec::TableMetadata;
use iceberg::transaction::{ApplyTransactionAction, Transaction};

use super::IngestError;

/// Tries of a commit that keeps losing its race.
const ATTEMPTS: usize = 8;

/// What an append wrote.
#[derive(Debug, Clone, Copy, Default)]
pub struct Appended {
    pub files: usize,
    pub rows: u64,
    /// The table's last sequence number once the snapshot was committed: a metadata whose
    /// last sequence number is at least this one has the rows.
    pub sequence_number: i64,
}

/// Appends `batch` (rows of the table's current schema) to table `ident` of `warehouse` as
/// `caller`, in one snapshot whose summary carries what `positions` makes of the table's
/// metadata as the commit finds it (or its refusal, such as [`IngestError::Fenced`]).
pub async fn append(
    catalog: &CatalogService,
    sql: &floe_sql::SqlEngine,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
    batch: RecordBatch,
    positions: impl Fn(&TableMetadata) -> Result<HashMap<String, String>, IngestError>,
) -> Result<Appended, IngestError> {
    let access = sql
        .access(caller, warehouse)
        .await
        .map_err(|e| IngestError::of_sql(&e))?;
    // The files are written through a store that keeps them, for the node's hot tier.
    let (access, kept) = match sql.write_through(&access) {
        Some((through, kept)) => (through, Some(kept)),
        None => (access, None),
    };
    let rows = batch.num_rows() as u64;
    let mut batch = Some(batch);
    let mut written: Option<Vec<iceberg::spec::DataFile>> = None;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let loaded = catalog
            .load_table(caller, warehouse, ident)
            .await
            .map_err(IngestError::of_catalog)?;
        // Rows appended as they are would stand beside the rows of their keys.
        if super::upsert::key_of(&loaded.metadata)?.is_some() {
            return Err(IngestError::Invalid(format!(
                "table {ident} is an upsert table: its rows are written as upserts (a Kafka \
                 pipeline needs mode upsert or debezium and the table's key)"
            )));
        }
        let properties = positions(&loaded.metadata)?;
        let table = floe_sql::write::table_of(&access, loaded)
            .map_err(|e| IngestError::Storage(e.to_string()))?;
        let files = match &written {
            Some(files) => files.clone(),
            None => {
                let sorted = sort_batch(table.metadata(), batch.take().expect("written once"))?;
                let files = floe_sql::write::write_batch_files(&table, &sorted)
                    .await
                    .map_err(|e| IngestError::of_write(&e))?;
                written = Some(files.clone());
                files
            }
        };
        let count = files.len();
        let transaction = Transaction::new(&table);
        // The files were written just now under new unique names, so none can be in the
        // table already: iceberg's duplicate check would only read every manifest.
        let transaction = transaction
            .fast_append()
            .with_check_duplicate(false)
            .set_snapshot_properties(properties)
            .add_data_files(files)
            .apply(transaction)
            .map_err(|e| IngestError::Invalid(e.to_string()))?;
        // On `table` exactly: the positions were made from it.
        match floe_sql::write::commit_transaction_on(&access, &table, transaction).await {
            Ok(committed) => {
                if let (Some(kept), Some(files)) = (&kept, &written) {
                    sql.admit_hot(&access, kept, files).await;
                }
                return Ok(Appended {
                    files: count,
                    rows,
                    sequence_number: committed.metadata().last_sequence_number(),
                });
            }
            Err(e) => match IngestError::of_write(&e) {
                IngestError::Conflict(_) if attempt < ATTEMPTS => {
                    tracing::info!(table = %ident, attempt, "retry an ingest commit");
                }
                error => return Err(error),
            },
        }
    }
}

/// `batch` sorted by the table's default sort order (identity fields of top-level columns;
/// other transforms are left to compaction).
pub fn sort_batch(
    metadata: &TableMetadata,
    batch: RecordBatch,
) -> Result<RecordBatch, IngestError> {
    use datafusion::arrow::compute::{
        SortColumn, SortOptions, lexsort_to_indices, take_record_batch,
    };
    use iceberg::spec::{NullOrder, SortDirection, Transform};
    let order = metadata.default_sort_order();
    let schema = metadata.current_schema();
    let mut columns = Vec::new();
    for field in &order.fields {
        if field.transform != Transform::Identity {
            continue;
        }
        let Some(name) = schema.name_by_field_id(field.source_id) else {
            continue;
        };
        let Some(values) = batch.column_by_name(name) else {
            continue;
        };
        columns.push(SortColumn {
            values: values.clone(),
            options: Some(SortOptions {
                descending: field.direction == SortDirection::Descending,
                nulls_first: field.null_order == NullOrder::First,
            }),
        });
    }
    if columns.is_empty() || batch.num_rows() < 2 {
        return Ok(batch);
    }
    let failed = |e: datafusion::arrow::error::ArrowError| {
        IngestError::Invalid(format!("sort rows by the table's sort order: {e}"))
    };
    let indices = lexsort_to_indices(&columns, None).map_err(failed)?;
    take_record_batch(&batch, &indices).map_err(failed)
}
