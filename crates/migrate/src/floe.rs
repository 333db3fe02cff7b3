//! The Floe server a migration writes to, through its public APIs only: the Iceberg REST
//! catalog (namespaces, register, unregister, load), `/api/v1/tables/convert`,
//! `/api/v1/migrations…` (the migration's records and the deep read of both sides). Every call is the
//! operator's principal's, authorized and audited by the server like any other.

use anyhow::{Context, bail};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A connection to a Floe server as one principal, for one target warehouse.
#[derive(Clone)]
pub struct Floe {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
    pub warehouse: String,
}

/// A table as Floe holds it.
#[derive(Debug, Clone)]
pub struct FloeTable {
    pub metadata_location: String,
    pub metadata: Value,
}

fn encode(part: &str) -> String {
    utf8_percent_encode(part, NON_ALPHANUMERIC).to_string()
}

impl Floe {
    fn namespace_url(&self, ns: &[String]) -> String {
        format!(
            "{}/catalog/v1/{}/namespaces/{}",
            self.base,
            encode(&self.warehouse),
            encode(&ns.join("\u{1f}"))
        )
    }

    fn table_url(&self, ns: &[String], name: &str) -> String {
        format!("{}/tables/{}", self.namespace_url(ns), encode(name))
    }

    /// Sends a request; the status and the JSON body (`null` when there is none).
    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let mut request = self
            .http
            .request(method.clone(), url)
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("Floe unreachable: {method} {url}"))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok((status, value))
    }

    /// The body of a success, or an error naming the call and what Floe said.
    async fn call(&self, method: Method, url: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let (status, value) = self.send(method.clone(), url, body).await?;
        if !status.is_success() {
            bail!(
                "Floe answered {status} to {method} {url}: {}",
                message(&value)
            );
        }
        Ok(value)
    }

    pub async fn load_table(&self, ns: &[String], name: &str) -> anyhow::Result<Option<FloeTable>> {
        let url = self.table_url(ns, name);
        let (status, value) = self.send(Method::GET, &url, None).await?;
        match status {
            StatusCode::NOT_FOUND => Ok(None),
            s if s.is_success() => Ok(Some(FloeTable {
                metadata_location: value["metadata-location"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                metadata: value["metadata"].clone(),
            })),
            s => bail!("Floe answered {s} to GET {url}: {}", message(&value)),
        }
    }

    /// Creates the namespace (and its parents) where missing; the namespaces created.
    pub async fn ensure_namespace(&self, ns: &[String]) -> anyhow::Result<Vec<Vec<String>>> {
        let mut created = Vec::new();
        for depth in 1..=ns.len() {
            let part = &ns[..depth];
            let (status, _) = self
                .send(Method::GET, &self.namespace_url(part), None)
                .await?;
            if status.is_success() {
                continue;
            }
            let url = format!(
                "{}/catalog/v1/{}/namespaces",
                self.base,
                encode(&self.warehouse)
            );
            let (status, value) = self
                .send(Method::POST, &url, Some(&json!({"namespace": part})))
                .await?;
            if status.is_success() {
                created.push(part.to_vec());
            } else if status != StatusCode::CONFLICT {
                bail!(
                    "Floe refused namespace {}: {}",
                    part.join("."),
                    message(&value)
                );
            }
        }
        Ok(created)
    }

    /// Drops the namespace if it is empty; whether it was dropped.
    pub async fn drop_namespace(&self, ns: &[String]) -> anyhow::Result<bool> {
        let (status, _) = self
            .send(Method::DELETE, &self.namespace_url(ns), None)
            .await?;
        Ok(status.is_success())
    }

    /// Registers a metadata file; `Err` carries Floe's status and message when refused.
    pub async fn register(
        &self,
        ns: &[String],
        name: &str,
        metadata_location: &str,
        overwrite: bool,
    ) -> anyhow::Result<Result<FloeTable, (StatusCode, String)>> {
        let url = format!("{}/register", self.namespace_url(ns));
        let body = json!({
            "name": name,
            "metadata-location": metadata_location,
            "overwrite": overwrite,
        });
        let (status, value) = self.send(Method::POST, &url, Some(&body)).await?;
        if !status.is_success() {
            return Ok(Err((status, message(&value))));
        }
        Ok(Ok(FloeTable {
            metadata_location: value["metadata-location"]
                .as_str()
                .unwrap_or(metadata_location)
                .to_string(),
            metadata: value["metadata"].clone(),
        }))
    }

    /// Removes the table from Floe, keeping its files; false when it was not there.
    pub async fn unregister(&self, ns: &[String], name: &str) -> anyhow::Result<bool> {
        let url = format!("{}/unregister", self.table_url(ns, name));
        let (status, value) = self.send(Method::POST, &url, None).await?;
        match status {
            StatusCode::NOT_FOUND => Ok(false),
            s if s.is_success() => Ok(true),
            s => bail!(
                "Floe answered {s} to unregister {name}: {}",
                message(&value)
            ),
        }
    }

    /// `/api/v1/tables/convert`; `Err` carries Floe's status and message when refused.
    pub async fn convert(
        &self,
        body: &Value,
    ) -> anyhow::Result<Result<Value, (StatusCode, String)>> {
        let url = format!("{}/api/v1/tables/convert", self.base);
        let (status, value) = self.send(Method::POST, &url, Some(body)).await?;
        if !status.is_success() {
            return Ok(Err((status, message(&value))));
        }
        Ok(Ok(value))
    }

    /// A metadata file inside the target warehouse, as Floe reads it; `table` (namespace and
    /// name) when the file lies in that Floe table's location.
    pub async fn read_metadata(
        &self,
        metadata_location: &str,
        table: Option<(&[String], &str)>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}/api/v1/migrations/read-metadata", self.base);
        let mut body = json!({"warehouse": self.warehouse, "metadata-location": metadata_location});
        if let Some((namespace, name)) = table {
            body["namespace"] = json!(namespace);
            body["table"] = json!(name);
        }
        Ok(self.call(Method::POST, &url, Some(&body)).await?["metadata"].clone())
    }

    /// The records of `migration`.
    pub async fn records(&self, migration: &str) -> anyhow::Result<Vec<Value>> {
        let url = format!("{}/api/v1/migrations/{}", self.base, encode(migration));
        let answer = self.call(Method::GET, &url, None).await?;
        Ok(answer["tables"].as_array().cloned().unwrap_or_default())
    }

    pub async fn put_record(
        &self,
        migration: &str,
        source: &str,
        wave: usize,
        state: &Value,
    ) -> anyhow::Result<()> {
        let url = format!(
            "{}/api/v1/migrations/{}/tables",
            self.base,
            encode(migration)
        );
        let body = json!({"source": source, "wave": wave, "state": state});
        self.call(Method::PUT, &url, Some(&body)).await.map(|_| ())
    }

    /// Every row of table `ns.name` read through Floe and from `source` (as the source's
    /// own engine reads it): row counts and per-column checksums of both sides.
    pub async fn digest(&self, ns: &[String], name: &str, source: &Value) -> anyhow::Result<Value> {
        let url = format!("{}/api/v1/migrations/digest", self.base);
        let body = json!({
            "warehouse": self.warehouse,
            "namespace": ns,
            "table": name,
            "source": source,
        });
        self.call(Method::POST, &url, Some(&body)).await
    }
}

/// What an error body says.
fn message(value: &Value) -> String {
    value["error"]["message"]
        .as_str()
        .or(value["message"].as_str())
        .or(value.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string())
}
