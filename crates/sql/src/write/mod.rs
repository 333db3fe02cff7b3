//! SQL writes through Floe's own commit path: `INSERT INTO` writes Parquet data files with
//! iceberg's writers (split by the table's partition spec) and commits one append snapshot
//! through [`CatalogService`] — the same requirements, authorization and audit as a REST
//! commit. `CREATE SCHEMA`, `CREATE TABLE` (with `PARTITIONED BY` transforms), `CREATE TABLE
//! AS SELECT` and `DROP TABLE` go to the catalog service directly.

mod commit;
mod create_table;
mod deletes;
mod evolution;
mod position_deletes;
mod sink;
mod snapshot;

pub use commit::{commit_transaction, commit_transaction_on, table_of};
pub use create_table::{
    PartitionFields, declared_iceberg_schema, iceberg_schema, partition_field, partition_spec,
    take_partitioned_by,
};
pub use deletes::{DeletesWritten, Doomed, delete_rows};
pub use evolution::{added_type, evolve_columns, merged_type, schema_change, widened_type};
pub use position_deletes::write_position_deletes;
pub use sink::{
    IcebergSink, write_batch_files, write_batch_parts, write_data_files, writer_properties,
};
pub use snapshot::{SnapshotWriter, main_ref, on_main, spec_of};

/// The table property that makes a table with identifier fields an upsert table (Iceberg's
/// Flink writer reads the same one): its rows are written by key, never appended as they are.
pub const UPSERT_PROPERTY: &str = "write.upsert.enabled";

/// Whether `metadata`'s table says it is an upsert table ([`UPSERT_PROPERTY`] is `true`).
pub fn upsert_enabled(metadata: &iceberg::spec::TableMetadata) -> bool {
    metadata
        .properties()
        .get(UPSERT_PROPERTY)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}
