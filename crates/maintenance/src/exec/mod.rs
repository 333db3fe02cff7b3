//! Executors: the IO around the planners. Each reads a table's metadata and manifests as the
//! system (whoever asked was authorized before), does its work and commits through Floe's own
//! catalog, so every change is a normal, audited commit with the usual requirements.

pub mod compact;
pub mod expire;
pub mod orphans;
pub mod retention;
mod state;

use std::sync::Arc;

use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogService, LoadedTable};
use floe_sql::SqlEngine;
use floe_sql::provider::TableAccess;
use iceberg::TableIdent;

/// What an executor needs: the catalog to read and commit through, the SQL engine to scan
/// with (deletes applied) and its object stores.
#[derive(Debug, Clone)]
pub struct Maintainer {
    pub catalog: Arc<CatalogService>,
    pub sql: Arc<SqlEngine>,
}

#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// Reading or writing files, or running the rewrite.
    #[error("{what}: {message}")]
    Io { what: String, message: String },
    /// The table cannot be maintained this way.
    #[error("{0}")]
    Unsupported(String),
}

pub type Result<T> = std::result::Result<T, MaintenanceError>;

pub(crate) fn io(what: impl Into<String>, e: impl std::fmt::Display) -> MaintenanceError {
    MaintenanceError::Io {
        what: what.into(),
        message: e.to_string(),
    }
}

/// Deletes each file with `delete`, counting those deleted and naming those that failed
/// (they are left for orphan cleanup).
pub(crate) async fn delete_each<'a, F, Fut, E>(
    files: impl IntoIterator<Item = &'a String>,
    delete: F,
    deleted: &mut usize,
    failed: &mut Vec<serde_json::Value>,
) where
    F: Fn(&'a String) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<(), E>>,
    E: std::fmt::Display,
{
    for file in files {
        match delete(file).await {
            Ok(()) => *deleted += 1,
            Err(e) => failed.push(serde_json::json!({"file": file, "error": e.to_string()})),
        }
    }
}

/// A table loaded as the system, with iceberg's view of it and how to reach its files.
pub struct Target {
    pub ident: TableIdent,
    pub loaded: LoadedTable,
    pub table: iceberg::table::Table,
    pub access: TableAccess,
}

impl Maintainer {
    pub fn new(catalog: Arc<CatalogService>, sql: Arc<SqlEngine>) -> Self {
        Self { catalog, sql }
    }

    /// Loads `ident` of `warehouse` as the system.
    pub async fn load(&self, warehouse: &str, ident: &TableIdent) -> Result<Target> {
        let system = Caller::system();
        let loaded = self.catalog.load_table(&system, warehouse, ident).await?;
        let access = self
            .sql
            .access(&system, warehouse)
            .await
            .map_err(|e| io("storage access", e.message))?;
        let table =
            floe_sql::write::table_of(&access, loaded.clone()).map_err(|e| io("table", e))?;
        Ok(Target {
            ident: ident.clone(),
            loaded,
            table,
            access,
        })
    }
}
