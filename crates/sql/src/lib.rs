//! Floe's SQL engine: a DataFusion session whose catalogs are Floe warehouses, whose schemas
//! are namespaces and whose tables are Iceberg tables, read with DataFusion's native Parquet
//! scan after Iceberg's own planning has pruned partitions and files.
//!
//! # Modules
//!
//! - `engine` — [`SqlEngine`]: admission, one session per statement over the warehouses the
//!   caller may see, the statement surface allowed, DDL, deadlines and the query runtime.
//! - `catalog` — warehouses, namespaces and tables as DataFusion's catalogs, schemas and
//!   tables, resolved with the caller's grants.
//! - [`scan`] — reading a table: the provider, Iceberg predicates, manifests and their
//!   statistics, the field-id schema adapter, position deletes and deletion vectors as access
//!   plans, equality deletes, bounded Parquet footers, metadata tables, caches.
//! - `optimizer` — Floe's logical and physical rules, one file per rule, and the one ordered
//!   list every session runs (its module documentation gives the order): the logical rules
//!   after DataFusion's; the physical ones inside DataFusion's list, before its
//!   `SanityCheckPlan`, so their output is checked too. Which run is configuration
//!   ([`Rewrites`], read once).
//! - [`token_index`] — per data file, which tokens its text columns hold (a Puffin file
//!   beside it), built as files are written and used by scans to skip files a search cannot
//!   match; `matches(text, query)`.
//! - [`write`] — `INSERT INTO` as a sink, commits through the catalog service, schema
//!   evolution, `CREATE TABLE`'s partitioning.
//!
//! - [`distributed`] — one query run by several nodes on DataFusion-distributed: the
//!   coordinator's session, plans made ready to travel, the codec of Floe's plan nodes, the
//!   worker service, placement of scan files, relaunch after a lost worker.
//!
//! Every plan node Floe adds lives with the rule that adds it (or, for scans, in [`scan`]);
//! its codec is in [`distributed`].
mod catalog;
pub mod distributed;
mod engine;
mod optimizer;
pub mod policy;
pub mod scan;
pub mod sketches;
mod sliding_min;
pub mod token_index;
pub mod write;

/// Every function Floe adds to DataFusion's, or puts in place of one of DataFusion's, in
/// `state`: the sketches, `matches` and the `min` whose sliding window forgets. Each session that plans
/// or decodes a plan (coordinator, worker, the plan codec's round trip) registers them here.
pub(crate) fn register_functions(
    state: &mut datafusion::execution::session_state::SessionState,
) -> datafusion::common::Result<()> {
    sketches::register(state)?;
    datafusion::execution::FunctionRegistry::register_udf(state, token_index::matches_udf())?;
    sliding_min::register(state)
}

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

pub use engine::{
    EngineConfig, QueryOptions, QueryResult, ResultLimits, SPOOL_DIR, SqlEngine, SqlError,
    SqlErrorKind,
};
pub use optimizer::Rewrites;

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
                return Ok(column.clone());
            }
            let cast = datafusion::arrow::compute::cast(column, field.data_type())?;
            if cast.data_type() == field.data_type() {
                return Ok(cast);
            }
            // Arrow casts a fixed-size list to a list whose element field keeps the source's
            // name (`item`); a second cast, list to list, names it as the table does
            // (`element`).
            datafusion::arrow::compute::cast(&cast, field.data_type())
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

/// What a caught panic said (its `&str` or `String` payload), for a log line or an error.
pub fn panic_said(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
