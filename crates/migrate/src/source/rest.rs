//! Another Iceberg REST catalog, read through the spec's own routes (config, namespaces,
//! tables, load table) with a bearer token or OAuth2 client credentials taken from the
//! environment variables the plan names. Read only.

use anyhow::{Context, bail};
use async_trait::async_trait;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use super::{Source, SourceTable};
use crate::plan::SourceConfig;

/// Deepest namespace nesting listed.
const MAX_NESTING: usize = 4;

pub struct RestSource {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

fn namespace_path(parts: &[String]) -> String {
    utf8_percent_encode(&parts.join("\u{1f}"), NON_ALPHANUMERIC).to_string()
}

impl RestSource {
    pub async fn connect(config: &SourceConfig) -> anyhow::Result<Self> {
        let http = reqwest::Client::new();
        let uri = config.uri.trim_end_matches('/').to_string();
        let mut token = match &config.token_env {
            Some(var) => Some(
                std::env::var(var)
                    .with_context(|| format!("environment variable {var} is unset"))?,
            ),
            None => None,
        };
        if let Some(var) = &config.credential_env {
            let credential = std::env::var(var)
                .with_context(|| format!("environment variable {var} is unset"))?;
            let (id, secret) = credential
                .split_once(':')
                .with_context(|| format!("{var} must hold client_id:client_secret"))?;
            let answer: Value = http
                .post(format!("{uri}/v1/oauth/tokens"))
                .form(&[
                    ("grant_type", "client_credentials"),
                    ("client_id", id),
                    ("client_secret", secret),
                ])
                .send()
                .await
                .context("the source catalog's token endpoint is unreachable")?
                .error_for_status()
                .context("the source catalog refused the client credentials")?
                .json()
                .await?;
            token = answer["access_token"].as_str().map(str::to_string);
        }
        let mut source = Self {
            http,
            base: uri.clone(),
            token,
        };
        let mut config_url = format!("{uri}/v1/config");
        if let Some(warehouse) = &config.catalog {
            config_url.push_str(&format!(
                "?warehouse={}",
                utf8_percent_encode(warehouse, NON_ALPHANUMERIC)
            ));
        }
        let answer = source.get(&config_url).await?;
        let prefix = answer["overrides"]["prefix"]
            .as_str()
            .or_else(|| answer["defaults"]["prefix"].as_str());
        if let Some(prefix) = prefix {
            source.base = format!("{uri}/v1/{}", utf8_percent_encode(prefix, NON_ALPHANUMERIC));
        } else {
            source.base = format!("{uri}/v1");
        }
        Ok(source)
    }

    async fn get(&self, url: &str) -> anyhow::Result<Value> {
        let mut request = self.http.get(url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("source catalog unreachable at {url}"))?;
        let status = response.status();
        if !status.is_success() {
            bail!("source catalog answered {status} to GET {url}");
        }
        Ok(response.json().await?)
    }

    /// Every page of a listing.
    async fn pages(&self, url: &str, key: &str) -> anyhow::Result<Vec<Value>> {
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page_url = match &token {
                Some(t) => format!(
                    "{url}{}pageToken={}",
                    if url.contains('?') { '&' } else { '?' },
                    utf8_percent_encode(t, NON_ALPHANUMERIC)
                ),
                None => url.to_string(),
            };
            let answer = self.get(&page_url).await?;
            items.extend(answer[key].as_array().cloned().unwrap_or_default());
            match answer["next-page-token"].as_str() {
                Some(next) if !next.is_empty() => token = Some(next.to_string()),
                _ => return Ok(items),
            }
        }
    }

    async fn namespaces(&self) -> anyhow::Result<Vec<Vec<String>>> {
        let mut found = Vec::new();
        let mut queue: Vec<Vec<String>> = vec![Vec::new()];
        while let Some(parent) = queue.pop() {
            if parent.len() >= MAX_NESTING {
                continue;
            }
            let url = if parent.is_empty() {
                format!("{}/namespaces", self.base)
            } else {
                format!(
                    "{}/namespaces?parent={}",
                    self.base,
                    namespace_path(&parent)
                )
            };
            for ns in self.pages(&url, "namespaces").await? {
                let parts: Vec<String> = ns
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|p| p.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                if parts.len() <= parent.len() || found.contains(&parts) {
                    continue;
                }
                found.push(parts.clone());
                queue.push(parts);
            }
        }
        found.sort();
        Ok(found)
    }
}

#[async_trait]
impl Source for RestSource {
    async fn list(&self) -> anyhow::Result<Vec<String>> {
        let mut tables = Vec::new();
        for ns in self.namespaces().await? {
            let url = format!("{}/namespaces/{}/tables", self.base, namespace_path(&ns));
            for ident in self.pages(&url, "identifiers").await? {
                if let Some(name) = ident["name"].as_str() {
                    tables.push(format!("{}.{name}", ns.join(".")));
                }
            }
        }
        Ok(tables)
    }

    async fn describe(&self, table: &str) -> anyhow::Result<SourceTable> {
        let (ns, name) = super::split(table)?;
        let parts: Vec<String> = ns.split('.').map(str::to_string).collect();
        let url = format!(
            "{}/namespaces/{}/tables/{}",
            self.base,
            namespace_path(&parts),
            utf8_percent_encode(name, NON_ALPHANUMERIC)
        );
        let answer = self.get(&url).await?;
        match answer["metadata-location"].as_str() {
            Some(location) => Ok(SourceTable::Iceberg {
                metadata_location: location.to_string(),
            }),
            None => bail!("the source catalog gave no metadata location for {table}"),
        }
    }
}
