//! Views: create, load, replace, drop, list, rename, register.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{Schema, ViewFormatVersion, ViewMetadata, ViewMetadataBuilder, ViewVersion};
use iceberg::{NamespaceIdent, TableIdent, ViewUpdate};
use uuid::Uuid;

use super::CatalogService;
use super::tables::{canonical_location, validate_ident};
use crate::commit::{ViewRequirement, apply_view_updates, check_view_requirements};
use crate::governance::authz::{Caller, Privilege, Scope};
use crate::metadata::next_metadata_location;
use crate::model::{
    MetadataSwap, NewTabular, Page, PageRequest, SwapFailure, TabularKind, TabularRecord,
};
use crate::{CatalogError, Result};

#[derive(Debug, Clone)]
pub struct CreateView {
    pub name: String,
    pub location: Option<String>,
    pub schema: Schema,
    pub view_version: ViewVersion,
    pub properties: HashMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct LoadedView {
    pub ident: TableIdent,
    pub metadata_location: String,
    pub metadata: Arc<ViewMetadata>,
}

impl CatalogService {
    /// The error for creating or registering a view under a taken name.
    fn view_exists_error(kind: TabularKind, ident: &TableIdent) -> CatalogError {
        match kind {
            TabularKind::View => {
                CatalogError::already_exists(format!("View already exists: {ident}"))
            }
            TabularKind::Table => CatalogError::already_exists(format!(
                "Table with same name already exists: {ident}"
            )),
        }
    }

    /// The view, if the caller holds `privilege` on it (403), or can see it at all (404).
    async fn view_record(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
        privilege: Privilege,
    ) -> Result<(Arc<super::WarehouseHandle>, TabularRecord)> {
        validate_ident(ident, "view")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        match self.find_tabular(&wh, ident).await? {
            Some(record) if record.kind == TabularKind::View => {
                caller.require(privilege, &record.scope(), || {
                    CatalogError::no_such_view(ident)
                })?;
                Ok((wh, record))
            }
            _ => Err(CatalogError::no_such_view(ident)),
        }
    }

    pub async fn create_view(
        &self,
        caller: &Caller,
        warehouse: &str,
        ns: &NamespaceIdent,
        request: CreateView,
    ) -> Result<LoadedView> {
        let ident = TableIdent::new(ns.clone(), request.name.clone());
        validate_ident(&ident, "view")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        caller.require(
            Privilege::CreateView,
            &Scope::namespace(wh.warehouse.id, ns),
            || CatalogError::no_such_namespace(ns.join(".")),
        )?;
        let id = Uuid::now_v7();
        let location = self
            .new_location(&wh, ns, &request.name, id, request.location.as_deref())
            .await?;
        if let Some(existing) = self.find_tabular(&wh, &ident).await? {
            return Err(Self::view_exists_error(existing.kind, &ident));
        }
        let metadata = ViewMetadataBuilder::new(
            location.clone(),
            request.schema,
            request.view_version,
            ViewFormatVersion::V1,
            request.properties,
        )
        .and_then(|b| b.build())
        .map_err(crate::commit::from_iceberg)?
        .metadata;
        let metadata = Arc::new(metadata);
        let metadata_location = next_metadata_location(&location, None, metadata.properties());
        self.metadata
            .write_view(&wh.storage, &metadata_location, metadata.clone())
            .await?;
        let inserted = self
            .store
            .create_tabular(&NewTabular {
                id,
                warehouse_id: wh.warehouse.id,
                namespace: ns.clone(),
                name: request.name,
                kind: TabularKind::View,
                metadata_location: metadata_location.clone(),
                location: canonical_location(&location)?,
            })
            .await;
        self.settle_create(&wh, inserted, &metadata_location)
            .await?;
        Ok(LoadedView {
            ident,
            metadata_location,
            metadata,
        })
    }

