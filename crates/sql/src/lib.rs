//! Floe's SQL engine: a DataFusion session whose catalogs are Floe warehouses, whose schemas
//! are namespaces and whose tables are Iceberg tables, read with DataFusion's native Parquet
//! scan after Iceberg's own planning has pruned partitions and files.

pub mod adapter;
mod build_keys;
pub mod catalog;
pub mod conjunction;
pub mod decimal;
pub mod deletes;
pub mod engine;
pub mod equality;
pub mod few_groups;
mod footer;
pub mod join_mode;
pub mod join_order;
mod key_set;
pub mod like;
pub mod manifests;
pub mod metadata_tables;
pub mod not_in;
pub mod plain_repartitions;
pub mod predicate;
pub mod provider;
mod recent;
pub mod runtime_filters;
pub mod shared;
pub mod write;
mod yielding;

/// `PartialEq`, `Eq` and `Hash` for a physical expression that wraps another, `$field`, and
/// is the same as any wrapper of an equal expression.
#[macro_export]
macro_rules! same_as_inner_expr {
    ($type:ty, $field:ident) => {
        impl PartialEq for $type {
            fn eq(&self, other: &Self) -> bool {
                self.$field.as_ref() == other.$field.as_ref()
            }
        }

        impl Eq for $type {}

        impl std::hash::Hash for $type {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.$field.hash(state);
            }
        }
    };
}

/// The `PhysicalExpr` methods of an expression that reads its columns by position and was
/// made from the planned expression in its field `$original`: no children to re-address, and
/// printed as SQL as that original.
#[macro_export]
macro_rules! leaf_of_original {
    ($original:ident) => {
        fn children(&self) -> Vec<&std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
            Vec::new()
        }

        fn with_new_children(
            self: std::sync::Arc<Self>,
            _children: Vec<std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
        ) -> datafusion::common::Result<std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>>
        {
            Ok(self)
        }

        fn fmt_sql(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.$original.fmt_sql(f)
        }
    };
}

pub use engine::{EngineConfig, QueryOptions, QueryResult, SqlEngine, SqlError, SqlErrorKind};

use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::SchemaRef;

/// `batch` with its columns cast, by position, to the types of `schema`'s fields (view and
/// plain string types, widened numbers); columns already of the right type are kept as they are.
pub fn cast_batch(
    batch: &RecordBatch,
    schema: &SchemaRef,
) -> datafusion::common::Result<RecordBatch> {
    if batch.num_columns() != schema.fields().len() {
        return Err(datafusion::common::DataFusionError::Plan(format!(
            "{} columns given where {} are expected",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(column.clone())
            } else {
                datafusion::arrow::compute::cast(column, field.data_type())
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}
