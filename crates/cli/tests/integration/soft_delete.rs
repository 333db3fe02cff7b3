//! Soft delete and deletion protection through the server: REST drops hide and keep, the
//! management API lists and undrops (same id), and a set protection flag refuses every drop
//! and purge — REST, SQL and the dropped list's purge alike — with a 409 naming it.

use serde_json::{Value, json};

use crate::harness::{Answer, Api, Floe, simple_schema};

const NS: &str = "/catalog/v1/default/namespaces";

async fn put(api: &Api, path: &str, body: Value) -> Answer {
    api.send(api.http.put(format!("{}{path}", api.base)).json(&body))
        .await
}

async fn create_table(api: &Api, ns: &str, name: &str) -> String {
    let created = api
        .post(
            &format!("{NS}/{ns}/tables"),
            json!({"name": name, "schema": simple_schema()}),
        )
        .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    created.body["metadata"]["table-uuid"]
        .as_str()
        .unwrap()
        .to_string()
}

fn on_table(ns: &str, name: &str) -> Value {
    json!({"type": "table", "warehouse": "default", "namespace": [ns], "name": name})
}

#[tokio::test]
async fn protection_refuses_every_drop_path_until_cleared() {
    let floe = Floe::start("sqlite").await;
    let root = Api::new(&floe);
    assert_eq!(
        root.post(NS, json!({"namespace": ["prod"]})).await.status,
        200
    );
    create_table(&root, "prod", "orders").await;
    create_table(&root, "prod", "staging").await;

    let set = put(
        &root,
        "/api/v1/protection",
        json!({"on": on_table("prod", "orders"), "protected": true}),
    )
    .await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    assert_eq!(set.body["protected"], true);

    let refused = root
        .delete(&format!("{NS}/prod/tables/orders?purgeRequested=true"))
        .await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(refused.error_type(), "DeletionProtectedException");
    assert!(
        refused.message().contains("deletion-protection")
            && refused.message().contains("table prod.orders"),
        "{}",
        refused.message()
    );
    let by_sql = root
        .post(
            "/api/v1/sql",
            json!({"sql": "DROP TABLE default.prod.orders"}),
        )
        .await;
    assert!(
        by_sql.status >= 400 && by_sql.message().contains("deletion-protection"),
        "{} {:?}",
        by_sql.status,
        by_sql.body
    );
    assert_eq!(
        root.get(&format!("{NS}/prod/tables/orders")).await.status,
        200
    );

    // A protected namespace refuses its own drop and those of everything in it.
    let ns = json!({"type": "namespace", "warehouse": "default", "namespace": ["prod"]});
    assert_eq!(
        put(
            &root,
            "/api/v1/protection",
            json!({"on": ns, "protected": true})
        )
        .await
        .status,
        200
    );
    let inside = root.delete(&format!("{NS}/prod/tables/staging")).await;
    assert_eq!(inside.status, 409);
    assert!(
        inside.message().contains("namespace prod"),
        "{}",
        inside.message()
    );
    let read = root
        .get("/api/v1/protection?warehouse=default&namespace=prod&table=staging")
        .await;
    assert_eq!(
        (
            read.body["protected"].clone(),
            read.body["drops-refused"].clone()
        ),
        (json!(false), json!(true))
    );

    // Cleared: the drops go through.
    for on in [ns, on_table("prod", "orders")] {
        let cleared = put(
            &root,
            "/api/v1/protection",
            json!({"on": on, "protected": false}),
        )
        .await;
        assert_eq!(cleared.body["changed"], true, "{:?}", cleared.body);
    }
    assert_eq!(
        root.delete(&format!("{NS}/prod/tables/orders"))
            .await
            .status,
        204
    );
    assert_eq!(
        root.delete(&format!("{NS}/prod/tables/staging"))
            .await
            .status,
        204
    );

    // Protecting the server is no such thing.
    let server = put(
        &root,
        "/api/v1/protection",
        json!({"on": {"type": "server"}, "protected": true}),
    )
    .await;
    assert_eq!(server.status, 400);
}

