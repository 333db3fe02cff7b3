//! SQL writes through Floe's own commit path: `INSERT INTO` writes Parquet data files with
//! iceberg's writers (split by the table's partition spec) and commits one append snapshot
//! through [`CatalogService`] — the same requirements, authorization and audit as a REST
//! commit. `CREATE SCHEMA`, `CREATE TABLE` (with `PARTITIONED BY` transforms), `CREATE TABLE
//! AS SELECT` and `DROP TABLE` go to the catalog service directly.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField as RowSortField};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use floe_catalog::governance::authz::Privilege;
use floe_catalog::service::TableCommitRequest;
use futures::StreamExt;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{DataFile, DataFileBuilder, DataFileFormat, Transform, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{Catalog, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent};
use parquet::file::properties::WriterProperties;

use crate::provider::{TableAccess, iceberg_error};

fn catalog_error(e: floe_catalog::CatalogError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Appends what `INSERT INTO` produces to one Iceberg table.
pub struct IcebergSink {
    access: TableAccess,
    table: Table,
    schema: SchemaRef,
    snapshot_properties: HashMap<String, String>,
}

impl std::fmt::Debug for IcebergSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IcebergSink({})", self.table.identifier())
    }
}

impl IcebergSink {
    pub fn new(access: TableAccess, table: Table, schema: SchemaRef) -> Self {
        Self {
            access,
            table,
            schema,
            snapshot_properties: HashMap::new(),
        }
    }

    /// Entries for the summary of the snapshot the write commits.
    pub fn with_snapshot_properties(mut self, properties: HashMap<String, String>) -> Self {
        self.snapshot_properties = properties;
        self
    }
}

impl DisplayAs for IcebergSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "IcebergSink: table={}", self.table.identifier())
    }
}

#[async_trait]
impl DataSink for IcebergSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let access = &self.access;
        let ident = self.table.identifier().clone();
        // Refuse before writing a single file.
        access
            .service
            .authorize_table(
                &access.caller,
                &access.warehouse,
                &ident,
                Privilege::WriteData,
            )
            .await
            .map_err(catalog_error)?;
        let (data_files, rows) = write_data_files(&self.table, data, None).await?;
        if data_files.is_empty() {
            return Ok(0);
        }
        let transaction = Transaction::new(&self.table);
        let transaction = transaction
            .fast_append()
            .set_snapshot_properties(self.snapshot_properties.clone())
            .add_data_files(data_files)
            .apply(transaction)
            .map_err(iceberg_error)?;
        commit_transaction(access, transaction).await?;
        Ok(rows)
    }
}

/// Writes `data` as Parquet data files of `table` (split by its default partition spec,
/// rolling over at `target_file_size`, default 512 MiB), returning the files and the rows
/// written. Nothing is committed.
pub async fn write_data_files(
    table: &Table,
    mut data: SendableRecordBatchStream,
    target_file_size: Option<usize>,
) -> Result<(Vec<DataFile>, u64)> {
    let (file_schema, splitter) = write_layout(table)?;
    let writer_builder = data_file_writers(table, target_file_size)?;
    let mut order = OrderCheck::new(table, &file_schema)?;
    let mut rows = 0u64;
    let data_files: Vec<DataFile> = if let Some(splitter) = splitter {
        let mut writer = FanoutWriter::new(writer_builder);
        while let Some(batch) = data.next().await {
            let batch = crate::cast_batch(&batch?, &file_schema)?;
            rows += batch.num_rows() as u64;
            order.observe(&batch)?;
            for (key, part) in splitter.split(&batch).map_err(iceberg_error)? {
                writer.write(key, part).await.map_err(iceberg_error)?;
            }
        }
        writer.close().await.map_err(iceberg_error)?
    } else {
        let mut writer = writer_builder.build(None).await.map_err(iceberg_error)?;
        while let Some(batch) = data.next().await {
            let batch = crate::cast_batch(&batch?, &file_schema)?;
            rows += batch.num_rows() as u64;
            order.observe(&batch)?;
            writer.write(batch).await.map_err(iceberg_error)?;
        }
        writer.close().await.map_err(iceberg_error)?
    };
    Ok((order.stamp(table, data_files)?, rows))
}

