//! Floe's SQL engine: a DataFusion session whose catalogs are Floe warehouses, whose schemas
//! are namespaces and whose tables are Iceberg tables, read with DataFusion's native Parquet
//! scan after Iceberg's own planning has pruned partitions and files.

pub mod adapter;
pub mod catalog;
pub mod engine;
pub mod metadata_tables;
pub mod predicate;
pub mod provider;
pub mod write;

pub use engine::{EngineConfig, QueryOptions, QueryResult, SqlEngine, SqlError, SqlErrorKind};