#[tokio::test]
async fn soft_deleted_table_is_hidden_listed_and_undropped_with_its_id() {
    let floe = Floe::start("sqlite").await;
    let root = Api::new(&floe);
    let on = put(
        &root,
        "/api/v1/warehouses/default/soft-delete",
        json!({"retention-seconds": 3600}),
    )
    .await;
    assert_eq!(
        (on.status, on.body["retention-seconds"].clone()),
        (200, json!(3600))
    );
    assert_eq!(
        root.post(NS, json!({"namespace": ["sd"]})).await.status,
        200
    );
    let uuid = create_table(&root, "sd", "t").await;

    assert_eq!(
        root.delete(&format!("{NS}/sd/tables/t?purgeRequested=true"))
            .await
            .status,
        204
    );
    let gone = root.get(&format!("{NS}/sd/tables/t")).await;
    assert_eq!(
        (gone.status, gone.error_type().as_str()),
        (404, "NoSuchTableException")
    );
    let listed = root
        .get("/api/v1/warehouses/default/dropped?namespace=sd")
        .await;
    let dropped = listed.body["dropped"].as_array().unwrap();
    assert_eq!(dropped.len(), 1, "{:?}", listed.body);
    assert_eq!(dropped[0]["purge-requested"], true);
    // Floe's id of the table (what its grants and the undrop name); its Iceberg table-uuid is
    // in the metadata, which is kept as it was.
    let id = dropped[0]["id"].as_str().unwrap().to_string();

    // The name is free: a new table takes it, and the undrop is refused meanwhile.
    create_table(&root, "sd", "t").await;
    let undrop = format!("/api/v1/warehouses/default/dropped/{id}/undrop");
    let taken = root.post(&undrop, json!({})).await;
    assert_eq!(taken.status, 409, "{:?}", taken.body);
    assert_eq!(root.delete(&format!("{NS}/sd/tables/t")).await.status, 204);
    // The second table is now dropped too; purge it at once.
    let listed = root.get("/api/v1/warehouses/default/dropped").await;
    let second = listed.body["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] != id.as_str())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let purged = root
        .post(
            &format!("/api/v1/warehouses/default/dropped/{second}/purge"),
            json!({}),
        )
        .await;
    assert_eq!(purged.status, 200, "{:?}", purged.body);

    let back = root.post(&undrop, json!({})).await;
    assert_eq!(back.status, 200, "{:?}", back.body);
    let loaded = root.get(&format!("{NS}/sd/tables/t")).await;
    assert_eq!(loaded.body["metadata"]["table-uuid"], uuid.as_str());
    assert!(
        root.get("/api/v1/warehouses/default/dropped").await.body["dropped"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let bad = put(
        &root,
        "/api/v1/warehouses/default/soft-delete",
        json!({"retention-seconds": -1}),
    )
    .await;
    assert_eq!(bad.status, 400);
}

/// Creates a principal holding `grants` (privilege, securable) through a role of its own, and
/// answers an `Api` acting as it.
async fn principal_with(floe: &Floe, root: &Api, name: &str, grants: &[(&str, Value)]) -> Api {
    let created = root
        .post(
            "/api/v1/principals",
            json!({"name": name, "kind": "service"}),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let credentials = &created.body["credentials"];
    let role = format!("role-{name}");
    assert_eq!(
        root.post("/api/v1/roles", json!({"name": role}))
            .await
            .status,
        201
    );
    let member = root
        .post(
            &format!("/api/v1/roles/{role}/members"),
            json!({"principal": name}),
        )
        .await;
    assert_eq!(member.status, 204, "{:?}", member.body);
    for (privilege, on) in grants {
        let answer = root
            .post(
                "/api/v1/grants",
                json!({"role": role, "privilege": privilege, "on": on}),
            )
            .await;
        assert_eq!(answer.status, 204, "{privilege} on {on}: {:?}", answer.body);
    }
    let token = crate::harness::token_for(
        &floe.base,
        credentials["client-id"].as_str().unwrap(),
        credentials["client-secret"].as_str().unwrap(),
    )
    .await;
    Api::with_token(floe, &token)
}

fn on_ns(ns: &str) -> Value {
    json!({"type": "namespace", "warehouse": "default", "namespace": [ns]})
}

async fn dropped_ids(api: &Api, query: &str) -> (u16, Vec<String>, Value) {
    let listed = api
        .get(&format!("/api/v1/warehouses/default/dropped{query}"))
        .await;
    let ids = listed.body["dropped"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| d["id"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    (listed.status, ids, listed.body["next-after"].clone())
}

#[tokio::test]
async fn protection_has_no_side_door_and_dropped_tables_answer_only_their_holders() {
    let floe = Floe::start("sqlite").await;
    let root = Api::new(&floe);
    let on = put(
        &root,
        "/api/v1/warehouses/default/soft-delete",
        json!({"retention-seconds": 3600}),
    )
    .await;
    assert_eq!(on.status, 200, "{:?}", on.body);
    for ns in ["prod", "scratch", "own", "gone"] {
        assert_eq!(root.post(NS, json!({"namespace": [ns]})).await.status, 200);
    }
    create_table(&root, "prod", "ledger").await;
    create_table(&root, "own", "t1").await;
    create_table(&root, "gone", "old").await;
    let protect = put(
        &root,
        "/api/v1/protection",
        json!({"on": on_ns("prod"), "protected": true}),
    )
    .await;
    assert_eq!(protect.status, 200, "{:?}", protect.body);

    // Moving a table out of a protected namespace, then dropping it, would be a drop the flag
    // never refused: the move is refused.
    let moved = root
        .post(
            "/catalog/v1/default/tables/rename",
            json!({
                "source": {"namespace": ["prod"], "name": "ledger"},
                "destination": {"namespace": ["scratch"], "name": "ledger"},
            }),
        )
        .await;
    assert_eq!(moved.status, 409, "{:?}", moved.body);
    assert_eq!(moved.error_type(), "DeletionProtectedException");
    assert!(
        moved.message().contains("namespace prod"),
        "{}",
        moved.message()
    );
    // Registering over a protected table loses it: refused like a drop.
    let loaded = root.get(&format!("{NS}/prod/tables/ledger")).await;
    let location = loaded.body["metadata-location"]
        .as_str()
        .unwrap()
        .to_string();
    let replaced = root
        .post(
            &format!("{NS}/prod/register"),
            json!({"name": "ledger", "metadata-location": location, "overwrite": true}),
        )
        .await;
    assert_eq!(replaced.status, 409, "{:?}", replaced.body);
    assert_eq!(replaced.error_type(), "DeletionProtectedException");

    // A principal that may drop in `own` but not create there: it lists and purges what it
    // may drop, but an undrop (a create of the name) needs create-table too.
    let dropper = principal_with(
        &floe,
        &root,
        "dropper",
        &[("drop-table", on_ns("own")), ("read-data", on_ns("own"))],
    )
    .await;
    let reader = principal_with(&floe, &root, "reader", &[("read-data", on_ns("own"))]).await;
    assert_eq!(
        dropper.delete(&format!("{NS}/own/tables/t1")).await.status,
        204
    );
    let (status, ids, _) = dropped_ids(&dropper, "").await;
    assert_eq!((status, ids.len()), (200, 1));
    let t1 = ids[0].clone();
    let undrop = format!("/api/v1/warehouses/default/dropped/{t1}/undrop");
    let refused = dropper.post(&undrop, json!({})).await;
    assert_eq!(refused.status, 403, "{:?}", refused.body);
    // A reader sees nothing to act on and may do nothing.
    assert!(dropped_ids(&reader, "").await.1.is_empty());
    assert_eq!(reader.post(&undrop, json!({})).await.status, 403);
    assert_eq!(
        reader
            .post(
                &format!("/api/v1/warehouses/default/dropped/{t1}/purge"),
                json!({})
            )
            .await
            .status,
        403
    );
    assert_eq!(root.post(&undrop, json!({})).await.status, 200);

    // Orphaned dropped tables (their namespace dropped, then made again under the same name)
    // are not the new namespace's: its grants neither list nor purge them.
    assert_eq!(
        root.delete(&format!("{NS}/gone/tables/old")).await.status,
        204
    );
    assert_eq!(root.delete(&format!("{NS}/gone")).await.status, 204);
    assert_eq!(
        root.post(NS, json!({"namespace": ["gone"]})).await.status,
        200
    );
    let newcomer = principal_with(&floe, &root, "newcomer", &[("drop-table", on_ns("gone"))]).await;
    let (status, orphans, _) = dropped_ids(&newcomer, "?namespace=gone").await;
    assert_eq!((status, orphans.len()), (200, 0));
    let (_, all, _) = dropped_ids(&root, "").await;
    assert_eq!(all.len(), 1, "root sees the orphan");
    let purge_orphan = newcomer
        .post(
            &format!("/api/v1/warehouses/default/dropped/{}/purge", all[0]),
            json!({}),
        )
        .await;
    assert!(
        matches!(purge_orphan.status, 403 | 404),
        "{:?}",
        purge_orphan.body
    );

    // The listing pages.
    create_table(&root, "scratch", "a").await;
    assert_eq!(
        root.delete(&format!("{NS}/scratch/tables/a")).await.status,
        204
    );
    let (_, first, next) = dropped_ids(&root, "?limit=1").await;
    assert_eq!(first.len(), 1);
    let next = next.as_str().expect("a next page").to_string();
    let (_, second, last) = dropped_ids(&root, &format!("?limit=1&after={next}")).await;
    assert_eq!(second.len(), 1);
    assert_ne!(first, second);
    assert!(
        last.is_null()
            || dropped_ids(&root, &format!("?after={}", last.as_str().unwrap()))
                .await
                .1
                .is_empty()
    );
    assert_eq!(dropped_ids(&root, "?limit=0").await.0, 400);
}
