//! `CREATE SCHEMA`, `CREATE TABLE [AS SELECT]` and `DROP TABLE`, carried out by the catalog
//! service as the caller.

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use floe_catalog::CatalogError;
use floe_catalog::service::CreateTable;
use iceberg::{NamespaceIdent, TableIdent};

use super::{QueryResult, SqlError, SqlErrorKind};
use crate::scan::provider::TableAccess;
use crate::write::{
    IcebergSink, PartitionFields, declared_iceberg_schema, iceberg_schema, partition_spec, table_of,
};

pub(super) async fn run(
    context: &SessionContext,
    ddl: &DdlStatement,
    access: impl Fn(&str) -> Result<TableAccess, SqlError>,
    default_warehouse: &str,
    default_namespace: &str,
    partitioned_by: Option<PartitionFields>,
) -> Result<QueryResult, SqlError> {
    if partitioned_by.is_some() && !matches!(ddl, DdlStatement::CreateMemoryTable(_)) {
        return Err(SqlError::new(
            SqlErrorKind::Invalid,
            "PARTITIONED BY belongs to CREATE TABLE",
        ));
    }
    match ddl {
        DdlStatement::CreateCatalogSchema(create) => {
            let (warehouse, namespace) = match create.schema_name.split_once('.') {
                Some((w, n)) if access(w).is_ok() => (w.to_string(), n.to_string()),
                _ => (default_warehouse.to_string(), create.schema_name.clone()),
            };
            let target = access(&warehouse)?;
            let ident = NamespaceIdent::from_strs(namespace.split('.'))
                .map_err(|e| SqlError::new(SqlErrorKind::Invalid, e.to_string()))?;
            match target
                .service
                .create_namespace(&target.caller, &warehouse, &ident, Default::default())
                .await
            {
                Ok(_) => {}
                Err(CatalogError::AlreadyExists { .. }) if create.if_not_exists => {}
                Err(e) => return Err(e.into()),
            }
            Ok(done(None))
        }
        DdlStatement::CreateMemoryTable(create) => {
            let name = create
                .name
                .clone()
                .resolve(default_warehouse, default_namespace);
            let target = access(&name.catalog)?;
            let ident = table_ident(&name)?;
            if create.or_replace {
                return Err(SqlError::new(
                    SqlErrorKind::Unsupported,
                    "CREATE OR REPLACE TABLE is not supported yet",
                ));
            }
            // Iceberg's column defaults (`write-default`) are format v3's; a default Floe
            // would not write is refused rather than written as NULL.
            if let Some((column, _)) = create.column_defaults.first() {
                return Err(SqlError::new(
                    SqlErrorKind::Unsupported,
                    format!(
                        "column defaults are not supported yet (DEFAULT of column \"{column}\"): \
                         write the value in each INSERT"
                    ),
                ));
            }
            let arrow = create.input.schema().as_arrow().clone();
            // Declared columns keep NOT NULL; a query's columns (CREATE TABLE … AS) are
            // optional, as later rows may hold NULLs where the first did not.
            let declared = matches!(create.input.as_ref(), LogicalPlan::EmptyRelation(_));
            let schema = if declared {
                declared_iceberg_schema(&arrow)?
            } else {
                iceberg_schema(&arrow)?
            };
            let spec = partitioned_by
                .as_deref()
                .map(|fields| partition_spec(&schema, fields))
                .transpose()?;
            let created = target
                .service
                .create_table(
                    &target.caller,
                    &name.catalog,
                    &ident.namespace,
                    CreateTable {
                        name: ident.name.clone(),
                        location: None,
                        schema,
                        partition_spec: spec,
                        write_order: None,
                        stage_create: false,
                        properties: Default::default(),
                    },
                )
                .await;
            let loaded = match created {
                Ok(loaded) => loaded,
                Err(CatalogError::AlreadyExists { .. }) if create.if_not_exists => {
                    return Ok(done(None));
                }
                Err(e) => return Err(e.into()),
            };
            if declared {
                return Ok(done(None));
            }
            // CREATE TABLE AS SELECT: the query's rows are the table's first snapshot. The
            // table exists only with them: a fill that fails, or is abandoned with its
            // statement, takes the create back.
            let undo = UndoCreate {
                target: Some(target.clone()),
                warehouse: name.catalog.to_string(),
                created: loaded.clone(),
            };
            let filled = async {
                let table = table_of(&target, loaded)
                    .map_err(|e| SqlError::new(SqlErrorKind::Execution, e.to_string()))?;
                let frame = context
                    .execute_logical_plan(create.input.as_ref().clone())
                    .await?;
                let schema = Arc::new(frame.schema().as_arrow().clone());
                let stream = frame.execute_stream().await?;
                let sink = IcebergSink::new(target, table, schema);
                Ok::<_, SqlError>(
                    sink.write_all(stream, &Arc::new(TaskContext::from(&context.state())))
                        .await?,
                )
            }
            .await;
            let rows = filled?;
            undo.disarm();
            Ok(done(Some(rows)))
        }
        DdlStatement::DropTable(drop) => {
            let name = drop
                .name
                .clone()
                .resolve(default_warehouse, default_namespace);
            let target = access(&name.catalog)?;
            let ident = table_ident(&name)?;
            match target
                .service
                .drop_table(&target.caller, &name.catalog, &ident, false)
                .await
            {
                Ok(()) => {}
                Err(CatalogError::NotFound { .. } | CatalogError::Hidden(_)) if drop.if_exists => {}
                Err(e) => return Err(e.into()),
            }
            Ok(done(None))
        }
        other => Err(SqlError::new(
            SqlErrorKind::Unsupported,
            format!("{} is not supported yet", other.name()),
        )),
    }
}

/// The Iceberg name of a resolved SQL table name (a dotted schema is a nested namespace).
fn table_ident(name: &datafusion::sql::ResolvedTableReference) -> Result<TableIdent, SqlError> {
    let namespace = NamespaceIdent::from_strs(name.schema.split('.'))
        .map_err(|e| SqlError::new(SqlErrorKind::Invalid, e.to_string()))?;
    Ok(TableIdent::new(namespace, name.table.to_string()))
}

/// What a statement that changes the catalog answers with: the rows it wrote.
pub(super) fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

/// The answer of a statement that changes the catalog: the rows it wrote, if any.
fn done(rows: Option<u64>) -> QueryResult {
    let schema = count_schema();
    let batches: Vec<RecordBatch> = rows
        .map(|n| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(UInt64Array::from(vec![n]))])
                .expect("one count")
        })
        .into_iter()
        .collect();
    let stream = futures::stream::iter(batches.into_iter().map(Ok));
    QueryResult {
        stages: None,
        policies: Vec::new(),
        schema: schema.clone(),
        stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
    }
}

/// Drops a table created by `CREATE TABLE AS SELECT` unless disarmed: on a failed fill, and on
/// a statement dropped halfway (its client went away), when only a task of its own can still
/// run the undo.
struct UndoCreate {
    target: Option<TableAccess>,
    warehouse: String,
    created: floe_catalog::service::LoadedTable,
}

impl UndoCreate {
    fn disarm(mut self) {
        self.target = None;
    }
}

impl Drop for UndoCreate {
    fn drop(&mut self) {
        let Some(target) = self.target.take() else {
            return;
        };
        let warehouse = std::mem::take(&mut self.warehouse);
        let created = self.created.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            if let Err(e) = target
                .service
                .undo_create_table(&target.caller, &warehouse, &created)
                .await
            {
                tracing::warn!(table = %created.ident, error = %e, "take back a table whose rows were not written");
            }
        });
    }
}
