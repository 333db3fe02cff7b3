//! The catalog service: every catalog operation, over a store and the warehouses' storage.

mod credentials;
mod dropped;
mod namespaces;
mod policies;
mod protection;
mod rebase;
mod repair;
mod securables;
mod signing;
mod tables;
mod transactions;
mod views;
mod warehouses;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use floe_storage::WarehouseStorage;

pub(crate) use crate::clock::now_ms;
use crate::metadata::MetadataIo;
use crate::model::Warehouse;
use crate::store::CatalogStore;
use crate::{CatalogError, Result};

pub use credentials::TableCredentials;
pub use protection::{FLAG as PROTECTION_FLAG, Governing};
pub use repair::TableFiles;
pub use securables::SecurableRef;
pub use signing::SignRequest;
pub use tables::{CreateTable, LoadedTable, TableCommitRequest};
pub use views::{CreateView, LoadedView};

/// Tunables of the catalog service.
#[derive(Debug, Clone)]
pub struct CatalogConfig {
    /// How often a commit that lost a race is re-applied on the new base before the client
    /// gets a 409.
    pub commit_retries: usize,
    /// Metadata files kept in the in-memory cache.
    pub metadata_cache_entries: usize,
    /// How long a warehouse definition is cached before it is read from the store again.
    pub warehouse_cache_ttl: Duration,
    /// Lifetime of vended storage credentials.
    pub vended_credentials_ttl: Duration,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        Self {
            commit_retries: 8,
            metadata_cache_entries: 1024,
            warehouse_cache_ttl: Duration::from_secs(30),
            vended_credentials_ttl: Duration::from_secs(3600),
        }
    }
}

/// A warehouse with its storage, ready for use.
#[derive(Debug)]
pub struct WarehouseHandle {
    pub warehouse: Warehouse,
    pub storage: WarehouseStorage,
    loaded_at: Instant,
}

/// Catalog operations. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct CatalogService {
    store: Arc<dyn CatalogStore>,
    metadata: MetadataIo,
    warehouses: RwLock<HashMap<String, Arc<WarehouseHandle>>>,
    config: CatalogConfig,
    /// Every successful table commit, for whoever listens (the maintenance scheduler).
    commits: tokio::sync::broadcast::Sender<CommittedTable>,
    /// Tenants (warehouses) and their limits in force on this node.
    tenants: Arc<crate::tenants::Tenants>,
}

/// A table as a commit left it.
#[derive(Debug, Clone)]
pub struct CommittedTable {
    pub warehouse: String,
    pub ident: iceberg::TableIdent,
    pub metadata: Arc<iceberg::spec::TableMetadata>,
}

impl CatalogService {
    pub fn new(store: Arc<dyn CatalogStore>, config: CatalogConfig) -> Self {
        Self {
            store,
            metadata: MetadataIo::new(config.metadata_cache_entries),
            warehouses: RwLock::new(HashMap::new()),
            config,
            commits: tokio::sync::broadcast::channel(1024).0,
            tenants: Arc::default(),
        }
    }

    /// Tenants (warehouses) and their limits in force on this node.
    pub fn tenants(&self) -> &Arc<crate::tenants::Tenants> {
        &self.tenants
    }

    /// Tables as successful commits leave them, from now on. A receiver that falls more
    /// than 1,024 commits behind misses some (and is told so).
    /// Rewrites table and view locations stored before the store kept one canonical
    /// spelling (the overlap check compares that spelling); run once at start-up.
    pub async fn canonicalize_locations(&self) -> Result<u64> {
        self.store
            .canonicalize_locations(|raw| {
                floe_storage::Location::parse(raw)
                    .ok()
                    .map(|l| l.to_string())
            })
            .await
    }

    pub fn subscribe_commits(&self) -> tokio::sync::broadcast::Receiver<CommittedTable> {
        self.commits.subscribe()
    }

    pub(crate) fn announce_commit(&self, warehouse: &str, loaded: &LoadedTable) {
        if self.commits.receiver_count() > 0 {
            let _ = self.commits.send(CommittedTable {
                warehouse: warehouse.to_string(),
                ident: loaded.ident.clone(),
                metadata: loaded.metadata.clone(),
            });
        }
    }

    pub fn store(&self) -> &Arc<dyn CatalogStore> {
        &self.store
    }

    /// The named warehouse, from cache or store; `NoSuchWarehouse` when it does not exist.
    pub async fn warehouse(&self, name: &str) -> Result<Arc<WarehouseHandle>> {
        if let Some(hit) = self.warehouses.read().expect("warehouse cache").get(name)
            && hit.loaded_at.elapsed() < self.config.warehouse_cache_ttl
        {
            return Ok(hit.clone());
        }
        let warehouse = self
            .store
            .get_warehouse(name)
            .await?
            .ok_or_else(|| CatalogError::no_such_warehouse(name))?;
        let storage = WarehouseStorage::new(warehouse.storage.clone())
            .map_err(|e| CatalogError::internal(format!("open storage of warehouse {name}"), e))?;
        let handle = Arc::new(WarehouseHandle {
            warehouse,
            storage,
            loaded_at: Instant::now(),
        });
        self.warehouses
            .write()
            .expect("warehouse cache")
            .insert(name.to_string(), handle.clone());
        Ok(handle)
    }

    /// The named warehouse, if the caller holds anything in it (else `NoSuchWarehouse`).
    pub async fn visible_warehouse(
        &self,
        caller: &crate::governance::authz::Caller,
        name: &str,
    ) -> Result<Arc<WarehouseHandle>> {
        let handle = self.warehouse(name).await?;
        caller.require_visible(
            &crate::governance::authz::Scope::warehouse(handle.warehouse.id),
            || CatalogError::no_such_warehouse(name),
        )?;
        Ok(handle)
    }

    fn forget_warehouse(&self, name: &str) {
        self.warehouses
            .write()
            .expect("warehouse cache")
            .remove(name);
    }
}
