//! The REST contract over raw HTTP: statuses, error bodies, concurrency, idempotency.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::harness::{Api, Floe, backends, simple_schema};

const NS: &str = "/catalog/v1/default/namespaces";

async fn create_table(api: &Api, ns: &str, name: &str) {
    let answer = api
        .post(
            &format!("{NS}/{ns}/tables"),
            json!({"name": name, "schema": simple_schema()}),
        )
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// An append commit on top of `parent`, as clients send it.
fn append_body(parent: Option<i64>, sequence: i64, snapshot_id: i64, location: &str) -> Value {
    let mut snapshot = json!({
        "snapshot-id": snapshot_id, "sequence-number": sequence, "timestamp-ms": now_ms(),
        "manifest-list": format!("{location}/metadata/snap-{snapshot_id}.avro"),
        "summary": {"operation": "append"}, "schema-id": 0
    });
    if let Some(p) = parent {
        snapshot["parent-snapshot-id"] = json!(p);
    }
    json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent}],
        "updates": [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id}
        ]
    })
}

#[tokio::test]
async fn namespaces_tables_and_errors_follow_the_spec() {
    for backend in backends() {
        let floe = Floe::start(backend).await;
        let api = Api::new(&floe);

        let config = api.get("/catalog/v1/config?warehouse=default").await;
        assert_eq!(config.status, 200);
        assert_eq!(config.body["overrides"]["prefix"], "default");
        assert!(config.body["endpoints"].as_array().unwrap().len() > 20);
        let missing = api.get("/catalog/v1/config?warehouse=nope").await;
        assert_eq!(
            (missing.status, missing.error_type().as_str()),
            (404, "NoSuchWarehouseException")
        );

        for ns in [json!(["a"]), json!(["b"]), json!(["a", "x"])] {
            let answer = api
                .post(NS, json!({"namespace": ns, "properties": {"owner": "qa"}}))
                .await;
            assert_eq!(answer.status, 200, "{backend}: {:?}", answer.body);
        }
        let dup = api.post(NS, json!({"namespace": ["a"]})).await;
        assert_eq!(
            (dup.status, dup.error_type().as_str()),
            (409, "AlreadyExistsException")
        );
        let orphan = api.post(NS, json!({"namespace": ["zz", "y"]})).await;
        assert_eq!(orphan.status, 404, "{:?}", orphan.body);

        let page = api.get(&format!("{NS}?page-size=1")).await;
        assert_eq!(page.body["namespaces"], json!([["a"]]));
        let token = page.body["next-page-token"].as_str().unwrap().to_string();
        let next = api
            .get(&format!("{NS}?page-size=1&page-token={token}"))
            .await;
        assert_eq!(next.body["namespaces"], json!([["b"]]));
        let children = api.get(&format!("{NS}?parent=a")).await;
        assert_eq!(children.body["namespaces"], json!([["a", "x"]]));

        let props = api
            .post(
                &format!("{NS}/a/properties"),
                json!({"updates": {"k": "v"}, "removals": ["owner", "ghost"]}),
            )
            .await;
        assert_eq!(props.body["updated"], json!(["k"]));
        assert_eq!(props.body["removed"], json!(["owner"]));
        assert_eq!(props.body["missing"], json!(["ghost"]));

        let not_empty = api.delete(&format!("{NS}/a")).await;
        assert_eq!(
            (not_empty.status, not_empty.error_type().as_str()),
            (409, "NamespaceNotEmptyException")
        );

        create_table(&api, "b", "t").await;
        let table = format!("{NS}/b/tables/t");
        let loaded = api.get(&table).await;
        assert_eq!(loaded.status, 200);
        let etag = loaded.headers["etag"].to_str().unwrap().to_string();
        let cached = api
            .send(
                api.http
                    .get(format!("{}{table}", api.base))
                    .header("if-none-match", &etag),
            )
            .await;
        assert_eq!(cached.status, 304);
        let location = loaded.body["metadata"]["location"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            location.starts_with(&format!("file://{}", floe.warehouse_dir().display())),
            "{location}"
        );

        let committed = api.post(&table, append_body(None, 1, 11, &location)).await;
        assert_eq!(committed.status, 200, "{:?}", committed.body);
        let fresh = api
            .send(
                api.http
                    .get(format!("{}{table}", api.base))
                    .header("if-none-match", &etag),
            )
            .await;
        assert_eq!(fresh.status, 200, "a commit changes the ETag");
        let stale = api.post(&table, append_body(None, 1, 12, &location)).await;
        assert_eq!(
            (stale.status, stale.error_type().as_str()),
            (409, "CommitFailedException")
        );
        assert!(stale.message().contains("main"), "{}", stale.message());

        // Bad input: each answer names what was wrong.
        let cases: Vec<(String, reqwest::Body, u16, &str)> = vec![
            (
                NS.to_string(),
                "{not json".into(),
                400,
                "invalid request body",
            ),
            (
                NS.to_string(),
                r#"{"namespace": ["q"], "colour": 1}"#.into(),
                400,
                "colour",
            ),
            (
                NS.to_string(),
                r#"{"namespace": "q"}"#.into(),
                400,
                "namespace",
            ),
            (NS.to_string(), "".into(), 400, "empty"),
            (
                table.clone(),
                r#"{"updates": [{"action": "explode"}]}"#.into(),
                400,
                "explode",
            ),
            (
                table.clone(),
                r#"{"requirements": [{"type": "assert-magic"}], "updates": []}"#.into(),
                400,
                "assert-magic",
            ),
            (
                table.clone(),
                r#"{"updates": [{"action": "set-current-schema", "schema-id": 99}]}"#.into(),
                400,
                "99",
            ),
            (
                format!("{NS}/b/tables"),
                json!({"name": "out", "schema": simple_schema(), "location": "file:///etc/out"})
                    .to_string()
                    .into(),
                400,
                "outside the warehouse",
            ),
            (
                format!("{NS}/b/tables"),
                json!({"name": "bad\u{1}name", "schema": simple_schema()})
                    .to_string()
                    .into(),
                400,
                "control character",
            ),
        ];
        for (path, body, status, needle) in cases {
            let answer = api.post_raw(&path, body).await;
            assert_eq!(answer.status, status, "{backend} {path}: {:?}", answer.body);
            assert_eq!(answer.body["error"]["code"], status);
            assert!(
                answer.message().contains(needle),
                "{backend} {path}: {:?} should mention {needle:?}",
                answer.message()
            );
        }
        // The server answers 413 as soon as the limit is passed; the client may still be
        // writing and see the connection close instead.
        match api
            .http
            .post(format!("{}{NS}", api.base))
            .header("content-type", "application/json")
            .body(vec![b' '; 40 * 1024 * 1024])
            .send()
            .await
        {
            Ok(response) => assert_eq!(response.status(), 413),
            Err(e) => assert!(e.is_request(), "{e}"),
        }
        let bad_page = api.get(&format!("{NS}?page-size=abc")).await;
        assert_eq!(bad_page.status, 400);
        assert!(bad_page.message().contains("page-size"));
        let empty_level = api.get(&format!("{NS}/a%1F")).await;
        assert_eq!(empty_level.status, 400);
        let unknown = api.get("/catalog/v1/default/nothing-here").await;
        assert_eq!(unknown.status, 404);
        assert_eq!(unknown.body["error"]["code"], 404);
        let no_table = api.get(&format!("{NS}/b/tables/ghost")).await;
        assert_eq!(
            (no_table.status, no_table.error_type().as_str()),
            (404, "NoSuchTableException")
        );

        // The server keeps serving after all of that.
        assert_eq!(api.get(&table).await.status, 200);
    }
}

