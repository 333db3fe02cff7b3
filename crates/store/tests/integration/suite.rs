//! One suite every store implementation must pass.

use std::collections::HashMap;
use std::sync::Arc;

use floe_catalog::CatalogError;
use floe_catalog::governance::audit::{
    AuditEvent, AuditOrder, AuditQuery, AuditScope, AuditStore, StatusClass, verify,
};
use floe_catalog::model::*;
use floe_catalog::store::CatalogStore;
use floe_storage::StorageProfile;
use iceberg::NamespaceIdent;
use uuid::Uuid;

mod cancellation;
mod events;
mod jobs;
mod migrations;
mod pipelines;
mod registry;
mod soft_delete;
mod tenants;
pub use cancellation::cancelled_writes;
pub use events::events;
pub use jobs::jobs;
pub use migrations::migrations;
pub use pipelines::pipelines;
pub use registry::registry;
pub use soft_delete::soft_delete;
pub use tenants::tenants;

fn ns(parts: &[&str]) -> NamespaceIdent {
    NamespaceIdent::from_strs(parts.iter().copied()).unwrap()
}

async fn warehouse(store: &Arc<dyn CatalogStore>, name: &str) -> Warehouse {
    let w = Warehouse {
        id: Uuid::now_v7(),
        name: name.to_string(),
        storage: StorageProfile::Local {
            path: format!("/tmp/{name}"),
        },
        properties: HashMap::from([("k".into(), "v".into())]),
        created_at_ms: 1,
    };
    store.create_warehouse(&w).await.unwrap();
    w
}

async fn namespace(store: &Arc<dyn CatalogStore>, wh: Uuid, parts: &[&str]) {
    store
        .create_namespace(&NamespaceRecord {
            id: Uuid::now_v7(),
            warehouse_id: wh,
            ident: ns(parts),
            properties: HashMap::new(),
        })
        .await
        .unwrap();
}

fn tabular(wh: Uuid, parts: &[&str], name: &str, kind: TabularKind) -> NewTabular {
    let id = Uuid::now_v7();
    NewTabular {
        id,
        warehouse_id: wh,
        namespace: ns(parts),
        name: name.to_string(),
        kind,
        metadata_location: format!("file:///w/{name}/metadata/00000.metadata.json"),
        location: format!("file:///w/{name}-{}", id.simple()),
    }
}

pub async fn run_all(store: Arc<dyn CatalogStore>) {
    warehouses(&store).await;
    namespaces(&store).await;
    tabulars(&store).await;
    commits(&store).await;
    locations(&store).await;
    idempotency(&store).await;
}

