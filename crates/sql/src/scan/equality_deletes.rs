//! Equality deletes, applied to the rows of DataFusion's native Parquet scan.
//!
//! An equality delete file (as Flink and Iceberg's Java writers write them) lists values of
//! some columns, named by field id; a data file row whose values in those columns equal any
//! listed row's (a null equals a null) is deleted. iceberg's planning already attaches to each
//! data file exactly the equality delete files that apply to it (by sequence number and
//! partition). Floe reads those files once per scan into sets of keys in Arrow's row format;
//! the data files are read by the same native scan as every other file — their position
//! deletes and deletion vectors still become row selections there — with the equality columns
//! added to the projection, and [`EqualityDeleteExec`] drops the rows whose keys are in a set.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;
use iceberg::scan::FileScanTaskDeleteFile;
use parquet::arrow::async_reader::ParquetObjectReader;
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};

use crate::scan::field_ids::{FieldIds, field_id};
use crate::scan::provider::TableFiles;

/// The deleted keys of equality delete files that share one list of equality columns.
pub struct KeySet {
    /// Positions of the equality columns in the scanned batches, in the delete files' order.
    columns: Vec<usize>,
    converter: RowConverter,
    keys: HashSet<Box<[u8]>>,
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySet")
            .field("columns", &self.columns)
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl KeySet {
    /// The set of `keys` (Arrow rows) over `columns` of rows of `schema`, as it travelled.
    pub(crate) fn from_parts(
        columns: Vec<usize>,
        schema: &SchemaRef,
        keys: Vec<Vec<u8>>,
    ) -> Result<Self> {
        let fields: Vec<SortField> = columns
            .iter()
            .map(|&c| SortField::new(schema.field(c).data_type().clone()))
            .collect();
        Ok(Self {
            columns,
            converter: RowConverter::new(fields)?,
            keys: keys.into_iter().map(Vec::into_boxed_slice).collect(),
        })
    }

    /// Positions of the equality columns in the scanned batches.
    pub(crate) fn columns(&self) -> &[usize] {
        &self.columns
    }

    /// The deleted keys, in Arrow's row format.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.keys.iter().map(|k| k.as_ref())
    }

    /// Clears the `keep` flags of the rows of `batch` whose keys were deleted.
    fn mark(&self, batch: &RecordBatch, keep: &mut [bool]) -> Result<()> {
        let columns: Vec<ArrayRef> = self
            .columns
            .iter()
            .map(|&c| batch.column(c).clone())
            .collect();
        let rows = self.converter.convert_columns(&columns)?;
        for (flag, row) in keep.iter_mut().zip(rows.iter()) {
            if *flag && self.keys.contains(row.as_ref()) {
                *flag = false;
            }
        }
        Ok(())
    }
}

/// The field ids an equality delete file deletes by.
pub fn equality_ids(file: &FileScanTaskDeleteFile) -> Result<&[i32]> {
    match file.equality_ids.as_deref() {
        Some(ids) if !ids.is_empty() => Ok(ids),
        _ => Err(DataFusionError::Execution(format!(
            "equality delete file {} names no equality columns",
            file.file_path
        ))),
    }
}

/// The position in `schema` of the column with field id `id` (of the table's `ids`), which the
/// equality delete file `file` deletes by.
pub fn column_of(
    schema: &SchemaRef,
    ids: &FieldIds,
    file: &FileScanTaskDeleteFile,
    id: i32,
) -> Result<usize> {
    ids.position_in(schema, id).ok_or_else(|| {
        DataFusionError::Execution(format!(
            "equality delete file {} deletes by field id {id}, which is not a column of the \
                 table's schema",
            file.file_path
        ))
    })
}

/// The keys of the equality delete files one scan has read, in Arrow's row format, by file:
/// a file that applies to several groups of data files (those of different sequence numbers
/// in one partition, say) is read once.
#[derive(Default)]
pub struct ReadKeys(HashMap<String, Arc<Vec<Box<[u8]>>>>);

