//! An authenticated HTTP client for commands that talk to a running server.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

#[derive(Args, Clone)]
pub struct ServerArgs {
    /// Base URL of the Floe server.
    #[arg(long, env = "FLOE_SERVER", default_value = "http://127.0.0.1:8181")]
    pub server: String,
    /// Client id to authenticate with (default: the root credentials file).
    #[arg(long, env = "FLOE_CLIENT_ID")]
    pub client_id: Option<String>,
    /// Client secret to authenticate with.
    #[arg(long, env = "FLOE_CLIENT_SECRET", hide_env_values = true)]
    pub client_secret: Option<String>,
    /// Credentials file written by `floe serve` on first start.
    #[arg(
        long,
        env = "FLOE_CREDENTIALS_FILE",
        default_value = "./floe-data/root-credentials.json"
    )]
    pub credentials_file: PathBuf,
}

/// Never shows the secret.
impl std::fmt::Debug for ServerArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerArgs")
            .field("server", &self.server)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("credentials_file", &self.credentials_file)
            .finish()
    }
}

/// A client holding a bearer token.
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl ServerArgs {
    fn credentials(&self) -> anyhow::Result<(String, String)> {
        if let (Some(id), Some(secret)) = (&self.client_id, &self.client_secret) {
            return Ok((id.clone(), secret.clone()));
        }
        let text = std::fs::read_to_string(&self.credentials_file).with_context(|| {
            format!(
                "no --client-id/--client-secret given and cannot read {}",
                self.credentials_file.display()
            )
        })?;
        let value: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", self.credentials_file.display()))?;
        match (value["client_id"].as_str(), value["client_secret"].as_str()) {
            (Some(id), Some(secret)) => Ok((id.to_string(), secret.to_string())),
            _ => bail!(
                "{} lacks client_id or client_secret",
                self.credentials_file.display()
            ),
        }
    }

    /// Obtains a token with the configured client credentials.
    pub async fn connect(&self) -> anyhow::Result<Client> {
        let (id, secret) = self.credentials()?;
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()?;
        let base = self.server.trim_end_matches('/').to_string();
        let response = http
            .post(format!("{base}/catalog/v1/oauth/tokens"))
            .form(&[
                ("grant_type", "client_credentials"),
                ("client_id", id.as_str()),
                ("client_secret", secret.as_str()),
                ("scope", "catalog"),
            ])
            .send()
            .await
            .with_context(|| format!("reach Floe at {base}"))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let Some(token) = body["access_token"].as_str() else {
            bail!(
                "authentication failed ({status}): {}",
                body["error_description"]
                    .as_str()
                    .unwrap_or("no token in the answer")
            );
        };
        Ok(Client {
            http,
            base,
            token: token.to_string(),
        })
    }
}

impl Client {
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    /// Sends a request and returns the JSON answer, or an error carrying the server's message.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("reach Floe at {}", self.base))?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or(text);
            bail!("{status}: {message}");
        }
        Ok(if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)?
        })
    }
}

/// Prints a JSON answer for a person.
pub fn print(value: &Value) -> anyhow::Result<()> {
    if !value.is_null() {
        println!("{}", serde_json::to_string_pretty(value)?);
    }
    Ok(())
}
