//! Namespaces: nested, with properties.

use std::collections::HashMap;

use iceberg::NamespaceIdent;
use uuid::Uuid;

use super::{CatalogService, WarehouseHandle};
use crate::governance::authz::{Caller, Privilege, SEP, Scope};
use crate::ident::{namespace_key, validate_namespace};
use crate::model::{NamespaceRecord, Page, PageRequest, Visibility};
use crate::store::PropertyChanges;
use crate::{CatalogError, Result};

impl CatalogService {
    /// The scope of a namespace's container: its parent, or the warehouse.
    fn parent_scope(wh: &WarehouseHandle, ns: &NamespaceIdent) -> Scope {
        match ns.parent() {
            Some(parent) => Scope::namespace(wh.warehouse.id, &parent),
            None => Scope::warehouse(wh.warehouse.id),
        }
    }

    pub async fn create_namespace(
        &self,
        caller: &Caller,
        warehouse: &str,
        ns: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<NamespaceRecord> {
        validate_namespace(ns)?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        caller.require(
            Privilege::CreateNamespace,
            &Self::parent_scope(&wh, ns),
            || {
                CatalogError::no_such_namespace(
                    ns.parent().map(|p| p.join(".")).unwrap_or_default(),
                )
            },
        )?;
        if let Some(location) = properties.get("location") {
            wh.storage.require_inside(location)?;
        }
        if let Some(parent) = ns.parent() {
            self.require_namespace(&wh, &parent).await?;
        }
        let record = NamespaceRecord {
            id: Uuid::now_v7(),
            warehouse_id: wh.warehouse.id,
            ident: ns.clone(),
            properties,
        };
        self.store.create_namespace(&record).await?;
        Ok(record)
    }

    /// Checks that the namespace exists and the caller holds `privilege` on it (as
    /// [`CatalogService::authorize_table`] does for a table).
    pub async fn authorize_namespace(
        &self,
        caller: &Caller,
        warehouse: &str,
        ns: &NamespaceIdent,
        privilege: Privilege,
    ) -> Result<()> {
        validate_namespace(ns)?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        caller.require(privilege, &Scope::namespace(wh.warehouse.id, ns), || {
            CatalogError::no_such_namespace(ns.join("."))
        })?;
        self.require_namespace(&wh, ns).await.map(|_| ())
    }

    pub async fn load_namespace(
        &self,
        caller: &Caller,
        warehouse: &str,
        ns: &NamespaceIdent,
    ) -> Result<NamespaceRecord> {
        validate_namespace(ns)?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        caller.require_visible(&Scope::namespace(wh.warehouse.id, ns), || {
            CatalogError::no_such_namespace(ns.join("."))
        })?;
        let mut record = self.require_namespace(&wh, ns).await?;
        // A namespace created without a location says where its tables go by default, as
        // engines that place tables themselves (Trino) expect; it is not stored.
        if !record.properties.contains_key("location") {
            let path: Vec<String> = ns
                .iter()
                .map(|p| super::tables::sanitize_segment(p))
                .collect();
            let location = wh.storage.root().join(&path.join("/")).to_string();
            record.properties.insert("location".into(), location);
        }
        Ok(record)
    }

    /// Direct children of `parent`: all of them for a caller holding `list-namespaces` on the
    /// parent, otherwise only those the caller holds a grant on or below (filtered in the
    /// store query).
    pub async fn list_namespaces(
        &self,
        caller: &Caller,
        warehouse: &str,
        parent: Option<&NamespaceIdent>,
        page: &PageRequest,
    ) -> Result<Page<NamespaceIdent>> {
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let parent_scope = match parent {
            Some(parent) => {
                validate_namespace(parent)?;
                let scope = Scope::namespace(wh.warehouse.id, parent);
                caller.require_visible(&scope, || {
                    CatalogError::no_such_namespace(parent.join("."))
                })?;
                self.require_namespace(&wh, parent).await?;
                scope
            }
            None => Scope::warehouse(wh.warehouse.id),
        };
        let visibility = (!caller
            .grants
            .allows(Privilege::ListNamespaces, &parent_scope))
        .then(|| Visibility {
            principal: caller.principal.id,
            prefix: format!("{}{SEP}", wh.warehouse.id),
        });
        self.store
            .list_namespaces(wh.warehouse.id, parent, page, visibility.as_ref())
            .await
    }

    pub async fn drop_namespace(
        &self,
        caller: &Caller,
        warehouse: &str,
        ns: &NamespaceIdent,
    ) -> Result<()> {
        validate_namespace(ns)?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        caller.require(
            Privilege::DropNamespace,
            &Scope::namespace(wh.warehouse.id, ns),
            || CatalogError::no_such_namespace(ns.join(".")),
        )?;
        let action = format!("drop namespace {}", ns.join("."));
        let guard = self
            .require_unprotected(&wh, Some(ns), None, &action)
            .await?;
        let dropped = self.store.drop_namespace(wh.warehouse.id, ns, &guard).await;
        self.refused_meanwhile(dropped, &wh, Some(ns), None, &action)
            .await
    }

    pub async fn update_namespace_properties(
        &self,
        caller: &Caller,
        warehouse: &str,
        ns: &NamespaceIdent,
        updates: HashMap<String, String>,
        removals: Vec<String>,
    ) -> Result<PropertyChanges> {
        validate_namespace(ns)?;
        if let Some(both) = removals.iter().find(|k| updates.contains_key(*k)) {
            return Err(CatalogError::bad_request(format!(
                "property {both:?} is both updated and removed"
            )));
        }
        let wh = self.visible_warehouse(caller, warehouse).await?;
        caller.require(
            Privilege::UpdateNamespace,
            &Scope::namespace(wh.warehouse.id, ns),
            || CatalogError::no_such_namespace(ns.join(".")),
        )?;
        if let Some(location) = updates.get("location") {
            wh.storage.require_inside(location)?;
        }
        self.store
            .update_namespace_properties(wh.warehouse.id, ns, &updates, &removals)
            .await
    }
}

/// The scope prefix of tables and views directly in `ns`: `<warehouse>␟<ns key>␟t:`.
pub(crate) fn tabular_prefix(warehouse: uuid::Uuid, ns: &NamespaceIdent) -> String {
    format!("{warehouse}{SEP}{}{SEP}t:", namespace_key(ns))
}