/// Reads `files` (equality delete files) into key sets over the columns of `scanned`, the
/// schema of the batches they will be checked against (it must hold every equality column);
/// files in `read` are not read again.
pub(crate) async fn load(
    table: &TableFiles,
    files: &[FileScanTaskDeleteFile],
    scanned: &SchemaRef,
    ids: &FieldIds,
    read: &mut ReadKeys,
) -> Result<Vec<KeySet>> {
    let mut by_columns: BTreeMap<Vec<i32>, Vec<&FileScanTaskDeleteFile>> = BTreeMap::new();
    for file in files {
        by_columns
            .entry(equality_ids(file)?.to_vec())
            .or_default()
            .push(file);
    }
    let mut sets = Vec::with_capacity(by_columns.len());
    for (equality, files) in by_columns {
        let columns = equality
            .iter()
            .map(|&id| column_of(scanned, ids, files[0], id))
            .collect::<Result<Vec<_>>>()?;
        let fields: Vec<SortField> = columns
            .iter()
            .map(|&c| SortField::new(scanned.field(c).data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)?;
        let mut keys = HashSet::new();
        for file in files {
            let rows = match read.0.get(&file.file_path) {
                Some(rows) => rows.clone(),
                None => {
                    let rows =
                        read_keys(table, file, &equality, scanned, &columns, &converter).await?;
                    let rows = Arc::new(rows);
                    read.0.insert(file.file_path.clone(), rows.clone());
                    rows
                }
            };
            keys.extend(rows.iter().cloned());
        }
        sets.push(KeySet {
            columns,
            converter,
            keys,
        });
    }
    Ok(sets)
}

/// The keys of one equality delete file.
async fn read_keys(
    table: &TableFiles,
    file: &FileScanTaskDeleteFile,
    ids: &[i32],
    scanned: &SchemaRef,
    columns: &[usize],
    converter: &RowConverter,
) -> Result<Vec<Box<[u8]>>> {
    let mut keys = Vec::new();
    crate::scan::position_deletes::count_delete_file_read();
    let location = &file.file_path;
    let reader = crate::scan::bounded_footer::Bounded::new(
        ParquetObjectReader::new(table.store.clone(), table.path(location)?.into())
            .with_file_size(file.file_size_in_bytes),
        location.to_string(),
        file.file_size_in_bytes,
    );
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let file_schema = builder.schema().clone();
    let mut roots = Vec::with_capacity(ids.len());
    for &id in ids {
        let found = file_schema
            .fields()
            .iter()
            .position(|f| field_id(f) == Some(id))
            .ok_or_else(|| {
                DataFusionError::Execution(format!(
                    "equality delete file {location} has no column with field id {id}"
                ))
            })?;
        roots.push(found);
    }
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let mut stream = builder.with_projection(mask).build()?;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let key_columns = ids
            .iter()
            .zip(columns)
            .map(|(&id, &c)| {
                let at = batch
                    .schema()
                    .fields()
                    .iter()
                    .position(|f| field_id(f) == Some(id))
                    .expect("projected column");
                let target = scanned.field(c).data_type();
                cast(batch.column(at), target).map_err(|e| {
                    DataFusionError::Execution(format!(
                        "equality delete file {location}: column with field id {id} does not \
                         read as the table's {target}: {e}"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let rows = converter.convert_columns(&key_columns)?;
        keys.extend(rows.iter().map(|row| Box::<[u8]>::from(row.as_ref())));
    }
    Ok(keys)
}

/// Drops the rows of its input whose equality-column values were deleted.
#[derive(Debug)]
pub struct EqualityDeleteExec {
    input: Arc<dyn ExecutionPlan>,
    sets: Arc<Vec<KeySet>>,
}

impl EqualityDeleteExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, sets: Vec<KeySet>) -> Self {
        Self {
            input,
            sets: Arc::new(sets),
        }
    }
}

impl EqualityDeleteExec {
    /// The key sets rows are checked against.
    pub(crate) fn sets(&self) -> &[KeySet] {
        &self.sets
    }
}

impl DisplayAs for EqualityDeleteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: usize = self.sets.iter().map(|s| s.keys.len()).sum();
        write!(
            f,
            "IcebergEqualityDeleteExec: key_sets={}, deleted_keys={keys}",
            self.sets.len()
        )
    }
}

impl ExecutionPlan for EqualityDeleteExec {
    fn name(&self) -> &str {
        "IcebergEqualityDeleteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        // Rows are only dropped: partitioning, order and equivalences stay the input's.
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children.pop().ok_or_else(|| {
            DataFusionError::Internal("IcebergEqualityDeleteExec takes one child".into())
        })?;
        Ok(Arc::new(Self {
            input,
            sets: self.sets.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let sets = self.sets.clone();
        let schema = input.schema();
        let kept = input.map(move |batch| {
            let batch = batch?;
            let mut keep = vec![true; batch.num_rows()];
            for set in sets.iter() {
                set.mark(&batch, &mut keep)?;
            }
            if keep.iter().all(|&k| k) {
                return Ok(batch);
            }
            Ok(filter_record_batch(&batch, &BooleanArray::from(keep))?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, kept)))
    }
}
