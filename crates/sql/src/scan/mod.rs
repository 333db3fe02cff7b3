//! Reading Iceberg tables: a table as a DataFusion table ([`provider`]), planned from the
//! manifests kept per file with Iceberg's pruning rules ([`predicate`], [`manifests`],
//! [`planning`]) and read with DataFusion's
//! native Parquet scan, whose files are mapped to the table's schema by field id
//! ([`field_ids`]), whose deleted rows are skipped ([`position_deletes`] as access plans,
//! [`equality_deletes`] as a filter over the scan), and whose footers are checked before they
//! are decoded ([`bounded_footer`]). [`metadata_tables`] adds time travel and the metadata
//! tables; [`cache`] keeps what planning read for the next query; [`pending`] adds the rows
//! this node acknowledged but has not committed yet.

pub(crate) mod bounded_footer;
pub(crate) mod cache;
pub(crate) mod equality_deletes;
pub(crate) mod field_ids;
pub(crate) mod file_pruning;
pub(crate) mod live_keys;
pub(crate) mod manifests;
pub(crate) mod metadata_tables;
pub mod pending;
pub(crate) mod planning;
pub(crate) mod position_deletes;
pub(crate) mod predicate;
pub(crate) mod provider;
pub mod server_plan;

pub use bounded_footer::{parquet_batches, parquet_rows};
pub use live_keys::{FileKeys, Keep, LiveFile, LiveFiles, Reading};
pub use manifests::forget_manifests;
pub use pending::PendingRows;
pub use position_deletes::delete_files_read;
pub use provider::{IcebergTableProvider, TableAccess};
pub use roaring::RoaringTreemap;
