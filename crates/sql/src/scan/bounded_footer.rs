//! Parquet metadata of files writers committed is checked before the parquet crate decodes
//! it: its Thrift decoder sizes each list by the count the file declares (`Vec::with_capacity`)
//! before reading a single element, so a footer of a few bytes declaring two billion row
//! groups — or a page index declaring as many pages — would abort the process of anyone
//! reading the table. Every Parquet file Floe reads (scans, position and equality delete
//! files) goes through [`Bounded`]: the first time a file is opened, its footer and page
//! indexes are walked as Thrift compact encoding, every declared length and count checked
//! against the bytes left and the decoded size against a budget, and only then handed to the
//! parquet crate. Files once checked (by path and size) are not checked again.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;
use datafusion::common::Result as DfResult;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::ParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::FutureExt;
use futures::future::BoxFuture;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

/// Largest footer Floe decodes (real ones hold a few KiB to a few MiB).
const MAX_FOOTER_BYTES: u64 = 64 << 20;
/// Largest decoded size a file's metadata may declare: each declared list element counted
/// at an upper bound of its in-memory size.
const MAX_DECODED_BYTES: u64 = 1 << 30;
/// Upper bounds of one decoded list element: a struct (a row group, a column chunk) or
/// anything else (a number, a string's header).
const STRUCT_BYTES: u64 = 512;
const SCALAR_BYTES: u64 = 32;
/// Deepest nesting of Thrift structs (Parquet's metadata nests a handful deep).
const MAX_DEPTH: usize = 32;

/// Files whose metadata passed, by location and size; forgotten wholesale past this many.
const REMEMBERED: usize = 100_000;
static CHECKED: LazyLock<Mutex<HashSet<(String, u64)>>> =
    LazyLock::new(|| Mutex::new(HashSet::new()));

/// A reader factory whose readers check a file's metadata before decoding it.
#[derive(Debug)]
pub(crate) struct BoundedFactory(pub Arc<dyn ParquetFileReaderFactory>);

impl ParquetFileReaderFactory for BoundedFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> DfResult<Box<dyn AsyncFileReader + Send>> {
        let location = file.object_meta.location.to_string();
        let size = file.object_meta.size;
        let inner = self
            .0
            .create_reader(partition_index, file, metadata_size_hint, metrics)?;
        Ok(Box::new(Bounded::boxed(inner, location, size)))
    }
}

/// `plan` (a Parquet scan as DataFusion's `ParquetFormat` builds it) with its reader factory
/// wrapped in [`BoundedFactory`]; any other plan as it is.
pub(crate) fn bounded_scan(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    let Some(config) = crate::optimizer::utils::file_scan(&plan) else {
        return Ok(plan);
    };
    let Some(source) = config.file_source().downcast_ref::<ParquetSource>() else {
        return Ok(plan);
    };
    let Some(factory) = source.parquet_file_reader_factory() else {
        return Ok(plan);
    };
    let source = source
        .clone()
        .with_parquet_file_reader_factory(Arc::new(BoundedFactory(factory.clone())));
    let config = FileScanConfigBuilder::from(config.clone())
        .with_source(Arc::new(source))
        .build();
    Ok(DataSourceExec::from_data_source(config))
}

/// `plan` (a Parquet scan that travelled, which DataFusion's encoding writes without its
/// reader) reading through DataFusion's metadata-caching reader of the task's runtime, bounded.
pub(crate) fn with_bounded_reader(
    plan: Arc<dyn ExecutionPlan>,
    ctx: &datafusion::execution::TaskContext,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let Some(config) = crate::optimizer::utils::file_scan(&plan) else {
        return Ok(plan);
    };
    let Some(source) = config.file_source().downcast_ref::<ParquetSource>() else {
        return Ok(plan);
    };
    let runtime = ctx.runtime_env();
    let store = runtime.object_store(config.object_store_url.clone())?;
    let cached =
        datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory::new(
            store,
            runtime.cache_manager.get_file_metadata_cache(),
        );
    let source = source
        .clone()
        .with_parquet_file_reader_factory(Arc::new(BoundedFactory(Arc::new(cached))));
    let config = FileScanConfigBuilder::from(config.clone())
        .with_source(Arc::new(source))
        .build();
    Ok(DataSourceExec::from_data_source(config))
}

