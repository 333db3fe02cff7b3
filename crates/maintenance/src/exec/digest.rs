//! Deep verification of a migrated table: every row read twice and reduced to a digest — once
//! through Floe's SQL, as any client of Floe reads the table, and once from the source, as the
//! source's own engine reads it: a Hive table's Parquet files straight from its partition
//! directories, with the partition values the metastore gave (no Iceberg metadata in
//! between), or an Iceberg source's current snapshot from the source's own metadata file.
//!
//! A digest is the row count and, per column, the non-null count and an order-independent
//! checksum: each value rendered as text in the column's type as Floe answers it, hashed
//! (xxHash64 under two seeds) and the hashes summed, so rows in any order or file layout give
//! the same checksum and any value changed, lost or doubled gives another.
//!
//! Checked where it is used: `manage-warehouses` on the server (the caller moves catalogs) and
//! `read-data` on Floe's table; the source is read only inside that table's location (a Hive
//! source's directory must be the table's; an Iceberg source's metadata must name the table's
//! location, and its files are reached through the table's storage handle, as Floe's are).
//! Source files go through the same bounded footer reader as every scan.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege, Scope};
use floe_catalog::service::LoadedTable;
use floe_sql::QueryOptions;
use floe_sql::scan::IcebergTableProvider;
use floe_storage::Location;
use futures::{StreamExt, TryStreamExt};
use iceberg::TableIdent;
use serde::{Deserialize, Serialize};
use twox_hash::XxHash64;

use super::convert::{
    HIVE_NULL_PARTITION, HivePartition, list_paths, partition_dirs, partition_types,
};
use super::{Maintainer, MaintenanceError, Result, io};

/// Source files read at once.
const CONCURRENCY: usize = 2;
/// Rows per batch read from a source file.
const BATCH_ROWS: usize = 8192;
/// Memory for reading an Iceberg source (operators spill beyond it).
const MEMORY_LIMIT: usize = 512 << 20;
const SEEDS: [u64; 2] = [0x666c_6f65, 0x6d69_6772_6174_6521];

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DigestRequest {
    pub warehouse: String,
    pub namespace: Vec<String>,
    /// Floe's table the source was migrated to.
    pub table: String,
    pub source: DigestSource,
}

