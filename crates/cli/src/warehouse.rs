//! `floe warehouse …`: manage warehouses through a running server's management API.

use anyhow::bail;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::client::{ServerArgs, print};

/// Where a warehouse's files live.
#[derive(Args, Debug)]
pub struct StorageArgs {
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
    /// The store has no STS: vend no credentials, and skip validation's STS steps.
    #[arg(long)]
    s3_no_sts: bool,
}

impl StorageArgs {
    fn given(&self) -> bool {
        self.local.is_some() || self.s3_bucket.is_some()
    }

    /// The `storage` body of the management API.
    fn profile(&self) -> anyhow::Result<Value> {
        Ok(match (&self.local, &self.s3_bucket) {
            (Some(path), None) => json!({ "type": "local", "path": path }),
            (None, Some(bucket)) => {
                let secret = std::env::var("FLOE_S3_SECRET_ACCESS_KEY").ok();
                strip_nulls(json!({
                    "type": "s3", "bucket": bucket, "key-prefix": self.s3_prefix,
                    "region": self.s3_region, "endpoint": self.s3_endpoint,
                    "path-style-access": self.s3_path_style,
                    "access-key-id": self.s3_access_key_id, "secret-access-key": secret,
                    "sts-role-arn": self.s3_sts_role_arn, "sts-enabled": !self.s3_no_sts,
                }))
            }
            _ => bail!("give exactly one of --local or --s3-bucket"),
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum WarehouseCommand {
    /// Create a warehouse on a local directory or an S3-compatible bucket. Its storage is
    /// validated first (see `floe warehouse validate`); storage that fails is refused.
    Create {
        name: String,
        #[command(flatten)]
        storage: StorageArgs,
        /// Create the S3 bucket (an existing one these keys own is kept) and apply lifecycle
        /// rules: abort incomplete multipart uploads, expire noncurrent versions where
        /// versioning is on.
        #[arg(long)]
        create_bucket: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Validate a warehouse's storage: write, read, list and delete a probe object, and where
    /// the warehouse vends credentials, check that STS issues one that reaches one table's
    /// prefix and no other's. Give a warehouse's name, or storage flags to validate storage
    /// before creating a warehouse on it. Exits non-zero when a step fails.
    Validate {
        /// An existing warehouse.
        #[arg(required_unless_present_any = ["local", "s3_bucket"])]
        name: Option<String>,
        #[command(flatten)]
        storage: StorageArgs,
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
            storage,
            create_bucket,
            server,
        } => {
            let mut body = json!({ "name": name, "storage": storage.profile()? });
            if create_bucket {
                body["create-bucket"] = json!(true);
            }
            server
                .connect()
                .await?
                .call(Method::POST, "/api/v1/warehouses", Some(body))
                .await?
        }
        WarehouseCommand::Validate {
            name,
            storage,
            server,
        } => {
            let client = server.connect().await?;
            let report = match (name, storage.given()) {
                (Some(_), true) => bail!("give a warehouse's name or storage flags, not both"),
                (Some(name), false) => {
                    let path = format!("/api/v1/warehouses/{name}/validate");
                    client.call(Method::POST, &path, None).await?
                }
                (None, _) => {
                    let body = json!({ "storage": storage.profile()? });
                    client
                        .call(Method::POST, "/api/v1/storage/validate", Some(body))
                        .await?
                }
            };
            print(&report)?;
            if report["ok"] != json!(true) {
                let failed = report["steps"]
                    .as_array()
                    .and_then(|steps| steps.iter().find(|s| s["status"] == "failed"));
                match failed {
                    Some(step) => bail!(
                        "storage validation failed at step {}: {}",
                        step["step"].as_str().unwrap_or("?"),
                        step["detail"].as_str().unwrap_or_default()
                    ),
                    None => bail!("storage validation failed"),
                }
            }
            return Ok(());
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
