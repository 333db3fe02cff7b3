//! Temporary credentials scoped to one table: STS `AssumeRole` with an inline session policy
//! that allows exactly the table's location, read-only or read-write.

use serde::Serialize;
use serde_json::{Value, json};

use crate::{Location, S3Profile, StorageError};

/// Credentials an engine uses for one table's files.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct VendedCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    /// Expiry, milliseconds since the epoch.
    pub expires_at_ms: i64,
}

impl std::fmt::Debug for VendedCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VendedCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("expires_at_ms", &self.expires_at_ms)
            .finish_non_exhaustive()
    }
}

/// The session policy for `location` (an `s3://bucket/key` table location).
pub fn session_policy(location: &Location, write: bool) -> Value {
    let bucket = location.authority();
    let key = location.path().trim_matches('/');
    let mut object_actions = vec!["s3:GetObject", "s3:GetObjectVersion"];
    if write {
        object_actions.extend(["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]);
    }
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": object_actions,
                "Resource": [format!("arn:aws:s3:::{bucket}/{key}/*")]
            },
            {
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [format!("arn:aws:s3:::{bucket}")],
                "Condition": {"StringLike": {"s3:prefix": [format!("{key}/*")]}}
            },
            {
                "Effect": "Allow",
                "Action": ["s3:GetBucketLocation"],
                "Resource": [format!("arn:aws:s3:::{bucket}")]
            }
        ]
    })
}

/// The shortest lifetime STS `AssumeRole` grants (AWS and MinIO alike).
pub const STS_MIN_DURATION_SECS: u64 = 900;

/// `policy` with every statement ending at `until` (an `aws:CurrentTime` condition): how a
/// credential is made to last less than [`STS_MIN_DURATION_SECS`], which STS will not issue.
/// The store enforces the deadline on each request, as it enforces the session's own expiry.
pub fn expiring_at(mut policy: Value, until: chrono::DateTime<chrono::Utc>) -> Value {
    let deadline = until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    if let Some(Value::Array(statements)) = policy.get_mut("Statement") {
        for statement in statements {
            let Some(statement) = statement.as_object_mut() else {
                continue;
            };
            let condition = statement.entry("Condition").or_insert_with(|| json!({}));
            if let Some(condition) = condition.as_object_mut() {
                condition.insert(
                    "DateLessThan".to_string(),
                    json!({ "aws:CurrentTime": deadline }),
                );
            }
        }
    }
    policy
}

pub(crate) fn xml_value(xml: &str, tag: &str) -> Option<String> {
    let start = xml.find(&format!("<{tag}>"))? + tag.len() + 2;
    let end = start + xml[start..].find(&format!("</{tag}>"))?;
    Some(xml[start..end].to_string())
}