/// Watches the rows a write receives and tells whether they came in the table's default sort
/// order (every field an identity transform of a column that is not floating point). Files of
/// such a write are stamped with that order's id in their manifest entries, which lets readers
/// rely on it ([`crate::provider`] declares it to DataFusion). Nothing is sorted here: rows that
/// arrive out of order leave the files unstamped, as Iceberg allows.
struct OrderCheck {
    order_id: i32,
    columns: Vec<usize>,
    converter: Option<RowConverter>,
    last: Option<OwnedRow>,
    sorted: bool,
}

impl OrderCheck {
    fn new(table: &Table, file_schema: &SchemaRef) -> Result<Self> {
        let order = table.metadata().default_sort_order();
        let (sorted_by, complete) = crate::provider::sort_columns(order, file_schema);
        if !complete || sorted_by.is_empty() {
            return Ok(Self::unsorted());
        }
        let columns: Vec<usize> = sorted_by.iter().map(|&(index, _)| index).collect();
        let fields: Vec<RowSortField> = sorted_by
            .iter()
            .map(|&(index, options)| {
                RowSortField::new_with_options(
                    file_schema.field(index).data_type().clone(),
                    options,
                )
            })
            .collect();
        Ok(Self {
            order_id: order.order_id as i32,
            columns,
            converter: Some(RowConverter::new(fields)?),
            last: None,
            sorted: true,
        })
    }

    fn unsorted() -> Self {
        Self {
            order_id: 0,
            columns: Vec::new(),
            converter: None,
            last: None,
            sorted: false,
        }
    }

    fn observe(&mut self, batch: &RecordBatch) -> Result<()> {
        let Some(converter) = self.converter.as_ref().filter(|_| self.sorted) else {
            return Ok(());
        };
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let columns: Vec<_> = self
            .columns
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        let rows = converter.convert_columns(&columns)?;
        let in_order = self
            .last
            .as_ref()
            .is_none_or(|last| last.row() <= rows.row(0))
            && (1..rows.num_rows()).all(|i| rows.row(i - 1) <= rows.row(i));
        if in_order {
            self.last = Some(rows.row(rows.num_rows() - 1).owned());
        } else {
            self.sorted = false;
            self.last = None;
        }
        Ok(())
    }

    /// `files` with the order's id when every row came in order.
    fn stamp(&self, table: &Table, files: Vec<DataFile>) -> Result<Vec<DataFile>> {
        if !self.sorted {
            return Ok(files);
        }
        let spec_id = table.metadata().default_partition_spec_id();
        files
            .into_iter()
            .map(|file| with_sort_order(file, self.order_id, spec_id))
            .collect()
    }
}

/// A written data file, the same but for its sort order id. iceberg's writers leave the id
/// unset, and a data file's fields are only reachable through its builder.
/// Floe writes with the table's default partition spec, whose id an append requires.
fn with_sort_order(file: DataFile, order_id: i32, spec_id: i32) -> Result<DataFile> {
    DataFileBuilder::default()
        .content(file.content_type())
        .file_path(file.file_path().to_string())
        .file_format(file.file_format())
        .partition(file.partition().clone())
        .record_count(file.record_count())
        .file_size_in_bytes(file.file_size_in_bytes())
        .column_sizes(file.column_sizes().clone())
        .value_counts(file.value_counts().clone())
        .null_value_counts(file.null_value_counts().clone())
        .nan_value_counts(file.nan_value_counts().clone())
        .lower_bounds(file.lower_bounds().clone())
        .upper_bounds(file.upper_bounds().clone())
        .key_metadata(file.key_metadata().map(<[u8]>::to_vec))
        .split_offsets(file.split_offsets().map(<[i64]>::to_vec))
        .equality_ids(file.equality_ids())
        .sort_order_id(order_id)
        .first_row_id(file.first_row_id())
        .partition_spec_id(spec_id)
        .referenced_data_file(file.referenced_data_file())
        .content_offset(file.content_offset())
        .content_size_in_bytes(file.content_size_in_bytes())
        .build()
        .map_err(|e| DataFusionError::Internal(format!("rebuilding a written data file: {e}")))
}

