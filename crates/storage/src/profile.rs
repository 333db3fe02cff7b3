//! Storage profiles: where a warehouse lives and how to reach it.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;
use serde::{Deserialize, Serialize};

use crate::{Location, Result, StorageError};

/// Where a warehouse stores its files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum StorageProfile {
    /// A directory on the local file system.
    Local {
        /// Absolute path of the warehouse directory.
        path: String,
    },
    /// A bucket (and optional key prefix) of an S3-compatible object store.
    S3(S3Profile),
}

/// An S3-compatible bucket. Credentials not given here are taken from the environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, ...).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct S3Profile {
    pub bucket: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
    #[serde(default = "default_region")]
    pub region: String,
    /// Endpoint of a non-AWS S3-compatible server, e.g. `http://127.0.0.1:9000`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default)]
    pub path_style_access: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key: Option<String>,
    /// The IAM role that credential vending assumes (`RoleArn` of STS `AssumeRole`, which AWS
    /// requires); S3-compatible servers such as MinIO assume the keys' own identity without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sts_role_arn: Option<String>,
    /// Whether the warehouse vends credentials through STS `AssumeRole` (the default).
    /// Validation then checks that STS answers and that its credentials are scoped to one
    /// table; a store without STS needs `false`, and its tables are vended nothing.
    #[serde(default = "default_true")]
    pub sts_enabled: bool,
}

fn default_region() -> String {
    "us-east-1".to_string()
}

fn default_true() -> bool {
    true
}

impl std::fmt::Debug for S3Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Profile")
            .field("bucket", &self.bucket)
            .field("key_prefix", &self.key_prefix)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("path_style_access", &self.path_style_access)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("sts_role_arn", &self.sts_role_arn)
            .field("sts_enabled", &self.sts_enabled)
            .finish()
    }
}

impl S3Profile {
    /// The client settings that locate this bucket (endpoint, addressing, region), in the
    /// property names Iceberg clients read from a table's `config`. Never credentials.
    pub fn client_properties(&self) -> std::collections::HashMap<String, String> {
        let mut properties = std::collections::HashMap::from([
            (
                "s3.path-style-access".to_string(),
                self.path_style_access.to_string(),
            ),
            ("client.region".to_string(), self.region.clone()),
            ("s3.region".to_string(), self.region.clone()),
        ]);
        if let Some(endpoint) = &self.endpoint {
            properties.insert("s3.endpoint".to_string(), endpoint.clone());
        }
        properties
    }
}