/// Locations are claimed exclusively: none equals, contains or lies inside another's,
/// checked by the store inside the transaction that claims it (also for concurrent claims).
async fn locations(store: &Arc<dyn CatalogStore>) {
    let w = warehouse(store, "wh_loc").await;
    namespace(store, w.id, &["n"]).await;
    let at = |name: &str, location: &str| NewTabular {
        location: location.to_string(),
        ..tabular(w.id, &["n"], name, TabularKind::Table)
    };
    let finance = at("finance", "file:///wh/n/finance");
    store.create_tabular(&finance).await.unwrap();
    for (name, location) in [
        ("same", "file:///wh/n/finance"),
        ("inside", "file:///wh/n/finance/data"),
        ("around", "file:///wh/n"),
        ("root", "file:///"),
    ] {
        let err = store.create_tabular(&at(name, location)).await.unwrap_err();
        assert!(err.to_string().contains("n.finance"), "{location}: {err}");
        assert!(
            store
                .get_tabular(w.id, &ns(&["n"]), name)
                .await
                .unwrap()
                .is_none()
        );
    }
    // Neighbours whose names merely extend the victim's are free.
    for (name, location) in [
        ("f2", "file:///wh/n/finance2"),
        ("f3", "file:///wh/n/finance.x"),
    ] {
        store.create_tabular(&at(name, location)).await.unwrap();
    }
    assert_eq!(
        store
            .location_in_use(w.id, "file:///wh/n/finance/x", None)
            .await
            .unwrap()
            .as_deref(),
        Some("n.finance")
    );
    assert!(
        store
            .location_in_use(w.id, "file:///wh/n/finance", Some(finance.id))
            .await
            .unwrap()
            .is_none()
    );
    // A commit that moves a table into another's location loses, and changes nothing.
    let mover = at("mover", "file:///wh/n/mover");
    store.create_tabular(&mover).await.unwrap();
    let moved = store
        .commit(&[MetadataSwap::Update {
            id: mover.id,
            expected_location: mover.metadata_location.clone(),
            new_location: "file:///wh/n/mover/metadata/1.json".into(),
            moved_to: Some("file:///wh/n/finance/mover".into()),
        }])
        .await;
    assert!(
        matches!(&moved, Err(SwapFailure::LocationTaken { index: 0, other }) if other == "n.finance"),
        "{moved:?}"
    );
    let unchanged = store
        .get_tabular(w.id, &ns(&["n"]), "mover")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(unchanged.metadata_location, mover.metadata_location);
    assert_eq!(unchanged.location, mover.location);
    // The same record by id, wherever it is; an unknown id is none.
    let by_id = store.get_tabular_by_id(mover.id).await.unwrap().unwrap();
    assert_eq!(
        (by_id.name.as_str(), by_id.namespace.clone()),
        ("mover", ns(&["n"]))
    );
    assert!(
        store
            .get_tabular_by_id(Uuid::now_v7())
            .await
            .unwrap()
            .is_none()
    );
    // Concurrent creates of nested locations: exactly one wins.
    let mut handles = Vec::new();
    for i in 0..6 {
        let store = store.clone();
        let t = at(
            &format!("race{i}"),
            &format!("file:///wh/n/race{}", "/x".repeat(i)),
        );
        handles.push(tokio::spawn(async move {
            store.create_tabular(&t).await.is_ok()
        }));
    }
    let mut winners = 0;
    for h in handles {
        winners += usize::from(h.await.unwrap());
    }
    assert_eq!(winners, 1);
    // Locations stored in another spelling are rewritten in the canonical one.
    let changed = store
        .canonicalize_locations(|raw| Some(raw.replace("finance2", "finance-two")))
        .await
        .unwrap();
    assert!(changed >= 1);
    let renamed = store
        .get_tabular(w.id, &ns(&["n"]), "f2")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(renamed.location, "file:///wh/n/finance-two");
}

async fn warehouses(store: &Arc<dyn CatalogStore>) {
    let w = warehouse(store, "wh_a").await;
    let dup = store
        .create_warehouse(&Warehouse {
            id: Uuid::now_v7(),
            ..w.clone()
        })
        .await;
    assert!(
        matches!(dup, Err(CatalogError::AlreadyExists { .. })),
        "{dup:?}"
    );
    let got = store.get_warehouse("wh_a").await.unwrap().unwrap();
    assert_eq!(got.id, w.id);
    assert_eq!(got.storage, w.storage);
    assert_eq!(got.properties, w.properties);
    assert_eq!(
        store.get_warehouse_by_id(w.id).await.unwrap().unwrap().name,
        "wh_a"
    );
    assert!(store.get_warehouse("missing").await.unwrap().is_none());
    namespace(store, w.id, &["x"]).await;
    let busy = store.delete_warehouse(w.id, &[]).await;
    assert!(
        matches!(busy, Err(CatalogError::NamespaceNotEmpty(_))),
        "{busy:?}"
    );
    store.drop_namespace(w.id, &ns(&["x"]), &[]).await.unwrap();
    assert!(store.delete_warehouse(w.id, &[]).await.unwrap());
    assert!(!store.delete_warehouse(w.id, &[]).await.unwrap());
}