/// The Arrow schema `table`'s data files are written in, and the splitter of rows by its
/// default partition spec (`None` when the table is unpartitioned).
fn write_layout(table: &Table) -> Result<(SchemaRef, Option<RecordBatchPartitionSplitter>)> {
    let metadata = table.metadata();
    let iceberg_schema = metadata.current_schema().clone();
    let file_schema =
        Arc::new(iceberg::arrow::schema_to_arrow_schema(&iceberg_schema).map_err(iceberg_error)?);
    let spec = metadata.default_partition_spec().clone();
    let splitter = if spec.is_unpartitioned() {
        None
    } else {
        Some(
            RecordBatchPartitionSplitter::try_new_with_computed_values(iceberg_schema, spec)
                .map_err(iceberg_error)?,
        )
    };
    Ok((file_schema, splitter))
}

/// Builds Parquet data file writers for `table`, rolling over at `target_file_size`.
fn data_file_writers(
    table: &Table,
    target_file_size: Option<usize>,
) -> Result<
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>,
> {
    let metadata = table.metadata();
    Ok(DataFileWriterBuilder::new(RollingFileWriterBuilder::new(
        ParquetWriterBuilder::new(
            writer_properties(metadata),
            metadata.current_schema().clone(),
        ),
        target_file_size.unwrap_or(
            iceberg::spec::TableProperties::PROPERTY_WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
        ),
        table.file_io().clone(),
        DefaultLocationGenerator::new(metadata).map_err(iceberg_error)?,
        DefaultFileNameGenerator::new(
            format!("floe-{}", uuid::Uuid::now_v7()),
            None,
            DataFileFormat::Parquet,
        ),
    )))
}

/// Writes one batch as Parquet data files of `table`, one table partition after another:
/// each partition's writer is closed before the next opens, so memory holds one open file
/// however many partitions the batch touches (a stream pipeline's commit). Nothing is
/// committed.
pub async fn write_batch_files(table: &Table, batch: &RecordBatch) -> Result<Vec<DataFile>> {
    let (file_schema, splitter) = write_layout(table)?;
    let writer_builder = data_file_writers(table, None)?;
    let batch = crate::cast_batch(batch, &file_schema)?;
    let mut order = OrderCheck::new(table, &file_schema)?;
    order.observe(&batch)?;
    let parts = match splitter {
        None => vec![(None, batch)],
        Some(splitter) => splitter
            .split(&batch)
            .map_err(iceberg_error)?
            .into_iter()
            .map(|(key, part)| (Some(key), part))
            .collect(),
    };
    let mut files = Vec::new();
    for (key, part) in parts {
        let mut writer = writer_builder.build(key).await.map_err(iceberg_error)?;
        writer.write(part).await.map_err(iceberg_error)?;
        files.extend(writer.close().await.map_err(iceberg_error)?);
    }
    order.stamp(table, files)
}

/// Parquet writer settings: the table's `write.parquet.compression-codec` (`zstd`, `snappy`,
/// `gzip`, `lz4`, `uncompressed`) and `write.parquet.compression-level`; uncompressed when
/// unset.
pub fn writer_properties(metadata: &iceberg::spec::TableMetadata) -> WriterProperties {
    use parquet::basic::{Compression, GzipLevel, ZstdLevel};
    let properties = metadata.properties();
    let level = properties
        .get("write.parquet.compression-level")
        .and_then(|l| l.parse::<i32>().ok());
    let codec = properties
        .get("write.parquet.compression-codec")
        .map(|c| c.to_ascii_lowercase());
    let compression = match codec.as_deref() {
        Some("zstd") => Compression::ZSTD(
            level
                .and_then(|l| ZstdLevel::try_new(l).ok())
                .unwrap_or_default(),
        ),
        Some("snappy") => Compression::SNAPPY,
        Some("gzip") => Compression::GZIP(
            level
                .and_then(|l| GzipLevel::try_new(l as u32).ok())
                .unwrap_or_default(),
        ),
        Some("lz4") => Compression::LZ4_RAW,
        _ => Compression::UNCOMPRESSED,
    };
    WriterProperties::builder()
        .set_compression(compression)
        .build()
}

