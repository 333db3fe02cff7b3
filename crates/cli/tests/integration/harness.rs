//! Starts `floe serve` as a child process on a free port with a fresh data directory.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Floe {
    child: Child,
    pub base: String,
    pub data_dir: tempfile::TempDir,
    /// The catalog database the server runs on (for other nodes of its cluster).
    pub catalog_db: String,
    /// A token of the root principal.
    pub root_token: String,
}

/// Root credentials every test server is started with.
pub const ROOT_ID: &str = "floe-test-root";
pub const ROOT_SECRET: &str = "floe-test-root-secret";

/// Client credentials grant against a running server.
pub async fn fetch_token(base: &str, id: &str, secret: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/catalog/v1/oauth/tokens"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", id),
            ("client_secret", secret),
            ("scope", "catalog"),
        ])
        .send()
        .await
        .unwrap()
}

pub async fn token_for(base: &str, id: &str, secret: &str) -> String {
    let response = fetch_token(base, id, secret).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["access_token"].as_str().unwrap().to_string()
}

/// Which catalog databases to test: SQLite always, PostgreSQL when the test script started one.
pub fn backends() -> Vec<&'static str> {
    let mut backends = vec!["sqlite"];
    if std::env::var("FLOE_TEST_POSTGRES_URL").is_ok() {
        backends.push("postgres");
    } else if std::env::var("CI").is_ok() {
        panic!("FLOE_TEST_POSTGRES_URL must be set in CI");
    }
    backends
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) async fn fresh_postgres_database() -> String {
    let url = std::env::var("FLOE_TEST_POSTGRES_URL").unwrap();
    let name = format!("floe_it_{}", uuid::Uuid::new_v4().simple());
    psql(&url, &format!("CREATE DATABASE {name}")).await;
    let mut parsed = url::Url::parse(&url).unwrap();
    parsed.set_path(&format!("/{name}"));
    parsed.to_string()
}

/// Runs one statement through `psql` (the tests use no SQL driver of their own).
async fn psql(url: &str, sql: &str) {
    let status = tokio::process::Command::new("psql")
        .arg(url)
        .arg("-q")
        .arg("-c")
        .arg(sql)
        .status()
        .await
        .expect("run psql");
    assert!(status.success(), "psql {sql} failed");
}

impl Floe {
    pub async fn start(backend: &'static str) -> Floe {
        Self::start_with(backend, &[]).await
    }

    pub async fn start_with(backend: &'static str, env: &[(&str, &str)]) -> Floe {
        let data_dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_floe"));
        command
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(data_dir.path())
            .env(
                "FLOE_LOG",
                std::env::var("FLOE_TEST_LOG").unwrap_or_else(|_| "warn".to_string()),
            )
            .env("FLOE_ROOT_CLIENT_ID", ROOT_ID)
            .env("FLOE_ROOT_CLIENT_SECRET", ROOT_SECRET)
            // Many servers run at once: none takes the fixed PostgreSQL port.
            .env("FLOE_PG_LISTEN", "127.0.0.1:0")
            .env("FLOE_FLIGHT_LISTEN", "127.0.0.1:0")
            .env("FLOE_OTLP_GRPC_LISTEN", "127.0.0.1:0")
            .stdin(Stdio::null());
        let catalog_db = if backend == "postgres" {
            let url = fresh_postgres_database().await;
            command.env("FLOE_CATALOG_DB", &url);
            url
        } else {
            command.env_remove("FLOE_CATALOG_DB");
            format!("sqlite:{}/catalog.db", data_dir.path().display())
        };
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command.spawn().expect("start floe");
        let mut floe = Floe {
            child,
            base: format!("http://127.0.0.1:{port}"),
            data_dir,
            catalog_db,
            root_token: String::new(),
        };
        floe.wait_ready().await;
        floe.root_token = token_for(&floe.base, ROOT_ID, ROOT_SECRET).await;
        floe
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = reqwest::Client::new();
        while Instant::now() < deadline {
            if let Ok(r) = client.get(format!("{}/health", self.base)).send().await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("floe did not become healthy at {}", self.base);
    }

    /// The text of `/metrics`, asked without a token.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub fn catalog_uri(&self) -> String {
        format!("{}/catalog", self.base)
    }

    pub fn warehouse_dir(&self) -> std::path::PathBuf {
        std::fs::canonicalize(self.data_dir.path())
            .unwrap()
            .join("warehouse")
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").arg("-TERM").arg(&pid).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "floe did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Floe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small JSON client for the REST catalog.
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    token: String,
}

pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    /// The `ErrorModel` message, for error answers.
    pub fn message(&self) -> String {
        self.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn error_type(&self) -> String {
        self.body["error"]["type"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

impl Api {
    /// A client acting as the root principal.
    pub fn new(floe: &Floe) -> Api {
        Api::with_token(floe, &floe.root_token)
    }

    /// A client sending `token` as its bearer token.
    pub fn with_token(floe: &Floe, token: &str) -> Api {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        Api {
            http: reqwest::Client::builder()
                .default_headers(headers)
                // No reuse of idle connections: when the server answers a request without
                // reading its whole body it closes the connection, and a pooled client can
                // race that close with its next request (a broken pipe, seen in CI).
                .pool_max_idle_per_host(0)
                .build()
                .unwrap(),
            base: floe.base.clone(),
            token: token.to_string(),
        }
    }

    /// A client sending no credentials.
    pub fn anonymous(floe: &Floe) -> Api {
        Api {
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap(),
            base: floe.base.clone(),
            token: String::new(),
        }
    }

    /// The bearer token this client sends.
    pub fn http_token(&self) -> String {
        self.token.clone()
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.send(self.http.post(format!("{}{path}", self.base)).json(&body))
            .await
    }

    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> Answer {
        self.send(
            self.http
                .post(format!("{}{path}", self.base))
                .header("content-type", "application/json")
                .body(body),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.send(self.http.delete(format!("{}{path}", self.base)))
            .await
    }
}

pub fn simple_schema() -> Value {
    serde_json::json!({
        "type": "struct", "schema-id": 0,
        "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "name", "required": false, "type": "string"}
        ]
    })
}
