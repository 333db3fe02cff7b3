//! `TenantStore` conformance: limits set, replaced, listed by warehouse name with a version
//! that moves on every change, removed, and gone with their warehouse.

use std::sync::Arc;

use floe_catalog::store::CatalogStore;
use floe_catalog::tenants::TenantStore;
use serde_json::json;

pub async fn tenants(catalog: Arc<dyn CatalogStore>, store: Arc<dyn TenantStore>) {
    let a = super::warehouse(&catalog, "tenant-a").await;
    let b = super::warehouse(&catalog, "tenant-b").await;
    assert!(store.list_tenant_limits().await.unwrap().is_empty());

    store
        .set_tenant_limits(a.id, Some(&json!({"ingest-records-per-second": 10})))
        .await
        .unwrap();
    store
        .set_tenant_limits(b.id, Some(&json!({"max-active-series": 5})))
        .await
        .unwrap();
    let listed = store.list_tenant_limits().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].warehouse, "tenant-a");
    assert_eq!(listed[0].limits, json!({"ingest-records-per-second": 10}));
    let first = listed[0].updated_at_ms;

    // A change, however quick, moves the version on.
    store
        .set_tenant_limits(a.id, Some(&json!({"ingest-records-per-second": 20})))
        .await
        .unwrap();
    let listed = store.list_tenant_limits().await.unwrap();
    assert_eq!(listed[0].limits, json!({"ingest-records-per-second": 20}));
    assert!(listed[0].updated_at_ms > first);

    store.set_tenant_limits(b.id, None).await.unwrap();
    let listed = store.list_tenant_limits().await.unwrap();
    assert_eq!(listed.len(), 1);

    // A dropped warehouse's limits are not listed.
    assert!(catalog.delete_warehouse(a.id, &[]).await.unwrap());
    assert!(store.list_tenant_limits().await.unwrap().is_empty());
}