/// Commits an iceberg transaction (built on a table loaded through `access`) through Floe's
/// catalog as `access`'s caller; the table as the commit left it.
pub async fn commit_transaction(access: &TableAccess, transaction: Transaction) -> Result<Table> {
    commit_with(access, None, transaction).await
}

/// Commits `transaction` on exactly the table state `base` it was built from. iceberg's own
/// commit reloads the table first and re-applies the transaction to whatever is current then;
/// here a table changed meanwhile fails the commit with a conflict instead (the commit
/// requires `main` where `base` had it), so a caller whose snapshot properties depend on that
/// state — a pipeline's offsets, merged from the current snapshot — reloads and rebuilds them.
pub async fn commit_transaction_on(
    access: &TableAccess,
    base: &Table,
    transaction: Transaction,
) -> Result<Table> {
    commit_with(access, Some(base.clone()), transaction).await
}

async fn commit_with(
    access: &TableAccess,
    pinned: Option<Table>,
    transaction: Transaction,
) -> Result<Table> {
    let catalog = FloeCatalog {
        access: access.clone(),
        pinned,
    };
    transaction.commit(&catalog).await.map_err(iceberg_error)
}

/// The Iceberg type of a column added from ingested values (JSON, Arrow, registry schemas):
/// primitives, and structs, lists and maps of them whose nested fields take ids after
/// `last_id` (which is moved past them); a 400 naming the field when its type cannot be
/// added automatically.
pub fn added_type(field: &Field, last_id: &mut i32) -> floe_catalog::Result<iceberg::spec::Type> {
    added(field.name(), field.data_type(), last_id)
}

fn added(
    name: &str,
    data_type: &DataType,
    last_id: &mut i32,
) -> floe_catalog::Result<iceberg::spec::Type> {
    use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, StructType, Type};
    fn next(last_id: &mut i32) -> i32 {
        *last_id += 1;
        *last_id
    }
    Ok(Type::Primitive(match data_type {
        DataType::Boolean => PrimitiveType::Boolean,
        DataType::Int8 | DataType::Int16 | DataType::Int32 => PrimitiveType::Int,
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => PrimitiveType::Long,
        DataType::Float32 => PrimitiveType::Float,
        DataType::Float64 => PrimitiveType::Double,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => PrimitiveType::String,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => PrimitiveType::Binary,
        DataType::Date32 => PrimitiveType::Date,
        DataType::Time64(TimeUnit::Microsecond) => PrimitiveType::Time,
        DataType::Timestamp(TimeUnit::Microsecond, None) => PrimitiveType::Timestamp,
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => PrimitiveType::Timestamptz,
        DataType::Decimal128(precision, scale) if *scale >= 0 => PrimitiveType::Decimal {
            precision: u32::from(*precision),
            scale: *scale as u32,
        },
        // A field first seen only as null: a string column takes whatever comes later best.
        DataType::Null => PrimitiveType::String,
        DataType::Struct(fields) if !fields.is_empty() => {
            let mut children = Vec::with_capacity(fields.len());
            for child in fields {
                let id = next(last_id);
                let child_type = added(child.name(), child.data_type(), last_id)?;
                children.push(Arc::new(NestedField::optional(
                    id,
                    child.name(),
                    child_type,
                )));
            }
            return Ok(Type::Struct(StructType::new(children)));
        }
        DataType::List(element) | DataType::LargeList(element) => {
            let id = next(last_id);
            let element_type = added(name, element.data_type(), last_id)?;
            return Ok(Type::List(ListType::new(Arc::new(
                NestedField::list_element(id, element_type, false),
            ))));
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(pair) = entries.data_type() else {
                return Err(not_addable(name, data_type));
            };
            let [key, value] = pair.iter().collect::<Vec<_>>()[..] else {
                return Err(not_addable(name, data_type));
            };
            let key_id = next(last_id);
            let value_id = next(last_id);
            let key_type = added(name, key.data_type(), last_id)?;
            let value_type = added(name, value.data_type(), last_id)?;
            return Ok(Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(key_id, key_type)),
                Arc::new(NestedField::map_value_element(value_id, value_type, false)),
            )));
        }
        other => return Err(not_addable(name, other)),
    }))
}