#[tokio::test]
async fn concurrent_appends_lose_nothing() {
    for backend in backends() {
        let floe = Floe::start(backend).await;
        let api = Arc::new(Api::new(&floe));
        assert_eq!(api.post(NS, json!({"namespace": ["c"]})).await.status, 200);
        create_table(&api, "c", "hot").await;
        let table = format!("{NS}/c/tables/hot");
        let workers = 12;
        let per_worker = 6;
        let mut handles = Vec::new();
        for w in 0..workers {
            let api = api.clone();
            let table = table.clone();
            handles.push(tokio::spawn(async move {
                let mut conflicts = 0;
                let mut committed = Vec::new();
                for i in 0..per_worker {
                    let id = 1_000 + (w * per_worker + i) as i64;
                    loop {
                        let loaded = api.get(&table).await.body;
                        let meta = &loaded["metadata"];
                        let parent = meta["current-snapshot-id"].as_i64().filter(|p| *p > 0);
                        let seq = meta["last-sequence-number"].as_i64().unwrap() + 1;
                        let location = meta["location"].as_str().unwrap();
                        let answer = api
                            .post(&table, append_body(parent, seq, id, location))
                            .await;
                        match answer.status {
                            200 => break,
                            409 => conflicts += 1,
                            other => panic!("commit answered {other}: {:?}", answer.body),
                        }
                    }
                    committed.push(id);
                }
                (committed, conflicts)
            }));
        }
        let mut expected = HashSet::new();
        let mut conflicts = 0;
        for handle in handles {
            let (ids, c) = handle.await.unwrap();
            expected.extend(ids);
            conflicts += c;
        }
        let meta = api.get(&table).await.body["metadata"].clone();
        let snapshots: Vec<&Value> = meta["snapshots"].as_array().unwrap().iter().collect();
        let parents: std::collections::HashMap<i64, Option<i64>> = snapshots
            .iter()
            .map(|s| {
                (
                    s["snapshot-id"].as_i64().unwrap(),
                    s["parent-snapshot-id"].as_i64(),
                )
            })
            .collect();
        let mut chain = Vec::new();
        let mut cursor = meta["current-snapshot-id"].as_i64();
        while let Some(id) = cursor {
            chain.push(id);
            cursor = parents[&id];
        }
        let in_chain: HashSet<i64> = chain.iter().copied().collect();
        assert_eq!(
            chain.len(),
            workers * per_worker,
            "{backend}: every append exactly once"
        );
        assert_eq!(in_chain, expected, "{backend}");
        assert!(
            conflicts > 0,
            "{backend}: the test should have produced conflicts"
        );
    }
}

