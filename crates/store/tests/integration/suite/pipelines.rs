//! `PipelineStore` conformance: definitions, members and partition leases.

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
    // Members: joining renews, a member whose lease ran out is forgotten.
    assert_eq!(
        store.join_pipeline("p1", "b", 1_000, 2_000).await.unwrap(),
        ["b"]
    );
    assert_eq!(
        store.join_pipeline("p1", "a", 1_000, 2_000).await.unwrap(),
        ["a", "b"]
    );
    assert_eq!(
        store.join_pipeline("p1", "a", 1_900, 3_000).await.unwrap(),
        ["a", "b"]
    );
    assert_eq!(
        store.join_pipeline("p1", "a", 2_500, 3_500).await.unwrap(),
        ["a"]
    );

    // Partitions: one holder at a time; renewal by the holder; takeover after expiry.
    let p = |n: i32| ("t".to_string(), n);
    assert_eq!(
        store
            .lease_partitions("p1", "a", 1_000, 2_000, &[p(0), p(1)])
            .await
            .unwrap(),
        [p(0), p(1)]
    );
    assert_eq!(
        store
            .lease_partitions("p1", "b", 1_500, 2_500, &[p(1), p(2)])
            .await
            .unwrap(),
        [p(2)]
    );
    assert_eq!(
        store
            .lease_partitions("p1", "a", 1_900, 3_000, &[p(0), p(1)])
            .await
            .unwrap(),
        [p(0), p(1)]
    );
    assert_eq!(
        store
            .lease_partitions("p1", "b", 3_001, 4_000, &[p(0), p(2)])
            .await
            .unwrap(),
        [p(0), p(2)],
        "a's lease on 0 ran out"
    );
    // Releasing keeps what is asked for; others may then take the rest.
    store.release_partitions("p1", "b", &[p(2)]).await.unwrap();
    let leases = store.partition_leases("p1").await.unwrap();
    let owners: Vec<(i32, Option<&str>)> = leases
        .iter()
        .map(|l| (l.partition, l.owner.as_deref()))
        .collect();
    assert_eq!(owners, [(0, None), (1, Some("a")), (2, Some("b"))]);
    assert_eq!(
        store
            .lease_partitions("p1", "a", 3_100, 5_000, &[p(0)])
            .await
            .unwrap(),
        [p(0)]
    );
    store.leave_pipeline("p1", "b").await.unwrap();
    assert_eq!(
        store.join_pipeline("p1", "a", 3_200, 5_000).await.unwrap(),
        ["a"]
    );
    assert_eq!(
        store.partition_leases("p1").await.unwrap()[2].owner,
        None,
        "left"
    );

    assert!(store.delete_pipeline("p1").await.unwrap());
    assert!(store.partition_leases("p1").await.unwrap().is_empty());
    assert!(!store.delete_pipeline("p1").await.unwrap());
    assert!(store.get_pipeline("p1").await.unwrap().is_none());
    assert!(store.delete_pipeline("p0").await.unwrap());
}