fn not_addable(name: &str, data_type: &DataType) -> floe_catalog::CatalogError {
    floe_catalog::CatalogError::bad_request(format!(
        "field {name:?} is not a column of the table and a {data_type} column cannot be added \
         automatically; add it with a schema update first"
    ))
}

/// `current` evolved to hold values of `seen`, when that changes it: struct fields the
/// values bring are added (optional, ids after `last_id`), list elements and map values are
/// evolved the same way, primitives widened ([`widened_type`]). Fields that cannot be added
/// are left out.
pub fn merged_type(
    current: &iceberg::spec::Type,
    seen: &DataType,
    last_id: &mut i32,
) -> Option<iceberg::spec::Type> {
    use iceberg::spec::{ListType, MapType, NestedField, StructType, Type};
    let evolve = |field: &NestedField, seen: &DataType, last_id: &mut i32| {
        merged_type(&field.field_type, seen, last_id).map(|evolved| {
            let mut field = field.clone();
            field.field_type = Box::new(evolved);
            Arc::new(field)
        })
    };
    match (current, seen) {
        (Type::Struct(current), DataType::Struct(fields)) => {
            let mut children = current.fields().to_vec();
            let mut changed = false;
            for field in fields {
                match children.iter().position(|c| c.name == *field.name()) {
                    Some(i) => {
                        if let Some(evolved) = evolve(&children[i], field.data_type(), last_id) {
                            children[i] = evolved;
                            changed = true;
                        }
                    }
                    None => {
                        let id = *last_id + 1;
                        let mut scratch = id;
                        if let Ok(child) = added(field.name(), field.data_type(), &mut scratch) {
                            *last_id = scratch;
                            children.push(Arc::new(NestedField::optional(id, field.name(), child)));
                            changed = true;
                        }
                    }
                }
            }
            changed.then(|| Type::Struct(StructType::new(children)))
        }
        (Type::List(current), DataType::List(element) | DataType::LargeList(element)) => {
            evolve(&current.element_field, element.data_type(), last_id)
                .map(|element| Type::List(ListType::new(element)))
        }
        (Type::Map(current), DataType::Map(entries, _)) => {
            let DataType::Struct(pair) = entries.data_type() else {
                return None;
            };
            let value = pair.get(1)?;
            evolve(&current.value_field, value.data_type(), last_id)
                .map(|value| Type::Map(MapType::new(current.key_field.clone(), value)))
        }
        (current, seen) => widened_type(current, seen),
    }
}

/// The wider Iceberg type a column of type `current` takes for values of `seen`, when
/// Iceberg allows the promotion: int to long, float to double, a decimal's precision up at
/// the same scale.
pub fn widened_type(current: &iceberg::spec::Type, seen: &DataType) -> Option<iceberg::spec::Type> {
    use iceberg::spec::{PrimitiveType, Type};
    let wider = match (current, seen) {
        (Type::Primitive(PrimitiveType::Int), DataType::Int64) => PrimitiveType::Long,
        (Type::Primitive(PrimitiveType::Float), DataType::Float64) => PrimitiveType::Double,
        (
            Type::Primitive(PrimitiveType::Decimal { precision, scale }),
            DataType::Decimal128(p, s),
        ) if i64::from(*s) == i64::from(*scale) && u32::from(*p) > *precision => {
            PrimitiveType::Decimal {
                precision: u32::from(*p),
                scale: *scale,
            }
        }
        _ => return None,
    };
    Some(Type::Primitive(wider))
}

