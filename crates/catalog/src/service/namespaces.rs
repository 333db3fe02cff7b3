//! Namespaces: nested, with properties.

use std::collections::HashMap;

use iceberg::NamespaceIdent;
use uuid::Uuid;

use super::CatalogService;
use crate::ident::validate_namespace;
use crate::model::{NamespaceRecord, Page, PageRequest};
use crate::store::PropertyChanges;
use crate::{CatalogError, Result};

impl CatalogService {
    pub async fn create_namespace(
        &self,
        warehouse: &str,
        ns: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<NamespaceRecord> {
        validate_namespace(ns)?;
        let wh = self.warehouse(warehouse).await?;
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

    pub async fn load_namespace(
        &self,
        warehouse: &str,
        ns: &NamespaceIdent,
    ) -> Result<NamespaceRecord> {
        validate_namespace(ns)?;
        let wh = self.warehouse(warehouse).await?;
        self.require_namespace(&wh, ns).await
    }

    pub async fn list_namespaces(
        &self,
        warehouse: &str,
        parent: Option<&NamespaceIdent>,
        page: &PageRequest,
    ) -> Result<Page<NamespaceIdent>> {
        let wh = self.warehouse(warehouse).await?;
        if let Some(parent) = parent {
            validate_namespace(parent)?;
            self.require_namespace(&wh, parent).await?;
        }
        self.store
            .list_namespaces(wh.warehouse.id, parent, page)
            .await
    }

    pub async fn drop_namespace(&self, warehouse: &str, ns: &NamespaceIdent) -> Result<()> {
        validate_namespace(ns)?;
        let wh = self.warehouse(warehouse).await?;
        self.store.drop_namespace(wh.warehouse.id, ns).await
    }

    pub async fn update_namespace_properties(
        &self,
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
        let wh = self.warehouse(warehouse).await?;
        if let Some(location) = updates.get("location") {
            wh.storage.require_inside(location)?;
        }
        self.store
            .update_namespace_properties(wh.warehouse.id, ns, &updates, &removals)
            .await
    }
}
