//! `PipelineStore` conformance: definitions and leases.

use std::sync::Arc;

use floe_catalog::CatalogError;
use floe_catalog::pipelines::PipelineStore;
use uuid::Uuid;

pub async fn pipelines(store: Arc<dyn PipelineStore>) {
    let wh = Uuid::now_v7();
    let spec = serde_json::json!({"topics": ["a"]});
    store.create_pipeline("p1", wh, &spec).await.unwrap();
    store.create_pipeline("p0", wh, &spec).await.unwrap();
    assert!(matches!(
        store.create_pipeline("p1", wh, &spec).await,
        Err(CatalogError::AlreadyExists { .. })
    ));
    let listed: Vec<String> = store
        .list_pipelines()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(listed, ["p0", "p1"]);
    let got = store.get_pipeline("p1").await.unwrap().unwrap();
    assert_eq!(got.spec, spec);
    assert_eq!(got.warehouse_id, wh);
    assert_eq!(got.owner, None);

    // One holder at a time; renewal by the holder; takeover after expiry.
    assert!(store.lease_pipeline("p1", "a", 1_000, 2_000).await.unwrap());
    assert!(!store.lease_pipeline("p1", "b", 1_500, 2_500).await.unwrap());
    assert!(store.lease_pipeline("p1", "a", 1_900, 3_000).await.unwrap());
    assert!(!store.lease_pipeline("p1", "b", 2_999, 4_000).await.unwrap());
    assert!(store.lease_pipeline("p1", "b", 3_001, 4_000).await.unwrap());
    assert!(
        !store.lease_pipeline("p1", "a", 3_500, 5_000).await.unwrap(),
        "a was fenced"
    );
    let held = store.get_pipeline("p1").await.unwrap().unwrap();
    assert_eq!(
        (held.owner.as_deref(), held.lease_until_ms),
        (Some("b"), Some(4_000))
    );
    store.release_pipeline("p1", "a").await.unwrap();
    assert_eq!(
        store
            .get_pipeline("p1")
            .await
            .unwrap()
            .unwrap()
            .owner
            .as_deref(),
        Some("b")
    );
    store.release_pipeline("p1", "b").await.unwrap();
    assert!(
        store.lease_pipeline("p1", "a", 3_600, 5_000).await.unwrap(),
        "released"
    );
    assert!(!store.lease_pipeline("missing", "a", 0, 1).await.unwrap());

    assert!(store.delete_pipeline("p1").await.unwrap());
    assert!(!store.delete_pipeline("p1").await.unwrap());
    assert!(store.get_pipeline("p1").await.unwrap().is_none());
    assert!(store.delete_pipeline("p0").await.unwrap());
}
