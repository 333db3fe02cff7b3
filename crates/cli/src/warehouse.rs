//! `floe warehouse …`: manage warehouses through a running server's management API.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// Base URL of the Floe server.
    #[arg(long, env = "FLOE_SERVER", default_value = "http://127.0.0.1:8181")]
    pub server: String,
}

#[derive(Subcommand, Debug)]
pub enum WarehouseCommand {
    /// Create a warehouse on a local directory or an S3-compatible bucket.
    Create {
        name: String,
        /// Absolute directory of a local warehouse.
        #[arg(long, conflicts_with = "s3_bucket")]
        local: Option<String>,
        #[arg(long)]
        s3_bucket: Option<String>,
        #[arg(long)]
        s3_prefix: Option<String>,
        #[arg(long, default_value = "us-east-1")]
        s3_region: String,
        /// Endpoint of a non-AWS S3-compatible server.
        #[arg(long)]
        s3_endpoint: Option<String>,
        #[arg(long)]
        s3_path_style: bool,
        /// Access key id; the secret is read from FLOE_S3_SECRET_ACCESS_KEY.
        #[arg(long, env = "FLOE_S3_ACCESS_KEY_ID")]
        s3_access_key_id: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// List warehouses.
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Show one warehouse.
    Get {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Delete an empty warehouse.
    Delete {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

pub async fn run(command: WarehouseCommand) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let (request, server) = match command {
        WarehouseCommand::Create {
            name,
            local,
            s3_bucket,
            s3_prefix,
            s3_region,
            s3_endpoint,
            s3_path_style,
            s3_access_key_id,
            server,
        } => {
            let storage = match (local, s3_bucket) {
                (Some(path), None) => json!({ "type": "local", "path": path }),
                (None, Some(bucket)) => {
                    let secret = std::env::var("FLOE_S3_SECRET_ACCESS_KEY").ok();
                    json!({
                        "type": "s3", "bucket": bucket, "key-prefix": s3_prefix, "region": s3_region,
                        "endpoint": s3_endpoint, "path-style-access": s3_path_style,
                        "access-key-id": s3_access_key_id, "secret-access-key": secret,
                    })
                }
                _ => bail!("give exactly one of --local or --s3-bucket"),
            };
            let storage = strip_nulls(storage);
            let url = format!("{}/api/v1/warehouses", server.server);
            (
                client
                    .post(url)
                    .json(&json!({ "name": name, "storage": storage })),
                server,
            )
        }
        WarehouseCommand::List { server } => (
            client.get(format!("{}/api/v1/warehouses", server.server)),
            server,
        ),
        WarehouseCommand::Get { name, server } => (
            client.get(format!("{}/api/v1/warehouses/{name}", server.server)),
            server,
        ),
        WarehouseCommand::Delete { name, server } => (
            client.delete(format!("{}/api/v1/warehouses/{name}", server.server)),
            server,
        ),
    };
    let response = request
        .send()
        .await
        .with_context(|| format!("reach Floe at {}", server.server))?;
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or(text);
        bail!("{status}: {message}");
    }
    if !text.is_empty() {
        let value: Value = serde_json::from_str(&text)?;
        println!("{}", serde_json::to_string_pretty(&value)?);
    }
    Ok(())
}

fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    }
}
