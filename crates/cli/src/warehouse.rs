//! `floe warehouse …`: manage warehouses through a running server's management API.

use anyhow::bail;
use clap::Subcommand;
use serde_json::{Value, json};

use crate::client::{ServerArgs, print};

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
        /// The IAM role credential vending assumes (needed on AWS).
        #[arg(long)]
        s3_sts_role_arn: Option<String>,
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
    use reqwest::Method;
    let answer = match command {
        WarehouseCommand::Create {
            name,
            local,
            s3_bucket,
            s3_prefix,
            s3_region,
            s3_endpoint,
            s3_path_style,
            s3_access_key_id,
            s3_sts_role_arn,
            server,
        } => {
            let storage = match (local, s3_bucket) {
                (Some(path), None) => json!({ "type": "local", "path": path }),
                (None, Some(bucket)) => {
                    let secret = std::env::var("FLOE_S3_SECRET_ACCESS_KEY").ok();
                    strip_nulls(json!({
                        "type": "s3", "bucket": bucket, "key-prefix": s3_prefix, "region": s3_region,
                        "endpoint": s3_endpoint, "path-style-access": s3_path_style,
                        "access-key-id": s3_access_key_id, "secret-access-key": secret,
                        "sts-role-arn": s3_sts_role_arn,
                    }))
                }
                _ => bail!("give exactly one of --local or --s3-bucket"),
            };
            let body = json!({ "name": name, "storage": storage });
            server
                .connect()
                .await?
                .call(Method::POST, "/api/v1/warehouses", Some(body))
                .await?
        }
        WarehouseCommand::List { server } => {
            server
                .connect()
                .await?
                .call(Method::GET, "/api/v1/warehouses", None)
                .await?
        }
        WarehouseCommand::Get { name, server } => {
            let path = format!("/api/v1/warehouses/{name}");
            server
                .connect()
                .await?
                .call(Method::GET, &path, None)
                .await?
        }
        WarehouseCommand::Delete { name, server } => {
            let path = format!("/api/v1/warehouses/{name}");
            server
                .connect()
                .await?
                .call(Method::DELETE, &path, None)
                .await?
        }
    };
    print(&answer)
}

fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    }
}
