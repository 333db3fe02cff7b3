//! Transactions committed through [`floe_catalog::service::CatalogService`] — the same
//! requirements, authorization and audit as a REST commit — and a table loaded for writing.

use std::collections::HashMap;

use async_trait::async_trait;
use datafusion::common::Result;
use floe_catalog::service::TableCommitRequest;
use iceberg::table::Table;
use iceberg::transaction::Transaction;
use iceberg::{Catalog, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent};

use crate::scan::provider::{TableAccess, iceberg_error};

/// Commits an iceberg transaction (built on a table loaded through `access`) through Floe's
/// catalog as `access`'s caller; the table as the commit left it.
pub async fn commit_transaction(access: &TableAccess, transaction: Transaction) -> Result<Table> {
    commit_with(access, None, transaction).await
}

/// Commits `transaction` on exactly the table state `base` it was built from. iceberg's own
/// commit reloads the table first and re-applies the transaction to whatever is current then;
/// here a table changed meanwhile fails the commit with a conflict instead (the commit
/// requires `main` where `base` had it), so a caller whose snapshot properties depend on that
/// state — a pipeline's offsets, merged from the current snapshot — reloads and rebuilds them.
pub async fn commit_transaction_on(
    access: &TableAccess,
    base: &Table,
    transaction: Transaction,
) -> Result<Table> {
    commit_with(access, Some(base.clone()), transaction).await
}

async fn commit_with(
    access: &TableAccess,
    pinned: Option<Table>,
    transaction: Transaction,
) -> Result<Table> {
    let catalog = FloeCatalog {
        access: access.clone(),
        pinned,
    };
    transaction.commit(&catalog).await.map_err(iceberg_error)
}

/// Just enough of iceberg's `Catalog` for iceberg's transactions to commit through Floe.
#[derive(Debug)]
struct FloeCatalog {
    access: TableAccess,
    /// The table state commits apply to, instead of the current one.
    pinned: Option<Table>,
}

fn unsupported<T>() -> iceberg::Result<T> {
    Err(iceberg::Error::new(
        iceberg::ErrorKind::FeatureUnsupported,
        "not used by Floe's SQL writes",
    ))
}

fn to_iceberg(e: floe_catalog::CatalogError) -> iceberg::Error {
    let kind = match &e {
        floe_catalog::CatalogError::CommitFailed(_) => iceberg::ErrorKind::CatalogCommitConflicts,
        _ => iceberg::ErrorKind::Unexpected,
    };
    iceberg::Error::new(kind, e.to_string()).with_source(e)
}

#[async_trait]
impl Catalog for FloeCatalog {
    async fn list_namespaces(
        &self,
        _parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        unsupported()
    }
    async fn create_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        unsupported()
    }
    async fn get_namespace(&self, _namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        unsupported()
    }
    async fn namespace_exists(&self, _namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        unsupported()
    }
    async fn update_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        unsupported()
    }
    async fn drop_namespace(&self, _namespace: &NamespaceIdent) -> iceberg::Result<()> {
        unsupported()
    }
    async fn list_tables(&self, _namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        unsupported()
    }
    async fn create_table(
        &self,
        _namespace: &NamespaceIdent,
        _creation: TableCreation,
    ) -> iceberg::Result<Table> {
        unsupported()
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        if let Some(pinned) = &self.pinned {
            return Ok(pinned.clone());
        }
        let loaded = self
            .access
            .service
            .load_table(&self.access.caller, &self.access.warehouse, table)
            .await
            .map_err(to_iceberg)?;
        table_of(&self.access, loaded)
    }
    async fn drop_table(&self, _table: &TableIdent) -> iceberg::Result<()> {
        unsupported()
    }
    async fn purge_table(&self, _table: &TableIdent) -> iceberg::Result<()> {
        unsupported()
    }
    async fn table_exists(&self, _table: &TableIdent) -> iceberg::Result<bool> {
        unsupported()
    }
    async fn rename_table(&self, _src: &TableIdent, _dest: &TableIdent) -> iceberg::Result<()> {
        unsupported()
    }
    async fn register_table(
        &self,
        _table: &TableIdent,
        _metadata_location: String,
    ) -> iceberg::Result<Table> {
        unsupported()
    }
    async fn update_table(&self, mut commit: TableCommit) -> iceberg::Result<Table> {
        let request = TableCommitRequest {
            ident: commit.identifier().clone(),
            requirements: commit.take_requirements(),
            updates: commit.take_updates(),
        };
        let loaded = self
            .access
            .service
            .commit_table(&self.access.caller, &self.access.warehouse, request)
            .await
            .map_err(to_iceberg)?;
        table_of(&self.access, loaded)
    }
}

/// A loaded table as iceberg's `Table`.
pub fn table_of(
    access: &TableAccess,
    loaded: floe_catalog::service::LoadedTable,
) -> iceberg::Result<Table> {
    // The table's reads and writes reach only its location.
    let files = access
        .storage
        .for_table(loaded.metadata.location())
        .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::DataInvalid, e.to_string()))?;
    let mut builder = Table::builder()
        .metadata(loaded.metadata.clone())
        .identifier(loaded.ident.clone())
        .file_io(files.file_io())
        .runtime(iceberg::Runtime::current());
    if let Some(location) = loaded.metadata_location {
        builder = builder.metadata_location(location);
    }
    builder.build()
}
