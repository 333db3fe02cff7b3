//! `INSERT INTO` as a DataFusion sink: rows checked against the table's sort order, split by
//! its partition spec, written as Parquet data files with iceberg's writers, and committed as
//! one append snapshot.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField as RowSortField};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use floe_catalog::governance::authz::Privilege;
use futures::StreamExt;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{DataFile, DataFileBuilder, DataFileFormat};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;

use crate::token_index::IndexedWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use parquet::file::properties::WriterProperties;

use super::commit::commit_transaction;
use crate::scan::provider::{TableAccess, iceberg_error};

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
        // The files were written just now under new unique names, so none can be in the
        // table already: iceberg's duplicate check would only read every manifest of the
        // snapshot (a cost that grows with every commit).
        let transaction = transaction
            .fast_append()
            .with_check_duplicate(false)
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
/// rely on it ([`crate::scan`] declares it to DataFusion). Nothing is sorted here: rows that
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
        let ids = crate::scan::field_ids::FieldIds::of_arrow(file_schema);
        let (sorted_by, complete) = crate::scan::provider::sort_columns(order, file_schema, &ids);
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

/// Builds Parquet data file writers for `table`, rolling over at `target_file_size`, each
/// file with its token index when the table asks for one ([`crate::token_index`]).
fn data_file_writers(
    table: &Table,
    target_file_size: Option<usize>,
) -> Result<
    DataFileWriterBuilder<
        IndexedWriterBuilder<ParquetWriterBuilder>,
        DefaultLocationGenerator,
        DefaultFileNameGenerator,
    >,
