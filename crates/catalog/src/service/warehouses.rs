//! Warehouses: create, list, get, delete, and validate their storage.
//!
//! A warehouse is created only when its storage passes validation
//! ([`floe_storage::validate`]): written, read, listed and deleted, and where it vends
//! credentials, STS issues one that reaches exactly one table's prefix. A refusal names the
//! step that failed. With `create_bucket`, the bucket is provisioned first
//! ([`floe_storage::bucket`]) and those steps lead the report.

use std::collections::HashMap;

use floe_storage::validate::{ValidationReport, validate};
use floe_storage::{StorageProfile, bucket};
use uuid::Uuid;

use super::{CatalogService, now_ms};
use crate::governance::authz::{Caller, Privilege, Scope};
use crate::ident::validate_name;
use crate::model::Warehouse;
use crate::{CatalogError, Result};

impl CatalogService {
    /// Creates a warehouse after its storage passed validation.
    pub async fn create_warehouse(
        &self,
        caller: &Caller,
        name: &str,
        storage: StorageProfile,
        properties: HashMap<String, String>,
    ) -> Result<Warehouse> {
        let (warehouse, _) = self
            .create_warehouse_validated(caller, name, storage, properties, false)
            .await?;
        Ok(warehouse)
    }

    /// Creates a warehouse — its bucket first with `create_bucket` — and returns the
    /// validation report; storage that fails validation is refused naming the failed step.
    pub async fn create_warehouse_validated(
        &self,
        caller: &Caller,
        name: &str,
        storage: StorageProfile,
        properties: HashMap<String, String>,
        create_bucket: bool,
    ) -> Result<(Warehouse, ValidationReport)> {
        require_manage_server(caller)?;
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
        if self.store.get_warehouse(name).await?.is_some() {
            return Err(CatalogError::already_exists(format!(
                "Warehouse already exists: {name}"
            )));
        }
        let report = provision_and_validate(&storage, create_bucket).await?;
        if let Some(failed) = report.failed_step() {
            return Err(CatalogError::bad_request(format!(
                "storage of warehouse {name} failed validation at step {}: {}",
                failed.step, failed.detail
            )));
        }
        let warehouse = Warehouse {
            id: Uuid::now_v7(),
            name: name.to_string(),
            storage,
            properties,
            created_at_ms: now_ms(),
        };
        self.store.create_warehouse(&warehouse).await?;
        Ok((warehouse, report))
    }

    /// Validates the storage of an existing warehouse (needs manage-warehouses on it).
    pub async fn validate_warehouse(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<ValidationReport> {
        let wh = self.visible_warehouse(caller, name).await?;
        let warehouse = wh.warehouse.clone();
        caller.require(
            Privilege::ManageWarehouses,
            &Scope::warehouse(warehouse.id),
            || {
                CatalogError::PermissionDenied(format!(
                    "principal {} may not validate warehouse {name}",
                    caller.principal.name
                ))
            },
        )?;
        Ok(validate(&warehouse.storage).await)
    }

    /// Validates storage a warehouse could be created on, creating nothing (needs
    /// manage-warehouses on the server, as creating one does).
    pub async fn validate_storage(
        &self,
        caller: &Caller,
        storage: &StorageProfile,
    ) -> Result<ValidationReport> {
        require_manage_server(caller)?;
        storage.validate()?;
        Ok(validate(storage).await)
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

fn require_manage_server(caller: &Caller) -> Result<()> {
    caller.require(Privilege::ManageWarehouses, &Scope::server(), || {
        CatalogError::PermissionDenied(format!(
            "principal {} may not create warehouses",
            caller.principal.name
        ))
    })
}

async fn provision_and_validate(
    storage: &StorageProfile,
    create_bucket: bool,
) -> Result<ValidationReport> {
    if !create_bucket {
        return Ok(validate(storage).await);
    }
    let StorageProfile::S3(s3) = storage else {
        return Err(CatalogError::bad_request(
            "create-bucket applies to S3 warehouses only",
        ));
    };
    let provisioned = bucket::provision(s3).await;
    if provisioned
        .iter()
        .any(|s| s.status == floe_storage::validate::StepStatus::Failed)
    {
        // Nothing to validate in a bucket that is not there: the refusal names the step.
        let location = storage
            .root_location()
            .map(|l| l.to_string())
            .unwrap_or_default();
        return Ok(ValidationReport::from_steps(location, provisioned));
    }
    Ok(validate(storage).await.after(provisioned))
}
