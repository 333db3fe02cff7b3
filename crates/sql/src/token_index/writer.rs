//! Indexes built as data files are written: a file writer that hands every batch to iceberg's
//! Parquet writer and gathers the tokens of the table's indexed columns from the same batch,
//! then, once the Parquet file is closed, writes its index file beside it
//! ([`super::file::write`]). Every writer of data files — `INSERT`, the ingestion log's
//! commits, upserts, compaction, rollups — goes through [`crate::write`]'s one builder, so a
//! table's files are indexed however they were written, and a compaction's output is
//! indexed as it is written, from the rows it rewrites.
//!
//! The index is written before the data file is committed (it is written when the file is
//! closed), so a committed file's index is in place before any reader can see the file. An
//! index that cannot be built or written is logged and left out: its data file is then read
//! by every search, as one written before this feature or by another engine is.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use iceberg::io::{FileIO, OutputFile};
use iceberg::spec::{DataFileBuilder, TableMetadata};
use iceberg::writer::CurrentFileStatus;
use iceberg::writer::file_writer::{FileWriter, FileWriterBuilder, ParquetWriter};

use super::bloom::TokenHashes;
use super::tokens::for_each_token;

/// A column whose tokens are indexed: its name in the written batches and its field id.
#[derive(Debug, Clone)]
pub(crate) struct IndexedColumn {
    pub name: String,
    pub field_id: i32,
}

/// Builds [`IndexedWriter`]s around iceberg's Parquet writers.
#[derive(Clone)]
pub(crate) struct IndexedWriterBuilder<B> {
    inner: B,
    columns: Arc<Vec<IndexedColumn>>,
    file_io: FileIO,
}

impl<B> IndexedWriterBuilder<B> {
    /// `inner`, indexing the columns `metadata`'s table names in [`super::COLUMNS_PROPERTY`]
    /// (none: files are written as `inner` writes them).
    pub(crate) fn new(inner: B, metadata: &TableMetadata, file_io: FileIO) -> Self {
        Self {
            inner,
            columns: Arc::new(super::indexed_columns(metadata)),
            file_io,
        }
    }
}

impl<B> FileWriterBuilder for IndexedWriterBuilder<B>
where
    B: FileWriterBuilder<R = ParquetWriter>,
{
    type R = IndexedWriter;

    async fn build(&self, output_file: OutputFile) -> iceberg::Result<Self::R> {
        let location = output_file.location().to_string();
        Ok(IndexedWriter {
            inner: self.inner.build(output_file).await?,
            hashes: self
                .columns
                .iter()
                .map(|_| TokenHashes::default())
                .collect(),
            columns: self.columns.clone(),
            file_io: self.file_io.clone(),
            location,
            records: 0,
            buffer: String::new(),
        })
    }
}

/// A Parquet file being written, with the tokens of its indexed columns.
pub(crate) struct IndexedWriter {
    inner: ParquetWriter,
    columns: Arc<Vec<IndexedColumn>>,
    hashes: Vec<TokenHashes>,
    file_io: FileIO,
    location: String,
    records: u64,
    buffer: String,
}

impl IndexedWriter {
    fn gather(&mut self, batch: &RecordBatch) {
        for (column, hashes) in self.columns.iter().zip(self.hashes.iter_mut()) {
            let Some(array) = batch.column_by_name(&column.name) else {
                continue;
            };
            let mut add = |text: &str| for_each_token(text, &mut self.buffer, |t| hashes.add(t));
            match array.data_type() {
                DataType::Utf8 => array.as_string::<i32>().iter().flatten().for_each(&mut add),
                DataType::LargeUtf8 => array.as_string::<i64>().iter().flatten().for_each(&mut add),
                DataType::Utf8View => array.as_string_view().iter().flatten().for_each(&mut add),
                _ => {}
            }
        }
    }
}

impl FileWriter for IndexedWriter {
    async fn write(&mut self, batch: &RecordBatch) -> iceberg::Result<()> {
        self.inner.write(batch).await?;
        if !self.columns.is_empty() {
            self.gather(batch);
        }
        self.records += batch.num_rows() as u64;
        Ok(())
    }

    async fn close(self) -> iceberg::Result<Vec<DataFileBuilder>> {
        let written = self.inner.close().await?;
        if self.columns.is_empty() || self.records == 0 {
            return Ok(written);
        }
        let filters: Vec<_> = self
            .columns
            .iter()
            .zip(self.hashes)
            .filter_map(|(column, hashes)| {
                let bloom = hashes.finish();
                if bloom.is_none() {
                    tracing::warn!(
                        file = %self.location,
                        column = %column.name,
                        "leave a column unindexed: too many distinct tokens"
                    );
                }
                Some((column.field_id, column.name.clone(), bloom?))
            })
            .collect();
        if filters.is_empty() {
            return Ok(written);
        }
        if let Err(e) =
            super::file::write(&self.file_io, &self.location, self.records, filters).await
        {
            tracing::warn!(file = %self.location, error = %e, "write the token index of a data file");
        }
        Ok(written)
    }
}

impl CurrentFileStatus for IndexedWriter {
    fn current_file_path(&self) -> String {
        self.inner.current_file_path()
    }

    fn current_row_num(&self) -> usize {
        self.inner.current_row_num()
    }

    fn current_written_size(&self) -> usize {
        self.inner.current_written_size()
    }
}