#[tokio::test]
async fn server_side_retry_applies_compatible_commits() {
    let floe = Floe::start("sqlite").await;
    let api = Arc::new(Api::new(&floe));
    assert_eq!(api.post(NS, json!({"namespace": ["r"]})).await.status, 200);
    create_table(&api, "r", "t").await;
    let table = format!("{NS}/r/tables/t");
    let mut handles = Vec::new();
    for i in 0..16 {
        let api = api.clone();
        let table = table.clone();
        handles.push(tokio::spawn(async move {
            let body = json!({"updates": [{"action": "set-properties", "updates": {format!("k{i}"): "v"}}]});
            api.post(&table, body).await.status
        }));
    }
    for handle in handles {
        assert_eq!(
            handle.await.unwrap(),
            200,
            "a commit without conflicting requirements never 409s"
        );
    }
    let props = api.get(&table).await.body["metadata"]["properties"].clone();
    for i in 0..16 {
        assert_eq!(props[format!("k{i}")], "v");
    }
}

#[tokio::test]
async fn transactions_are_all_or_nothing() {
    let floe = Floe::start("sqlite").await;
    let api = Api::new(&floe);
    assert_eq!(api.post(NS, json!({"namespace": ["tx"]})).await.status, 200);
    create_table(&api, "tx", "a").await;
    create_table(&api, "tx", "b").await;
    let change = |name: &str, requirements: Value| {
        json!({
            "identifier": {"namespace": ["tx"], "name": name},
            "requirements": requirements,
            "updates": [{"action": "set-properties", "updates": {"batch": "1"}}]
        })
    };
    let failing = api
        .post(
            "/catalog/v1/default/transactions/commit",
            json!({"table-changes": [
                change("a", json!([])),
                change("b", json!([{"type": "assert-current-schema-id", "current-schema-id": 5}]))
            ]}),
        )
        .await;
    assert_eq!(failing.status, 409, "{:?}", failing.body);
    let a = api.get(&format!("{NS}/tx/tables/a")).await.body;
    assert!(
        a["metadata"]["properties"].get("batch").is_none(),
        "a must be unchanged"
    );
    let ok = api
        .post(
            "/catalog/v1/default/transactions/commit",
            json!({"table-changes": [change("a", json!([])), change("b", json!([]))]}),
        )
        .await;
    assert_eq!(ok.status, 204, "{:?}", ok.body);
    for t in ["a", "b"] {
        let body = api.get(&format!("{NS}/tx/tables/{t}")).await.body;
        assert_eq!(body["metadata"]["properties"]["batch"], "1");
    }
}

