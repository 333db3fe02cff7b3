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