/// The source as it holds the table now.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DigestSource {
    /// An Iceberg table: its current metadata file.
    #[serde(rename_all = "kebab-case")]
    Iceberg { metadata_location: String },
    /// A Hive table of Parquet files, as its metastore describes it.
    #[serde(rename_all = "kebab-case")]
    Hive {
        location: String,
        #[serde(default)]
        partition_columns: Vec<String>,
        #[serde(default)]
        partitions: Vec<HivePartition>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ColumnDigest {
    pub name: String,
    pub non_null: u64,
    pub checksum: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableDigest {
    /// The snapshot read (none for a Hive source).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<i64>,
    pub rows: u64,
    pub columns: Vec<ColumnDigest>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct DigestReport {
    pub floe: TableDigest,
    pub source: TableDigest,
}

/// Reads Floe's table and its source as `request` says, as `caller`.
pub async fn digest_table(
    maintainer: &Maintainer,
    caller: &Caller,
    request: &DigestRequest,
) -> Result<DigestReport> {
    caller.require(Privilege::ManageWarehouses, &Scope::server(), || {
        CatalogError::PermissionDenied(format!(
            "principal {} lacks the manage-warehouses privilege on the server",
            caller.principal.name
        ))
    })?;
    let ident = table_ident(request)?;
    maintainer
        .catalog
        .authorize_table(caller, &request.warehouse, &ident, Privilege::ReadData)
        .await?;
    let loaded = maintainer
        .catalog
        .load_table(caller, &request.warehouse, &ident)
        .await?;
    let own = Location::parse(loaded.metadata.location())
        .map_err(|e| MaintenanceError::Invalid(format!("the table's location: {e}")))?;

    // The source first: it decides which of Floe's snapshots to compare with (an Iceberg
    // source's current one when Floe holds it, so writes in Floe since do not count).
    let (source, floe_snapshot) = match &request.source {
        DigestSource::Iceberg { metadata_location } => {
            let metadata = maintainer
                .catalog
                .read_table_metadata(caller, &request.warehouse, metadata_location, Some(&ident))
                .await?;
            let theirs = Location::parse(metadata.location())
                .map_err(|e| MaintenanceError::Invalid(format!("the source's location: {e}")))?;
            if theirs != own {
                return Err(MaintenanceError::Invalid(format!(
                    "{metadata_location} describes a table at {}, not table {ident}'s location {}",
                    metadata.location(),
                    loaded.metadata.location()
                )));
            }
            let snapshot = metadata.current_snapshot_id();
            let floe_snapshot = snapshot.filter(|id| loaded.metadata.snapshot_by_id(*id).is_some());
            let source = LoadedTable {
                ident: ident.clone(),
                metadata_location: Some(metadata_location.clone()),
                metadata,
            };
            (Source::Iceberg(source, snapshot), floe_snapshot)
        }
        DigestSource::Hive {
            location,
            partition_columns,
            partitions,
        } => {
            let root = Location::parse(location)
                .map_err(|e| MaintenanceError::Invalid(format!("location: {e}")))?;
            if root != own {
                return Err(MaintenanceError::Invalid(format!(
                    "location {location} is not table {ident}'s location {}",
                    loaded.metadata.location()
                )));
            }
            let types = partition_types(loaded.metadata.current_schema(), partition_columns)?;
            let dirs = partition_dirs(&root, partition_columns, partitions, &types)?;
            (Source::Hive { root, dirs }, None)
        }
    };

    let floe = read_floe(
        maintainer,
        caller,
        request,
        floe_snapshot,
        loaded.metadata.current_snapshot_id(),
    )
    .await?;
    let source = match source {
        Source::Iceberg(source, snapshot) => {
            let mut digest =
                read_iceberg(maintainer, caller, request, source, &floe.schema).await?;
            digest.snapshot_id = snapshot;
            digest
        }
        Source::Hive { root, dirs } => {
            let DigestSource::Hive {
                partition_columns,
                partitions,
                ..
            } = &request.source
            else {
                unreachable!("a Hive source was described as one")
            };
            read_hive(
                maintainer,
                caller,
                request,
                &root,
                &dirs,
                partition_columns,
                partitions,
                &floe.schema,
            )
            .await?
        }
    };
    Ok(DigestReport {
        floe: floe.digest,
        source,
    })
}

enum Source {
    Iceberg(LoadedTable, Option<i64>),
    Hive {
        root: Location,
        dirs: Vec<(String, usize)>,
    },
}

struct FloeRead {
    digest: TableDigest,
    /// The columns as Floe's SQL answers them: the source's are read into these types.
    schema: SchemaRef,
}

/// Every row of Floe's table through its SQL engine (at `snapshot` when given, else at its
/// current snapshot, `current`).
async fn read_floe(
    maintainer: &Maintainer,
    caller: &Caller,
    request: &DigestRequest,
    snapshot: Option<i64>,
    current: Option<i64>,
) -> Result<FloeRead> {
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let name = match snapshot {
        Some(id) => format!("{}@snapshot={id}", request.table),
        None => request.table.clone(),
    };
    let sql = format!(
        "SELECT * FROM {}.{}.{}",
        quote(&request.warehouse),
        quote(&request.namespace.join(".")),
        quote(&name)
    );
    let result = maintainer
        .sql
        .query(caller, &sql, &QueryOptions::default())
        .await
        .map_err(|e| io("read the table through Floe", e.message))?;
    let schema = result.schema.clone();
    let mut digest = Digest::new(&schema);
    let mut stream = result.stream;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| io("read the table through Floe", e))?;
        let columns = batch.columns().iter().cloned().map(Some).collect();
        digest.add(batch.num_rows(), columns, "Floe's table")?;
    }
    let mut digest = digest.finish();
    digest.snapshot_id = snapshot.or(current);
    Ok(FloeRead { digest, schema })
}

fn table_ident(request: &DigestRequest) -> Result<TableIdent> {
    TableIdent::from_strs(
        request
            .namespace
            .iter()
            .map(String::as_str)
            .chain([request.table.as_str()]),
    )
    .map_err(|e| MaintenanceError::Invalid(format!("table name: {e}")))
}

/// Every row of the source's current snapshot, read from its own metadata file.
async fn read_iceberg(
    maintainer: &Maintainer,
    caller: &Caller,
    request: &DigestRequest,
    source: LoadedTable,
    schema: &SchemaRef,
) -> Result<TableDigest> {
    let access = maintainer
        .sql
        .access(caller, &request.warehouse)
        .await
        .map_err(|e| io("storage access", e.message))?;
    let provider = IcebergTableProvider::try_new(access, source)
        .map_err(|e| MaintenanceError::Invalid(format!("the source: {e}")))?;
    let ctx = maintainer
        .sql
        .background_session(MEMORY_LIMIT, CONCURRENCY)
        .map_err(|e| io("read the source", e.message))?;
    ctx.register_table("source", Arc::new(provider))
        .map_err(|e| io("read the source", e))?;
    // The source's metadata, manifests and files are the client's: one that does not read
    // (or names a file outside the table) is named to the caller, not taken for Floe's failure.
    let unreadable = |e: datafusion::error::DataFusionError| {
        MaintenanceError::Invalid(format!("cannot read the source: {e}"))
    };
    let mut stream = ctx
        .table("source")
        .await
        .map_err(unreadable)?
        .execute_stream()
        .await
        .map_err(unreadable)?;
    let mut digest = Digest::new(schema);
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(unreadable)?;
        let columns = digest.by_name(&batch);
        digest.add(batch.num_rows(), columns, "the source")?;
    }
    Ok(digest.finish())
}

