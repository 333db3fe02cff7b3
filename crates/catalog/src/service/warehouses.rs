//! Warehouses: create, list, get, delete.

use std::collections::HashMap;

use floe_storage::{StorageProfile, WarehouseStorage};
use uuid::Uuid;

use super::{CatalogService, now_ms};
use crate::ident::validate_name;
use crate::model::Warehouse;
use crate::{CatalogError, Result};

impl CatalogService {
    /// Creates a warehouse after checking that its storage is reachable and writable.
    pub async fn create_warehouse(
        &self,
        name: &str,
        storage: StorageProfile,
        properties: HashMap<String, String>,
    ) -> Result<Warehouse> {
        validate_name("warehouse", name)?;
        if name.contains('/') {
            return Err(CatalogError::bad_request(format!(
                "warehouse name {name:?} must not contain '/'"
            )));
        }
        storage.validate()?;
        let opened = WarehouseStorage::new(storage.clone())?;
        let probe = opened
            .root()
            .join(&format!(".floe-probe-{}", Uuid::new_v4()));
        opened
            .write(&probe.to_string(), bytes::Bytes::from_static(b"probe"))
            .await
            .map_err(|e| {
                CatalogError::bad_request(format!(
                    "storage of warehouse {name} is not writable: {e}"
                ))
            })?;
        opened.delete(&probe.to_string()).await?;
        let warehouse = Warehouse {
            id: Uuid::now_v7(),
            name: name.to_string(),
            storage,
            properties,
            created_at_ms: now_ms(),
        };
        self.store.create_warehouse(&warehouse).await?;
        Ok(warehouse)
    }

    /// Creates the warehouse unless one of that name exists.
    pub async fn ensure_warehouse(&self, name: &str, storage: StorageProfile) -> Result<Warehouse> {
        if let Some(existing) = self.store.get_warehouse(name).await? {
            return Ok(existing);
        }
        self.create_warehouse(name, storage, HashMap::new()).await
    }

    pub async fn list_warehouses(&self) -> Result<Vec<Warehouse>> {
        self.store.list_warehouses().await
    }

    pub async fn get_warehouse(&self, name: &str) -> Result<Warehouse> {
        Ok(self.warehouse(name).await?.warehouse.clone())
    }

    /// Deletes an empty warehouse.
    pub async fn delete_warehouse(&self, name: &str) -> Result<()> {
        let warehouse = self
            .store
            .get_warehouse(name)
            .await?
            .ok_or_else(|| CatalogError::no_such_warehouse(name))?;
        self.store.delete_warehouse(warehouse.id).await?;
        self.forget_warehouse(name);
        Ok(())
    }
}