#[tokio::test]
async fn idempotency_keys_replay_final_answers() {
    let floe = Floe::start("sqlite").await;
    let api = Api::new(&floe);
    let key = uuid::Uuid::now_v7().to_string();
    let create = || {
        api.http
            .post(format!("{}{NS}", api.base))
            .header("idempotency-key", &key)
            .json(&json!({"namespace": ["idem"]}))
    };
    let first = api.send(create()).await;
    assert_eq!(first.status, 200);
    let replayed = api.send(create()).await;
    assert_eq!(
        replayed.status, 200,
        "a retry with the same key gets the first answer"
    );
    assert_eq!(replayed.body, first.body);
    let without = api.post(NS, json!({"namespace": ["idem"]})).await;
    assert_eq!(without.status, 409);
    // Another principal reusing the key gets no replay of root's answer.
    let created = api
        .post(
            "/api/v1/principals",
            json!({"name": "stranger", "kind": "service"}),
        )
        .await;
    let stranger_token = crate::harness::token_for(
        &floe.base,
        created.body["credentials"]["client-id"].as_str().unwrap(),
        created.body["credentials"]["client-secret"]
            .as_str()
            .unwrap(),
    )
    .await;
    let stranger = Api::with_token(&floe, &stranger_token);
    let replay_attempt = stranger
        .send(
            stranger
                .http
                .post(format!("{}{NS}", stranger.base))
                .header("idempotency-key", &key)
                .json(&json!({"namespace": ["idem"]})),
        )
        .await;
    assert_eq!(replay_attempt.status, 422, "{:?}", replay_attempt.body);
    assert!(replay_attempt.body.get("namespace").is_none());
    let other_path = api
        .send(
            api.http
                .post(format!("{}{NS}/idem/properties", api.base))
                .header("idempotency-key", &key)
                .json(&json!({"updates": {}})),
        )
        .await;
    assert_eq!(other_path.status, 422);
    let malformed = api
        .send(
            api.http
                .post(format!("{}{NS}", api.base))
                .header("idempotency-key", "not-a-uuid")
                .json(&json!({"namespace": ["x"]})),
        )
        .await;
    assert_eq!(malformed.status, 400);
}

#[tokio::test]
async fn load_can_return_only_referenced_snapshots() {
    let floe = Floe::start("sqlite").await;
    let api = Api::new(&floe);
    assert_eq!(api.post(NS, json!({"namespace": ["s"]})).await.status, 200);
    create_table(&api, "s", "t").await;
    let table = format!("{NS}/s/tables/t");
    let location = api.get(&table).await.body["metadata"]["location"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        api.post(&table, append_body(None, 1, 1, &location))
            .await
            .status,
        200
    );
    assert_eq!(
        api.post(&table, append_body(Some(1), 2, 2, &location))
            .await
            .status,
        200
    );
    let all = api.get(&table).await.body;
    assert_eq!(all["metadata"]["snapshots"].as_array().unwrap().len(), 2);
    let refs = api.get(&format!("{table}?snapshots=refs")).await.body;
    let ids: Vec<i64> = refs["metadata"]["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["snapshot-id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![2]);
    assert_eq!(
        api.get(&format!("{table}?snapshots=some")).await.status,
        400
    );
}

