//! The SQL engine: one DataFusion session per statement, over the warehouses the caller may
//! see, sharing one runtime (object stores, memory pool, Parquet metadata cache).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Column;
use datafusion::common::DataFusionError;
use datafusion::dataframe::DataFrame;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::{Expr, LogicalPlan, cast};
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::CatalogService;

use crate::catalog::{FloeCatalogList, WarehouseCatalog, list_warehouse};
use crate::provider::TableAccess;

mod ddl;

/// How the engine runs queries.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Partitions each scan and operator is split into (default: the machine's cores).
    pub target_partitions: usize,
    /// Rows per batch.
    pub batch_size: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            target_partitions: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            batch_size: 8192,
        }
    }
}

/// Where unqualified names resolve.
#[derive(Debug, Clone, Default)]
pub struct QueryOptions {
    /// The catalog of `schema.table` names (default: `default`).
    pub warehouse: Option<String>,
    /// The schema of bare `table` names (default: `default`).
    pub namespace: Option<String>,
}

/// Why a statement failed, classified for the front doors (HTTP status, PostgreSQL code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlErrorKind {
    /// The caller lacks a privilege on an object it can see.
    PermissionDenied,
    /// Bad SQL, an unknown table or column, a type error.
    Invalid,
    /// A statement or feature Floe does not support yet.
    Unsupported,
    /// A failure while running the query.
    Execution,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct SqlError {
    pub kind: SqlErrorKind,
    pub message: String,
}

