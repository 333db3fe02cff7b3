use super::*;
use crate::core::dead_letter::{Door, Letter};

/// Records read and not committed yet.
#[derive(Default)]
pub(super) struct Batch {
    /// Rows as NDJSON; row `i` ends at `ends[i]` and came from `sources[i]`.
    pub(super) rows: Vec<u8>,
    pub(super) ends: Vec<usize>,
    pub(super) sources: Vec<Source>,
    /// Per row: whether it is the key of a row to delete (upsert and Debezium pipelines).
    pub(super) deletes: Vec<bool>,
    /// The rows the table took (indexes into `sources`, in order), once prepared.
    pub(super) kept: Vec<usize>,
    pub(super) records: usize,
    pub(super) rejected: u64,
    pub(super) dead: Vec<DeadLetter>,
    /// Fields the records' registry schemas give (Avro, Protobuf, JSON Schema): the table
    /// follows them instead of inferring from the rows.
    pub(super) fields: Vec<Field>,
}

/// Where a record came from.
pub(super) struct Source {
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) timestamp_ms: Option<i64>,
    pub(super) key: Option<Vec<u8>>,
    pub(super) headers: Vec<(String, Option<Vec<u8>>)>,
    /// The value as received, when the row is a conversion of it.
    pub(super) original: Option<Vec<u8>>,
}

/// A record the table could not take, kept with its source coordinates and the reason.
pub(super) struct DeadLetter {
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) timestamp_ms: Option<i64>,
    pub(super) key: Option<Vec<u8>>,
    /// The record's value; none for a tombstone, or for a gap of records the broker deleted.
    pub(super) value: Option<Vec<u8>>,
    pub(super) error: String,
}

impl DeadLetter {
    /// The record as a letter of the one dead-letter form, from `pipeline`.
    pub(super) fn letter(&self, pipeline: &str) -> Letter {
        let mut letter = Letter::new(Door::Kafka, &self.error, self.value.clone());
        letter.source = Some(self.topic.clone());
        letter.partition = Some(self.partition);
        letter.offset = Some(self.offset);
        letter.timestamp_ms = self.timestamp_ms;
        letter.key = self.key.clone();
        letter.pipeline = Some(pipeline.to_string());
        letter
    }
}

impl Batch {
    /// Takes a record whose value decoded to `row` (one JSON object, no newline).
    pub(super) fn push(&mut self, source: Source, row: &[u8]) {
        self.push_change(source, row, false);
    }

    /// Takes a record that deletes the row of the key `key` (one JSON object of the key
    /// fields).
    pub(super) fn push_delete(&mut self, source: Source, key: &[u8]) {
        self.push_change(source, key, true);
    }

    fn push_change(&mut self, source: Source, row: &[u8], delete: bool) {
        self.rows.extend_from_slice(row);
        self.rows.push(b'\n');
        self.ends.push(self.rows.len());
        self.sources.push(source);
        self.deletes.push(delete);
        self.records += 1;
    }

    /// The prepared rows (`rows`, one per kept record) as the changes they make, in order.
    pub(super) fn changes(&self, rows: &RecordBatch) -> Vec<crate::core::upsert::Change> {
        use crate::core::upsert::Change;
        let mut changes = Vec::new();
        let mut start = 0;
        while start < self.kept.len() {
            let delete = self.deletes[self.kept[start]];
            let mut end = start + 1;
            while end < self.kept.len() && self.deletes[self.kept[end]] == delete {
                end += 1;
            }
            let slice = rows.slice(start, end - start);
            changes.push(if delete {
                Change::Delete(slice)
            } else {
                Change::Upsert(slice)
            });
            start = end;
        }
        changes
    }

    /// Dead-letters a record unless an earlier run did (its offset lies below what the
    /// dead-letter table has committed for the partition).
    pub(super) fn reject(
        &mut self,
        letter: DeadLetter,
        dead_committed: &HashMap<(String, i32), i64>,
    ) {
        self.rejected += 1;
        let done = dead_committed
            .get(&(letter.topic.clone(), letter.partition))
            .is_some_and(|next| letter.offset < *next);
        if !done {
            self.dead.push(letter);
        }
    }
}