/// An `AsyncFileReader` whose metadata is checked before it is decoded.
pub(crate) struct Bounded {
    inner: Box<dyn AsyncFileReader + Send>,
    location: String,
    size: u64,
}

impl Bounded {
    pub fn new(inner: impl AsyncFileReader + 'static, location: String, size: u64) -> Self {
        Self::boxed(Box::new(inner), location, size)
    }

    fn boxed(inner: Box<dyn AsyncFileReader + Send>, location: String, size: u64) -> Self {
        Self {
            inner,
            location,
            size,
        }
    }

    async fn check(&mut self) -> Result<()> {
        let key = (self.location.clone(), self.size);
        if CHECKED.lock().expect("checked files").contains(&key) {
            return Ok(());
        }
        let bad = |why: String| {
            ParquetError::General(format!("Parquet file {} refused: {why}", self.location))
        };
        if self.size < 12 {
            return Err(bad(format!("{} bytes is too short", self.size)));
        }
        let tail = self.inner.get_bytes(self.size - 8..self.size).await?;
        match &tail[4..] {
            b"PAR1" => {}
            b"PARE" => return Err(bad("encrypted footers are not read".into())),
            _ => return Err(bad("it does not end in PAR1".into())),
        }
        let length = u64::from(u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")));
        if length > MAX_FOOTER_BYTES || length + 8 > self.size - 4 {
            return Err(bad(format!(
                "its footer declares {length} bytes (the file has {}, at most {MAX_FOOTER_BYTES} are read)",
                self.size
            )));
        }
        let footer = self
            .inner
            .get_bytes(self.size - 8 - length..self.size - 8)
            .await?;
        let mut budget = MAX_DECODED_BYTES;
        walk(&footer, &mut budget).map_err(|why| bad(format!("footer: {why}")))?;
        // The footer is sound: decoding it is safe, and it says where the page indexes are.
        let metadata = ParquetMetaDataReader::decode_metadata(&footer)?;
        let mut ranges: Vec<Range<u64>> = Vec::new();
        for group in metadata.row_groups() {
            for column in group.columns() {
                for (offset, len) in [
                    (column.column_index_offset(), column.column_index_length()),
                    (column.offset_index_offset(), column.offset_index_length()),
                ] {
                    if let (Some(offset), Some(len)) = (offset, len) {
                        let (Ok(start), Ok(len)) = (u64::try_from(offset), u64::try_from(len))
                        else {
                            return Err(bad("a page index has a negative offset or length".into()));
                        };
                        if start.checked_add(len).is_none_or(|end| end > self.size) {
                            return Err(bad("a page index lies outside the file".into()));
                        }
                        ranges.push(start..start + len);
                    }
                }
            }
        }
        let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        if total > MAX_FOOTER_BYTES {
            return Err(bad(format!("its page indexes declare {total} bytes")));
        }
        if !ranges.is_empty() {
            for index in self.inner.get_byte_ranges(ranges).await? {
                walk(&index, &mut budget).map_err(|why| bad(format!("page index: {why}")))?;
            }
        }
        let mut checked = CHECKED.lock().expect("checked files");
        if checked.len() >= REMEMBERED {
            checked.clear();
        }
        checked.insert(key);
        Ok(())
    }
}

impl AsyncFileReader for Bounded {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        self.inner.get_bytes(range)
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, Result<Vec<Bytes>>> {
        self.inner.get_byte_ranges(ranges)
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>>> {
        async move {
            self.check().await?;
            self.inner.get_metadata(options).await
        }
        .boxed()
    }
}

/// Walks one Thrift compact-protocol struct at the start of `bytes` (the rest may follow).
fn walk(bytes: &[u8], budget: &mut u64) -> std::result::Result<(), String> {
    let mut walker = Walker {
        bytes,
        at: 0,
        budget,
    };
    walker.structure(0)
}

struct Walker<'a, 'b> {
    bytes: &'a [u8],
    at: usize,
    budget: &'b mut u64,
}

// Thrift compact type codes.
const STOP: u8 = 0;
const TRUE: u8 = 1;
const FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

impl Walker<'_, '_> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn byte(&mut self) -> std::result::Result<u8, String> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| format!("it ends at byte {} inside a value", self.at))?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> std::result::Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return Err(format!("a varint at byte {} overflows", self.at));
            }
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("a varint at byte {} is too long", self.at))
    }

    fn skip(&mut self, n: u64) -> std::result::Result<(), String> {
        if n > self.left() as u64 {
            return Err(format!(
                "a value at byte {} declares {n} bytes, {} are left",
                self.at,
                self.left()
            ));
        }
        self.at += n as usize;
        Ok(())
    }

    /// Counts `count` declared elements of type `element` against what is left and the
    /// budget.
    fn declare(&mut self, count: u64, element: u8) -> std::result::Result<(), String> {
        // Every element takes at least one byte (booleans in a list take one each).
        if count > self.left() as u64 {
            return Err(format!(
                "a list at byte {} declares {count} elements, {} bytes are left",
                self.at,
                self.left()
            ));
        }
        let each = if element == STRUCT {
            STRUCT_BYTES
        } else {
            SCALAR_BYTES
        };
        let cost = count.saturating_mul(each);
        if cost > *self.budget {
            return Err(format!(
                "its lists declare more than {MAX_DECODED_BYTES} bytes once decoded"
            ));
        }
        *self.budget -= cost;
        Ok(())
    }

    fn value(&mut self, kind: u8, depth: usize) -> std::result::Result<(), String> {
        match kind {
            TRUE | FALSE => Ok(()),
            BYTE => self.skip(1),
            I16 | I32 | I64 => self.varint().map(|_| ()),
            DOUBLE => self.skip(8),
            BINARY => {
                let len = self.varint()?;
                self.skip(len)
            }
            LIST | SET => {
                let header = self.byte()?;
                let element = header & 0x0f;
                let count = match header >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                self.declare(count, element)?;
                for _ in 0..count {
                    if matches!(element, TRUE | FALSE) {
                        self.skip(1)?;
                    } else {
                        self.value(element, depth + 1)?;
                    }
                }
                Ok(())
            }
            MAP => {
                let count = self.varint()?;
                if count == 0 {
                    return Ok(());
                }
                let types = self.byte()?;
                self.declare(count.saturating_mul(2), types & 0x0f)?;
                for _ in 0..count {
                    self.value(types >> 4, depth + 1)?;
                    self.value(types & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            STRUCT => self.structure(depth + 1),
            other => Err(format!("unknown Thrift type {other} at byte {}", self.at)),
        }
    }

    fn structure(&mut self, depth: usize) -> std::result::Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("structs nest deeper than {MAX_DEPTH}"));
        }
        loop {
            let header = self.byte()?;
            let kind = header & 0x0f;
            if kind == STOP {
                return Ok(());
            }
            if header >> 4 == 0 {
                // A field id of its own (zigzag i16) follows.
                self.varint()?;
            }
            self.value(kind, depth)?;
        }
    }
}