/// Adds the `additions` the table still lacks as optional columns and evolves the top-level
/// columns named in `evolved` to hold their values there ([`merged_type`]: nested fields
/// added, types widened; others are left as they are) — one schema change, one catalog
/// commit as `caller` (so the caller's privileges apply); returns the table as it then is.
/// A concurrent schema change is met by reading the table again and evolving what still
/// needs it.
pub async fn evolve_columns(
    service: &floe_catalog::service::CatalogService,
    caller: &floe_catalog::governance::authz::Caller,
    warehouse: &str,
    ident: &TableIdent,
    additions: &[Field],
    evolved: &[Field],
) -> floe_catalog::Result<floe_catalog::service::LoadedTable> {
    use iceberg::spec::NestedField;
    use iceberg::{TableRequirement, TableUpdate};
    let mut attempts = 0;
    loop {
        attempts += 1;
        let loaded = service.load_table(caller, warehouse, ident).await?;
        let metadata = &loaded.metadata;
        let current = metadata.current_schema();
        let missing: Vec<&Field> = additions
            .iter()
            .filter(|f| current.field_by_name(f.name()).is_none())
            .collect();
        let mut fields: Vec<_> = current.as_struct().fields().to_vec();
        let mut next_id = metadata.last_column_id();
        let mut promoted = Vec::new();
        for field in evolved {
            let Some(position) = fields.iter().position(|f| f.name == *field.name()) else {
                continue;
            };
            if let Some(merged) = merged_type(
                &fields[position].field_type,
                field.data_type(),
                &mut next_id,
            ) {
                let mut column = fields[position].as_ref().clone();
                column.field_type = Box::new(merged);
                fields[position] = Arc::new(column);
                promoted.push(field.name().clone());
            }
        }
        if missing.is_empty() && promoted.is_empty() {
            return Ok(loaded);
        }
        for field in &missing {
            next_id += 1;
            let id = next_id;
            let column_type = added_type(field, &mut next_id)?;
            fields.push(Arc::new(NestedField::optional(
                id,
                field.name(),
                column_type,
            )));
        }
        let schema = iceberg::spec::Schema::builder()
            .with_schema_id(current.schema_id() + 1)
            .with_identifier_field_ids(current.identifier_field_ids())
            .with_fields(fields)
            .build()
            .map_err(|e| floe_catalog::CatalogError::bad_request(format!("evolved schema: {e}")))?;
        let request = TableCommitRequest {
            ident: ident.clone(),
            requirements: vec![
                TableRequirement::CurrentSchemaIdMatch {
                    current_schema_id: current.schema_id(),
                },
                TableRequirement::LastAssignedFieldIdMatch {
                    last_assigned_field_id: metadata.last_column_id(),
                },
            ],
            updates: vec![
                TableUpdate::AddSchema { schema },
                TableUpdate::SetCurrentSchema { schema_id: -1 },
            ],
        };
        match service.commit_table(caller, warehouse, request).await {
            Ok(committed) => {
                tracing::info!(table = %ident, added = ?missing.iter().map(|f| f.name()).collect::<Vec<_>>(), ?promoted, "evolve columns");
                return Ok(committed);
            }
            Err(floe_catalog::CatalogError::CommitFailed(_)) if attempts < 5 => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Just enough of iceberg's `Catalog` for iceberg's transactions to commit through Floe.
#[derive(Debug)]
struct FloeCatalog {
    access: TableAccess,
    /// The table state commits apply to, instead of the current one.
    pinned: Option<Table>,
}

fn unsupported<T>() -> iceberg::Result<T> {
    Err(iceberg::Error::new(
        iceberg::ErrorKind::FeatureUnsupported,
        "not used by Floe's SQL writes",
    ))
}

fn to_iceberg(e: floe_catalog::CatalogError) -> iceberg::Error {
    let kind = match &e {
        floe_catalog::CatalogError::CommitFailed(_) => iceberg::ErrorKind::CatalogCommitConflicts,
        _ => iceberg::ErrorKind::Unexpected,
    };
    iceberg::Error::new(kind, e.to_string()).with_source(e)
}

#[async_trait]
impl Catalog for FloeCatalog {
    async fn list_namespaces(
        &self,
        _parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        unsupported()
    }
    async fn create_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        unsupported()
    }
    async fn get_namespace(&self, _namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        unsupported()
    }
    async fn namespace_exists(&self, _namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        unsupported()
    }
    async fn update_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        unsupported()
    }
    async fn drop_namespace(&self, _namespace: &NamespaceIdent) -> iceberg::Result<()> {
        unsupported()
    }
    async fn list_tables(&self, _namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        unsupported()
    }
    async fn create_table(
        &self,
        _namespace: &NamespaceIdent,
        _creation: TableCreation,
    ) -> iceberg::Result<Table> {
        unsupported()
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        if let Some(pinned) = &self.pinned {
            return Ok(pinned.clone());
        }
        let loaded = self
            .access
            .service
            .load_table(&self.access.caller, &self.access.warehouse, table)
            .await
            .map_err(to_iceberg)?;
        table_of(&self.access, loaded)
    }
    async fn drop_table(&self, _table: &TableIdent) -> iceberg::Result<()> {
        unsupported()
    }
    async fn purge_table(&self, _table: &TableIdent) -> iceberg::Result<()> {
        unsupported()
    }
    async fn table_exists(&self, _table: &TableIdent) -> iceberg::Result<bool> {
        unsupported()
    }
    async fn rename_table(&self, _src: &TableIdent, _dest: &TableIdent) -> iceberg::Result<()> {
        unsupported()
    }
    async fn register_table(
        &self,
        _table: &TableIdent,
        _metadata_location: String,
    ) -> iceberg::Result<Table> {
        unsupported()
    }
    async fn update_table(&self, mut commit: TableCommit) -> iceberg::Result<Table> {
        let request = TableCommitRequest {
            ident: commit.identifier().clone(),
            requirements: commit.take_requirements(),
            updates: commit.take_updates(),
        };
        let loaded = self
            .access
            .service
            .commit_table(&self.access.caller, &self.access.warehouse, request)
            .await
            .map_err(to_iceberg)?;
        table_of(&self.access, loaded)
    }
}

/// A loaded table as iceberg's `Table`.
pub fn table_of(
    access: &TableAccess,
    loaded: floe_catalog::service::LoadedTable,
) -> iceberg::Result<Table> {
    // The table's reads and writes reach only its location.
    let files = access
        .storage
        .for_table(loaded.metadata.location())
        .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e.to_string()))?;
    let mut builder = Table::builder()
        .metadata(loaded.metadata.clone())
        .identifier(loaded.ident.clone())
        .file_io(files.file_io())
        .runtime(iceberg::Runtime::current());
    if let Some(location) = loaded.metadata_location {
        builder = builder.metadata_location(location);
    }
    builder.build()
}

