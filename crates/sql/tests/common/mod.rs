//! What the engine's integration tests share: an engine over a fresh embedded catalog.

use std::sync::Arc;

use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogConfig, CatalogService};
use floe_sql::{EngineConfig, SqlEngine};
use floe_storage::StorageProfile;

/// An engine configured by `config` over a catalog in `dir` (SQLite store, local warehouse
/// `default` below it).
pub async fn engine_in(dir: &tempfile::TempDir, config: EngineConfig) -> SqlEngine {
    let store = floe_store::SqlStore::connect(
        &format!("sqlite:{}/catalog.db", dir.path().display()),
        Default::default(),
    )
    .await
    .unwrap();
    let service = Arc::new(CatalogService::new(
        Arc::new(store),
        CatalogConfig::default(),
    ));
    service
        .create_warehouse(
            &Caller::system(),
            "default",
            StorageProfile::Local {
                path: dir.path().join("warehouse").to_string_lossy().into_owned(),
            },
            Default::default(),
        )
        .await
        .unwrap();
    SqlEngine::new(service, config).unwrap()
}
