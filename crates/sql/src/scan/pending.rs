//! Rows a node has acknowledged for a table but not committed yet — its ingestion log's — so
//! that reads on that node see them at once (a dashboard reads what was just sent), counted
//! exactly once: the log gives only the rows the snapshot being read does not cover, by the
//! log positions that snapshot's summary records.

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use iceberg::TableIdent;
use iceberg::spec::TableMetadata;

/// Where a node's acknowledged, uncommitted rows are (`floe_stream`'s log implements it).
#[async_trait]
pub trait PendingRows: Send + Sync + std::fmt::Debug {
    /// The rows of table `ident` of `warehouse` acknowledged on this node that the current
    /// snapshot of `metadata` does not cover, as batches of `schema` (the table's current
    /// Arrow schema as the engine plans with it: without field ids, which `metadata`'s
    /// current schema has, to match the log's columns by).
    async fn rows_after(
        &self,
        warehouse: &str,
        ident: &TableIdent,
        metadata: &TableMetadata,
        schema: &SchemaRef,
    ) -> Result<Vec<RecordBatch>>;
}