/// Every row of a Hive table: each Parquet file below its partitions, columns matched by
/// name (as Hive matches them, case aside), partition columns from the partition's values.
#[allow(clippy::too_many_arguments)]
async fn read_hive(
    maintainer: &Maintainer,
    caller: &Caller,
    request: &DigestRequest,
    root: &Location,
    dirs: &[(String, usize)],
    partition_columns: &[String],
    partitions: &[HivePartition],
    schema: &SchemaRef,
) -> Result<TableDigest> {
    let storage = maintainer
        .catalog
        .visible_warehouse(caller, &request.warehouse)
        .await?
        .storage
        .for_table(&root.to_string())
        .map_err(|e| MaintenanceError::Invalid(format!("location: {e}")))?;
    let files = list_paths(&storage, root, dirs).await?;
    // Where each partition column sits among Floe's columns.
    let slots: Vec<usize> = partition_columns
        .iter()
        .map(|name| {
            schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    MaintenanceError::Invalid(format!(
                        "partition column {name} is not among the table's columns"
                    ))
                })
        })
        .collect::<Result<_>>()?;
    let object_store = storage.object_store();
    let digests: Vec<Digest> = futures::stream::iter(files)
        .map(|(path, partition)| {
            let storage = storage.clone();
            let object_store = object_store.clone();
            let slots = &slots;
            async move {
                let reach = |e: &dyn std::fmt::Display| io(format!("read {path}"), e);
                let size = storage
                    .size(&path)
                    .await
                    .map_err(|e| reach(&e))?
                    .ok_or_else(|| reach(&"it is gone"))?;
                let object = storage.object_path(&path).map_err(|e| reach(&e))?;
                // What the file holds is the source's: a file that does not decode is named
                // to the caller (a 400), not taken for Floe's failure.
                let unreadable =
                    |e: &dyn std::fmt::Display| MaintenanceError::Invalid(format!("{path}: {e}"));
                let mut batches =
                    floe_sql::scan::parquet_batches(object_store, object, size, BATCH_ROWS)
                        .await
                        .map_err(|e| unreadable(&e))?;
                let values = partitions
                    .get(partition)
                    .map(|p| p.values.as_slice())
                    .unwrap_or(&[]);
                let mut digest = Digest::new(schema);
                while let Some(batch) = batches.try_next().await.map_err(|e| unreadable(&e))? {
                    let rows = batch.num_rows();
                    let mut columns = digest.by_name(&batch);
                    for (slot, value) in slots.iter().zip(values) {
                        columns[*slot] = Some(partition_column(
                            value,
                            schema.field(*slot).data_type(),
                            rows,
                        )?);
                    }
                    digest.add(rows, columns, &path)?;
                }
                Ok::<_, MaintenanceError>(digest)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await?;
    let mut total = Digest::new(schema);
    for digest in digests {
        total.merge(digest);
    }
    Ok(total.finish())
}

/// A partition's value as a column of `rows` rows of `ty` (Hive's null partition as nulls).
fn partition_column(value: &str, ty: &DataType, rows: usize) -> Result<ArrayRef> {
    if value == HIVE_NULL_PARTITION {
        return Ok(new_null_array(ty, rows));
    }
    let text: ArrayRef = Arc::new(StringArray::from(vec![value; rows]));
    cast_with_options(&text, ty, &STRICT)
        .map_err(|e| MaintenanceError::Invalid(format!("partition value {value:?}: {e}")))
}

const STRICT: CastOptions<'static> = CastOptions {
    safe: false,
    format_options: FormatOptions::new(),
};

/// Row and non-null counts and per-column checksums, accumulated batch by batch.
struct Digest {
    schema: SchemaRef,
    rows: u64,
    non_null: Vec<u64>,
    sums: Vec<[u64; 2]>,
    text: String,
}

impl Digest {
    fn new(schema: &SchemaRef) -> Self {
        let n = schema.fields().len();
        Self {
            schema: schema.clone(),
            rows: 0,
            non_null: vec![0; n],
            sums: vec![[0; 2]; n],
            text: String::new(),
        }
    }

    /// `batch`'s columns in this digest's order, found by name (case aside); a column the
    /// batch lacks is `None` (all null).
    fn by_name(&self, batch: &RecordBatch) -> Vec<Option<ArrayRef>> {
        let theirs = batch.schema();
        self.schema
            .fields()
            .iter()
            .map(|field| {
                theirs
                    .fields()
                    .iter()
                    .position(|f| f.name().eq_ignore_ascii_case(field.name()))
                    .map(|i| batch.column(i).clone())
            })
            .collect()
    }

    /// Adds `rows` rows; each column is read in this digest's type of it.
    fn add(&mut self, rows: usize, columns: Vec<Option<ArrayRef>>, from: &str) -> Result<()> {
        use std::fmt::Write;
        self.rows += rows as u64;
        for (i, column) in columns.into_iter().enumerate() {
            let Some(column) = column else { continue };
            let field = self.schema.field(i);
            let column = if column.data_type() == field.data_type() {
                column
            } else {
                cast_with_options(&column, field.data_type(), &STRICT).map_err(|e| {
                    MaintenanceError::Unsupported(format!(
                        "column {} of {from} does not read as {}: {e}",
                        field.name(),
                        field.data_type()
                    ))
                })?
            };
            let format = FormatOptions::new().with_null("");
            let formatter = ArrayFormatter::try_new(&column, &format)
                .map_err(|e| io(format!("render column {}", field.name()), e))?;
            for row in 0..column.len() {
                if column.is_null(row) {
                    continue;
                }
                self.text.clear();
                write!(self.text, "{}", formatter.value(row))
                    .map_err(|e| io(format!("render column {}", field.name()), e))?;
                self.non_null[i] += 1;
                for (sum, seed) in self.sums[i].iter_mut().zip(SEEDS) {
                    *sum = sum.wrapping_add(XxHash64::oneshot(seed, self.text.as_bytes()));
                }
            }
        }
        Ok(())
    }

    fn merge(&mut self, other: Digest) {
        self.rows += other.rows;
        for i in 0..self.non_null.len() {
            self.non_null[i] += other.non_null[i];
            for k in 0..2 {
                self.sums[i][k] = self.sums[i][k].wrapping_add(other.sums[i][k]);
            }
        }
    }

    fn finish(self) -> TableDigest {
        TableDigest {
            snapshot_id: None,
            rows: self.rows,
            columns: self
                .schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| ColumnDigest {
                    name: f.name().clone(),
                    non_null: self.non_null[i],
                    checksum: format!("{:016x}{:016x}", self.sums[i][0], self.sums[i][1]),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    fn digest(batches: &[Vec<Option<i64>>]) -> TableDigest {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let mut digest = Digest::new(&schema);
        for values in batches {
            let column: ArrayRef = Arc::new(Int64Array::from(values.clone()));
            digest
                .add(values.len(), vec![Some(column)], "test")
                .unwrap();
        }
        digest.finish()
    }

    #[test]
    fn checksums_ignore_order_and_batching_but_not_values() {
        let a = digest(&[vec![Some(1), None, Some(3)], vec![Some(2)]]);
        let b = digest(&[vec![Some(2), Some(3)], vec![None, Some(1)]]);
        assert_eq!(a, b);
        assert_eq!(a.rows, 4);
        assert_eq!(a.columns[0].non_null, 3);
        let doubled = digest(&[vec![Some(1), None, Some(3)], vec![Some(3)]]);
        assert_ne!(a.columns[0].checksum, doubled.columns[0].checksum);
    }

    #[test]
    fn a_column_read_in_another_type_is_cast_to_floes() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let mut narrow = Digest::new(&schema);
        let column: ArrayRef = Arc::new(datafusion::arrow::array::Int32Array::from(vec![7]));
        narrow.add(1, vec![Some(column)], "test").unwrap();
        assert_eq!(narrow.finish(), digest(&[vec![Some(7)]]));
    }

    #[test]
    fn hive_partition_values_read_in_the_columns_type() {
        let column = partition_column("2024-01-02", &DataType::Date32, 2).unwrap();
        assert_eq!(column.len(), 2);
        assert_eq!(column.data_type(), &DataType::Date32);
        let nulls = partition_column(HIVE_NULL_PARTITION, &DataType::Int32, 3).unwrap();
        assert_eq!(nulls.null_count(), 3);
        assert!(partition_column("x", &DataType::Int32, 1).is_err());
    }
}