/// Partition fields of `PARTITIONED BY`: a source column and its transform each.
pub type PartitionFields = Vec<(String, Transform)>;

/// `CREATE TABLE … PARTITIONED BY (day(ts), bucket(16, id), region)` is not SQL DataFusion
/// parses: the clause is taken out of the statement text and returned as a partition spec
/// for the columns it names.
pub fn take_partitioned_by(sql: &str) -> Result<(String, Option<PartitionFields>)> {
    let upper = sql.to_ascii_uppercase();
    let Some(start) = find_outside_quotes(&upper, "PARTITIONED BY") else {
        return Ok((sql.to_string(), None));
    };
    let open = sql[start..].find('(').map(|i| start + i).ok_or_else(|| {
        DataFusionError::Plan("PARTITIONED BY needs a list in parentheses".into())
    })?;
    let mut depth = 0;
    let mut close = None;
    for (i, c) in sql[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(open + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let close =
        close.ok_or_else(|| DataFusionError::Plan("PARTITIONED BY list is not closed".into()))?;
    let mut fields = Vec::new();
    for item in split_top_level(&sql[open + 1..close]) {
        fields.push(partition_field(item.trim())?);
    }
    let rest = format!("{} {}", &sql[..start], &sql[close + 1..]);
    Ok((rest, Some(fields)))
}

fn find_outside_quotes(upper: &str, needle: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in upper.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if upper[i..].starts_with(needle) => return Some(i),
            None => {}
        }
    }
    None
}

