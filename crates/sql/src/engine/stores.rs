//! The object stores a query can reach: each warehouse's, under `floe://wh-<id>`, registered
//! by the engine when a caller first touches the warehouse — and nothing else.
//!
//! DataFusion's default registry answers `file://` with an unrooted local file system, so
//! any statement that names a URL (`COPY … TO '/path'`, an external table) could read or
//! write whatever the process may. The statement surface refuses those statements
//! ([`super::surface`]); this registry makes sure that, whatever plan gets through, the only
//! stores behind it are warehouse stores, rooted at their warehouse (see
//! `floe_storage::WarehouseStorage`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreRegistry;
use object_store::ObjectStore;
use url::Url;

/// The scheme of warehouse store URLs.
pub(crate) const SCHEME: &str = "floe";

#[derive(Debug, Default)]
pub(crate) struct WarehouseStores {
    stores: RwLock<HashMap<String, Arc<dyn ObjectStore>>>,
}

fn key(url: &Url) -> String {
    format!("{}://{}", url.scheme(), url.authority())
}

impl ObjectStoreRegistry for WarehouseStores {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        if url.scheme() != SCHEME {
            tracing::warn!(%url, "refuse to register an object store that is not a warehouse's");
            return None;
        }
        self.stores
            .write()
            .expect("store registry lock")
            .insert(key(url), store)
    }

    fn deregister_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        self.stores
            .write()
            .expect("store registry lock")
            .remove(&key(url))
            .ok_or_else(|| no_store(url))
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        self.stores
            .read()
            .expect("store registry lock")
            .get(&key(url))
            .cloned()
            .ok_or_else(|| no_store(url))
    }
}

fn no_store(url: &Url) -> DataFusionError {
    DataFusionError::Plan(format!(
        "no object store serves {url}: Floe's SQL reads and writes Iceberg tables only"
    ))
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;

    #[test]
    fn only_warehouse_stores_are_served() {
        let registry = WarehouseStores::default();
        for url in [
            "file:///",
            "file:///etc/passwd",
            "s3://bucket/x",
            "memory://",
        ] {
            let url = Url::parse(url).unwrap();
            assert!(registry.get_store(&url).is_err(), "{url}");
            assert!(
                registry
                    .register_store(&url, Arc::new(InMemory::new()))
                    .is_none()
            );
            assert!(registry.get_store(&url).is_err(), "{url}");
        }
        let warehouse = Url::parse("floe://wh-1").unwrap();
        registry.register_store(&warehouse, Arc::new(InMemory::new()));
        assert!(registry.get_store(&warehouse).is_ok());
        assert!(
            registry
                .get_store(&Url::parse("floe://wh-1/some/file.parquet").unwrap())
                .is_ok()
        );
        assert!(
            registry
                .get_store(&Url::parse("floe://wh-2").unwrap())
                .is_err()
        );
    }
}
