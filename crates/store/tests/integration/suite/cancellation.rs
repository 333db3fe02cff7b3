//! Writes whose callers vanish at every point leave the store as usable as before.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use floe_catalog::model::{NamespaceRecord, PageRequest};
use floe_catalog::store::CatalogStore;
use uuid::Uuid;

use super::{ns, warehouse};

/// Drops thousands of namespace creations after 0–2 ms, eight at a time, so that some are cut
/// between `BEGIN` and their first statement, inside it, and at commit; then a write must
/// succeed at once, and every namespace listed must read whole.
pub async fn cancelled_writes(store: Arc<dyn CatalogStore>) {
    let wh = warehouse(&store, "cancelled-writes").await;
    let mut running = tokio::task::JoinSet::new();
    for i in 0..3000u64 {
        let store = store.clone();
        running.spawn(async move {
            // A cheap spread of delays from 0 to 2 ms, without a random source.
            let delay = Duration::from_micros((i * 7919) % 2000);
            let record = NamespaceRecord {
                id: Uuid::now_v7(),
                warehouse_id: wh.id,
                ident: ns(&[&format!("cut{i}")]),
                properties: HashMap::new(),
            };
            let _ = tokio::time::timeout(delay, store.create_namespace(&record)).await;
        });
        if running.len() >= 8 {
            running.join_next().await;
        }
    }
    while running.join_next().await.is_some() {}
    let after = NamespaceRecord {
        id: Uuid::now_v7(),
        warehouse_id: wh.id,
        ident: ns(&["after"]),
        properties: HashMap::new(),
    };
    tokio::time::timeout(Duration::from_secs(3), store.create_namespace(&after))
        .await
        .expect("a write after thousands of cancelled ones takes no longer than usual")
        .unwrap();
    let listed = store
        .list_namespaces(
            wh.id,
            None,
            &PageRequest {
                token: None,
                size: Some(10_000),
            },
            None,
        )
        .await
        .unwrap()
        .items;
    assert!(listed.contains(&after.ident));
    for ident in listed {
        let read = store.get_namespace(wh.id, &ident).await.unwrap();
        assert_eq!(read.map(|r| r.ident), Some(ident));
    }
}