impl SqlError {
    pub(crate) fn new(kind: SqlErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl From<DataFusionError> for SqlError {
    fn from(e: DataFusionError) -> Self {
        let root = e.find_root();
        if let DataFusionError::External(inner) = root
            && let Some(catalog) = inner.downcast_ref::<CatalogError>()
        {
            return SqlError::from(catalog);
        }
        let kind = match root {
            DataFusionError::Plan(_)
            | DataFusionError::SQL(..)
            | DataFusionError::SchemaError(..) => SqlErrorKind::Invalid,
            DataFusionError::NotImplemented(_) => SqlErrorKind::Unsupported,
            _ => SqlErrorKind::Execution,
        };
        SqlError::new(kind, root.to_string())
    }
}

impl From<&CatalogError> for SqlError {
    fn from(e: &CatalogError) -> Self {
        let kind = match e {
            CatalogError::PermissionDenied(_) | CatalogError::Unauthenticated(_) => {
                SqlErrorKind::PermissionDenied
            }
            CatalogError::NotFound { .. }
            | CatalogError::Hidden(_)
            | CatalogError::BadRequest { .. }
            | CatalogError::InvalidArgument(_) => SqlErrorKind::Invalid,
            CatalogError::Unsupported(_) => SqlErrorKind::Unsupported,
            _ => SqlErrorKind::Execution,
        };
        SqlError::new(kind, e.to_string())
    }
}

impl From<CatalogError> for SqlError {
    fn from(e: CatalogError) -> Self {
        SqlError::from(&e)
    }
}

/// A statement's result, streamed.
pub struct QueryResult {
    pub schema: SchemaRef,
    pub stream: SendableRecordBatchStream,
}

/// Runs SQL over a catalog service.
#[derive(Debug)]
pub struct SqlEngine {
    service: Arc<CatalogService>,
    runtime: Arc<RuntimeEnv>,
    config: EngineConfig,
    /// Warehouses whose object store is registered in `runtime`.
    registered: Mutex<HashSet<uuid::Uuid>>,
}

impl SqlEngine {
    pub fn new(service: Arc<CatalogService>, config: EngineConfig) -> Result<Self, SqlError> {
        let runtime = RuntimeEnvBuilder::new().build_arc()?;
        Ok(Self {
            service,
            runtime,
            config,
            registered: Mutex::new(HashSet::new()),
        })
    }

    /// Plans and starts one statement as `caller`.
    pub async fn query(
        &self,
        caller: &Caller,
        sql: &str,
        options: &QueryOptions,
    ) -> Result<QueryResult, SqlError> {
        let warehouse = options.warehouse.as_deref().unwrap_or("default");
        let namespace = options.namespace.as_deref().unwrap_or("default");
        let config = SessionConfig::new()
            .with_target_partitions(self.config.target_partitions)
            .with_batch_size(self.config.batch_size)
            .with_information_schema(true)
            .with_create_default_catalog_and_schema(false)
            .with_default_catalog_and_schema(warehouse, namespace);
        let parser = SessionStateBuilder::new()
            .with_config(config.clone())
            .with_runtime_env(self.runtime.clone())
            .with_default_features()
            .build();
        let dialect = parser.config().options().sql_parser.dialect;
        let (sql, partitioned_by) = crate::write::take_partitioned_by(sql)?;
        let statement = parser.sql_to_statement(&sql, &dialect)?;
        let references = parser.resolve_table_references(&statement)?;
        let lists = references
            .iter()
            .any(|r| r.schema() == Some("information_schema"));

        let catalogs = self.catalogs(caller, lists).await?;
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(self.runtime.clone())
            .with_default_features()
            .with_catalog_list(Arc::new(catalogs))
            .build();
        let plan = state.statement_to_plan(statement).await?;
        let context = SessionContext::new_with_state(state);
        if let LogicalPlan::Ddl(ddl) = &plan {
            let access = |name: &str| {
                catalogs_access(&context, name).ok_or_else(|| {
                    SqlError::new(
                        SqlErrorKind::Invalid,
                        format!("warehouse {name:?} does not exist"),
                    )
                })
            };
            return ddl::run(&context, ddl, access, warehouse, namespace, partitioned_by).await;
        }
        if partitioned_by.is_some() {
            return Err(SqlError::new(
                SqlErrorKind::Invalid,
                "PARTITIONED BY belongs to CREATE TABLE",
            ));
        }
        SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(true)
            .with_allow_statements(false)
            .verify_plan(&plan)
            .map_err(|_| unsupported(&plan))?;
        let frame = plain_types(context.execute_logical_plan(plan).await?)?;
        let schema = frame.schema().inner().clone();
        let stream = frame.execute_stream().await?;
        Ok(QueryResult { schema, stream })
    }

    /// The catalog service the engine runs over.
    pub fn catalog(&self) -> &Arc<CatalogService> {
        &self.service
    }

    /// How `caller` reads and writes tables of `warehouse` (its object store registered).
    pub async fn access(&self, caller: &Caller, warehouse: &str) -> Result<TableAccess, SqlError> {
        let handle = self.service.warehouse(warehouse).await?;
        let id = handle.warehouse.id;
        let store_url = ObjectStoreUrl::parse(format!("floe://wh-{id}"))?;
        let newly = self
            .registered
            .lock()
            .expect("registered stores")
            .insert(id);
        if newly {
            self.runtime
                .register_object_store(store_url.as_ref(), handle.storage.object_store());
        }
        Ok(TableAccess {
            service: self.service.clone(),
            caller: caller.clone(),
            warehouse: warehouse.to_string(),
            file_io: handle.storage.file_io(),
            store_url,
        })
    }

    /// The caller's warehouses as DataFusion catalogs; with `listing`, also every namespace
    /// and table name in them.
    async fn catalogs(&self, caller: &Caller, listing: bool) -> Result<FloeCatalogList, SqlError> {
        let mut warehouses = HashMap::new();
        for warehouse in self.service.list_warehouses(caller).await? {
            let access = self.access(caller, &warehouse.name).await?;
            let listing = if listing {
                Some(list_warehouse(&access).await?)
            } else {
                None
            };
            warehouses.insert(
                warehouse.name.clone(),
                Arc::new(WarehouseCatalog { access, listing }),
            );
        }
        Ok(FloeCatalogList { warehouses })
    }
}

/// Results leave with plain string and binary types: DataFusion computes with view types,
/// which many clients (and the PostgreSQL and Flight SQL front doors' peers) do not read.
fn plain_types(frame: DataFrame) -> Result<DataFrame, DataFusionError> {
    let viewed = |t: &DataType| matches!(t, DataType::Utf8View | DataType::BinaryView);
    if !frame
        .schema()
        .fields()
        .iter()
        .any(|f| viewed(f.data_type()))
    {
        return Ok(frame);
    }
    let columns: Vec<Expr> = frame
        .schema()
        .iter()
        .map(|(qualifier, field)| {
            let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
            match field.data_type() {
                DataType::Utf8View => cast(column, DataType::Utf8).alias(field.name()),
                DataType::BinaryView => cast(column, DataType::Binary).alias(field.name()),
                _ => column,
            }
        })
        .collect();
    frame.select(columns)
}

/// The table access of a warehouse of this session.
fn catalogs_access(context: &SessionContext, warehouse: &str) -> Option<TableAccess> {
    let catalog = context.catalog(warehouse)?;
    let catalog = catalog.downcast_ref::<WarehouseCatalog>()?;
    Some(catalog.access.clone())
}

fn unsupported(plan: &LogicalPlan) -> SqlError {
    let what = match plan {
        LogicalPlan::Ddl(ddl) => ddl.name().to_string(),
        LogicalPlan::Dml(dml) => dml.op.to_string(),
        _ => plan.display().to_string(),
    };
    SqlError::new(
        SqlErrorKind::Unsupported,
        format!(
            "{what} is not supported yet: Floe's SQL runs queries, INSERT INTO, CREATE SCHEMA, \
             CREATE TABLE [AS SELECT] and DROP TABLE"
        ),
    )
}
