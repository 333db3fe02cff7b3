//! Position delete files (format v2): a Parquet file of `file_path` and `pos` that removes
//! rows of data files of one partition, as Spark, PyIceberg, DuckDB, Trino and Flink read
//! them — sorted by path and position, with the paths' bounds, and `referenced_data_file`
//! set when it names one data file, so a reader applies it to that file only.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DataFusionError, Result};
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, FormatVersion, Struct,
};
use iceberg::table::Table;
use iceberg::writer::file_writer::location_generator::{
    DefaultLocationGenerator, LocationGenerator,
};
use parquet::arrow::ArrowWriter;

use crate::scan::provider::iceberg_error;

/// Field ids the spec reserves for a position delete file's columns.
const FILE_PATH_ID: i32 = 2147483546;
const POS_ID: i32 = 2147483545;

/// Writes a position delete file removing, of each data file in `rows` (sorted by path, each
/// with its positions ascending), those positions; the data files share partition spec
/// `spec_id` and tuple `partition`. A file naming one data file says so
/// (`referenced_data_file`); one naming several is scoped to their partition, with the
/// bounds of its paths. Nothing is committed.
pub async fn write_position_deletes(
    table: &Table,
    spec_id: i32,
    partition: &Struct,
    rows: &[(&str, &[u64])],
) -> Result<DataFile> {
    let metadata = table.metadata();
    if metadata.format_version() == FormatVersion::V3 {
        return Err(DataFusionError::Plan(
            "deletes in a format v3 table must be deletion vectors, not position delete files"
                .into(),
        ));
    }
    let count: usize = rows.iter().map(|(_, p)| p.len()).sum();
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Err(DataFusionError::Internal(
            "a position delete file needs a position".into(),
        ));
    };
    let positions = || rows.iter().flat_map(|(_, p)| p.iter().map(|&p| p as i64));
    let (Some(lowest), Some(highest)) = (positions().min(), positions().max()) else {
        return Err(DataFusionError::Internal(
            "a position delete file needs a position".into(),
        ));
    };
    let field = |name: &str, data_type: DataType, id: i32| {
        Field::new(name, data_type, false).with_metadata(HashMap::from([(
            crate::scan::field_ids::FIELD_ID_KEY.to_string(),
            id.to_string(),
        )]))
    };
    let schema = Arc::new(Schema::new(vec![
        field("file_path", DataType::Utf8, FILE_PATH_ID),
        field("pos", DataType::Int64, POS_ID),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(
                rows.iter()
                    .flat_map(|(path, p)| std::iter::repeat_n(*path, p.len()))
                    .collect::<Vec<&str>>(),
            )),
            Arc::new(Int64Array::from(positions().collect::<Vec<i64>>())),
        ],
    )?;
    let mut bytes = Vec::new();
    {
        let properties = super::writer_properties(metadata);
        let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(properties))?;
        writer.write(&batch)?;
        writer.close()?;
    }
    let size = bytes.len() as u64;
    let location = DefaultLocationGenerator::new(metadata)
        .map_err(iceberg_error)?
        .generate_location(
            None,
            &format!("floe-{}-deletes.parquet", uuid::Uuid::now_v7()),
        );
    table
        .file_io()
        .new_output(&location)
        .map_err(iceberg_error)?
        .write(bytes.into())
        .await
        .map_err(iceberg_error)?;
    DataFileBuilder::default()
        .content(DataContentType::PositionDeletes)
        .file_path(location)
        .file_format(DataFileFormat::Parquet)
        .partition(partition.clone())
        .partition_spec_id(spec_id)
        .record_count(count as u64)
        .file_size_in_bytes(size)
        .referenced_data_file((rows.len() == 1).then(|| first.0.to_string()))
        .lower_bounds(HashMap::from([
            (FILE_PATH_ID, Datum::string(first.0)),
            (POS_ID, Datum::long(lowest)),
        ]))
        .upper_bounds(HashMap::from([
            (FILE_PATH_ID, Datum::string(last.0)),
            (POS_ID, Datum::long(highest)),
        ]))
        .build()
        .map_err(|e| DataFusionError::Internal(format!("describe a position delete file: {e}")))
}
