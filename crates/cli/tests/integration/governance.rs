//! Authentication and authorization over HTTP: who may call, and what each principal may do.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Answer, Api, Floe, ROOT_ID, fetch_token, simple_schema, token_for};

const NS: &str = "/catalog/v1/default/namespaces";

/// Creates a principal (as root) and returns its (client id, secret).
async fn principal(root: &Api, name: &str) -> (String, String) {
    let created = root
        .post(
            "/api/v1/principals",
            json!({"name": name, "kind": "service"}),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let credentials = &created.body["credentials"];
    (
        credentials["client-id"].as_str().unwrap().to_string(),
        credentials["client-secret"].as_str().unwrap().to_string(),
    )
}

/// Gives `principal` (through a role of its own) each privilege on its securable.
async fn grant(root: &Api, principal: &str, grants: &[(&str, Value)]) {
    let role = format!("role-{principal}");
    let created = root.post("/api/v1/roles", json!({"name": role})).await;
    assert!(matches!(created.status, 201 | 409), "{:?}", created.body);
    let member = root
        .post(
            &format!("/api/v1/roles/{role}/members"),
            json!({"principal": principal}),
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
        assert_eq!(
            answer.status, 204,
            "grant {privilege} on {on}: {:?}",
            answer.body
        );
    }
}

fn on_ns(ns: &str) -> Value {
    json!({"type": "namespace", "warehouse": "default", "namespace": [ns]})
}

fn on_table(ns: &str, name: &str) -> Value {
    json!({"type": "table", "warehouse": "default", "namespace": [ns], "name": name})
}

fn on_view(ns: &str, name: &str) -> Value {
    json!({"type": "view", "warehouse": "default", "namespace": [ns], "name": name})
}

fn view_body(name: &str) -> Value {
    json!({
        "name": name,
        "schema": {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]},
        "view-version": {
            "version-id": 1, "schema-id": 0, "timestamp-ms": 1_790_000_000_000i64, "summary": {},
            "representations": [{"type": "sql", "sql": "select 1 as id", "dialect": "spark"}],
            "default-namespace": []
        },
        "properties": {}
    })
}

/// Namespace `ns` with table `t`, view `v` and an empty child namespace `child`.
async fn fixtures(root: &Api, ns: &str) {
    assert_eq!(root.post(NS, json!({"namespace": [ns]})).await.status, 200);
    assert_eq!(
        root.post(NS, json!({"namespace": [ns, "child"]}))
            .await
            .status,
        200
    );
    let table = root
        .post(
            &format!("{NS}/{ns}/tables"),
            json!({"name": "t", "schema": simple_schema()}),
        )
        .await;
    assert_eq!(table.status, 200, "{:?}", table.body);
    let view = root.post(&format!("{NS}/{ns}/views"), view_body("v")).await;
    assert_eq!(view.status, 200, "{:?}", view.body);
}

#[tokio::test]
async fn authentication_refuses_bad_credentials_with_401() {
    let floe = Floe::start_with("sqlite", &[("FLOE_TOKEN_TTL_SECS", "1")]).await;
    let anonymous = Api::anonymous(&floe);
    let missing = anonymous.get(NS).await;
    assert_eq!(
        (missing.status, missing.error_type().as_str()),
        (401, "NotAuthorizedException")
    );
    assert!(missing.headers.contains_key("www-authenticate"));
    for header in [
        "Bearer",
        "Bearer not.a.jwt",
        "Basic abc",
        "Bearer a.b.c.d",
        "Token x",
    ] {
        let answer = anonymous
            .send(
                anonymous
                    .http
                    .get(format!("{}{NS}", floe.base))
                    .header("authorization", header),
            )
            .await;
        assert_eq!(answer.status, 401, "{header}: {:?}", answer.body);
    }
    let forged = format!("{}x", floe.root_token);
    assert_eq!(Api::with_token(&floe, &forged).get(NS).await.status, 401);

    let bad_secret = fetch_token(&floe.base, ROOT_ID, "wrong").await;
    assert_eq!(bad_secret.status(), 401);
    let body: Value = bad_secret.json().await.unwrap();
    assert_eq!(body["error"], "invalid_client");
    let unknown_grant = reqwest::Client::new()
        .post(format!("{}/catalog/v1/oauth/tokens", floe.base))
        .form(&[("grant_type", "password")])
        .send()
        .await
        .unwrap();
    assert_eq!(unknown_grant.status(), 400);

    // Tokens expire.
    let token = floe.root_token.clone();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let expired = Api::with_token(&floe, &token).get(NS).await;
    assert_eq!(expired.status, 401);
    assert!(
        expired.message().contains("expired"),
        "{}",
        expired.message()
    );
}

#[tokio::test]
async fn principals_rotate_disable_and_keys_rotate() {
    let floe = Floe::start("sqlite").await;
    let root = Api::new(&floe);
    let (id, secret) = principal(&root, "svc").await;
    let token = token_for(&floe.base, &id, &secret).await;
    grant(
        &root,
        "svc",
        &[(
            "list-namespaces",
            json!({"type": "warehouse", "warehouse": "default"}),
        )],
    )
    .await;
    let svc = Api::with_token(&floe, &token);
    assert_eq!(svc.get(NS).await.status, 200);

    // Token exchange gives a fresh token for the same principal.
    let exchanged: Value = reqwest::Client::new()
        .post(format!("{}/catalog/v1/oauth/tokens", floe.base))
        .form(&[
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:token-exchange",
            ),
            ("subject_token", token.as_str()),
            (
                "subject_token_type",
                "urn:ietf:params:oauth:token-type:access_token",
            ),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let fresh = exchanged["access_token"].as_str().unwrap();
    assert_eq!(Api::with_token(&floe, fresh).get(NS).await.status, 200);

    // Signing keys rotate without logging anyone out.
    assert_eq!(
        root.post("/api/v1/signing-keys/rotate", json!({}))
            .await
            .status,
        200
    );
    assert_eq!(svc.get(NS).await.status, 200, "old tokens stay valid");
    let after = token_for(&floe.base, &id, &secret).await;
    assert_eq!(Api::with_token(&floe, &after).get(NS).await.status, 200);

    // Rotated credentials: the old secret stops working.
    let rotated = root
        .post("/api/v1/principals/svc/rotate-credentials", json!({}))
        .await;
    assert_eq!(rotated.status, 200);
    assert_eq!(fetch_token(&floe.base, &id, &secret).await.status(), 401);
    let new_secret = rotated.body["client-secret"].as_str().unwrap();
    token_for(&floe.base, &id, new_secret).await;

    // Disabled: no new tokens, and existing ones stop working.
    assert_eq!(
        root.post("/api/v1/principals/svc/disable", json!({}))
            .await
            .status,
        204
    );
    assert_eq!(fetch_token(&floe.base, &id, new_secret).await.status(), 401);
    assert_eq!(svc.get(NS).await.status, 401);
    assert_eq!(
        root.post("/api/v1/principals/svc/enable", json!({}))
            .await
            .status,
        204
    );
    assert_eq!(svc.get(NS).await.status, 200);
    assert_eq!(
        root.post("/api/v1/principals/root/disable", json!({}))
            .await
            .status,
        400
    );

    // Secrets never come back from the API.
    let listed = root.get("/api/v1/principals").await;
    let text = listed.body.to_string();
    assert!(
        !text.contains(new_secret) && !text.contains("secret"),
        "{text}"
    );
}

#[tokio::test]
async fn root_credentials_file_is_written_private_when_not_configured() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .env("FLOE_PG_LISTEN", "127.0.0.1:0")
        .env("FLOE_OTLP_GRPC_LISTEN", "127.0.0.1:0")
        .env("FLOE_FLIGHT_LISTEN", "127.0.0.1:0")
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir.path())
        .env_remove("FLOE_ROOT_CLIENT_ID")
        .env_remove("FLOE_ROOT_CLIENT_SECRET")
        .env_remove("FLOE_CATALOG_DB")
        .env("FLOE_LOG", "warn")
        .spawn()
        .unwrap();
    let file = dir.path().join("root-credentials.json");
    for _ in 0..200 {
        if file.exists()
            && reqwest::get(format!("http://127.0.0.1:{port}/health"))
                .await
                .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let credentials: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let id = credentials["client_id"].as_str().unwrap();
    let secret = credentials["client_secret"].as_str().unwrap();
    token_for(&format!("http://127.0.0.1:{port}"), id, secret).await;
    let _ = child.kill();
    let _ = child.wait();
    let db = std::fs::read(dir.path().join("catalog.db")).unwrap();
    let db_text = String::from_utf8_lossy(&db);
    assert!(
        !db_text.contains(secret),
        "the secret is stored only as a salted hash"
    );
}