async fn namespaces(store: &Arc<dyn CatalogStore>) {
    let w = warehouse(store, "wh_ns").await;
    let other = warehouse(store, "wh_ns_other").await;
    for parts in [
        &["a"][..],
        &["b"],
        &["c"],
        &["a", "x"],
        &["a", "y"],
        &["a", "x", "deep"],
    ] {
        namespace(store, w.id, parts).await;
    }
    namespace(store, other.id, &["a"]).await;
    let dup = store
        .create_namespace(&NamespaceRecord {
            id: Uuid::now_v7(),
            warehouse_id: w.id,
            ident: ns(&["a"]),
            properties: HashMap::new(),
        })
        .await;
    assert!(
        matches!(dup, Err(CatalogError::AlreadyExists { .. })),
        "{dup:?}"
    );

    let top = store
        .list_namespaces(w.id, None, &PageRequest::default(), None)
        .await
        .unwrap();
    assert_eq!(top.items, vec![ns(&["a"]), ns(&["b"]), ns(&["c"])]);
    assert!(top.next_token.is_none());
    let children = store
        .list_namespaces(w.id, Some(&ns(&["a"])), &PageRequest::default(), None)
        .await
        .unwrap();
    assert_eq!(children.items, vec![ns(&["a", "x"]), ns(&["a", "y"])]);

    // Pagination walks every namespace exactly once.
    let first = store
        .list_namespaces(
            w.id,
            None,
            &PageRequest {
                token: None,
                size: Some(2),
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(first.items.len(), 2);
    let second = store
        .list_namespaces(
            w.id,
            None,
            &PageRequest {
                token: first.next_token.clone(),
                size: Some(2),
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(second.items, vec![ns(&["c"])]);
    assert!(second.next_token.is_none());

    let changes = store
        .update_namespace_properties(
            w.id,
            &ns(&["a"]),
            &HashMap::from([("owner".into(), "me".into())]),
            &["nope".into()],
        )
        .await
        .unwrap();
    assert_eq!(changes.updated, vec!["owner"]);
    assert_eq!(changes.missing, vec!["nope"]);
    let changes = store
        .update_namespace_properties(w.id, &ns(&["a"]), &HashMap::new(), &["owner".into()])
        .await
        .unwrap();
    assert_eq!(changes.removed, vec!["owner"]);
    let missing = store
        .update_namespace_properties(w.id, &ns(&["zz"]), &HashMap::new(), &[])
        .await;
    assert!(
        matches!(missing, Err(CatalogError::NotFound { .. })),
        "{missing:?}"
    );

    let not_empty = store.drop_namespace(w.id, &ns(&["a", "x"]), &[]).await;
    assert!(
        matches!(not_empty, Err(CatalogError::NamespaceNotEmpty(_))),
        "{not_empty:?}"
    );
    store
        .drop_namespace(w.id, &ns(&["a", "x", "deep"]), &[])
        .await
        .unwrap();
    store
        .drop_namespace(w.id, &ns(&["a", "x"]), &[])
        .await
        .unwrap();
    let gone = store.drop_namespace(w.id, &ns(&["a", "x"]), &[]).await;
    assert!(
        matches!(gone, Err(CatalogError::NotFound { .. })),
        "{gone:?}"
    );
    assert!(
        store
            .get_namespace(other.id, &ns(&["a"]))
            .await
            .unwrap()
            .is_some()
    );
}

async fn tabulars(store: &Arc<dyn CatalogStore>) {
    let w = warehouse(store, "wh_tab").await;
    namespace(store, w.id, &["n"]).await;
    namespace(store, w.id, &["m"]).await;
    let t = tabular(w.id, &["n"], "t1", TabularKind::Table);
    store.create_tabular(&t).await.unwrap();
    store
        .create_tabular(&tabular(w.id, &["n"], "t2", TabularKind::Table))
        .await
        .unwrap();
    store
        .create_tabular(&tabular(w.id, &["n"], "v1", TabularKind::View))
        .await
        .unwrap();
    let clash = store
        .create_tabular(&tabular(w.id, &["n"], "t1", TabularKind::View))
        .await;
    assert!(
        matches!(clash, Err(CatalogError::AlreadyExists { .. })),
        "{clash:?}"
    );
    let orphan = store
        .create_tabular(&tabular(w.id, &["none"], "t", TabularKind::Table))
        .await;
    assert!(
        matches!(orphan, Err(CatalogError::NotFound { .. })),
        "{orphan:?}"
    );

    let got = store
        .get_tabular(w.id, &ns(&["n"]), "t1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.id, t.id);
    assert_eq!(got.kind, TabularKind::Table);
    assert_eq!(got.namespace, ns(&["n"]));
    assert_eq!(got.metadata_location, t.metadata_location);

    let tables = store
        .list_tabulars(
            w.id,
            &ns(&["n"]),
            TabularKind::Table,
            &PageRequest::default(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(tables.items, vec!["t1", "t2"]);
    let views = store
        .list_tabulars(
            w.id,
            &ns(&["n"]),
            TabularKind::View,
            &PageRequest::default(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(views.items, vec!["v1"]);
    let paged = store
        .list_tabulars(
            w.id,
            &ns(&["n"]),
            TabularKind::Table,
            &PageRequest {
                token: None,
                size: Some(1),
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(paged.items, vec!["t1"]);
    assert_eq!(paged.next_token.as_deref(), Some("t1"));

    let busy = store.drop_namespace(w.id, &ns(&["n"]), &[]).await;
    assert!(
        matches!(busy, Err(CatalogError::NamespaceNotEmpty(_))),
        "{busy:?}"
    );

    store
        .rename_tabular(t.id, &ns(&["m"]), "moved")
        .await
        .unwrap();
    assert!(
        store
            .get_tabular(w.id, &ns(&["n"]), "t1")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .get_tabular(w.id, &ns(&["m"]), "moved")
            .await
            .unwrap()
            .unwrap()
            .id,
        t.id
    );
    let taken = store.rename_tabular(t.id, &ns(&["n"]), "v1").await;
    assert!(
        matches!(taken, Err(CatalogError::AlreadyExists { .. })),
        "{taken:?}"
    );

    assert!(
        !store
            .drop_tabular_at(t.id, "file:///elsewhere", &[])
            .await
            .unwrap()
    );
    assert!(
        store
            .drop_tabular_at(t.id, &t.metadata_location, &[])
            .await
            .unwrap()
    );
    assert!(!store.drop_tabular(t.id, &[]).await.unwrap());
}

async fn commits(store: &Arc<dyn CatalogStore>) {
    let w = warehouse(store, "wh_commit").await;
    namespace(store, w.id, &["n"]).await;
    let a = tabular(w.id, &["n"], "a", TabularKind::Table);
    let b = tabular(w.id, &["n"], "b", TabularKind::Table);
    store.create_tabular(&a).await.unwrap();
    store.create_tabular(&b).await.unwrap();
    let swap = |t: &NewTabular, from: &str, to: &str| MetadataSwap::Update {
        id: t.id,
        expected_location: from.to_string(),
        new_location: to.to_string(),
        moved_to: None,
    };
    store
        .commit(&[swap(&a, &a.metadata_location, "a1")])
        .await
        .unwrap();
    // A stale expectation loses.
    let lost = store.commit(&[swap(&a, &a.metadata_location, "a2")]).await;
    assert!(matches!(lost, Err(SwapFailure::Conflict(0))), "{lost:?}");
    // All or nothing: b's valid swap is rolled back with a's stale one.
    let mixed = store
        .commit(&[
            swap(&b, &b.metadata_location, "b1"),
            swap(&a, "stale", "a3"),
        ])
        .await;
    assert!(matches!(mixed, Err(SwapFailure::Conflict(1))), "{mixed:?}");
    let b_now = store
        .get_tabular(w.id, &ns(&["n"]), "b")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b_now.metadata_location, b.metadata_location);
    // A create inside a commit, and one whose name is taken.
    let c = tabular(w.id, &["n"], "c", TabularKind::Table);
    store
        .commit(&[
            swap(&b, &b.metadata_location, "b1"),
            MetadataSwap::Create(c.clone()),
        ])
        .await
        .unwrap();
    assert_eq!(
        store
            .get_tabular(w.id, &ns(&["n"]), "c")
            .await
            .unwrap()
            .unwrap()
            .id,
        c.id
    );
    let again = store
        .commit(&[MetadataSwap::Create(NewTabular {
            id: Uuid::now_v7(),
            ..c.clone()
        })])
        .await;
    assert!(
        matches!(again, Err(SwapFailure::AlreadyExists(0))),
        "{again:?}"
    );
    let a_now = store
        .get_tabular(w.id, &ns(&["n"]), "a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a_now.metadata_location, "a1");

    // Concurrent swaps from one base: exactly one wins.
    let mut handles = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let a = a.clone();
        handles.push(tokio::spawn(async move {
            store
                .commit(&[MetadataSwap::Update {
                    id: a.id,
                    expected_location: "a1".into(),
                    new_location: format!("race{i}"),
                    moved_to: None,
                }])
                .await
                .is_ok()
        }));
    }
    let mut winners = 0;
    for h in handles {
        winners += h.await.unwrap() as usize;
    }
    assert_eq!(winners, 1);
}

async fn idempotency(store: &Arc<dyn CatalogStore>) {
    let record = IdempotentResponse {
        key: Uuid::now_v7().to_string(),
        fingerprint: "POST /x".into(),
        status: 409,
        body: "{\"error\":1}".into(),
        created_at_ms: 1_000,
    };
    store.put_idempotent(&record).await.unwrap();
    store
        .put_idempotent(&IdempotentResponse {
            status: 200,
            ..record.clone()
        })
        .await
        .unwrap();
    let got = store.get_idempotent(&record.key).await.unwrap().unwrap();
    assert_eq!(got.status, 409, "the first final answer is kept");
    assert_eq!(got.body, record.body);
    assert_eq!(store.expire_idempotent(2_000).await.unwrap(), 1);
    assert!(store.get_idempotent(&record.key).await.unwrap().is_none());
}

pub async fn data_survives_reopen(store: Arc<dyn CatalogStore>) {
    let w = store.get_warehouse("wh_commit").await.unwrap().unwrap();
    let a = store
        .get_tabular(w.id, &ns(&["n"]), "a")
        .await
        .unwrap()
        .unwrap();
    assert!(
        a.metadata_location.starts_with("race"),
        "{}",
        a.metadata_location
    );
}

fn scoped_event(request_id: &str) -> AuditEvent {
    AuditEvent {
        at_ms: 7,
        request_id: request_id.into(),
        principal: "alice".into(),
        action: "POST /catalog/v1/{prefix}/namespaces".into(),
        resource: "/catalog/v1/w/namespaces".into(),
        decision: "allow".into(),
        status: 200,
        client: "127.0.0.1".into(),
        details: "{}".into(),
    }
}

async fn trail_ids(audit: &Arc<dyn AuditStore>) -> Vec<String> {
    let trail = audit.audit_trail().await.unwrap();
    verify(&trail).unwrap();
    trail.into_iter().map(|r| r.event.request_id).collect()
}

/// A request's audit record commits in the same transaction as the first change the request
/// makes, and only when that change commits.
pub async fn audit_commits_with_changes(store: Arc<dyn CatalogStore>, audit: Arc<dyn AuditStore>) {
    let wh = warehouse(&store, "audited").await;
    let before = trail_ids(&audit).await;

    // A change inside a scope writes its record, once, even when the request changes twice.
    let scope = AuditScope::new(scoped_event("req-1"));
    scope
        .run(async {
            namespace(&store, wh.id, &["a"]).await;
            store
                .update_namespace_properties(
                    wh.id,
                    &ns(&["a"]),
                    &HashMap::from([("x".into(), "1".into())]),
                    &[],
                )
                .await
                .unwrap();
        })
        .await;
    let (seq, committed) = scope.committed().expect("record committed with the change");
    assert_eq!(committed, scoped_event("req-1"));
    let ids = trail_ids(&audit).await;
    assert_eq!(ids.len(), before.len() + 1);
    assert_eq!(ids.last().unwrap(), "req-1");
    assert_eq!(seq as usize, ids.len());

    // A change that fails writes nothing: the record is the request layer's to write.
    let scope = AuditScope::new(scoped_event("req-2"));
    let err = scope
        .run(store.create_namespace(&NamespaceRecord {
            id: Uuid::now_v7(),
            warehouse_id: wh.id,
            ident: ns(&["a"]),
            properties: HashMap::new(),
        }))
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogError::AlreadyExists { .. }), "{err:?}");
    assert!(scope.committed().is_none());
    let t = tabular(wh.id, &["a"], "t", TabularKind::Table);
    store.create_tabular(&t).await.unwrap();
    let lost = scope
        .run(store.commit(&[MetadataSwap::Update {
            id: t.id,
            expected_location: "file:///elsewhere.json".into(),
            new_location: "file:///w/t/metadata/00001.metadata.json".into(),
            moved_to: None,
        }]))
        .await;
    assert!(matches!(lost, Err(SwapFailure::Conflict(0))));
    assert!(scope.committed().is_none());
    // Changes outside any request scope (start-up, background jobs) carry no record.
    assert_eq!(trail_ids(&audit).await.len(), before.len() + 1);

    // Scoped changes and batched appends from other tasks interleave into one intact chain.
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        let audit = audit.clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let scope = AuditScope::new(scoped_event(&format!("c-{i}")));
                scope
                    .run(namespace(&store, wh.id, &[&format!("n{i}")]))
                    .await;
                assert!(scope.committed().is_some());
            } else {
                audit
                    .append_audit(vec![scoped_event(&format!("b-{i}")); 3])
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let ids = trail_ids(&audit).await;
    assert_eq!(ids.len(), before.len() + 1 + 8 + 8 * 3);
}

/// Queries read the trail oldest first by default and newest first when asked, each paged
/// from where the last page ended, with every filter applied in both orders.
pub async fn audit_queries(audit: Arc<dyn AuditStore>) {
    let events: Vec<AuditEvent> = (0..25)
        .map(|i| AuditEvent {
            at_ms: 1_000 + i * 10,
            request_id: format!("q-{i}"),
            principal: "pager".into(),
            decision: if i % 3 == 1 { "deny" } else { "allow" }.into(),
            status: [200, 403, 500][i as usize % 3],
            ..scoped_event("")
        })
        .collect();
    audit.append_audit(events).await.unwrap();
    let ids = |records: &[floe_catalog::governance::audit::AuditRecord]| {
        records
            .iter()
            .map(|r| r.event.request_id.clone())
            .collect::<Vec<_>>()
    };
    let names =
        |range: &mut dyn Iterator<Item = i64>| range.map(|i| format!("q-{i}")).collect::<Vec<_>>();
    let pager = AuditQuery {
        principal: Some("pager".into()),
        limit: Some(10),
        ..AuditQuery::default()
    };

    // Oldest first stays the default.
    let first = audit.query_audit(&pager).await.unwrap();
    assert_eq!(ids(&first), names(&mut (0..10)));

    // Newest first, paged with before-seq until the trail runs out.
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = audit
            .query_audit(&AuditQuery {
                order: AuditOrder::Desc,
                before_seq: before,
                ..pager.clone()
            })
            .await
            .unwrap();
        assert!(page.windows(2).all(|w| w[0].seq > w[1].seq), "descending");
        let Some(last) = page.last() else { break };
        before = Some(last.seq);
        seen.extend(ids(&page));
    }
    assert_eq!(seen, names(&mut (0..25).rev()));

    // Filters hold in either order: a time window, a status class, a sequence range.
    let window = AuditQuery {
        order: AuditOrder::Desc,
        since_ms: Some(1_050),
        until_ms: Some(1_090),
        ..pager.clone()
    };
    assert_eq!(
        ids(&audit.query_audit(&window).await.unwrap()),
        names(&mut (5..=9).rev())
    );
    let refused = AuditQuery {
        order: AuditOrder::Desc,
        status_class: Some(StatusClass::ClientError),
        limit: Some(3),
        ..pager.clone()
    };
    let refused = audit.query_audit(&refused).await.unwrap();
    assert_eq!(ids(&refused), ["q-22", "q-19", "q-16"]);
    assert!(
        refused
            .iter()
            .all(|r| r.event.status == 403 && r.event.decision == "deny")
    );
    let all = audit
        .query_audit(&AuditQuery {
            limit: Some(100),
            ..pager.clone()
        })
        .await
        .unwrap();
    let between = AuditQuery {
        after_seq: Some(all[3].seq),
        before_seq: Some(all[7].seq),
        ..pager.clone()
    };
    assert_eq!(
        ids(&audit.query_audit(&between).await.unwrap()),
        names(&mut (4..7))
    );
}
