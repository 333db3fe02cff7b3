//! Floe's catalog as DataFusion sees it: catalogs are warehouses, schemas are namespaces
//! (nested ones joined with dots: `wh."a.b".t`), tables are Iceberg tables.
//!
//! Everything a caller resolves goes through [`CatalogService`] with the caller's grants, so
//! SQL sees exactly what the REST catalog would show the same principal: a table it may not
//! see does not exist, one it may see but not read fails with a permission error at scan time.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, CatalogProviderList, SchemaProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::TableProvider;
use floe_catalog::CatalogError;
use floe_catalog::model::PageRequest;
use iceberg::{NamespaceIdent, TableIdent};

use crate::policy::PolicyTable;
use crate::scan::field_ids::FieldIds;
use crate::scan::metadata_tables::{self, Suffix};
use crate::scan::provider::{IcebergTableProvider, TableAccess};

/// Namespaces and table names of one warehouse, fetched ahead when a statement lists them
/// (`SHOW TABLES`, `information_schema`): DataFusion asks for them synchronously.
pub type Listing = BTreeMap<String, Vec<String>>;

/// The warehouses a caller may see.
#[derive(Debug)]
pub struct FloeCatalogList {
    pub warehouses: HashMap<String, Arc<WarehouseCatalog>>,
}

impl CatalogProviderList for FloeCatalogList {
    fn register_catalog(
        &self,
        _name: String,
        _catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        None
    }

    fn catalog_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.warehouses.keys().cloned().collect();
        names.sort();
        names
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        self.warehouses
            .get(name)
            .map(|w| w.clone() as Arc<dyn CatalogProvider>)
    }
}

/// One warehouse.
#[derive(Debug)]
pub struct WarehouseCatalog {
    pub access: TableAccess,
    pub listing: Option<Listing>,
}

impl CatalogProvider for WarehouseCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.listing
            .as_ref()
            .map(|l| l.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let namespace = NamespaceIdent::from_strs(name.split('.')).ok()?;
        Some(Arc::new(NamespaceSchema {
            access: self.access.clone(),
            namespace,
            tables: self.listing.as_ref().and_then(|l| l.get(name).cloned()),
        }))
    }
}

/// One namespace.
#[derive(Debug)]
pub struct NamespaceSchema {
    access: TableAccess,
    namespace: NamespaceIdent,
    tables: Option<Vec<String>>,
}

#[async_trait]
impl SchemaProvider for NamespaceSchema {
    fn table_names(&self) -> Vec<String> {
        self.tables.clone().unwrap_or_default()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let (table_name, suffix) = metadata_tables::parse(name)?;
        let ident = TableIdent::new(self.namespace.clone(), table_name.to_string());
        // A statement that lists (`information_schema`, `SHOW TABLES`) is handed every listed
        // table: those the caller may list but not read are shown without columns rather than
        // failing the listing, and none has its statistics read from its manifests.
        let listing = self.tables.is_some();
        let (loaded, policy) = match self
            .access
            .service
            .load_table_under_policy(&self.access.caller, &self.access.warehouse, &ident)
            .await
        {
            Ok(loaded) => loaded,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e @ CatalogError::PermissionDenied(_)) if listing => {
                return Ok(Some(Arc::new(Unreadable(Arc::new(e)))));
            }
            Err(e) => return Err(DataFusionError::External(Box::new(e))),
        };
        let provider = IcebergTableProvider::try_new(self.access.clone(), loaded)?;
        let provider = match suffix {
            Suffix::Current if listing || policy.is_some() => provider,
            Suffix::Current => provider.with_statistics().await,
            // Metadata tables show files, their column bounds and snapshot summaries: not
            // to a caller under a policy.
            Suffix::Metadata(_) if policy.is_some() => {
                return Err(DataFusionError::External(Box::new(
                    CatalogError::PermissionDenied(format!(
                        "a row or column policy applies to principal {} on table {ident}: \
                         its metadata tables are not readable",
                        self.access.caller.principal.name
                    )),
                )));
            }
            Suffix::Metadata(kind) => {
                return Ok(Some(
                    metadata_tables::metadata_table(&provider.table()?, &kind).await?,
                ));
            }
            travel => {
                let id = metadata_tables::snapshot_for(provider.metadata(), &travel, table_name)?;
                let provider = provider.at_snapshot(id)?;
                if policy.is_some() {
                    let now = FieldIds::of(provider.metadata().current_schema());
                    if let Some(column) =
                        crate::policy::column_changed_since(provider.field_ids(), &now)
                    {
                        return Err(DataFusionError::External(Box::new(
                            CatalogError::PermissionDenied(format!(
                                "a row or column policy applies to principal {} on table \
                                 {ident}, kept over its current columns: snapshot {id} has \
                                 column {column:?}, which the current schema does not have \
                                 (dropped or renamed since), so it is not readable under the \
                                 policy",
                                self.access.caller.principal.name
                            )),
                        )));
                    }
                    provider
                } else {
                    provider.with_statistics().await
                }
            }
        };
        Ok(Some(match policy {
            None => Arc::new(provider),
            Some(policy) => {
                let ids = provider.field_ids().clone();
                Arc::new(PolicyTable::new(
                    Arc::new(provider),
                    &ids,
                    format!("{}.{ident}", self.access.warehouse),
                    policy,
                ))
            }
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.tables
            .as_ref()
            .is_some_and(|t| t.iter().any(|n| n == name))
    }
}

/// A listed table the caller may not read: no columns, and a scan fails with the refusal.
#[derive(Debug)]
struct Unreadable(Arc<CatalogError>);

#[async_trait]
impl TableProvider for Unreadable {
    fn schema(&self) -> datafusion::arrow::datatypes::SchemaRef {
        Arc::new(datafusion::arrow::datatypes::Schema::empty())
    }

    fn table_type(&self) -> datafusion::datasource::TableType {
        datafusion::datasource::TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn datafusion::catalog::Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[datafusion::prelude::Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        Err(DataFusionError::External(Box::new(
            CatalogError::PermissionDenied(self.0.to_string()),
        )))
    }
}

fn is_not_found(e: &CatalogError) -> bool {
    matches!(e, CatalogError::NotFound { .. } | CatalogError::Hidden(_))
}

/// Every namespace (nested ones too) and table of a warehouse the caller may see.
pub async fn list_warehouse(access: &TableAccess) -> floe_catalog::Result<Listing> {
    let mut listing = Listing::new();
    let mut pending: Vec<Option<NamespaceIdent>> = vec![None];
    while let Some(parent) = pending.pop() {
        let mut page = PageRequest::default();
        loop {
            let namespaces = access
                .service
                .list_namespaces(&access.caller, &access.warehouse, parent.as_ref(), &page)
                .await?;
            for ns in namespaces.items {
                let mut tables = Vec::new();
                let mut table_page = PageRequest::default();
                loop {
                    match access
                        .service
                        .list_tables(&access.caller, &access.warehouse, &ns, &table_page)
                        .await
                    {
                        Ok(found) => {
                            tables.extend(found.items);
                            match found.next_token {
                                Some(token) => table_page.token = Some(token),
                                None => break,
                            }
                        }
                        // Seen as a parent but not listable: no tables shown.
                        Err(CatalogError::PermissionDenied(_)) => break,
                        Err(e) => return Err(e),
                    }
                }
                listing.insert(ns.join("."), tables);
                pending.push(Some(ns));
            }
            match namespaces.next_token {
                Some(token) => page.token = Some(token),
                None => break,
            }
        }
    }
    Ok(listing)
}