/// Method, path, body, the grants that suffice, and the success status.
type Spec = (
    reqwest::Method,
    String,
    Option<Value>,
    Vec<(&'static str, Value)>,
    u16,
);

/// One endpoint of the authorization matrix.
struct Case {
    name: &'static str,
    method: reqwest::Method,
    path: String,
    body: Option<Value>,
    /// What the principal "with exactly the privilege" holds.
    grants: Vec<(&'static str, Value)>,
    ok: u16,
}

/// A correctly signed token for root that expired a minute ago, minted with the server's own
/// signing key (read from its SQLite store).
async fn expired_token(floe: &Floe) -> String {
    use floe_catalog::governance::token;
    let kid = token::key_id(&floe.root_token).unwrap();
    let mut claims = token::peek_claims(&floe.root_token).unwrap();
    claims.iat -= 7200;
    claims.exp = chrono::Utc::now().timestamp() - 60;
    sqlx::any::install_default_drivers();
    let url = format!("sqlite://{}/catalog.db", floe.data_dir.path().display());
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    let secret: String = sqlx::Row::get(
        &sqlx::query("SELECT secret FROM signing_keys WHERE kid = $1")
            .bind(&kid)
            .fetch_one(&pool)
            .await
            .unwrap(),
        "secret",
    );
    pool.close().await;
    token::sign(&claims, &kid, &hex::decode(secret).unwrap())
}

#[tokio::test]
async fn authorization_matrix_covers_every_endpoint() {
    use reqwest::Method;
    let floe = Floe::start("sqlite").await;
    let root = Api::new(&floe);
    let (nobody_id, nobody_secret) = principal(&root, "nobody").await;
    let nobody = Api::with_token(
        &floe,
        &token_for(&floe.base, &nobody_id, &nobody_secret).await,
    );
    let expired = Api::with_token(&floe, &expired_token(&floe).await);
    let still_valid = root.get(NS).await;
    assert_eq!(
        still_valid.status, 200,
        "the minted token's key is the server's"
    );
    let mut cases = Vec::new();
    let append =
        |ns: &str| json!({"updates": [{"action": "set-properties", "updates": {"k": ns}}]});
    for (i, name) in [
        "config",
        "list-namespaces",
        "create-namespace",
        "load-namespace",
        "drop-namespace",
        "update-namespace",
        "list-tables",
        "create-table",
        "load-table",
        "commit-table",
        "drop-table",
        "rename-table",
        "register-table",
        "unregister-table",
        "credentials",
        "metrics",
        "transaction",
        "list-views",
        "create-view",
        "load-view",
        "replace-view",
        "drop-view",
        "rename-view",
        "table-exists",
        "view-exists",
        "register-view",
    ]
    .iter()
    .enumerate()
    {
        let ns = format!("m{i}");
        fixtures(&root, &ns).await;
        let t = format!("{NS}/{ns}/tables/t");
        let v = format!("{NS}/{ns}/views/v");
        // A dropped table's metadata, for the register case: its location is free again.
        let dropped = root
            .post(
                &format!("{NS}/{ns}/tables"),
                json!({"name": "gone", "schema": simple_schema()}),
            )
            .await;
        let location = dropped.body["metadata-location"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            root.delete(&format!("{NS}/{ns}/tables/gone")).await.status,
            204
        );
        // The same for a dropped view, for the register-view case.
        let dropped_view = root
            .post(&format!("{NS}/{ns}/views"), view_body("vgone"))
            .await;
        let view_location = dropped_view.body["metadata-location"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            root.delete(&format!("{NS}/{ns}/views/vgone")).await.status,
            204
        );
        let ns_ref = on_ns(&ns);
        let t_ref = on_table(&ns, "t");
        let v_ref = on_view(&ns, "v");
        let (method, path, body, grants, ok): Spec = match *name {
            "config" => (
                Method::GET,
                "/catalog/v1/config?warehouse=default".into(),
                None,
                vec![("read-metadata", t_ref)],
                200,
            ),
            "list-namespaces" => (
                Method::GET,
                format!("{NS}?parent={ns}"),
                None,
                vec![("list-namespaces", ns_ref)],
                200,
            ),
            "create-namespace" => (
                Method::POST,
                NS.into(),
                Some(json!({"namespace": [&ns, "new"]})),
                vec![("create-namespace", ns_ref)],
                200,
            ),
            "load-namespace" => (
                Method::GET,
                format!("{NS}/{ns}"),
                None,
                vec![("read-metadata", ns_ref)],
                200,
            ),
            "drop-namespace" => (
                Method::DELETE,
                format!("{NS}/{ns}%1Fchild"),
                None,
                vec![("drop-namespace", ns_ref)],
                204,
            ),
            "update-namespace" => (
                Method::POST,
                format!("{NS}/{ns}/properties"),
                Some(json!({"updates": {"a": "b"}})),
                vec![("update-namespace", ns_ref)],
                200,
            ),
            "list-tables" => (
                Method::GET,
                format!("{NS}/{ns}/tables"),
                None,
                vec![("list-tables", ns_ref)],
                200,
            ),
            "create-table" => (
                Method::POST,
                format!("{NS}/{ns}/tables"),
                Some(json!({"name": "new", "schema": simple_schema()})),
                vec![("create-table", ns_ref)],
                200,
            ),
            "load-table" => (
                Method::GET,
                t.clone(),
                None,
                vec![("read-metadata", t_ref)],
                200,
            ),
            "commit-table" => (
                Method::POST,
                t.clone(),
                Some(append(&ns)),
                vec![("write-data", t_ref)],
                200,
            ),
            "drop-table" => (
                Method::DELETE,
                t.clone(),
                None,
                vec![("drop-table", t_ref)],
                204,
            ),
            "rename-table" => (
                Method::POST,
                "/catalog/v1/default/tables/rename".into(),
                Some(
                    json!({"source": {"namespace": [&ns], "name": "t"}, "destination": {"namespace": [&ns], "name": "t2"}}),
                ),
                vec![("drop-table", t_ref), ("create-table", ns_ref)],
                204,
            ),
            "register-table" => (
                Method::POST,
                format!("{NS}/{ns}/register"),
                Some(json!({"name": "again", "metadata-location": location})),
                vec![("create-table", ns_ref)],
                200,
            ),
            "unregister-table" => (
                Method::POST,
                format!("{t}/unregister"),
                Some(json!({})),
                vec![("drop-table", t_ref)],
                200,
            ),
            "credentials" => (
                Method::GET,
                format!("{t}/credentials"),
                None,
                vec![("read-data", t_ref)],
                200,
            ),
            "metrics" => (
                Method::POST,
                format!("{t}/metrics"),
                Some(json!({"report-type": "scan-report"})),
                vec![("read-metadata", t_ref)],
                204,
            ),
            "transaction" => (
                Method::POST,
                "/catalog/v1/default/transactions/commit".into(),
                Some(
                    json!({"table-changes": [{"identifier": {"namespace": [&ns], "name": "t"}, "requirements": [], "updates": [{"action": "set-properties", "updates": {"x": "1"}}]}]}),
                ),
                vec![("write-data", t_ref)],
                204,
            ),
            "list-views" => (
                Method::GET,
                format!("{NS}/{ns}/views"),
                None,
                vec![("list-views", ns_ref)],
                200,
            ),
            "create-view" => (
                Method::POST,
                format!("{NS}/{ns}/views"),
                Some(view_body("new")),
                vec![("create-view", ns_ref)],
                200,
            ),
            "load-view" => (
                Method::GET,
                v.clone(),
                None,
                vec![("read-metadata", v_ref)],
                200,
            ),
            "replace-view" => (
                Method::POST,
                v.clone(),
                Some(json!({"updates": [{"action": "set-properties", "updates": {"a": "b"}}]})),
                vec![("write-data", v_ref)],
                200,
            ),
            "drop-view" => (
                Method::DELETE,
                v.clone(),
                None,
                vec![("drop-view", v_ref)],
                204,
            ),
            "rename-view" => (
                Method::POST,
                "/catalog/v1/default/views/rename".into(),
                Some(
                    json!({"source": {"namespace": [&ns], "name": "v"}, "destination": {"namespace": [&ns], "name": "v2"}}),
                ),
                vec![("drop-view", v_ref), ("create-view", ns_ref)],
                204,
            ),
            "table-exists" => (
                Method::HEAD,
                t.clone(),
                None,
                vec![("read-metadata", t_ref)],
                204,
            ),
            "view-exists" => (
                Method::HEAD,
                v.clone(),
                None,
                vec![("read-metadata", v_ref)],
                204,
            ),
            "register-view" => (
                Method::POST,
                format!("{NS}/{ns}/register-view"),
                Some(json!({"name": "again", "metadata-location": view_location})),
                vec![("create-view", ns_ref)],
                200,
            ),
            other => unreachable!("{other}"),
        };
        cases.push(Case {
            name,
            method,
            path,
            body,
            grants,
            ok,
        });
    }
    for (i, case) in cases.into_iter().enumerate() {
        let send = |api: &Api| {
            let mut request = api
                .http
                .request(case.method.clone(), format!("{}{}", api.base, case.path));
            if let Some(body) = &case.body {
                request = request.json(body);
            }
            request
        };
        // No token, and a malformed one.
        let anonymous = Api::anonymous(&floe);
        assert_eq!(
            anonymous.send(send(&anonymous)).await.status,
            401,
            "{}: no token",
            case.name
        );
        let garbage = Api::with_token(&floe, "garbage");
        assert_eq!(
            garbage.send(send(&garbage)).await.status,
            401,
            "{}: malformed token",
            case.name
        );
        assert_eq!(
            expired.send(send(&expired)).await.status,
            401,
            "{}: expired token",
            case.name
        );
        // A principal holding nothing learns nothing: 404.
        let hidden = nobody.send(send(&nobody)).await;
        assert_eq!(
            hidden.status, 404,
            "{}: principal without grants: {:?}",
            case.name, hidden.body
        );
        // A principal that can see the objects but lacks the privilege: 403.
        let (viewer_id, viewer_secret) = principal(&root, &format!("viewer{i}")).await;
        let mut sees = vec![("read-metadata", on_ns(&format!("m{i}")))];
        if case.name == "config" {
            sees = vec![];
        }
        if !sees.is_empty() {
            grant(&root, &format!("viewer{i}"), &sees).await;
            let viewer = Api::with_token(
                &floe,
                &token_for(&floe.base, &viewer_id, &viewer_secret).await,
            );
            let forbidden = viewer.send(send(&viewer)).await;
            let expected = if matches!(
                case.name,
                "load-namespace"
                    | "list-tables"
                    | "list-views"
                    | "load-table"
                    | "load-view"
                    | "metrics"
                    | "list-namespaces"
                    | "table-exists"
                    | "view-exists"
            ) {
                case.ok // read-metadata on the namespace suffices for these
            } else {
                403
            };
            assert_eq!(
                forbidden.status, expected,
                "{}: visible without the privilege: {:?}",
                case.name, forbidden.body
            );
        }
        // A principal with exactly the privilege succeeds.
        let (id, secret) = principal(&root, &format!("granted{i}")).await;
        grant(&root, &format!("granted{i}"), &case.grants).await;
        let granted = Api::with_token(&floe, &token_for(&floe.base, &id, &secret).await);
        let answer = granted.send(send(&granted)).await;
        assert_eq!(
            answer.status, case.ok,
            "{}: with exactly the privilege: {:?}",
            case.name, answer.body
        );
    }

    management_matrix(&floe, &root, &nobody, &expired).await;
}

/// Every management endpoint: no, malformed and expired tokens get 401; a principal holding
/// nothing gets 403 (404 where the object itself is hidden from it); a principal holding
/// exactly the privilege succeeds.
async fn management_matrix(floe: &Floe, root: &Api, nobody: &Api, expired: &Api) {
    use reqwest::Method;
    let server = || json!({"type": "server"});
    let local = |name: &str| json!({"type": "local", "path": floe.data_dir.path().join(name).to_string_lossy()});
    for i in 0..23 {
        // Objects of this case's own, so destructive cases do not disturb the others.
        let (role, member, wh) = (format!("mr{i}"), format!("mp{i}"), format!("mw{i}"));
        assert_eq!(
            root.post("/api/v1/roles", json!({"name": role}))
                .await
                .status,
            201
        );
        principal(root, &member).await;
        assert_eq!(
            root.post(
                "/api/v1/warehouses",
                json!({"name": wh, "storage": local(&wh)})
            )
            .await
            .status,
            201
        );
        assert_eq!(root.post(NS, json!({"namespace": [&wh]})).await.status, 200);
        let grant_body = json!({"role": role, "privilege": "read-data", "on": on_ns(&wh)});
        let (method, path, body, privilege, on, ok, nobody_gets): (
            Method,
            String,
            Option<Value>,
            &str,
            Value,
            u16,
            u16,
        ) = match i {
            0 => (
                Method::GET,
                "/api/v1/warehouses".into(),
                None,
                "manage-warehouses",
                server(),
                200,
                200,
            ),
            1 => (
                Method::POST,
                "/api/v1/warehouses".into(),
                Some(json!({"name": format!("new{i}"), "storage": local(&format!("new{i}"))})),
                "manage-warehouses",
                server(),
                201,
                403,
            ),
            2 => (
                Method::GET,
                format!("/api/v1/warehouses/{wh}"),
                None,
                "manage-warehouses",
                server(),
                200,
                404,
            ),
            3 => {
                let empty = format!("empty{i}");
                assert_eq!(
                    root.post(
                        "/api/v1/warehouses",
                        json!({"name": empty, "storage": local(&empty)})
                    )
                    .await
                    .status,
                    201
                );
                (
                    Method::DELETE,
                    format!("/api/v1/warehouses/{empty}"),
                    None,
                    "manage-warehouses",
                    server(),
                    204,
                    404,
                )
            }
            4 => (
                Method::GET,
                "/api/v1/principals".into(),
                None,
                "manage-grants",
                server(),
                200,
                403,
            ),
            5 => (
                Method::POST,
                "/api/v1/principals".into(),
                Some(json!({"name": format!("new{i}"), "kind": "user"})),
                "manage-grants",
                server(),
                201,
                403,
            ),
            6 => (
                Method::GET,
                format!("/api/v1/principals/{member}"),
                None,
                "manage-grants",
                server(),
                200,
                403,
            ),
            7 => (
                Method::POST,
                format!("/api/v1/principals/{member}/rotate-credentials"),
                None,
                "manage-grants",
                server(),
                200,
                403,
            ),
            8 => (
                Method::POST,
                format!("/api/v1/principals/{member}/disable"),
                None,
                "manage-grants",
                server(),
                204,
                403,
            ),
            9 => (
                Method::POST,
                format!("/api/v1/principals/{member}/enable"),
                None,
                "manage-grants",
                server(),
                204,
                403,
            ),
            10 => (
                Method::POST,
                "/api/v1/signing-keys/rotate".into(),
                None,
                "manage-grants",
                server(),
                200,
                403,
            ),
            11 => (
                Method::GET,
                "/api/v1/roles".into(),
                None,
                "manage-grants",
                server(),
                200,
                403,
            ),
            12 => (
                Method::POST,
                "/api/v1/roles".into(),
                Some(json!({"name": format!("new{i}")})),
                "manage-grants",
                server(),
                201,
                403,
            ),
            13 => (
                Method::DELETE,
                format!("/api/v1/roles/{role}"),
                None,
                "manage-grants",
                server(),
                204,
                403,
            ),
            14 => (
                Method::POST,
                format!("/api/v1/roles/{role}/members"),
                Some(json!({"principal": member})),
                "manage-grants",
                server(),
                204,
                403,
            ),
            15 => {
                assert_eq!(
                    root.post(
                        &format!("/api/v1/roles/{role}/members"),
                        json!({"principal": member})
                    )
                    .await
                    .status,
                    204
                );
                (
                    Method::DELETE,
                    format!("/api/v1/roles/{role}/members/{member}"),
                    None,
                    "manage-grants",
                    server(),
                    204,
                    403,
                )
            }
            16 => (
                Method::GET,
                format!("/api/v1/roles/{role}/grants"),
                None,
                "manage-grants",
                server(),
                200,
                403,
            ),
            // Grants on a namespace need manage-grants on it; to others it does not exist.
            17 => (
                Method::POST,
                "/api/v1/grants".into(),
                Some(grant_body),
                "manage-grants",
                on_ns(&wh),
                204,
                404,
            ),
            18 => (
                Method::POST,
                "/api/v1/grants/revoke".into(),
                Some(grant_body),
                "manage-grants",
                on_ns(&wh),
                204,
                404,
            ),
            19 => (
                Method::GET,
                "/api/v1/audit".into(),
                None,
                "read-audit",
                server(),
                200,
                403,
            ),
            20 => (
                Method::POST,
                format!("/api/v1/warehouses/{wh}/validate"),
                None,
                "manage-warehouses",
                json!({"type": "warehouse", "warehouse": wh}),
                200,
                404,
            ),
            21 => (
                Method::POST,
                "/api/v1/storage/validate".into(),
                Some(json!({"storage": local(&format!("probe{i}"))})),
                "manage-warehouses",
                server(),
                200,
                403,
            ),
            _ => (
                Method::GET,
                "/api/v1/access-review".into(),
                None,
                "read-audit",
                server(),
                200,
                403,
            ),
        };
        let request = |api: &Api| {
            let mut r = api
                .http
                .request(method.clone(), format!("{}{path}", api.base));
            if let Some(b) = &body {
                r = r.json(b);
            }
            r
        };
        let anonymous = Api::anonymous(floe);
        let garbage = Api::with_token(floe, "garbage");
        for (who, api) in [
            ("no", &anonymous),
            ("malformed", &garbage),
            ("expired", expired),
        ] {
            assert_eq!(
                api.send(request(api)).await.status,
                401,
                "{method} {path}: {who} token"
            );
        }
        let denied = nobody.send(request(nobody)).await;
        assert_eq!(
            denied.status, nobody_gets,
            "{method} {path}: principal without the privilege: {:?}",
            denied.body
        );
        if method == Method::GET && path == "/api/v1/warehouses" {
            assert_eq!(
                denied.body["warehouses"],
                json!([]),
                "lists only what it may see"
            );
        }
        let admin = format!("admin{i}");
        principal(root, &admin).await;
        grant(root, &admin, &[(privilege, on)]).await;
        let rotated = root
            .post(
                &format!("/api/v1/principals/{admin}/rotate-credentials"),
                json!({}),
            )
            .await;
        let granted = Api::with_token(
            floe,
            &token_for(
                &floe.base,
                rotated.body["client-id"].as_str().unwrap(),
                rotated.body["client-secret"].as_str().unwrap(),
            )
            .await,
        );
        let answer = granted.send(request(&granted)).await;
        assert_eq!(
            answer.status, ok,
            "{method} {path} with exactly {privilege}: {:?}",
            answer.body
        );
    }
}

/// A request body in the matrix of the later endpoints.
enum Payload {
    Empty,
    Json(Value),
    /// Bytes with their content type (HTTP ingestion takes NDJSON).
    Raw(&'static str, &'static str),
}

/// A check of an answer beyond its status.
type Check = Box<dyn Fn(&Answer)>;

/// Privileges and the securables they are granted on.
type Grants = Vec<(&'static str, Value)>;

/// One endpoint of the later matrix, and who gets which status from it.
struct Later {
    name: &'static str,
    method: reqwest::Method,
    path: String,
    payload: Payload,
    /// What a principal holding nothing gets.
    nobody: u16,
    /// Principals holding something near the privilege but not it: what they hold and the
    /// status they get.
    lacking: Vec<(&'static str, Grants, u16)>,
    /// Checked on the answers to the principal holding nothing and to those lacking the
    /// privilege (filtered listings).
    denied_check: Option<Check>,
    /// What the principal "with exactly the privilege" holds.
    grants: Grants,
    ok: u16,
    ok_check: Option<Check>,
    /// Read-only routes: the same principal also succeeds with HTTP basic authentication.
    basic: bool,
}

impl Later {
    fn new(name: &'static str, method: reqwest::Method, path: impl Into<String>) -> Self {
        Later {
            name,
            method,
            path: path.into(),
            payload: Payload::Empty,
            nobody: 404,
            lacking: Vec::new(),
            denied_check: None,
            grants: Vec::new(),
            ok: 200,
            ok_check: None,
            basic: false,
        }
    }

    fn json(mut self, body: Value) -> Self {
        self.payload = Payload::Json(body);
        self
    }

    fn raw(mut self, content_type: &'static str, body: &'static str) -> Self {
        self.payload = Payload::Raw(content_type, body);
        self
    }

    fn nobody(mut self, status: u16) -> Self {
        self.nobody = status;
        self
    }

    fn lacking(mut self, label: &'static str, holds: Grants, status: u16) -> Self {
        self.lacking.push((label, holds, status));
        self
    }

    fn denied_check(mut self, check: impl Fn(&Answer) + 'static) -> Self {
        self.denied_check = Some(Box::new(check));
        self
    }

    fn grants(mut self, grants: Grants) -> Self {
        self.grants = grants;
        self
    }

    fn ok(mut self, status: u16) -> Self {
        self.ok = status;
        self
    }

    fn ok_check(mut self, check: impl Fn(&Answer) + 'static) -> Self {
        self.ok_check = Some(Box::new(check));
        self
    }

    fn basic(mut self) -> Self {
        self.basic = true;
        self
    }

    fn request(&self, api: &Api) -> reqwest::RequestBuilder {
        let request = api
            .http
            .request(self.method.clone(), format!("{}{}", api.base, self.path));
        match &self.payload {
            Payload::Empty => request,
            Payload::Json(body) => request.json(body),
            Payload::Raw(content_type, body) => {
                request.header("content-type", *content_type).body(*body)
            }
        }
    }
}

/// A new principal holding `grants` (through a role of its own), its client and credentials.
async fn holder(
    floe: &Floe,
    root: &Api,
    name: &str,
    grants: &[(&str, Value)],
) -> (Api, String, String) {
    let (id, secret) = principal(root, name).await;
    if !grants.is_empty() {
        grant(root, name, grants).await;
    }
    let api = Api::with_token(floe, &token_for(&floe.base, &id, &secret).await);
    (api, id, secret)
}

/// The routes added after the first matrix was written: namespace existence, remote signing,
/// SQL, HTTP ingestion, maintenance, pipelines and the schema registry. Each is called with
/// no token, a malformed token, an expired token, basic credentials with a wrong secret and
/// basic credentials that are not base64 (401 each); by a principal holding nothing; by
/// principals holding something near the privilege but not it; and by one holding exactly
/// the privilege.
#[tokio::test]
async fn authorization_matrix_covers_the_later_endpoints() {
    use reqwest::Method;
    const REGISTRY: &str = "/schema-registry";
    const AVRO: &str = r#"{"type":"record","name":"r","fields":[{"name":"id","type":"long"}]}"#;
    let floe = Floe::start("sqlite").await;
    let root = Api::new(&floe);
    let (nobody, _, _) = holder(&floe, &root, "nobody", &[]).await;
    let expired = Api::with_token(&floe, &expired_token(&floe).await);
    assert_eq!(
        root.get(NS).await.status,
        200,
        "the minted token's key is the server's"
    );
    let server = || json!({"type": "server"});
    let schema = || json!({"schema": AVRO});
    let names = [
        "namespace-exists",
        "sign-read",
        "sign-write",
        "sql-select",
        "sql-insert",
        "ingest",
        "ingest-status",
        "expire-snapshots",
        "remove-orphan-files",
        "set-policy",
        "get-policy",
        "queue-job",
        "list-jobs",
        "list-table-jobs",
        "get-job",
        "create-pipeline",
        "list-pipelines",
        "get-pipeline",
        "delete-pipeline",
        "pipeline-status",
        "registry-root",
        "registry-mode",
        "registry-types",
        "registry-schema",
        "registry-raw-schema",
        "registry-schema-subjects",
        "registry-schema-versions",
        "registry-subjects",
        "registry-lookup",
        "registry-versions",
        "registry-version",
        "registry-raw-version",
        "registry-config",
        "registry-subject-config",
        "registry-compatible-with-version",
        "registry-compatible-with-all",
        "registry-register",
        "registry-delete-subject",
        "registry-delete-version",
        "registry-set-config",
        "registry-set-subject-config",
        "registry-delete-subject-config",
    ];
    let mut cases = Vec::new();
    for (i, name) in names.into_iter().enumerate() {
        // Objects of this case's own: namespace `ns` (table `t` and `u`, view `v`, namespace
        // `ns.child`), a sibling namespace, a schema registry subject.
        let ns = format!("l{i}");
        fixtures(&root, &ns).await;
        let sibling = format!("{ns}s");
        assert_eq!(
            root.post(NS, json!({"namespace": [&sibling]})).await.status,
            200
        );
        let other_table = root
            .post(
                &format!("{NS}/{ns}/tables"),
                json!({"name": "u", "schema": simple_schema()}),
            )
            .await;
        assert_eq!(other_table.status, 200, "{:?}", other_table.body);
        let subject = format!("rs{i}");
        let registered = root
            .post(&format!("{REGISTRY}/subjects/{subject}/versions"), schema())
            .await;
        assert_eq!(registered.status, 200, "{:?}", registered.body);
        let schema_id = registered.body["id"].as_i64().unwrap();
        let t = format!("{NS}/{ns}/tables/t");
        let on_t = || on_table(&ns, "t");
        // Sees the namespace and everything in it, holds no privilege but reading metadata.
        let sees = || vec![("read-metadata", on_ns(&ns))];
        let table_body = |extra: Value| {
            let mut body = json!({"warehouse": "default", "namespace": [&ns], "table": "t"});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            body
        };
        let pipeline = |name: &str| {
            json!({
                "name": name, "warehouse": "default", "namespace": [&ns], "table": "p",
                // Nothing listens there: defining a pipeline does not contact the broker.
                "bootstrap-servers": "127.0.0.1:1", "topics": ["floe-matrix"]
            })
        };
        let defined = |name: String| {
            let body = pipeline(&name);
            let root = &root;
            async move {
                let created = root.post("/api/v1/pipelines", body).await;
                assert_eq!(created.status, 201, "{:?}", created.body);
                name
            }
        };
        let sign = |method: &str| {
            json!({
                "region": "us-east-1",
                "uri": format!("https://s3.us-east-1.amazonaws.com/bucket/{ns}/t/data/x.parquet"),
                "method": method,
                "headers": {}
            })
        };
        let says_not_s3 = |answer: &Answer| {
            assert!(
                answer.message().contains("not on S3"),
                "a local warehouse has nothing to sign: {:?}",
                answer.body
            );
        };
        let sql = |statement: &str| json!({"sql": statement, "namespace": &ns});
        let registry_read = |name: &'static str, method: Method, path: String| {
            Later::new(name, method, format!("{REGISTRY}{path}"))
                .nobody(403)
                .lacking(
                    "manages pipelines in a namespace",
                    vec![("manage-pipelines", on_ns(&ns))],
                    403,
                )
                .grants(vec![("read-schemas", server())])
                .basic()
        };
        let registry_write = |name: &'static str, method: Method, path: String| {
            Later::new(name, method, format!("{REGISTRY}{path}"))
                .nobody(403)
                .lacking("reads schemas", vec![("read-schemas", server())], 403)
                .lacking(
                    "manages pipelines in a namespace",
                    vec![("manage-pipelines", on_ns(&ns))],
                    403,
                )
                .grants(vec![("manage-pipelines", server())])
        };
        let case = match name {
            "namespace-exists" => Later::new(name, Method::HEAD, format!("{NS}/{ns}"))
                .lacking(
                    "sees a sibling namespace",
                    vec![("read-metadata", on_ns(&sibling))],
                    404,
                )
                .grants(sees())
                .ok(204),
            "sign-read" => Later::new(name, Method::POST, format!("{t}/sign"))
                .json(sign("GET"))
                .lacking("sees the namespace", sees(), 403)
                .grants(vec![("read-data", on_t())])
                .ok(400)
                .ok_check(says_not_s3),
            "sign-write" => Later::new(name, Method::POST, format!("{t}/sign"))
                .json(sign("PUT"))
                .lacking("sees the namespace", sees(), 403)
                .lacking("reads the table", vec![("read-data", on_t())], 403)
                .grants(vec![("write-data", on_t())])
                .ok(400)
                .ok_check(says_not_s3),
            // SQL answers a table it may not see as it answers one that does not exist: 400.
            "sql-select" => Later::new(name, Method::POST, "/api/v1/sql")
                .json(sql("SELECT count(*) AS n FROM t"))
                .nobody(400)
                .lacking("sees the namespace", sees(), 403)
                .grants(vec![("read-data", on_t())])
                .ok_check(|answer| assert_eq!(answer.body["rows"], json!([{"n": 0}]))),
            "sql-insert" => Later::new(name, Method::POST, "/api/v1/sql")
                .json(sql("INSERT INTO t VALUES (1, 'a')"))
                .nobody(400)
                .lacking("sees the namespace", sees(), 403)
                .lacking("reads the table", vec![("read-data", on_t())], 403)
                .grants(vec![("write-data", on_t())])
                .ok_check(|answer| assert_eq!(answer.body["row-count"], 1)),
            "ingest" => Later::new(name, Method::POST, format!("/ingest/v1/default/{ns}/t"))
                .raw("application/x-ndjson", "{\"id\": 1, \"name\": \"a\"}\n")
                .lacking("sees the namespace", sees(), 403)
                .lacking("reads the table", vec![("read-data", on_t())], 403)
                .grants(vec![("write-data", on_t())])
                .ok(202),
            "ingest-status" => Later::new(name, Method::GET, "/api/v1/ingest/status")
                .nobody(403)
                .lacking(
                    "manages pipelines in a namespace",
                    vec![("manage-pipelines", on_ns(&ns))],
                    403,
                )
                .grants(vec![("manage-pipelines", server())]),
            "expire-snapshots" => {
                Later::new(name, Method::POST, "/api/v1/maintenance/expire-snapshots")
                    .json(table_body(json!({"dry-run": true})))
                    .lacking("sees the namespace", sees(), 403)
                    .lacking("writes the table", vec![("write-data", on_t())], 403)
                    .grants(vec![("manage-maintenance", on_t())])
            }
            "remove-orphan-files" => Later::new(
                name,
                Method::POST,
                "/api/v1/maintenance/remove-orphan-files",
            )
            .json(table_body(json!({"dry-run": true})))
            .lacking("sees the namespace", sees(), 403)
            .lacking("writes the table", vec![("write-data", on_t())], 403)
            .grants(vec![("manage-maintenance", on_t())]),
            "set-policy" => Later::new(name, Method::PUT, "/api/v1/maintenance/policies")
                .json(json!({"on": on_ns(&ns), "policy": {"min-snapshots-to-keep": 2}}))
                .lacking("sees the namespace", sees(), 403)
                .lacking(
                    "maintains a table in it",
                    vec![("manage-maintenance", on_t())],
                    403,
                )
                .grants(vec![("manage-maintenance", on_ns(&ns))]),
            "get-policy" => Later::new(
                name,
                Method::GET,
                format!("/api/v1/maintenance/policies?warehouse=default&namespace={ns}&table=t"),
            )
            .lacking("sees the namespace", sees(), 403)
            .grants(vec![("manage-maintenance", on_t())])
            .ok_check(|answer| assert!(answer.body["effective"].is_object(), "{:?}", answer.body)),
            "queue-job" => Later::new(name, Method::POST, "/api/v1/jobs")
                .json(table_body(
                    json!({"kind": "expire-snapshots", "options": {"dry-run": true}}),
                ))
                .lacking("sees the namespace", sees(), 403)
                .lacking("writes the table", vec![("write-data", on_t())], 403)
                .grants(vec![("manage-maintenance", on_t())])
                .ok_check(|answer| assert!(answer.body["job"]["id"].is_string())),
            "list-jobs" => Later::new(name, Method::GET, "/api/v1/jobs?warehouse=default")
                .lacking("sees the namespace", sees(), 403)
                .lacking(
                    "maintains a table in the warehouse",
                    vec![("manage-maintenance", on_t())],
                    403,
                )
                .grants(vec![(
                    "manage-maintenance",
                    json!({"type": "warehouse", "warehouse": "default"}),
                )])
                .ok_check(|answer| assert!(answer.body["jobs"].is_array())),
            "list-table-jobs" => Later::new(
                name,
                Method::GET,
                format!("/api/v1/jobs?warehouse=default&namespace={ns}&table=t"),
            )
            .lacking("sees the namespace", sees(), 403)
            .grants(vec![("manage-maintenance", on_t())])
            .ok_check(|answer| assert!(answer.body["jobs"].is_array())),
            // A job is shown only to those who may maintain its table: to anyone else it
            // does not exist, even when they can see the table.
            "get-job" => {
                let queued = root
                    .post(
                        "/api/v1/jobs",
                        table_body(
                            json!({"kind": "remove-orphan-files", "options": {"dry-run": true}}),
                        ),
                    )
                    .await;
                assert_eq!(queued.status, 200, "{:?}", queued.body);
                let id = queued.body["job"]["id"].as_str().unwrap().to_string();
                Later::new(name, Method::GET, format!("/api/v1/jobs/{id}"))
                    .lacking("sees the namespace", sees(), 404)
                    .lacking(
                        "maintains another table",
                        vec![("manage-maintenance", on_table(&ns, "u"))],
                        404,
                    )
                    .grants(vec![("manage-maintenance", on_t())])
                    .ok_check(move |answer| assert_eq!(answer.body["id"], id.as_str()))
            }
            "create-pipeline" => Later::new(name, Method::POST, "/api/v1/pipelines")
                .json(pipeline(&format!("pc{i}")))
                .lacking("sees the namespace", sees(), 403)
                .lacking(
                    "manages pipelines in a sibling namespace",
                    vec![("manage-pipelines", on_ns(&sibling))],
                    404,
                )
                .grants(vec![("manage-pipelines", on_ns(&ns))])
                .ok(201),
            // Listings are filtered: those who may manage none see an empty list.
            "list-pipelines" => {
                let mine = defined(format!("pl{i}")).await;
                Later::new(name, Method::GET, "/api/v1/pipelines")
                    .nobody(200)
                    .lacking("sees the namespace", sees(), 200)
                    .denied_check(|answer| assert_eq!(answer.body["pipelines"], json!([])))
                    .grants(vec![("manage-pipelines", on_ns(&ns))])
                    .ok_check(move |answer| {
                        let names: Vec<&str> = answer.body["pipelines"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|p| p["name"].as_str().unwrap())
                            .collect();
                        assert_eq!(names, [mine.as_str()]);
                    })
            }
            // A pipeline is shown only to those who may manage it.
            "get-pipeline" | "delete-pipeline" | "pipeline-status" => {
                let mine = defined(format!("pl{i}")).await;
                let (method, path, ok) = match name {
                    "get-pipeline" => (Method::GET, format!("/api/v1/pipelines/{mine}"), 200),
                    "delete-pipeline" => (Method::DELETE, format!("/api/v1/pipelines/{mine}"), 204),
                    _ => (Method::GET, format!("/api/v1/pipelines/{mine}/status"), 200),
                };
                let case = Later::new(name, method, path)
                    .lacking("sees the namespace", sees(), 404)
                    .lacking(
                        "manages pipelines in a sibling namespace",
                        vec![("manage-pipelines", on_ns(&sibling))],
                        404,
                    )
                    .grants(vec![("manage-pipelines", on_ns(&ns))])
                    .ok(ok);
                match name {
                    "get-pipeline" => case.ok_check(move |answer| {
                        assert_eq!(answer.body["name"], mine.as_str(), "{:?}", answer.body)
                    }),
                    // The broker does not answer; that is reported, not fatal.
                    "pipeline-status" => case.ok_check(|answer| {
                        assert!(answer.body["broker-error"].is_string(), "{:?}", answer.body)
                    }),
                    _ => case,
                }
            }
            "registry-root" => registry_read(name, Method::GET, String::new()),
            "registry-mode" => registry_read(name, Method::GET, "/mode".into()),
            "registry-types" => registry_read(name, Method::GET, "/schemas/types".into()),
            "registry-schema" => {
                registry_read(name, Method::GET, format!("/schemas/ids/{schema_id}"))
                    .ok_check(|answer| assert_eq!(answer.body["schema"], AVRO))
            }
            "registry-raw-schema" => registry_read(
                name,
                Method::GET,
                format!("/schemas/ids/{schema_id}/schema"),
            ),
            "registry-schema-subjects" => registry_read(
                name,
                Method::GET,
                format!("/schemas/ids/{schema_id}/subjects"),
            ),
            "registry-schema-versions" => registry_read(
                name,
                Method::GET,
                format!("/schemas/ids/{schema_id}/versions"),
            ),
            "registry-subjects" => registry_read(name, Method::GET, "/subjects".into()),
            "registry-lookup" => {
                registry_read(name, Method::POST, format!("/subjects/{subject}")).json(schema())
            }
            "registry-versions" => {
                registry_read(name, Method::GET, format!("/subjects/{subject}/versions"))
                    .ok_check(|answer| assert_eq!(answer.body, json!([1])))
            }
            "registry-version" => {
                registry_read(name, Method::GET, format!("/subjects/{subject}/versions/1"))
            }
            "registry-raw-version" => registry_read(
                name,
                Method::GET,
                format!("/subjects/{subject}/versions/1/schema"),
            ),
            "registry-config" => registry_read(name, Method::GET, "/config".into()),
            "registry-subject-config" => {
                let set = root
                    .send(
                        root.http
                            .put(format!("{}{REGISTRY}/config/{subject}", root.base))
                            .json(&json!({"compatibility": "FULL"})),
                    )
                    .await;
                assert_eq!(set.status, 200, "{:?}", set.body);
                registry_read(name, Method::GET, format!("/config/{subject}"))
                    .ok_check(|answer| assert_eq!(answer.body["compatibilityLevel"], "FULL"))
            }
            "registry-compatible-with-version" => registry_read(
                name,
                Method::POST,
                format!("/compatibility/subjects/{subject}/versions/1"),
            )
            .json(schema())
            .ok_check(|answer| assert_eq!(answer.body["is_compatible"], true)),
            "registry-compatible-with-all" => registry_read(
                name,
                Method::POST,
                format!("/compatibility/subjects/{subject}/versions"),
            )
            .json(schema())
            .ok_check(|answer| assert_eq!(answer.body["is_compatible"], true)),
            "registry-register" => registry_write(
                name,
                Method::POST,
                format!("/subjects/{subject}-new/versions"),
            )
            .json(schema()),
            "registry-delete-subject" => {
                registry_write(name, Method::DELETE, format!("/subjects/{subject}"))
                    .ok_check(|answer| assert_eq!(answer.body, json!([1])))
            }
            "registry-delete-version" => registry_write(
                name,
                Method::DELETE,
                format!("/subjects/{subject}/versions/1"),
            )
            .ok_check(|answer| assert_eq!(answer.body, json!(1))),
            // Sets the global level to what it already is, so the other cases see no change.
            "registry-set-config" => registry_write(name, Method::PUT, "/config".into())
                .json(json!({"compatibility": "BACKWARD"})),
            "registry-set-subject-config" => {
                registry_write(name, Method::PUT, format!("/config/{subject}"))
                    .json(json!({"compatibility": "FULL"}))
            }
            "registry-delete-subject-config" => {
                let set = root
                    .send(
                        root.http
                            .put(format!("{}{REGISTRY}/config/{subject}", root.base))
                            .json(&json!({"compatibility": "FULL"})),
                    )
                    .await;
                assert_eq!(set.status, 200, "{:?}", set.body);
                registry_write(name, Method::DELETE, format!("/config/{subject}"))
            }
            other => unreachable!("{other}"),
        };
        cases.push(case);
    }

    let anonymous = Api::anonymous(&floe);
    let garbage = Api::with_token(&floe, "garbage");
    for (i, case) in cases.iter().enumerate() {
        let what = format!("{} ({} {})", case.name, case.method, case.path);
        for (who, api) in [
            ("no token", &anonymous),
            ("malformed token", &garbage),
            ("expired token", &expired),
        ] {
            let answer = api.send(case.request(api)).await;
            assert_eq!(answer.status, 401, "{what}: {who}: {:?}", answer.body);
        }
        // Basic credentials (what schema registry clients send) are checked like tokens.
        for (who, request) in [
            (
                "basic credentials with a wrong secret",
                case.request(&anonymous).basic_auth(ROOT_ID, Some("wrong")),
            ),
            (
                "basic credentials that are not base64",
                case.request(&anonymous)
                    .header("authorization", "Basic !!not-base64!!"),
            ),
        ] {
            let answer = anonymous.send(request).await;
            assert_eq!(answer.status, 401, "{what}: {who}: {:?}", answer.body);
        }
        let denied = nobody.send(case.request(&nobody)).await;
        assert_eq!(
            denied.status, case.nobody,
            "{what}: principal holding nothing: {:?}",
            denied.body
        );
        if let Some(check) = &case.denied_check {
            check(&denied);
        }
        for (j, (label, holds, status)) in case.lacking.iter().enumerate() {
            let (api, _, _) = holder(&floe, &root, &format!("lack{i}-{j}"), holds).await;
            let answer = api.send(case.request(&api)).await;
            assert_eq!(
                answer.status, *status,
                "{what}: principal that {label}: {:?}",
                answer.body
            );
            if let Some(check) = &case.denied_check {
                check(&answer);
            }
        }
        let (granted, id, secret) = holder(&floe, &root, &format!("exact{i}"), &case.grants).await;
        let answer = granted.send(case.request(&granted)).await;
        assert_eq!(
            answer.status, case.ok,
            "{what}: with exactly {:?}: {:?}",
            case.grants, answer.body
        );
        if let Some(check) = &case.ok_check {
            check(&answer);
        }
        if case.basic {
            let request = case.request(&anonymous).basic_auth(&id, Some(&secret));
            let answer = anonymous.send(request).await;
            assert_eq!(
                answer.status, case.ok,
                "{what}: basic credentials of the principal with exactly the privilege: {:?}",
                answer.body
            );
        }
    }

    // SQL answers a table it may not see exactly as one that does not exist.
    let sql_ns = format!(
        "l{}",
        names.iter().position(|n| *n == "sql-select").unwrap()
    );
    let hidden = nobody
        .post(
            "/api/v1/sql",
            json!({"sql": "SELECT count(*) FROM t", "namespace": sql_ns}),
        )
        .await;
    let missing = nobody
        .post(
            "/api/v1/sql",
            json!({"sql": "SELECT count(*) FROM t", "namespace": "nosuch"}),
        )
        .await;
    assert_eq!(hidden.status, 400, "{:?}", hidden.body);
    assert_eq!(
        (hidden.status, hidden.message().replace(&sql_ns, "nosuch")),
        (missing.status, missing.message()),
        "a hidden table answers like a missing one"
    );
}

/// `/metrics` is open (Prometheus scrapes it without a token), so it must not name what only
/// some principals may see: unauthenticated callers, and principals without `manage-pipelines`
/// on the server, learn nothing of warehouses, namespaces or tables from it. Holders of it see
/// HTTP ingestion's per-table series.
#[tokio::test]
async fn authorization_matrix_open_metrics_name_no_tables() {
    let floe = Floe::start("sqlite").await;
    let root = Api::new(&floe);
    assert_eq!(
        root.post(NS, json!({"namespace": ["hushns"]})).await.status,
        200
    );
    let table = root
        .post(
            &format!("{NS}/hushns/tables"),
            json!({"name": "hushtable", "schema": simple_schema()}),
        )
        .await;
    assert_eq!(table.status, 200, "{:?}", table.body);
    let ingested = root
        .send(
            root.http
                .post(format!("{}/ingest/v1/default/hushns/hushtable", root.base))
                .header("content-type", "application/x-ndjson")
                .body("{\"id\": 1}\n"),
        )
        .await;
    assert_eq!(ingested.status, 202, "{:?}", ingested.body);
    let metrics = floe.metrics().await;
    let named = |metrics: &str| -> usize {
        metrics
            .lines()
            .filter(|line| line.contains("hushns") || line.contains("hushtable"))
            .count()
    };
    assert_eq!(named(&metrics), 0, "unauthenticated /metrics names a table");
    assert!(metrics.contains("floe_http_requests_total"), "{metrics}");
    let scrape = |token: String| {
        let request = reqwest::Client::new()
            .get(format!("{}/metrics", floe.base))
            .bearer_auth(token);
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    let (id, secret) = principal(&root, "scraper").await;
    grant(&root, "scraper", &[("read-data", on_ns("hushns"))]).await;
    let reader = token_for(&floe.base, &id, &secret).await;
    assert_eq!(named(&scrape(reader).await), 0, "a reader sees no names");
    let (id, secret) = principal(&root, "operator").await;
    grant(
        &root,
        "operator",
        &[("manage-pipelines", json!({"type": "server"}))],
    )
    .await;
    let operator = token_for(&floe.base, &id, &secret).await;
    let seen = scrape(operator).await;
    let series = "floe_ingest_rows_total{table=\"default.hushns.hushtable\"} 1";
    assert!(
        seen.contains(series),
        "manage-pipelines on the server sees the per-table series: {seen}"
    );
    // Prometheus's basic_auth with the operator's client id and secret works too.
    let basic = reqwest::Client::new()
        .get(format!("{}/metrics", floe.base))
        .basic_auth(&id, Some(&secret))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(basic.contains(series), "basic credentials: {basic}");
}

#[tokio::test]
async fn grants_follow_renames_vanish_with_drops_and_filter_listings() {
    let floe = Floe::start("sqlite").await;
    let root = Api::new(&floe);
    assert_eq!(root.post(NS, json!({"namespace": ["a"]})).await.status, 200);
    assert_eq!(root.post(NS, json!({"namespace": ["b"]})).await.status, 200);
    for t in ["t1", "t2", "t3"] {
        let answer = root
            .post(
                &format!("{NS}/a/tables"),
                json!({"name": t, "schema": simple_schema()}),
            )
            .await;
        assert_eq!(answer.status, 200);
    }
    let (id, secret) = principal(&root, "reader").await;
    grant(&root, "reader", &[("read-data", on_table("a", "t2"))]).await;
    let reader = Api::with_token(&floe, &token_for(&floe.base, &id, &secret).await);

    // Listings show only what the principal may see.
    let listed = reader.get(&format!("{NS}/a/tables")).await;
    assert_eq!(
        listed.body["identifiers"],
        json!([{"namespace": ["a"], "name": "t2"}])
    );
    let namespaces = reader.get(NS).await;
    assert_eq!(namespaces.body["namespaces"], json!([["a"]]));
    assert_eq!(reader.get(&format!("{NS}/a/tables/t1")).await.status, 404);
    assert_eq!(reader.get(&format!("{NS}/b")).await.status, 404);

    // The grant follows a rename across namespaces.
    let renamed = root
        .post(
            "/catalog/v1/default/tables/rename",
            json!({"source": {"namespace": ["a"], "name": "t2"}, "destination": {"namespace": ["b"], "name": "moved"}}),
        )
        .await;
    assert_eq!(renamed.status, 204);
    tokio::time::sleep(Duration::from_millis(2100)).await; // the grant cache lifetime
    assert_eq!(
        reader.get(&format!("{NS}/b/tables/moved")).await.status,
        200
    );
    let old_home = reader.get(&format!("{NS}/a/tables")).await;
    assert_eq!(
        old_home.status, 404,
        "nothing left for the reader in the old namespace"
    );

    // Dropping the table drops its grants: a new table of the same name is not readable.
    assert_eq!(
        root.delete(&format!("{NS}/b/tables/moved")).await.status,
        204
    );
    let again = root
        .post(
            &format!("{NS}/b/tables"),
            json!({"name": "moved", "schema": simple_schema()}),
        )
        .await;
    assert_eq!(again.status, 200);
    let grants = root.get("/api/v1/roles/role-reader/grants").await;
    assert_eq!(
        grants.body["grants"],
        json!([]),
        "no stale grant survives the drop"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(
        reader.get(&format!("{NS}/b/tables/moved")).await.status,
        404
    );
}

/// Polls the audit API until `predicate` holds for the records (the writer batches).
async fn audit_records(
    root: &Api,
    query: &str,
    predicate: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    for _ in 0..100 {
        let answer = root.get(&format!("/api/v1/audit?{query}")).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        let records = answer.body["records"].as_array().unwrap().clone();
        if predicate(&records) {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("audit records for {query} never matched");
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

fn verify_audit(data_dir: &std::path::Path) -> std::process::Output {
    verify_audit_with(data_dir, &[])
}

fn verify_audit_with(data_dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .env("FLOE_PG_LISTEN", "127.0.0.1:0")
        .env("FLOE_OTLP_GRPC_LISTEN", "127.0.0.1:0")
        .env("FLOE_FLIGHT_LISTEN", "127.0.0.1:0")
        .args(["audit", "verify", "--data-dir"])
        .arg(data_dir)
        .args(args)
        .env_remove("FLOE_CATALOG_DB")
        .output()
        .unwrap()
}

async fn tamper(data_dir: &std::path::Path, statements: &[&str]) {
    sqlx::any::install_default_drivers();
    let url = format!("sqlite://{}/catalog.db", data_dir.display());
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    for sql in statements {
        let changed = sqlx::query(sql)
            .execute(&pool)
            .await
            .unwrap()
            .rows_affected();
        assert!(changed > 0, "{sql} changed nothing");
    }
    pool.close().await;
}

#[tokio::test]
async fn every_request_is_audited_in_a_tamper_evident_chain() {
    let mut floe = Floe::start("sqlite").await;
    let root = Api::new(&floe);
    assert_eq!(
        root.post(NS, json!({"namespace": ["audited"]}))
            .await
            .status,
        200
    );
    assert_eq!(Api::anonymous(&floe).get(NS).await.status, 401);
    let (id, secret) = principal(&root, "auditor").await;
    grant(
        &root,
        "auditor",
        &[("read-audit", json!({"type": "server"}))],
    )
    .await;
    let auditor = Api::with_token(&floe, &token_for(&floe.base, &id, &secret).await);
    // A grant's record names what was granted to whom, on what (the path shows none of it).
    let granted = audit_records(&root, "action=POST%20/api/v1/grants", |r| !r.is_empty()).await;
    let details: Value = serde_json::from_str(granted[0]["details"].as_str().unwrap()).unwrap();
    assert_eq!(
        details,
        json!({"role": "role-auditor", "privilege": "read-audit", "on": {"type": "server"}})
    );
    // A server-level grant makes everything visible, so a missing privilege is a 403.
    assert_eq!(
        auditor
            .post(NS, json!({"namespace": ["nope"]}))
            .await
            .status,
        403
    );

    let records = audit_records(&root, "principal=root&limit=1000", |r| {
        r.iter()
            .any(|x| x["action"] == "POST /catalog/v1/{prefix}/namespaces")
    })
    .await;
    let create = records
        .iter()
        .find(|x| x["action"] == "POST /catalog/v1/{prefix}/namespaces")
        .unwrap();
    assert_eq!(create["status"], 200);
    assert_eq!(create["decision"], "allow");
    assert_eq!(create["resource"], "/catalog/v1/default/namespaces");
    assert_eq!(create["client"], "127.0.0.1");
    assert!(create["request-id"].as_str().unwrap().len() >= 32);
    let denied = audit_records(&auditor, "decision=deny", |r| !r.is_empty()).await;
    assert!(
        denied
            .iter()
            .any(|x| x["principal"] == "anonymous" && x["status"] == 401)
    );
    let refused = audit_records(&auditor, "principal=auditor&decision=deny", |r| {
        !r.is_empty()
    })
    .await;
    assert_eq!(refused[0]["status"], 403);
    let tokens = audit_records(&auditor, "action=POST%20/catalog/v1/oauth/tokens", |r| {
        r.len() >= 2
    })
    .await;
    assert!(
        tokens
            .iter()
            .any(|x| x["principal"] == format!("client:{ROOT_ID}"))
    );

    // Nobody without read-audit reads the trail, and no secret is in it.
    let (other_id, other_secret) = principal(&root, "curious").await;
    let curious = Api::with_token(
        &floe,
        &token_for(&floe.base, &other_id, &other_secret).await,
    );
    assert_eq!(curious.get("/api/v1/audit").await.status, 403);
    // A 404 that hides an object from the caller is recorded as the denial it is.
    assert_eq!(curious.get(&format!("{NS}/audited")).await.status, 404);
    let hidden = audit_records(&root, "principal=curious&decision=deny", |r| {
        r.iter().any(|x| x["status"] == 404)
    })
    .await;
    assert!(
        hidden
            .iter()
            .any(|x| x["resource"] == "/catalog/v1/default/namespaces/audited")
    );
    let everything = root.get("/api/v1/audit?limit=10000").await.body.to_string();
    for secret in [
        crate::harness::ROOT_SECRET,
        secret.as_str(),
        other_secret.as_str(),
    ] {
        assert!(
            !everything.contains(secret),
            "a secret leaked into the audit trail"
        );
    }
    let review = auditor.get("/api/v1/access-review").await;
    assert_eq!(review.status, 200);
    let reviewed = review.body["principals"].as_array().unwrap();
    let auditor_entry = reviewed
        .iter()
        .find(|p| p["principal"] == "auditor")
        .unwrap();
    assert_eq!(auditor_entry["privileges"][0]["privilege"], "read-audit");

    // Stop the server (the writer drains), then verify and tamper with copies of the store.
    let data_dir = floe.data_dir.path().to_path_buf();
    let status = floe.terminate();
    assert!(status.success());
    let missing = verify_audit(&data_dir.join("nowhere"));
    assert!(
        !missing.status.success(),
        "verifying a missing store must fail, not create one"
    );
    let intact = verify_audit(&data_dir);
    assert!(
        intact.status.success(),
        "{}",
        String::from_utf8_lossy(&intact.stderr)
    );
    let said = String::from_utf8_lossy(&intact.stdout);
    assert!(
        said.contains("intact") && said.contains("it holds all"),
        "{said}"
    );
    for (name, sql, expected) in [
        (
            "edit",
            &["UPDATE audit_log SET principal = 'mallory' WHERE seq = 3"][..],
            "record 3 was edited",
        ),
        (
            "delete",
            &["DELETE FROM audit_log WHERE seq = 4"][..],
            "between 3 and 5 are missing",
        ),
        (
            "reorder",
            &[
                "UPDATE audit_log SET seq = -1 WHERE seq = 2",
                "UPDATE audit_log SET seq = 2 WHERE seq = 3",
                "UPDATE audit_log SET seq = 3 WHERE seq = -1",
            ][..],
            "record 2",
        ),
    ] {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(&data_dir, copy.path());
        tamper(copy.path(), sql).await;
        let out = verify_audit(copy.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} must be detected");
        assert!(stderr.contains(expected), "{name}: {stderr}");
    }

    // The chain alone cannot see its newest records deleted, or the newest record rewritten
    // with a hash recomputed to match; the checkpoint noted at shutdown does.
    let copy = tempfile::tempdir().unwrap();
    copy_dir(&data_dir, copy.path());
    tamper(
        copy.path(),
        &["DELETE FROM audit_log WHERE seq = (SELECT MAX(seq) FROM audit_log)"],
    )
    .await;
    let out = verify_audit(copy.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a deleted end must be detected");
    assert!(stderr.contains("were deleted"), "{stderr}");

    let copy = tempfile::tempdir().unwrap();
    copy_dir(&data_dir, copy.path());
    rewrite_last_record(copy.path()).await;
    let out = verify_audit(copy.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a rewritten record must be detected");
    assert!(stderr.contains("the trail was rewritten"), "{stderr}");
    std::fs::remove_file(copy.path().join("audit-checkpoints")).unwrap();
    let required = verify_audit_with(copy.path(), &["--require-checkpoints"]);
    assert!(
        !required.status.success()
            && String::from_utf8_lossy(&required.stderr).contains("no audit checkpoints"),
        "a missing checkpoint file fails when checkpoints are required"
    );
    let unanchored = verify_audit_with(copy.path(), &["--checkpoints", "/dev/null"]);
    assert!(
        unanchored.status.success(),
        "without checkpoints the rewrite passes the chain check: {}",
        String::from_utf8_lossy(&unanchored.stderr)
    );
}

/// Changes the newest audit record's principal and gives it the hash its new contents chain
/// to, as someone with write access to the database could.
async fn rewrite_last_record(data_dir: &std::path::Path) {
    use floe_catalog::governance::audit::{AuditEvent, record_hash};
    use sqlx::Row;
    sqlx::any::install_default_drivers();
    let url = format!("sqlite://{}/catalog.db", data_dir.display());
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    let row = sqlx::query("SELECT * FROM audit_log ORDER BY seq DESC LIMIT 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    let seq: i64 = row.get("seq");
    let prev: String = row.get("prev_hash");
    let event = AuditEvent {
        at_ms: row.get("at_ms"),
        request_id: row.get("request_id"),
        principal: "mallory".into(),
        action: row.get("action"),
        resource: row.get("resource"),
        decision: row.get("decision"),
        status: row.get::<i64, _>("status") as u16,
        client: row.get("client"),
        details: row.get("details"),
    };
    sqlx::query("UPDATE audit_log SET principal = $1, hash = $2 WHERE seq = $3")
        .bind("mallory")
        .bind(record_hash(&prev, seq, &event))
        .bind(seq)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

#[tokio::test]
async fn listing_ten_thousand_tables_shows_a_low_privilege_principal_only_its_own() {
    let floe = Floe::start("sqlite").await;
    let root = std::sync::Arc::new(Api::new(&floe));
    assert_eq!(
        root.post(NS, json!({"namespace": ["big"]})).await.status,
        200
    );
    let total = 10_000;
    let mut workers = Vec::new();
    for w in 0..16 {
        let root = root.clone();
        workers.push(tokio::spawn(async move {
            for i in (w..total).step_by(16) {
                let answer = root
                    .post(
                        &format!("{NS}/big/tables"),
                        json!({"name": format!("t{i:05}"), "schema": simple_schema()}),
                    )
                    .await;
                assert_eq!(answer.status, 200, "{:?}", answer.body);
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let (id, secret) = principal(&root, "narrow").await;
    let mine: Vec<String> = (0..total)
        .step_by(250)
        .map(|i| format!("t{i:05}"))
        .collect();
    let grants: Vec<(&str, Value)> = mine
        .iter()
        .map(|t| ("read-metadata", on_table("big", t)))
        .collect();
    grant(&root, "narrow", &grants).await;
    let narrow = Api::with_token(&floe, &token_for(&floe.base, &id, &secret).await);

    let list_all = |api: &Api| {
        let api = Api::with_token(&floe, &api.http_token());
        async move {
            let mut names = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let mut path = format!("{NS}/big/tables?page-size=1000");
                if let Some(t) = &token {
                    path.push_str(&format!("&page-token={t}"));
                }
                let page = api.get(&path).await;
                assert_eq!(page.status, 200);
                for ident in page.body["identifiers"].as_array().unwrap() {
                    names.push(ident["name"].as_str().unwrap().to_string());
                }
                match page.body["next-page-token"].as_str() {
                    Some(t) => token = Some(t.to_string()),
                    None => break names,
                }
            }
        }
    };
    let seen = list_all(&narrow).await;
    assert_eq!(seen, mine, "exactly the granted tables, in order");
    let everything = list_all(&root).await;
    assert_eq!(everything.len(), total);
}

#[tokio::test]
async fn token_endpoint_and_authorization_header_survive_garbage() {
    let floe = Floe::start("sqlite").await;
    let http = reqwest::Client::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet: Vec<u8> = (0u8..=255).collect();
    for round in 0..600 {
        let len = (next() % 200) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| alphabet[(next() % 256) as usize])
            .collect();
        let mut form = bytes.clone();
        if round % 3 == 0 {
            form = format!(
                "grant_type={}&client_id={}&client_secret={}&subject_token={}",
                [
                    "client_credentials",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                    "x"
                ][round % 3],
                String::from_utf8_lossy(&bytes[..len / 2]),
                String::from_utf8_lossy(&bytes[len / 2..]),
                String::from_utf8_lossy(&bytes),
            )
            .into_bytes();
        }
        let token = http
            .post(format!("{}/catalog/v1/oauth/tokens", floe.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .unwrap();
        assert!(
            token.status().is_client_error(),
            "round {round}: {}",
            token.status()
        );
        let printable: String = bytes.iter().map(|b| (b % 94 + 33) as char).collect();
        for header in [
            format!("Bearer {printable}"),
            printable.clone(),
            format!("Bearer {printable}.{printable}.{printable}"),
        ] {
            let answer = http
                .get(format!("{}{NS}", floe.base))
                .header("authorization", header)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 401, "round {round}");
        }
    }
    assert_eq!(Api::new(&floe).get(NS).await.status, 200, "still serving");
}

#[tokio::test]
async fn a_table_cannot_take_over_another_tables_files() {
    let floe = Floe::start("sqlite").await;
    let root = Api::new(&floe);
    assert_eq!(
        root.post(NS, json!({"namespace": ["own"]})).await.status,
        200
    );
    let victim = root
        .post(
            &format!("{NS}/own/tables"),
            json!({"name": "victim", "schema": simple_schema()}),
        )
        .await;
    let location = victim.body["metadata"]["location"]
        .as_str()
        .unwrap()
        .to_string();
    let metadata = victim.body["metadata-location"]
        .as_str()
        .unwrap()
        .to_string();
    for (what, body) in [
        (
            "same location",
            json!({"name": "a", "schema": simple_schema(), "location": location}),
        ),
        (
            "inside it",
            json!({"name": "b", "schema": simple_schema(), "location": format!("{location}/data")}),
        ),
    ] {
        let answer = root.post(&format!("{NS}/own/tables"), body).await;
        assert_eq!(answer.status, 400, "{what}: {:?}", answer.body);
        assert!(
            answer.message().contains("overlaps"),
            "{}",
            answer.message()
        );
    }
    let alias = root
        .post(
            &format!("{NS}/own/register"),
            json!({"name": "alias", "metadata-location": metadata}),
        )
        .await;
    assert_eq!(
        alias.status, 400,
        "registering a live table's metadata again: {:?}",
        alias.body
    );
    let other = root
        .post(
            &format!("{NS}/own/tables"),
            json!({"name": "other", "schema": simple_schema()}),
        )
        .await;
    assert_eq!(other.status, 200);
    let moved = root
        .post(
            &format!("{NS}/own/tables/other"),
            json!({"updates": [{"action": "set-location", "location": location}]}),
        )
        .await;
    assert_eq!(moved.status, 400, "{:?}", moved.body);
}

#[tokio::test]
async fn token_exchange_cannot_extend_a_session_forever() {
    let floe = Floe::start_with("sqlite", &[("FLOE_MAX_SESSION_SECS", "2")]).await;
    let exchange = |token: String| {
        let base = floe.base.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{base}/catalog/v1/oauth/tokens"))
                .form(&[
                    (
                        "grant_type",
                        "urn:ietf:params:oauth:grant-type:token-exchange",
                    ),
                    ("subject_token", token.as_str()),
                ])
                .send()
                .await
                .unwrap()
        }
    };
    let first = exchange(floe.root_token.clone()).await;
    assert_eq!(first.status(), 200);
    let body: Value = first.json().await.unwrap();
    assert!(
        body["expires_in"].as_i64().unwrap() <= 2,
        "capped by the session: {body}"
    );
    let renewed = body["access_token"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(exchange(renewed).await.status(), 401, "the session is over");
    // Fresh credentials start a fresh session.
    token_for(&floe.base, ROOT_ID, crate::harness::ROOT_SECRET).await;
}

/// Every change's audit record is committed with the change itself: it is readable the moment
/// the response arrives, carries the status the client saw, and each request has exactly one.
#[tokio::test]
async fn changes_commit_their_audit_record_in_the_same_transaction() {
    for backend in crate::harness::backends() {
        let floe = Floe::start(backend).await;
        let root = Api::new(&floe);
        let mut seen: Vec<(String, u16)> = Vec::new();
        let table = format!("{NS}/changes/tables/t");
        let steps: Vec<(&str, String, Value)> = vec![
            ("POST", NS.into(), json!({"namespace": ["changes"]})),
            ("POST", NS.into(), json!({"namespace": ["changes"]})),
            (
                "POST",
                format!("{NS}/changes/properties"),
                json!({"updates": {"owner": "ops"}, "removals": []}),
            ),
            (
                "POST",
                format!("{NS}/changes/tables"),
                json!({"name": "t", "schema": simple_schema()}),
            ),
            (
                "POST",
                table.clone(),
                json!({"requirements": [], "updates": [
                    {"action": "set-properties", "updates": {"k": "v"}}]}),
            ),
            (
                "POST",
                "/catalog/v1/default/tables/rename".into(),
                json!({"source": {"namespace": ["changes"], "name": "t"},
                       "destination": {"namespace": ["changes"], "name": "u"}}),
            ),
            ("DELETE", format!("{NS}/changes/tables/u"), Value::Null),
            (
                "POST",
                "/api/v1/principals".into(),
                json!({"name": "changer", "kind": "service"}),
            ),
            ("POST", "/api/v1/roles".into(), json!({"name": "changers"})),
            (
                "POST",
                "/api/v1/roles/changers/members".into(),
                json!({"principal": "changer"}),
            ),
            (
                "POST",
                "/api/v1/grants".into(),
                json!({"role": "changers", "privilege": "read-data", "on": on_ns("changes")}),
            ),
            (
                "POST",
                "/api/v1/grants/revoke".into(),
                json!({"role": "changers", "privilege": "read-data", "on": on_ns("changes")}),
            ),
            (
                "POST",
                "/api/v1/principals/changer/disable".into(),
                Value::Null,
            ),
            (
                "POST",
                "/api/v1/principals/changer/enable".into(),
                Value::Null,
            ),
            (
                "POST",
                "/api/v1/principals/changer/rotate-credentials".into(),
                Value::Null,
            ),
            (
                "DELETE",
                "/api/v1/roles/changers/members/changer".into(),
                Value::Null,
            ),
            ("DELETE", "/api/v1/roles/changers".into(), Value::Null),
            ("DELETE", format!("{NS}/changes"), Value::Null),
        ];
        for (method, path, body) in steps {
            let url = format!("{}{path}", root.base);
            let request = match method {
                "POST" => root.http.post(url).json(&body),
                _ => root.http.delete(url),
            };
            let answer = root.send(request).await;
            assert!(
                answer.status < 300 || (answer.status == 409 && seen.len() == 1),
                "{method} {path}: {} {:?}",
                answer.status,
                answer.body
            );
            let id = answer.headers["x-request-id"].to_str().unwrap().to_string();
            if answer.status < 300 {
                // Readable at once: written with the change, not after it by the batch writer.
                let now = root.get("/api/v1/audit?limit=10000").await;
                assert!(
                    now.body["records"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|r| r["request-id"] == id.as_str()),
                    "{method} {path}: no audit record committed with the change"
                );
            }
            seen.push((id, answer.status));
        }
        let records = audit_records(&root, "limit=10000", |records| {
            seen.iter()
                .all(|(id, _)| records.iter().any(|r| r["request-id"] == id.as_str()))
        })
        .await;
        for (id, status) in &seen {
            let mine: Vec<&Value> = records
                .iter()
                .filter(|r| r["request-id"] == id.as_str())
                .collect();
            assert_eq!(mine.len(), 1, "request {id}: {mine:?}");
            assert_eq!(mine[0]["status"], *status, "request {id}: {:?}", mine[0]);
            assert_eq!(mine[0]["principal"], "root");
        }
        assert!(
            !records.iter().any(|r| r["details"]
                .as_str()
                .unwrap_or("")
                .contains("follows-record")),
            "a change was recorded with a status its response did not have"
        );
    }
}