/// The rows the footer of the Parquet file at `path` (of `size` bytes) declares, read through
/// the same checks as every scan's (table checks compare it with the manifest's count).
pub async fn parquet_rows(
    store: Arc<dyn object_store::ObjectStore>,
    path: object_store::path::Path,
    size: u64,
) -> Result<i64> {
    let reader = parquet::arrow::async_reader::ParquetObjectReader::new(store, path.clone())
        .with_file_size(size);
    let mut bounded = Bounded::new(reader, path.to_string(), size);
    let metadata = bounded.get_metadata(None).await?;
    Ok(metadata.file_metadata().num_rows())
}

/// The rows of the Parquet file at `path` (of `size` bytes) as Arrow batches of up to
/// `batch_size` rows in the file's own schema, its footer checked as every scan's is: how a
/// migration reads a source's files the way the source's own engine would, without Iceberg
/// metadata in between.
pub async fn parquet_batches(
    store: Arc<dyn object_store::ObjectStore>,
    path: object_store::path::Path,
    size: u64,
    batch_size: usize,
) -> Result<futures::stream::BoxStream<'static, Result<datafusion::arrow::array::RecordBatch>>> {
    use futures::StreamExt;
    let reader = parquet::arrow::async_reader::ParquetObjectReader::new(store, path.clone())
        .with_file_size(size);
    let bounded = Bounded::new(reader, path.to_string(), size);
    let stream = parquet::arrow::ParquetRecordBatchStreamBuilder::new(bounded)
        .await?
        .with_batch_size(batch_size.max(1))
        .build()?;
    Ok(stream.boxed())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;

    use super::*;

    fn parquet_file() -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            ],
        )
        .unwrap();
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        bytes
    }

    fn footer(file: &[u8]) -> &[u8] {
        let n = file.len();
        let len = u32::from_le_bytes(file[n - 8..n - 4].try_into().unwrap()) as usize;
        &file[n - 8 - len..n - 8]
    }

    #[test]
    fn real_footers_pass() {
        let file = parquet_file();
        let mut budget = MAX_DECODED_BYTES;
        walk(footer(&file), &mut budget).unwrap();
        assert!(budget < MAX_DECODED_BYTES);
    }

    #[test]
    fn a_list_declaring_more_elements_than_bytes_is_refused() {
        // FileMetaData { 1: version i32 = 1, 2: schema list<struct> of 2^31-1 elements }.
        let forged = [0x15, 0x02, 0x19, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07];
        let mut budget = MAX_DECODED_BYTES;
        let err = walk(&forged, &mut budget).unwrap_err();
        assert!(err.contains("declares 2147483647 elements"), "{err}");
        // A binary longer than what is left, an unknown type, deep nesting, a cut-off value.
        for bad in [
            vec![0x18, 0xff, 0xff, 0x03, b'x'],
            vec![0x1d],
            [0x1c].repeat(40),
            vec![0x16, 0xff],
        ] {
            assert!(
                walk(&bad, &mut MAX_DECODED_BYTES.clone()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_truncation_and_mutation_of_a_real_footer_is_refused_or_decodes() {
        let file = parquet_file();
        let footer = footer(&file).to_vec();
        for cut in 0..footer.len() {
            assert!(walk(&footer[..cut], &mut MAX_DECODED_BYTES.clone()).is_err());
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut mutated = footer.clone();
            let at = (seed % mutated.len() as u64) as usize;
            mutated[at] = (seed >> 32) as u8;
            if walk(&mutated, &mut MAX_DECODED_BYTES.clone()).is_ok() {
                // Whatever passes decodes without aborting (it may still be an error).
                let _ = ParquetMetaDataReader::decode_metadata(&mutated);
            }
        }
    }

    #[tokio::test]
    async fn a_reader_refuses_a_forged_footer_and_reads_a_real_one() {
        struct InMemory(Bytes);
        impl AsyncFileReader for InMemory {
            fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
                let bytes = self.0.slice(range.start as usize..range.end as usize);
                async move { Ok(bytes) }.boxed()
            }
            fn get_metadata<'a>(
                &'a mut self,
                _options: Option<&'a ArrowReaderOptions>,
            ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>>> {
                let bytes = self.0.clone();
                async move {
                    let mut reader = ParquetMetaDataReader::new();
                    reader.try_parse(&bytes)?;
                    Ok(Arc::new(reader.finish()?))
                }
                .boxed()
            }
        }
        let real = Bytes::from(parquet_file());
        let size = real.len() as u64;
        let mut reader = Bounded::new(InMemory(real), "real.parquet".into(), size);
        assert_eq!(reader.get_metadata(None).await.unwrap().num_row_groups(), 1);

        let mut forged = b"PAR1".to_vec();
        let body = [0x15, 0x02, 0x19, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00];
        forged.extend_from_slice(&body);
        forged.extend_from_slice(&(body.len() as u32).to_le_bytes());
        forged.extend_from_slice(b"PAR1");
        let size = forged.len() as u64;
        let mut reader = Bounded::new(InMemory(Bytes::from(forged)), "forged.parquet".into(), size);
        let err = reader.get_metadata(None).await.unwrap_err().to_string();
        assert!(
            err.contains("forged.parquet") && err.contains("elements"),
            "{err}"
        );
    }
}
