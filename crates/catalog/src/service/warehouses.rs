//! Warehouses: create, list, get, delete.

use std::collections::HashMap;

use floe_storage::{StorageProfile, WarehouseStorage};
use uuid::Uuid;

use super::{CatalogService, now_ms};
use crate::governance::authz::{Caller, Privilege, Scope};
use crate::ident::validate_name;
use crate::model::Warehouse;
use crate::{CatalogError, Result};

impl CatalogService {
    /// Creates a warehouse after checking that its storage is reachable and writable.
    pub async fn create_warehouse(
        &self,
        caller: &Caller,
        name: &str,
        storage: StorageProfile,
        properties: HashMap<String, String>,
    ) -> Result<Warehouse> {
        caller.require(Privilege::ManageWarehouses, &Scope::server(), || {
            CatalogError::PermissionDenied(format!(
                "principal {} may not create warehouses",
                caller.principal.name
            ))
        })?;
        validate_name("warehouse", name)?;
        if name.contains('/') {
            return Err(CatalogError::bad_request(format!(
                "warehouse name {name:?} must not contain '/'"
            )));
        }
        storage.validate()?;
        crate::soft_delete::parse_retention(
            properties
                .get(crate::soft_delete::RETENTION_PROPERTY)
                .map(String::as_str),
        )?;
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
        self.create_warehouse(&Caller::system(), name, storage, HashMap::new())
            .await
    }

    /// The warehouses the caller holds anything in.
    pub async fn list_warehouses(&self, caller: &Caller) -> Result<Vec<Warehouse>> {
        let mut warehouses = self.store.list_warehouses().await?;
        warehouses.retain(|w| caller.grants.sees(&Scope::warehouse(w.id)));
        Ok(warehouses)
    }

    pub async fn get_warehouse(&self, caller: &Caller, name: &str) -> Result<Warehouse> {
        Ok(self
            .visible_warehouse(caller, name)
            .await?
            .warehouse
            .clone())
    }

    /// Deletes an empty warehouse; refused under deletion protection.
    pub async fn delete_warehouse(&self, caller: &Caller, name: &str) -> Result<()> {
        let wh = self.visible_warehouse(caller, name).await?;
        let warehouse = wh.warehouse.clone();
        caller.require(
            Privilege::ManageWarehouses,
            &Scope::warehouse(warehouse.id),
            || CatalogError::no_such_warehouse(name),
        )?;
        let action = format!("delete warehouse {name}");
        let guard = self.require_unprotected(&wh, None, None, &action).await?;
        let deleted = self.store.delete_warehouse(warehouse.id, &guard).await;
        self.refused_meanwhile(deleted, &wh, None, None, &action)
            .await?;
        self.forget_warehouse(name);
        Ok(())
    }
}