/// The decoded rows (`kept` of `sources`, in order) with the table's metadata columns
/// filled in from their Kafka coordinates, as a batch of `schema`.
pub(super) fn assemble(
    schema: &SchemaRef,
    decoded: &RecordBatch,
    kept: &[usize],
    sources: &[Source],
) -> Result<RecordBatch> {
    use datafusion::arrow::array::{
        ArrayRef, BinaryArray, BinaryBuilder, Int32Array, Int64Array, ListArray, StringArray,
        StringBuilder, StructArray, TimestampMicrosecondArray,
    };
    use datafusion::arrow::buffer::OffsetBuffer;
    use datafusion::arrow::datatypes::DataType;
    let kept: Vec<&Source> = kept.iter().map(|i| &sources[*i]).collect();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let Some(column) = MetadataColumn::of_column(field.name()) else {
            let values = decoded
                .column_by_name(field.name())
                .ok_or_else(|| table_error("assemble a batch", field.name()))?;
            columns.push(values.clone());
            continue;
        };
        let values: ArrayRef = match column {
            MetadataColumn::Key => Arc::new(BinaryArray::from(
                kept.iter().map(|s| s.key.as_deref()).collect::<Vec<_>>(),
            )),
            MetadataColumn::Topic => Arc::new(StringArray::from_iter_values(
                kept.iter().map(|s| s.topic.as_str()),
            )),
            MetadataColumn::Partition => Arc::new(Int32Array::from_iter_values(
                kept.iter().map(|s| s.partition),
            )),
            MetadataColumn::Offset => {
                Arc::new(Int64Array::from_iter_values(kept.iter().map(|s| s.offset)))
            }
            MetadataColumn::Timestamp => Arc::new(
                TimestampMicrosecondArray::from(
                    // A producer's timestamp beyond microseconds' range (year 294,247) is none.
                    kept.iter()
                        .map(|s| s.timestamp_ms.and_then(|ms| ms.checked_mul(1000)))
                        .collect::<Vec<_>>(),
                )
                .with_timezone("+00:00"),
            ),
            MetadataColumn::Headers => {
                let DataType::List(element) = field.data_type() else {
                    return Err(table_error("_kafka_headers", "the column is not a list"));
                };
                let DataType::Struct(entry) = element.data_type() else {
                    return Err(table_error("_kafka_headers", "the list is not of structs"));
                };
                let mut keys = StringBuilder::new();
                let mut header_values = BinaryBuilder::new();
                let mut lengths = Vec::with_capacity(kept.len());
                for source in &kept {
                    lengths.push(source.headers.len());
                    for (key, value) in &source.headers {
                        keys.append_value(key);
                        header_values.append_option(value.as_deref());
                    }
                }
                let children: Vec<ArrayRef> = [
                    Arc::new(keys.finish()) as ArrayRef,
                    Arc::new(header_values.finish()),
                ]
                .iter()
                .zip(entry.iter())
                .map(|(values, field)| {
                    datafusion::arrow::compute::cast(values, field.data_type())
                        .map_err(|e| table_error("_kafka_headers", e))
                })
                .collect::<Result<_>>()?;
                let entries = StructArray::try_new(entry.clone(), children, None)
                    .map_err(|e| table_error("_kafka_headers", e))?;
                Arc::new(
                    ListArray::try_new(
                        element.clone(),
                        OffsetBuffer::from_lengths(lengths),
                        Arc::new(entries),
                        None,
                    )
                    .map_err(|e| table_error("_kafka_headers", e))?,
                )
            }
        };
        let values = if values.data_type() == field.data_type() {
            values
        } else {
            datafusion::arrow::compute::cast(&values, field.data_type())
                .map_err(|e| table_error(field.name().as_str(), e))?
        };
        columns.push(values);
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(kept.len())),
    )
    .map_err(|e| table_error("assemble a batch", e))
}

/// The first `count` lines of NDJSON `rows`.
pub(super) fn first_lines(rows: &[u8], count: usize) -> &[u8] {
    let end = rows
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(count.saturating_sub(1))
        .map_or(rows.len(), |(i, _)| i + 1);
    &rows[..end]
}

/// NDJSON rows decoded against the table's schema as one batch; `strict` refuses fields
/// the schema lacks (at any depth) rather than ignoring them.
pub(super) fn decode(rows: &[u8], schema: &SchemaRef, strict: bool) -> Result<RecordBatch> {
    let reader = datafusion::arrow::json::ReaderBuilder::new(schema.clone())
        .with_batch_size(1 << 20)
        .with_strict_mode(strict)
        .build(std::io::Cursor::new(rows))
        .map_err(|e| table_error("decode records", e))?;
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| table_error("decode records", e))?;
    datafusion::arrow::compute::concat_batches(schema, &batches)
        .map_err(|e| table_error("decode records", e))
}
