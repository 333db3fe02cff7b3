//! Executors: the IO around the planners. Each reads a table's metadata and manifests as the
//! system (whoever asked was authorized before), does its work and commits through Floe's own
//! catalog, so every change is a normal, audited commit with the usual requirements.

pub mod check;
pub mod compact;
pub mod convert;
pub mod digest;
pub mod expire;
pub mod orphans;
pub mod repair;
pub mod retention;
pub mod rollup;
mod state;

use std::sync::Arc;

use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogService, LoadedTable};
use floe_sql::SqlEngine;
use floe_sql::scan::TableAccess;
use iceberg::TableIdent;

/// What an executor needs: the catalog to read and commit through, the SQL engine to scan
/// with (deletes applied) and its object stores.
#[derive(Debug, Clone)]
pub struct Maintainer {
    pub catalog: Arc<CatalogService>,
    pub sql: Arc<SqlEngine>,
    /// The youngest a file may be for orphan cleanup to delete it, however a run asks
    /// ([`orphans::DEFAULT_MIN_AGE_FLOOR_MS`] unless the operator lowers it).
    pub orphan_age_floor_ms: i64,
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
    /// The run's options break a rule (named in the message).
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, MaintenanceError>;

pub(crate) fn io(what: impl Into<String>, e: impl std::fmt::Display) -> MaintenanceError {
    MaintenanceError::Io {
        what: what.into(),
        message: e.to_string(),
    }
}

/// The table property Iceberg uses to say a table's files may be shared with others
/// (`false`: never delete them).
pub const GC_ENABLED: &str = "gc.enabled";

/// Whether Floe may delete files the table no longer references (`gc.enabled` is not `false`).
pub fn gc_enabled(metadata: &iceberg::spec::TableMetadata) -> bool {
    !metadata
        .properties()
        .get(GC_ENABLED)
        .is_some_and(|v| v.eq_ignore_ascii_case("false"))
}

/// Refuses to read `path` for `table` unless it lies below the table's location (the
/// table's `FileIO` would refuse too, but as an IO failure): a manifest list or manifest
/// that points elsewhere is the table's metadata at fault, named in a 400.
pub(crate) fn require_in_table(
    table: &iceberg::table::Table,
    path: &str,
    what: &str,
) -> Result<()> {
    let location = table.metadata().location();
    let inside = floe_storage::Location::parse(location)
        .and_then(|root| floe_storage::Location::parse(path).map(|p| p.is_within(&root)))
        .unwrap_or(false);
    if inside {
        Ok(())
    } else {
        Err(MaintenanceError::Invalid(format!(
            "{what} {path} lies outside the table's location {location}; Floe reads and \
             deletes only files inside it"
        )))
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

/// Commits `updates` as the system, if the table is still `metadata`'s (same uuid) with
/// `main` at `main`: how every executor commits what it decided from one read of the table.
pub(crate) async fn commit_on_main(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    metadata: &iceberg::spec::TableMetadata,
    main: Option<i64>,
    updates: Vec<iceberg::TableUpdate>,
) -> Result<()> {
    maintainer
        .catalog
        .commit_table(
            &Caller::system(),
            warehouse,
            floe_catalog::service::TableCommitRequest {
                ident: ident.clone(),
                requirements: floe_sql::write::on_main(metadata, main),
                updates,
            },
        )
        .await?;
    Ok(())
}

/// A table loaded as the system, with iceberg's view of it and how to reach its files.
pub struct Target {
    pub ident: TableIdent,
    pub loaded: LoadedTable,
    pub table: iceberg::table::Table,
    pub access: TableAccess,
}

impl Target {
    /// The table's storage: everything maintenance lists, reads or deletes for the table lies
    /// below its location, and anything else is refused by name.
    pub fn files(&self) -> Result<floe_storage::WarehouseStorage> {
        self.access
            .storage
            .for_table(self.table.metadata().location())
            .map_err(|e| io("the table's location", e))
    }
}

impl Maintainer {
    pub fn new(catalog: Arc<CatalogService>, sql: Arc<SqlEngine>) -> Self {
        Self {
            catalog,
            sql,
            orphan_age_floor_ms: orphans::DEFAULT_MIN_AGE_FLOOR_MS,
        }
    }

    /// The same maintainer with another floor for orphan cleanup's minimum age.
    pub fn with_orphan_age_floor(mut self, floor_ms: i64) -> Self {
        self.orphan_age_floor_ms = floor_ms.max(0);
        self
    }

    /// Refuses an orphan cleanup that would delete files younger than the floor: a writer
    /// may have written them for a commit it has not made yet.
    pub fn check_orphan_age(&self, older_than_ms: i64) -> Result<()> {
        if older_than_ms < self.orphan_age_floor_ms {
            return Err(MaintenanceError::Invalid(format!(
                "older-than-ms must be at least {} ({} s): younger files may belong to a \
                 commit in flight",
                self.orphan_age_floor_ms,
                self.orphan_age_floor_ms / 1000
            )));
        }
        Ok(())
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