fn split_top_level(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// One partition field as written in `PARTITIONED BY` (`day(ts)`, `bucket(16, id)`, `region`).
pub fn partition_field(item: &str) -> Result<(String, Transform)> {
    let bad = || {
        DataFusionError::Plan(format!(
            "partition field {item:?}: use a column, identity(c), year(c), month(c), day(c), hour(c), bucket(N, c) or truncate(N, c)"
        ))
    };
    let Some((name, args)) = item.split_once('(') else {
        return Ok((unquote(item), Transform::Identity));
    };
    let args: Vec<&str> = args
        .strip_suffix(')')
        .ok_or_else(bad)?
        .split(',')
        .map(str::trim)
        .collect();
    let number = |s: &str| s.parse::<u32>().map_err(|_| bad());
    Ok(
        match (name.trim().to_ascii_lowercase().as_str(), args.as_slice()) {
            ("identity", [c]) => (unquote(c), Transform::Identity),
            ("year" | "years", [c]) => (unquote(c), Transform::Year),
            ("month" | "months", [c]) => (unquote(c), Transform::Month),
            ("day" | "days", [c]) => (unquote(c), Transform::Day),
            ("hour" | "hours", [c]) => (unquote(c), Transform::Hour),
            ("bucket", [n, c]) => (unquote(c), Transform::Bucket(number(n)?)),
            ("truncate", [n, c]) => (unquote(c), Transform::Truncate(number(n)?)),
            _ => return Err(bad()),
        },
    )
}

fn unquote(s: &str) -> String {
    s.trim().trim_matches('"').to_string()
}

/// The Iceberg schema of a new table from the Arrow schema SQL gave it (ids assigned in
/// order; strings and binaries as Iceberg's `string` and `binary`).
pub fn iceberg_schema(schema: &Schema) -> Result<iceberg::spec::Schema> {
    let plain: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let data_type = match f.data_type() {
                DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
                DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
                // Iceberg v2 keeps times to the microsecond and has no unsigned or small ints.
                DataType::Timestamp(_, tz) => {
                    DataType::Timestamp(TimeUnit::Microsecond, tz.clone())
                }
                DataType::Time32(_) | DataType::Time64(_) => {
                    DataType::Time64(TimeUnit::Microsecond)
                }
                DataType::Date64 => DataType::Date32,
                DataType::Int8 | DataType::Int16 | DataType::UInt8 | DataType::UInt16 => {
                    DataType::Int32
                }
                DataType::UInt32 => DataType::Int64,
                DataType::UInt64 => DataType::Decimal128(20, 0),
                DataType::Float16 => DataType::Float32,
                other => other.clone(),
            };
            Field::new(f.name(), data_type, true)
        })
        .collect();
    iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(&Schema::new(plain))
        .map_err(iceberg_error)
}

/// The partition spec for `fields` over `schema`.
pub fn partition_spec(
    schema: &iceberg::spec::Schema,
    fields: &[(String, Transform)],
) -> Result<UnboundPartitionSpec> {
    let mut builder = UnboundPartitionSpec::builder();
    for (column, transform) in fields {
        let source = schema.field_by_name(column).ok_or_else(|| {
            DataFusionError::Plan(format!(
                "PARTITIONED BY names {column:?}, which is not a column"
            ))
        })?;
        let name = match transform {
            Transform::Identity => column.clone(),
            Transform::Bucket(n) => format!("{column}_bucket_{n}"),
            Transform::Truncate(n) => format!("{column}_trunc_{n}"),
            other => format!("{column}_{}", other.to_string().to_ascii_lowercase()),
        };
        builder = builder
            .add_partition_field(source.id, name, *transform)
            .map_err(iceberg_error)?;
    }
    Ok(builder.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitioned_by_is_taken_out_of_the_statement() {
        let (rest, spec) = take_partitioned_by(
            "CREATE TABLE s.t (id BIGINT, ts TIMESTAMP, r VARCHAR) PARTITIONED BY (day(ts), bucket(16, id), r) AS SELECT 1",
        )
        .unwrap();
        assert_eq!(
            rest.split_whitespace().collect::<Vec<_>>().join(" "),
            "CREATE TABLE s.t (id BIGINT, ts TIMESTAMP, r VARCHAR) AS SELECT 1"
        );
        assert_eq!(
            spec.unwrap(),
            vec![
                ("ts".to_string(), Transform::Day),
                ("id".to_string(), Transform::Bucket(16)),
                ("r".to_string(), Transform::Identity)
            ]
        );
        let (same, none) = take_partitioned_by("SELECT 'PARTITIONED BY (x)'").unwrap();
        assert_eq!(same, "SELECT 'PARTITIONED BY (x)'");
        assert!(none.is_none());
        assert!(take_partitioned_by("CREATE TABLE t (a INT) PARTITIONED BY (frob(a))").is_err());
    }
}
