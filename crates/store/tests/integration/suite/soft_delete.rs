//! `SoftDeleteStore` conformance: a soft drop frees the name, keeps grants and queues its
//! purge job in the same transaction; an undrop restores the same id and is refused when the
//! name is taken or the namespace is gone; a purge forgets the record with its grants; a
//! dropped table's location stays claimed; deletion protection is set, read and cleared.

use std::sync::Arc;

use floe_catalog::jobs::{JobFilter, JobStore, NewJob};
use floe_catalog::model::TabularKind;
use floe_catalog::soft_delete::{PURGE_JOB, ProtectedKind, Protection, SoftDrop, UndropRefusal};
use floe_catalog::store::CatalogStore;
use serde_json::json;
use uuid::Uuid;

fn soft_drop(warehouse: Uuid, id: Uuid, expires_at_ms: i64) -> SoftDrop {
    SoftDrop {
        id,
        expected_location: None,
        dropped_by: "alice".into(),
        dropped_at_ms: 1_000,
        expires_at_ms,
        purge_requested: true,
        purge_job: NewJob {
            warehouse_id: warehouse,
            table_id: id,
            kind: PURGE_JOB.into(),
            priority: 0,
            trigger: "drop".into(),
            max_attempts: 5,
            params: json!({"warehouse": "soft", "id": id}),
            not_before_ms: expires_at_ms,
        },
        guard: Vec::new(),
    }
}

