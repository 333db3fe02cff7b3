//! Token indexes: per data file, for the text columns a table names, which tokens its rows
//! hold — so that a search for a rare word or an id reads only the files that can hold it.
//!
//! - **What is indexed.** The top-level string columns the table property
//!   [`COLUMNS_PROPERTY`] lists (`floe.index.tokens.columns`, comma-separated; `otel.logs` is
//!   created with `body`). Tokens are [`tokens`]' (lowercased alphanumeric runs).
//! - **Where an index lives.** In a Puffin file beside its data file, named after it
//!   ([`index_location`]: `<data file>.tokens.puffin`), one blob per column
//!   ([`BLOB_TYPE`], a Bloom filter: [`bloom`]). Nothing in the table's metadata names it:
//!   Iceberg's `statistics` hold one Puffin file per snapshot, which a commit every second
//!   would have to rewrite whole, and a manifest entry has no field for it. So other engines
//!   read the table unchanged and never see the indexes; a reader finds a file's index by its
//!   name, and a file without one (written before, or by another engine) is simply read.
//! - **When it is built.** As the data file is written, from the same batches
//!   ([`writer`]): ingestion, `INSERT`, upserts, compaction and rollups all write through it.
//! - **How it is kept alive and removed.** An index lives exactly as long as its data file:
//!   orphan cleanup counts an index as referenced when its data file is
//!   ([`data_file_of`]); snapshot expiry deletes the indexes of the data files it deletes; a
//!   purge deletes everything below the table's location.
//! - **How it is used.** Scans drop files whose index proves that no row can pass the
//!   filters ([`prune`]: [`matches`], `LIKE` where the pattern holds a whole token, `=`).
//!   The filters are still evaluated on every row read.
//! - **Hostile bytes.** Anyone who may write the table's location may write an index, so
//!   index files are read within bounds and checked ([`file::parse`]); anything unexpected
//!   makes the file unprunable — never an error, never a hidden row beyond what such a
//!   writer could hide by rewriting the data file itself.

mod bloom;
mod file;
pub(crate) mod matches;
mod prune;
mod tokens;
mod writer;

use iceberg::spec::{PrimitiveType, TableMetadata, Type};

pub use file::{BLOB_TYPE, SUFFIX, data_file_of, index_location};
pub use matches::udf as matches_udf;
pub(crate) use prune::prune;
pub use prune::{TokenIndexStats, forget_indexes, stats};
use writer::IndexedColumn;
pub(crate) use writer::IndexedWriterBuilder;

/// The table property naming the columns whose tokens are indexed.
pub const COLUMNS_PROPERTY: &str = "floe.index.tokens.columns";

/// Most columns one table indexes (the rest of the list is ignored).
const MAX_COLUMNS: usize = 16;

/// The columns of `metadata`'s current schema that [`COLUMNS_PROPERTY`] names and that are
/// top-level strings (other names are ignored: a token index holds text only).
pub(crate) fn indexed_columns(metadata: &TableMetadata) -> Vec<IndexedColumn> {
    let Some(list) = metadata.properties().get(COLUMNS_PROPERTY) else {
        return Vec::new();
    };
    let schema = metadata.current_schema();
    let mut columns: Vec<IndexedColumn> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(field) = schema.as_struct().field_by_name(name) else {
            continue;
        };
        if *field.field_type != Type::Primitive(PrimitiveType::String)
            || columns.iter().any(|c| c.field_id == field.id)
        {
            continue;
        }
        columns.push(IndexedColumn {
            name: field.name.clone(),
            field_id: field.id,
        });
        if columns.len() == MAX_COLUMNS {
            break;
        }
    }
    columns
}