> {
    let metadata = table.metadata();
    Ok(DataFileWriterBuilder::new(RollingFileWriterBuilder::new(
        IndexedWriterBuilder::new(
            ParquetWriterBuilder::new(
                writer_properties(metadata),
                metadata.current_schema().clone(),
            ),
            metadata,
            table.file_io().clone(),
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
    Ok(write_batch_parts(table, batch)
        .await?
        .into_iter()
        .flat_map(|(files, _)| files)
        .collect())
}

/// [`write_batch_files`], telling where each row went: per table partition, its files in the
/// order they were written and the partition's rows in the order written — the first file
/// holds the first `record_count` rows, the next the rows after them (what an upsert's key
/// index records as each row's position).
pub async fn write_batch_parts(
    table: &Table,
    batch: &RecordBatch,
) -> Result<Vec<(Vec<DataFile>, RecordBatch)>> {
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
    let mut written = Vec::new();
    for (key, part) in parts {
        let mut writer = writer_builder.build(key).await.map_err(iceberg_error)?;
        writer.write(part.clone()).await.map_err(iceberg_error)?;
        let files = order.stamp(table, writer.close().await.map_err(iceberg_error)?)?;
        written.push((files, part));
    }
    Ok(written)
}

/// Iceberg's default for `write.parquet.row-group-size-bytes`.
const DEFAULT_ROW_GROUP_BYTES: usize = 128 << 20;

/// Rows in a row group unless `write.parquet.row-group-limit` says otherwise: DuckDB's
/// 122,880 rather than parquet-rs's 1,048,576, so that a row group's statistics cover a
/// narrow range of a column the table's rows are in order of and scans prune by them (TPC-DS
/// at SF1, `store_sales` by date: Floe/DuckDB on Q46 1.73 → 1.26, Q55 2.79 → 1.77, Q68
/// 1.79 → 1.38; docs/benchmarks.md). A file then splits into byte ranges several partitions
/// sort; their final merge keeps to a small memory budget since the sorted batches' string
/// views are compacted before it ([`crate::optimizer::compact_views`]).
const DEFAULT_ROW_GROUP_ROWS: usize = 122_880;

/// Parquet writer settings: the table's `write.parquet.compression-codec` (`zstd`, `snappy`,
/// `gzip`, `lz4`, `uncompressed`) and `write.parquet.compression-level` (uncompressed when
/// unset), a bloom filter on each top-level column named by
/// `write.parquet.bloom-filter-enabled.column.<name>` = `true` (false-positive rate
/// `write.parquet.bloom-filter-fpp.column.<name>`, 0.01 by default), and the sizes of row
/// groups and pages: `write.parquet.row-group-size-bytes` (Iceberg's, 128 MiB by default),
/// `write.parquet.row-group-limit` (PyIceberg's, rows; 122,880 by default),
/// `write.parquet.page-size-bytes`,
/// `write.parquet.page-row-limit` and `write.parquet.dict-size-bytes`, as Iceberg's own
/// writers read them (a value that is not a positive number is ignored).
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
    let positive = |key: &str| {
        properties
            .get(key)
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|v| *v > 0)
    };
    let mut builder = WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_bytes(Some(
            positive("write.parquet.row-group-size-bytes").unwrap_or(DEFAULT_ROW_GROUP_BYTES),
        ))
        .set_max_row_group_row_count(Some(
            positive("write.parquet.row-group-limit").unwrap_or(DEFAULT_ROW_GROUP_ROWS),
        ));
    if let Some(bytes) = positive("write.parquet.page-size-bytes") {
        builder = builder.set_data_page_size_limit(bytes);
    }
    if let Some(rows) = positive("write.parquet.page-row-limit") {
        builder = builder.set_data_page_row_count_limit(rows);
    }
    if let Some(bytes) = positive("write.parquet.dict-size-bytes") {
        builder = builder.set_dictionary_page_size_limit(bytes);
    }
    const BLOOM: &str = "write.parquet.bloom-filter-enabled.column.";
    for (key, value) in properties {
        let Some(column) = key.strip_prefix(BLOOM) else {
            continue;
        };
        if !value.eq_ignore_ascii_case("true") {
            continue;
        }
        let path = parquet::schema::types::ColumnPath::from(column);
        let fpp = properties
            .get(&format!("write.parquet.bloom-filter-fpp.column.{column}"))
            .and_then(|p| p.parse::<f64>().ok())
            .filter(|p| *p > 0.0 && *p < 1.0)
            .unwrap_or(0.01);
        builder = builder
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path, fpp);
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use iceberg::spec::{
        FormatVersion, NestedField, PrimitiveType, Schema, SortOrder, TableMetadataBuilder, Type,
        UnboundPartitionSpec,
    };
    use parquet::basic::Compression;

    use super::*;

    fn metadata(properties: &[(&str, &str)]) -> iceberg::spec::TableMetadata {
        let schema = Schema::builder()
            .with_fields(vec![Arc::new(NestedField::optional(
                1,
                "x",
                Type::Primitive(PrimitiveType::Long),
            ))])
            .build()
            .unwrap();
        let properties: HashMap<String, String> = properties
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TableMetadataBuilder::new(
            schema,
            UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "memory:///t".into(),
            FormatVersion::V2,
            properties,
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    #[test]
    fn row_group_and_page_sizes_come_from_the_tables_properties() {
        let defaults = writer_properties(&metadata(&[]));
        assert_eq!(defaults.max_row_group_bytes(), Some(128 << 20));
        assert_eq!(defaults.max_row_group_row_count(), Some(122_880));
        assert_eq!(defaults.compression(&"x".into()), Compression::UNCOMPRESSED);

        let set = writer_properties(&metadata(&[
            ("write.parquet.row-group-size-bytes", "8388608"),
            ("write.parquet.row-group-limit", "100000"),
            ("write.parquet.page-size-bytes", "65536"),
            ("write.parquet.page-row-limit", "5000"),
            ("write.parquet.dict-size-bytes", "131072"),
            ("write.parquet.compression-codec", "SNAPPY"),
        ]));
        assert_eq!(set.max_row_group_bytes(), Some(8 << 20));
        assert_eq!(set.max_row_group_row_count(), Some(100_000));
        assert_eq!(set.data_page_size_limit(), 65536);
        assert_eq!(set.data_page_row_count_limit(), 5000);
        assert_eq!(set.dictionary_page_size_limit(), 131072);
        assert_eq!(set.compression(&"x".into()), Compression::SNAPPY);

        // Zero, negative or unreadable values are ignored, not a panic in the writer.
        let odd = writer_properties(&metadata(&[
            ("write.parquet.row-group-size-bytes", "0"),
            ("write.parquet.row-group-limit", "-5"),
            ("write.parquet.page-row-limit", "many"),
        ]));
        assert_eq!(odd.max_row_group_bytes(), Some(128 << 20));
        assert_eq!(odd.max_row_group_row_count(), Some(122_880));
    }
}