    pub async fn load_view(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<LoadedView> {
        let (wh, record) = self
            .view_record(caller, warehouse, ident, Privilege::ReadMetadata)
            .await?;
        let metadata = self
            .metadata
            .read_view(&wh.storage, &record.metadata_location)
            .await?;
        Ok(LoadedView {
            ident: ident.clone(),
            metadata_location: record.metadata_location,
            metadata,
        })
    }

    pub async fn view_exists(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<bool> {
        match self
            .view_record(caller, warehouse, ident, Privilege::ReadMetadata)
            .await
        {
            Ok(_) => Ok(true),
            Err(CatalogError::NotFound {
                error_type: "NoSuchViewException",
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub async fn list_views(
        &self,
        caller: &Caller,
        warehouse: &str,
        ns: &NamespaceIdent,
        page: &PageRequest,
    ) -> Result<Page<String>> {
        self.list_tabulars(caller, warehouse, ns, TabularKind::View, page)
            .await
    }

    /// Replaces a view's metadata, re-applying on the new base when a concurrent replace wins.
    pub async fn replace_view(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
        requirements: Vec<ViewRequirement>,
        updates: Vec<ViewUpdate>,
    ) -> Result<LoadedView> {
        for attempt in 0..=self.config.commit_retries {
            let (wh, record) = self
                .view_record(caller, warehouse, ident, Privilege::WriteData)
                .await?;
            let base = self
                .metadata
                .read_view(&wh.storage, &record.metadata_location)
                .await?;
            check_view_requirements(&base, &requirements)?;
            let new = apply_view_updates(&base, updates.clone())?;
            let moved_to = if canonical_location(new.location())? != record.location {
                Some(
                    self.claim_location(&wh, new.location(), Some(record.id))
                        .await?,
                )
            } else {
                None
            };
            let new_location = next_metadata_location(
                new.location(),
                Some(&record.metadata_location),
                new.properties(),
            );
            let new = Arc::new(new);
            self.metadata
                .write_view(&wh.storage, &new_location, new.clone())
                .await?;
            let swap = MetadataSwap::Update {
                id: record.id,
                expected_location: record.metadata_location.clone(),
                new_location: new_location.clone(),
                moved_to,
            };
            match self.store.commit(&[swap]).await {
                Ok(()) => {
                    return Ok(LoadedView {
                        ident: ident.clone(),
                        metadata_location: new_location,
                        metadata: new,
                    });
                }
                Err(SwapFailure::Store(e)) => {
                    tracing::error!(error = %e, view = %ident, "store failed during view commit");
                    return Err(CatalogError::CommitStateUnknown(
                        "the metadata store failed while committing; the commit may or may not have been applied"
                            .to_string(),
                    ));
                }
                Err(SwapFailure::LocationTaken { other, .. }) => {
                    self.discard_file(&wh, &new_location).await;
                    return Err(CatalogError::bad_request(format!(
                        "the view's location overlaps the location of {other}"
                    )));
                }
                Err(_) => {
                    self.discard_file(&wh, &new_location).await;
                    tracing::debug!(attempt, view = %ident, "retry view commit on new base");
                }
            }
        }
        Err(CatalogError::CommitFailed(format!(
            "replace of view {ident} kept losing to concurrent commits; retry it"
        )))
    }

    pub async fn drop_view(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
    ) -> Result<()> {
        let (wh, record) = self
            .view_record(caller, warehouse, ident, Privilege::DropView)
            .await?;
        match self
            .remove_tabular(
                caller,
                &wh,
                &record,
                super::dropped::Removal::Drop { purge: false },
            )
            .await?
        {
            super::dropped::Removed::Missed => Err(CatalogError::no_such_view(ident)),
            _ => Ok(()),
        }
    }

    pub async fn rename_view(
        &self,
        caller: &Caller,
        warehouse: &str,
        from: &TableIdent,
        to: &TableIdent,
    ) -> Result<()> {
        self.rename_tabular(caller, warehouse, from, to, TabularKind::View)
            .await
    }

    pub async fn register_view(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
        metadata_location: &str,
    ) -> Result<LoadedView> {
        validate_ident(ident, "view")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        caller.require(
            Privilege::CreateView,
            &Scope::namespace(wh.warehouse.id, &ident.namespace),
            || CatalogError::no_such_namespace(ident.namespace.join(".")),
        )?;
        wh.storage.require_inside(metadata_location)?;
        self.require_namespace(&wh, &ident.namespace).await?;
        if let Some(existing) = self.find_tabular(&wh, ident).await? {
            return Err(Self::view_exists_error(existing.kind, ident));
        }
        let metadata = self
            .metadata
            .read_view(&wh.storage, metadata_location)
            .await
            .map_err(|e| match e {
                CatalogError::Internal { .. } => CatalogError::bad_request(format!(
                    "cannot read view metadata file {metadata_location}"
                )),
                other => other,
            })?;
        let view_location = floe_storage::Location::parse(metadata.location())?;
        if !floe_storage::Location::parse(metadata_location)?.is_within(&view_location) {
            return Err(CatalogError::bad_request(format!(
                "metadata file {metadata_location} does not lie under its view's location {}",
                metadata.location()
            )));
        }
        let location = self.claim_location(&wh, metadata.location(), None).await?;
        self.store
            .create_tabular(&NewTabular {
                id: Uuid::now_v7(),
                warehouse_id: wh.warehouse.id,
                namespace: ident.namespace.clone(),
                name: ident.name.clone(),
                kind: TabularKind::View,
                metadata_location: metadata_location.to_string(),
                location,
            })
            .await?;
        Ok(LoadedView {
            ident: ident.clone(),
            metadata_location: metadata_location.to_string(),
            metadata,
        })
    }
}