#[tokio::test]
async fn warehouses_are_managed_and_validated() {
    let floe = Floe::start("sqlite").await;
    let api = Api::new(&floe);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wh2").to_string_lossy().into_owned();
    let created = api
        .post(
            "/api/v1/warehouses",
            json!({"name": "second", "storage": {"type": "local", "path": path}}),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let dup = api
        .post(
            "/api/v1/warehouses",
            json!({"name": "second", "storage": {"type": "local", "path": path}}),
        )
        .await;
    assert_eq!(dup.status, 409);
    let relative = api
        .post(
            "/api/v1/warehouses",
            json!({"name": "rel", "storage": {"type": "local", "path": "rel/dir"}}),
        )
        .await;
    assert_eq!(relative.status, 400);
    assert!(
        relative.message().contains("absolute"),
        "{}",
        relative.message()
    );
    let listed = api.get("/api/v1/warehouses").await;
    let names: Vec<&str> = listed.body["warehouses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["default", "second"]);
    let config = api.get("/catalog/v1/config?warehouse=second").await;
    assert_eq!(config.body["overrides"]["prefix"], "second");
    assert_eq!(
        api.post("/catalog/v1/second/namespaces", json!({"namespace": ["n"]}))
            .await
            .status,
        200
    );
    assert_eq!(api.delete("/api/v1/warehouses/second").await.status, 409);
    assert_eq!(
        api.delete("/catalog/v1/second/namespaces/n").await.status,
        204
    );
    assert_eq!(api.delete("/api/v1/warehouses/second").await.status, 204);
    assert_eq!(
        api.get("/api/v1/openapi.json").await.body["openapi"],
        "3.0.3"
    );
}

#[tokio::test]
async fn health_metrics_and_graceful_shutdown() {
    let mut floe = Floe::start("sqlite").await;
    let api = Api::new(&floe);
    assert_eq!(api.get("/health").await.status, 200);
    api.get(NS).await;
    let metrics = api.get("/metrics").await;
    let text = metrics.body.as_str().unwrap().to_string();
    assert!(text.contains("floe_http_requests_total"), "{text}");
    assert!(
        text.contains("route=\"/catalog/v1/{prefix}/namespaces\""),
        "{text}"
    );
    assert!(text.contains("process_resident_memory_bytes"));
    let status = floe.terminate();
    assert!(status.success(), "SIGTERM exits cleanly: {status:?}");
}

#[tokio::test]
async fn warehouse_cli_talks_to_the_management_api() {
    let floe = Floe::start("sqlite").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cli-wh").to_string_lossy().into_owned();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
            .env("FLOE_PG_LISTEN", "127.0.0.1:0")
            .env("FLOE_FLIGHT_LISTEN", "127.0.0.1:0")
            .env("FLOE_OTLP_GRPC_LISTEN", "127.0.0.1:0")
            .arg("warehouse")
            .args(args)
            .args(["--server", &floe.base])
            .args(["--client-id", crate::harness::ROOT_ID])
            .args(["--client-secret", crate::harness::ROOT_SECRET])
            .output()
            .unwrap()
    };
    let created = run(&["create", "cli", "--local", &path]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let listed = run(&["list"]);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(
        text.contains("\"cli\"") && text.contains("\"default\""),
        "{text}"
    );
    let refused = run(&["create", "bad", "--local", "relative"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("must be absolute"));
    assert!(run(&["delete", "cli"]).status.success());

    // `floe admin …` administers principals, roles and grants the same way.
    let admin = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
            .env("FLOE_PG_LISTEN", "127.0.0.1:0")
            .env("FLOE_FLIGHT_LISTEN", "127.0.0.1:0")
            .env("FLOE_OTLP_GRPC_LISTEN", "127.0.0.1:0")
            .arg("admin")
            .args(args)
            .args(["--server", &floe.base])
            .args(["--client-id", crate::harness::ROOT_ID])
            .args(["--client-secret", crate::harness::ROOT_SECRET])
            .output()
            .unwrap()
    };
    let created = admin(&["principal", "create", "cli-user"]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    assert!(String::from_utf8_lossy(&created.stdout).contains("client-secret"));
    assert!(admin(&["role", "create", "cli-role"]).status.success());
    assert!(
        admin(&["role", "add-member", "cli-role", "cli-user"])
            .status
            .success()
    );
    let granted = admin(&[
        "grant",
        "--role",
        "cli-role",
        "--privilege",
        "list-namespaces",
        "--warehouse",
        "default",
    ]);
    assert!(
        granted.status.success(),
        "{}",
        String::from_utf8_lossy(&granted.stderr)
    );
    let grants = admin(&["role", "grants", "cli-role"]);
    assert!(String::from_utf8_lossy(&grants.stdout).contains("list-namespaces"));
    let bad = admin(&[
        "grant",
        "--role",
        "cli-role",
        "--privilege",
        "fly",
        "--warehouse",
        "default",
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown privilege"));
    assert!(
        admin(&[
            "revoke",
            "--role",
            "cli-role",
            "--privilege",
            "list-namespaces",
            "--warehouse",
            "default"
        ])
        .status
        .success()
    );
}

#[tokio::test]
async fn metadata_log_is_bounded_and_old_files_deleted_when_asked() {
    let floe = Floe::start("sqlite").await;
    let api = Api::new(&floe);
    assert_eq!(api.post(NS, json!({"namespace": ["m"]})).await.status, 200);
    let created = api
        .post(
            &format!("{NS}/m/tables"),
            json!({"name": "t", "schema": simple_schema(), "properties": {
                "write.metadata.delete-after-commit.enabled": "true",
                "write.metadata.previous-versions-max": "2"
            }}),
        )
        .await;
    assert_eq!(created.status, 200);
    let table = format!("{NS}/m/tables/t");
    let mut locations = vec![
        created.body["metadata-location"]
            .as_str()
            .unwrap()
            .to_string(),
    ];
    for i in 0..4 {
        let body =
            json!({"updates": [{"action": "set-properties", "updates": {"n": i.to_string()}}]});
        let answer = api.post(&table, body).await;
        assert_eq!(answer.status, 200);
        locations.push(
            answer.body["metadata-location"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let metadata = api.get(&table).await.body["metadata"].clone();
    let log: Vec<&str> = metadata["metadata-log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["metadata-file"].as_str().unwrap())
        .collect();
    assert_eq!(log, vec![locations[2].as_str(), locations[3].as_str()]);
    let exists = |l: &str| std::path::Path::new(l.trim_start_matches("file://")).exists();
    assert!(
        !exists(&locations[0]) && !exists(&locations[1]),
        "expired metadata files are deleted"
    );
    assert!(locations[2..].iter().all(|l| exists(l)));
}

#[tokio::test]
async fn unregister_keeps_files_and_returns_the_last_metadata() {
    let floe = Floe::start("sqlite").await;
    let api = Api::new(&floe);
    assert_eq!(api.post(NS, json!({"namespace": ["u"]})).await.status, 200);
    create_table(&api, "u", "t").await;
    let table = format!("{NS}/u/tables/t");
    let committed = api
        .post(
            &table,
            json!({"updates": [{"action": "set-properties", "updates": {"last": "yes"}}]}),
        )
        .await;
    let location = committed.body["metadata-location"]
        .as_str()
        .unwrap()
        .to_string();
    let gone = api.post(&format!("{table}/unregister"), json!({})).await;
    assert_eq!(gone.status, 200, "{:?}", gone.body);
    assert_eq!(gone.body["metadata-location"], location.as_str());
    assert_eq!(gone.body["metadata"]["properties"]["last"], "yes");
    assert!(std::path::Path::new(location.trim_start_matches("file://")).exists());
    assert_eq!(api.get(&table).await.status, 404);
    let late = api
        .post(
            &table,
            json!({"updates": [{"action": "set-properties", "updates": {"x": "1"}}]}),
        )
        .await;
    assert_eq!(late.status, 404, "commits after unregister fail");
    let back = api
        .post(
            &format!("{NS}/u/register"),
            json!({"name": "t", "metadata-location": location}),
        )
        .await;
    assert_eq!(back.status, 200, "{:?}", back.body);
}

#[tokio::test]
async fn server_errors_hide_internals_behind_an_error_id() {
    let floe = Floe::start("sqlite").await;
    let api = Api::new(&floe);
    assert_eq!(
        api.post(NS, json!({"namespace": ["broken"]})).await.status,
        200
    );
    // A file where the namespace's directory should be: storage writes below it must fail.
    let blocker = floe.warehouse_dir().join("broken");
    std::fs::create_dir_all(blocker.parent().unwrap()).unwrap();
    std::fs::write(&blocker, b"not a directory").unwrap();
    let answer = api
        .post(
            &format!("{NS}/broken/tables"),
            json!({"name": "t", "schema": simple_schema()}),
        )
        .await;
    assert_eq!(answer.status, 500, "{:?}", answer.body);
    assert_eq!(answer.error_type(), "InternalServerError");
    let message = answer.message();
    assert!(message.contains("error id"), "{message}");
    assert!(
        !message.contains(&floe.warehouse_dir().display().to_string()),
        "{message}"
    );
    assert!(!message.contains("Not a directory"), "{message}");
    // Nothing was registered, and the server keeps serving.
    assert_eq!(api.get(&format!("{NS}/broken/tables/t")).await.status, 404);
    assert_eq!(api.get("/health").await.status, 200);
}

/// A statement that fails while running, before its first rows, is an error status with a
/// message in Arrow's form too (it was a 200 whose body broke off, naming nothing).
#[tokio::test]
async fn a_statement_failing_before_its_rows_answers_an_error_in_either_form() {
    let floe = Floe::start("sqlite").await;
    let api = Api::new(&floe);
    for statement in [
        "CREATE SCHEMA s",
        "CREATE TABLE s.t (v VARCHAR)",
        "INSERT INTO s.t VALUES ('seven')",
    ] {
        let answer = api.post("/api/v1/sql", json!({ "sql": statement })).await;
        assert_eq!(answer.status, 200, "{statement}: {}", answer.body);
    }
    let failing = json!({ "sql": "SELECT CAST(v AS INT) FROM s.t" });
    let answer = api.post("/api/v1/sql", failing.clone()).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let arrow = api
        .send(
            reqwest::Client::new()
                .post(format!("{}/api/v1/sql", floe.base))
                .bearer_auth(api.http_token())
                .header("accept", "application/vnd.apache.arrow.stream")
                .json(&failing),
        )
        .await;
    assert_eq!(arrow.status, 400, "{:?}", arrow.body);
    assert!(arrow.message().contains("seven"), "{}", arrow.body);
}