/// Calls STS `AssumeRole` at the profile's endpoint (or AWS's) with the profile's keys.
pub async fn assume_role(
    profile: &S3Profile,
    role_arn: Option<&str>,
    policy: &Value,
    duration_secs: u64,
) -> Result<VendedCredentials, StorageError> {
    let fail = |m: String| StorageError::InvalidProfile(m);
    let (Some(access_key), Some(secret_key)) = (&profile.access_key_id, &profile.secret_access_key)
    else {
        return Err(fail(
            "vending credentials needs the warehouse's access key and secret".into(),
        ));
    };
    let endpoint = profile
        .endpoint
        .clone()
        .unwrap_or_else(|| format!("https://sts.{}.amazonaws.com", profile.region));
    let url = reqwest::Url::parse(&endpoint)
        .map_err(|e| fail(format!("bad endpoint {endpoint}: {e}")))?;
    let mut form = vec![
        ("Action", "AssumeRole".to_string()),
        ("Version", "2011-06-15".to_string()),
        ("DurationSeconds", duration_secs.to_string()),
        ("Policy", policy.to_string()),
        ("RoleSessionName", "floe".to_string()),
    ];
    if let Some(arn) = role_arn {
        form.push(("RoleArn", arn.to_string()));
    }
    let body = serde_urlencoded::to_string(&form).map_err(|e| fail(e.to_string()))?;
    let now = chrono::Utc::now();
    let content_type = "application/x-www-form-urlencoded; charset=utf-8";
    let payload_hash = crate::sigv4::sha256_hex(body.as_bytes());
    let signed = crate::sigv4::sign(crate::sigv4::SignInput {
        method: "POST",
        url: &url,
        headers: vec![("content-type".to_string(), content_type.to_string())],
        payload_hash: &payload_hash,
        region: &profile.region,
        service: "sts",
        access_key,
        secret_key,
        session_token: None,
        now,
    });
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", content_type);
    for (name, value) in signed {
        request = request.header(name, value);
    }
    let response = request
        .body(body)
        .send()
        .await
        .map_err(|e| fail(format!("STS request failed: {e}")))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if !status.is_success() {
        let message = xml_value(&text, "Message").unwrap_or_else(|| status.to_string());
        return Err(fail(format!("STS refused to vend credentials: {message}")));
    }
    let get =
        |tag: &str| xml_value(&text, tag).ok_or_else(|| fail(format!("STS answer lacks {tag}")));
    let expires_at_ms = chrono::DateTime::parse_from_rfc3339(&get("Expiration")?)
        .map(|t| t.timestamp_millis())
        .unwrap_or_else(|_| now.timestamp_millis() + duration_secs as i64 * 1000);
    Ok(VendedCredentials {
        access_key_id: get("AccessKeyId")?,
        secret_access_key: get("SecretAccessKey")?,
        session_token: get("SessionToken")?,
        expires_at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_policies_cover_exactly_the_table() {
        let location = Location::parse("s3://lake/wh/sales/orders-1").unwrap();
        let read = session_policy(&location, false);
        assert_eq!(
            read,
            json!({
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": ["s3:GetObject", "s3:GetObjectVersion"],
                     "Resource": ["arn:aws:s3:::lake/wh/sales/orders-1/*"]},
                    {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": ["arn:aws:s3:::lake"],
                     "Condition": {"StringLike": {"s3:prefix": ["wh/sales/orders-1/*"]}}},
                    {"Effect": "Allow", "Action": ["s3:GetBucketLocation"], "Resource": ["arn:aws:s3:::lake"]}
                ]
            })
        );
        let write = session_policy(&location, true);
        assert_eq!(
            write["Statement"][0]["Action"],
            json!([
                "s3:GetObject",
                "s3:GetObjectVersion",
                "s3:PutObject",
                "s3:DeleteObject",
                "s3:AbortMultipartUpload"
            ])
        );
        assert_eq!(write["Statement"][1], read["Statement"][1]);
    }

    #[test]
    fn deadlines_bind_every_statement() {
        let location = Location::parse("s3://lake/wh/sales/orders-1").unwrap();
        let until = chrono::DateTime::parse_from_rfc3339("2026-12-07T10:00:30Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let policy = expiring_at(session_policy(&location, false), until);
        let statements = policy["Statement"].as_array().unwrap();
        assert_eq!(statements.len(), 3);
        for statement in statements {
            assert_eq!(
                statement["Condition"]["DateLessThan"],
                json!({"aws:CurrentTime": "2026-12-07T10:00:30Z"})
            );
        }
        // The listing statement keeps its prefix condition beside the deadline.
        assert_eq!(
            statements[1]["Condition"]["StringLike"],
            json!({"s3:prefix": ["wh/sales/orders-1/*"]})
        );
    }

    #[test]
    fn xml_fields_are_read() {
        let xml = "<AssumeRoleResponse><Credentials><AccessKeyId>AK</AccessKeyId><SecretAccessKey>SK</SecretAccessKey></Credentials></AssumeRoleResponse>";
        assert_eq!(xml_value(xml, "AccessKeyId").as_deref(), Some("AK"));
        assert_eq!(xml_value(xml, "SessionToken"), None);
    }
}