pub async fn soft_delete(store: Arc<dyn CatalogStore>, jobs: Arc<dyn JobStore>) {
    let wh = super::warehouse(&store, "soft").await;
    super::namespace(&store, wh.id, &["sd"]).await;
    super::namespace(&store, wh.id, &["sd", "inner"]).await;
    let table = super::tabular(wh.id, &["sd"], "orders", TabularKind::Table);
    store.create_tabular(&table).await.unwrap();

    assert!(
        store
            .soft_drop_tabular(&soft_drop(wh.id, table.id, 9_000))
            .await
            .unwrap()
    );
    assert!(
        !store
            .soft_drop_tabular(&soft_drop(wh.id, table.id, 9_000))
            .await
            .unwrap(),
        "a second drop finds nothing live"
    );
    assert!(
        store
            .get_tabular(wh.id, &super::ns(&["sd"]), "orders")
            .await
            .unwrap()
            .is_none()
    );
    let dropped = store.get_dropped(table.id).await.unwrap().expect("kept");
    assert_eq!(
        (
            dropped.name.as_str(),
            dropped.namespace.clone(),
            dropped.expires_at_ms
        ),
        ("orders", super::ns(&["sd"]), 9_000)
    );
    assert!(dropped.purge_requested);
    assert_eq!(dropped.location, table.location);
    // The purge job was queued with the drop, due at the expiry.
    let queued = jobs
        .list_jobs(&JobFilter {
            table_id: Some(table.id),
            kind: Some(PURGE_JOB.into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].not_before_ms, 9_000);

    // Listed for the warehouse and for the namespace (and its parent), not for a sibling.
    assert_eq!(
        store
            .list_dropped(wh.id, None, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    // Pages by id: nothing after the one there is, nothing in a page of none.
    assert!(
        store
            .list_dropped(wh.id, None, Some(table.id), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_dropped(wh.id, None, None, 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .list_dropped(wh.id, Some(&super::ns(&["sd"])), None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .list_dropped(wh.id, Some(&super::ns(&["sd", "inner"])), None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // The dropped table's files stay: its location is still claimed.
    let inside = format!("{}/sub", table.location);
    let claimed = store.location_in_use(wh.id, &inside, None).await.unwrap();
    assert!(
        claimed.is_some_and(|c| c.contains("sd.orders")),
        "location stays claimed"
    );

    // The name is free at once; an undrop is refused while it is taken.
    let mut other = super::tabular(wh.id, &["sd"], "orders", TabularKind::Table);
    other.location = format!("{}-new", table.location);
    store.create_tabular(&other).await.unwrap();
    assert_eq!(
        store.undrop_tabular(table.id).await.unwrap(),
        Err(UndropRefusal::NameTaken)
    );
    assert!(
        store.get_dropped(table.id).await.unwrap().is_some(),
        "still dropped"
    );
    assert!(store.drop_tabular(other.id, &[]).await.unwrap());

    // Undropped: same id, the queued purge gone.
    assert_eq!(store.undrop_tabular(table.id).await.unwrap(), Ok(()));
    let back = store
        .get_tabular(wh.id, &super::ns(&["sd"]), "orders")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.id, table.id);
    assert!(store.get_dropped(table.id).await.unwrap().is_none());
    assert_eq!(
        store.undrop_tabular(table.id).await.unwrap(),
        Err(UndropRefusal::NotDropped)
    );
    let queued = jobs
        .list_jobs(&JobFilter {
            table_id: Some(table.id),
            kind: Some(PURGE_JOB.into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(queued.is_empty(), "the undrop takes its purge job back");

    // Dropped again, its namespace dropped: the undrop is refused, the purge forgets it.
    assert!(
        store
            .soft_drop_tabular(&soft_drop(wh.id, table.id, 9_000))
            .await
            .unwrap()
    );
    store
        .drop_namespace(wh.id, &super::ns(&["sd", "inner"]), &[])
        .await
        .unwrap();
    store
        .drop_namespace(wh.id, &super::ns(&["sd"]), &[])
        .await
        .unwrap();
    assert_eq!(
        store.undrop_tabular(table.id).await.unwrap(),
        Err(UndropRefusal::NamespaceGone)
    );
    let busy = store.delete_warehouse(wh.id, &[]).await;
    assert!(
        busy.is_err(),
        "a warehouse keeping dropped tables is not deleted"
    );
    assert!(store.purge_dropped(table.id, &[]).await.unwrap());
    assert!(!store.purge_dropped(table.id, &[]).await.unwrap());
    assert!(
        store
            .location_in_use(wh.id, &inside, None)
            .await
            .unwrap()
            .is_none()
    );

    // Protection: set once, read back, cleared.
    let protection = Protection {
        securable_id: wh.id,
        warehouse_id: wh.id,
        kind: ProtectedKind::Warehouse,
        set_by: "root".into(),
        set_at_ms: 5,
    };
    assert!(
        store
            .set_protection(wh.id, Some(&protection))
            .await
            .unwrap()
    );
    assert!(
        !store
            .set_protection(wh.id, Some(&protection))
            .await
            .unwrap()
    );
    assert_eq!(
        store.protections(&[Uuid::now_v7(), wh.id]).await.unwrap(),
        vec![protection.clone()]
    );
    assert_eq!(
        store.warehouse_protections(wh.id).await.unwrap(),
        vec![protection.clone()]
    );
    // The drop's own transaction checks its guard again: a flag set after the catalog's
    // check still refuses it, with the 409 of deletion protection.
    super::namespace(&store, wh.id, &["sd"]).await;
    let guarded = super::tabular(wh.id, &["sd"], "guarded", TabularKind::Table);
    store.create_tabular(&guarded).await.unwrap();
    let refused = store
        .drop_tabular(guarded.id, &[guarded.id, wh.id])
        .await
        .unwrap_err();
    assert_eq!(
        refused.error_type(),
        "DeletionProtectedException",
        "{refused}"
    );
    let mut soft = soft_drop(wh.id, guarded.id, 9_000);
    soft.guard = vec![guarded.id, wh.id];
    assert_eq!(
        store
            .soft_drop_tabular(&soft)
            .await
            .unwrap_err()
            .error_type(),
        "DeletionProtectedException"
    );
    assert!(
        store
            .drop_namespace(wh.id, &super::ns(&["sd"]), &[wh.id])
            .await
            .unwrap_err()
            .to_string()
            .contains("deletion-protection")
    );
    assert!(store.get_tabular_by_id(guarded.id).await.unwrap().is_some());
    // A flag is not set on an object that is gone (it could never be cleared).
    let gone = Protection {
        securable_id: Uuid::now_v7(),
        kind: ProtectedKind::Table,
        ..protection
    };
    assert!(
        !store
            .set_protection(gone.securable_id, Some(&gone))
            .await
            .unwrap()
    );
    assert!(store.set_protection(wh.id, None).await.unwrap());
    assert!(
        store
            .drop_tabular(guarded.id, &[guarded.id, wh.id])
            .await
            .unwrap()
    );
    store
        .drop_namespace(wh.id, &super::ns(&["sd"]), &[wh.id])
        .await
        .unwrap();
    assert!(store.protections(&[wh.id]).await.unwrap().is_empty());
    assert!(store.delete_warehouse(wh.id, &[]).await.unwrap());
}