impl StorageProfile {
    /// Checks the profile's fields and returns a clear message for the first bad one.
    pub fn validate(&self) -> Result<()> {
        let invalid = |m: String| Err(StorageError::InvalidProfile(m));
        match self {
            StorageProfile::Local { path } => {
                if !path.starts_with('/') {
                    return invalid(format!("local path '{path}' must be absolute"));
                }
            }
            StorageProfile::S3(s3) => {
                let valid_bucket = (3..=63).contains(&s3.bucket.len())
                    && s3.bucket.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'
                    });
                if !valid_bucket {
                    return invalid(format!(
                        "bucket '{}' is not a valid S3 bucket name (3-63 characters of a-z, 0-9, '-', '.')",
                        s3.bucket
                    ));
                }
                if let Some(endpoint) = &s3.endpoint
                    && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
                {
                    return invalid(format!(
                        "endpoint '{endpoint}' must start with http:// or https://"
                    ));
                }
                if s3.access_key_id.is_some() != s3.secret_access_key.is_some() {
                    return invalid(
                        "access-key-id and secret-access-key must be given together".to_string(),
                    );
                }
                // These travel in request headers and signatures: printable ASCII only (a
                // control character would fail deep in the S3 client). Values are not echoed:
                // one of them is a secret.
                let fields = [
                    ("access-key-id", s3.access_key_id.as_deref()),
                    ("secret-access-key", s3.secret_access_key.as_deref()),
                    ("region", Some(s3.region.as_str())),
                    ("endpoint", s3.endpoint.as_deref()),
                    ("sts-role-arn", s3.sts_role_arn.as_deref()),
                ];
                for (name, value) in fields {
                    if value
                        .is_some_and(|v| v.is_empty() || !v.chars().all(|c| c.is_ascii_graphic()))
                    {
                        return invalid(format!(
                            "{name} must be non-empty printable ASCII without spaces"
                        ));
                    }
                }
            }
        }
        self.root_location().map(|_| ())
    }

    /// The warehouse root as a location.
    pub fn root_location(&self) -> Result<Location> {
        match self {
            StorageProfile::Local { path } => Location::parse(&format!("file://{path}")),
            StorageProfile::S3(s3) => {
                let root = Location::parse(&format!("s3://{}", s3.bucket))?;
                Ok(match &s3.key_prefix {
                    Some(prefix) => root.join(prefix),
                    None => root,
                })
            }
        }
    }

    /// The same profile with secrets blanked, for API responses and logs.
    pub fn redacted(&self) -> StorageProfile {
        match self {
            StorageProfile::S3(s3) => StorageProfile::S3(S3Profile {
                secret_access_key: s3.secret_access_key.as_ref().map(|_| "<redacted>".into()),
                ..s3.clone()
            }),
            other => other.clone(),
        }
    }

    pub(crate) fn build_object_store(&self) -> Result<Arc<dyn ObjectStore>> {
        self.build_object_store_with(None)
    }

    /// The object store, with `retry` in place of object_store's default (ten retries over
    /// up to three minutes) where given: a probe of a store that does not answer should
    /// say so in seconds.
    pub(crate) fn build_object_store_with(
        &self,
        retry: Option<object_store::RetryConfig>,
    ) -> Result<Arc<dyn ObjectStore>> {
        match self {
            StorageProfile::Local { path } => {
                std::fs::create_dir_all(path).map_err(|e| {
                    StorageError::InvalidProfile(format!("cannot create directory '{path}': {e}"))
                })?;
                // Rooted at the warehouse directory: nothing outside it can be named.
                let store = LocalFileSystem::new_with_prefix(path).map_err(|e| {
                    StorageError::InvalidProfile(format!("cannot open directory '{path}': {e}"))
                })?;
                Ok(Arc::new(store))
            }
            StorageProfile::S3(s3) => {
                let mut builder = AmazonS3Builder::from_env()
                    .with_bucket_name(&s3.bucket)
                    .with_region(&s3.region)
                    .with_virtual_hosted_style_request(!s3.path_style_access);
                if let Some(endpoint) = &s3.endpoint {
                    builder = builder
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                if let (Some(id), Some(secret)) = (&s3.access_key_id, &s3.secret_access_key) {
                    builder = builder
                        .with_access_key_id(id)
                        .with_secret_access_key(secret);
                }
                if let Some(retry) = retry {
                    builder = builder.with_retry(retry);
                }
                let store = builder
                    .build()
                    .map_err(|e| StorageError::InvalidProfile(e.to_string()))?;
                // Rooted at the key prefix, as the local store is at its directory.
                let root = self.root_location()?;
                Ok(match root.path() {
                    "" => Arc::new(store),
                    prefix => Arc::new(PrefixStore::new(store, prefix)),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_profile_root_and_validation() {
        let profile: StorageProfile = serde_json::from_value(serde_json::json!({
            "type": "s3", "bucket": "floe-test", "key-prefix": "/wh/", "endpoint": "http://127.0.0.1:9000",
            "path-style-access": true, "access-key-id": "a", "secret-access-key": "s"
        }))
        .unwrap();
        profile.validate().unwrap();
        assert_eq!(
            profile.root_location().unwrap().to_string(),
            "s3://floe-test/wh"
        );
        let shown = serde_json::to_string(&profile.redacted()).unwrap();
        assert!(!shown.contains("\"s\""), "{shown}");
        assert!(!format!("{profile:?}").contains("\"s\""));

        let bad: StorageProfile =
            serde_json::from_value(serde_json::json!({"type": "s3", "bucket": "Bad_Bucket"}))
                .unwrap();
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("Bad_Bucket")
        );
        for (field, value) in [
            ("access-key-id", "a\nb"),
            ("secret-access-key", "x\u{7f}"),
            ("region", "us east"),
            ("access-key-id", ""),
        ] {
            let mut fields = serde_json::json!({
                "type": "s3", "bucket": "abc", "access-key-id": "a", "secret-access-key": "s"
            });
            fields[field] = serde_json::json!(value);
            let profile: StorageProfile = serde_json::from_value(fields).unwrap();
            let err = profile.validate().unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
            assert!(value.is_empty() || !err.contains(value), "{err}");
        }
        let unknown = serde_json::from_value::<StorageProfile>(
            serde_json::json!({"type": "s3", "bucket": "abc", "colour": 1}),
        );
        assert!(unknown.is_err());
    }
}
