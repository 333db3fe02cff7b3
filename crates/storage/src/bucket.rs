//! Bucket provisioning (`floe warehouse create … --create-bucket`): create the warehouse's
//! bucket, and give the warehouse's prefix the lifecycle rules a lakehouse needs.
//!
//! - `create-bucket`: S3 `CreateBucket`. A bucket that exists and that the warehouse's keys
//!   own (`BucketAlreadyOwnedByYou`) is kept as it is; one owned by another account fails.
//! - `bucket-lifecycle`: multipart uploads left incomplete (a writer that died mid-file
//!   leaves parts that are billed and never listed) are aborted after
//!   [`ABORT_INCOMPLETE_UPLOAD_DAYS`]; where versioning is on or suspended, noncurrent versions
//!   expire after [`NONCURRENT_VERSION_DAYS`] — otherwise every file that snapshot expiry and
//!   orphan removal delete is kept forever as a noncurrent version. The rules apply to the
//!   warehouse's key prefix only and are named after it, so several warehouses share a bucket;
//!   rules already on the bucket are kept (the configuration is replaced whole by S3, so they
//!   are read first and sent again); Floe's rules for this prefix are replaced. The rules are
//!   read back to check that the store kept them.
//!
//! MinIO refuses `AbortIncompleteMultipartUpload` rules: it removes incomplete uploads itself,
//! after `MINIO_API_STALE_UPLOADS_EXPIRY` (24 hours by default). On MinIO (as its `Server`
//! header says) that rule is left out and the step's detail says so; on any other store its
//! refusal fails the step.
//!
//! Requests are signed with the warehouse's keys ([`crate::s3_client`]).

use reqwest::{Method, StatusCode};

use crate::S3Profile;
use crate::s3_client::{Answer, S3Client};
use crate::sigv4::sha256_hex;
use crate::sts::xml_value;
use crate::validate::StepReport;

pub const CREATE_BUCKET: &str = "create-bucket";
pub const BUCKET_LIFECYCLE: &str = "bucket-lifecycle";
pub const ABORT_INCOMPLETE_UPLOAD_DAYS: u32 = 7;
pub const NONCURRENT_VERSION_DAYS: u32 = 7;
const S3_XMLNS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";

/// Creates the bucket and applies the lifecycle rules; one report per step.
pub async fn provision(s3: &S3Profile) -> Vec<StepReport> {
    let client = match BucketClient::new(s3) {
        Ok(client) => client,
        Err(e) => {
            return vec![
                StepReport::failed(CREATE_BUCKET, e),
                StepReport::skipped(BUCKET_LIFECYCLE, "the bucket was not created"),
            ];
        }
    };
    let mut steps = Vec::new();
    match client.create().await {
        Ok(detail) => {
            steps.push(StepReport::ok(CREATE_BUCKET, detail));
            steps.push(match client.apply_lifecycle().await {
                Ok(detail) => StepReport::ok(BUCKET_LIFECYCLE, detail),
                Err(detail) => StepReport::failed(BUCKET_LIFECYCLE, detail),
            });
        }
        Err(detail) => {
            steps.push(StepReport::failed(CREATE_BUCKET, detail));
            steps.push(StepReport::skipped(
                BUCKET_LIFECYCLE,
                "the bucket was not created",
            ));
        }
    }
    steps
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

struct BucketClient<'a> {
    s3: &'a S3Profile,
    client: S3Client<'a>,
}

impl<'a> BucketClient<'a> {
    fn new(s3: &'a S3Profile) -> Result<Self, String> {
        let client =
            S3Client::with_warehouse_keys(s3).map_err(|e| format!("creating a bucket: {e}"))?;
        Ok(Self { s3, client })
    }

    async fn send(
        &self,
        method: Method,
        sub_resource: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Answer, String> {
        let query: Vec<(&str, &str)> = sub_resource.map(|s| (s, "")).into_iter().collect();
        self.client.send(method, "", &query, body).await
    }

    async fn create(&self) -> Result<String, String> {
        let bucket = &self.s3.bucket;
        let body = if self.s3.region == "us-east-1" {
            Vec::new()
        } else {
            format!(
                "<CreateBucketConfiguration xmlns=\"{S3_XMLNS}\"><LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                xml_escape(&self.s3.region)
            )
            .into_bytes()
        };
        let answer = self.send(Method::PUT, None, body).await?;
        if answer.status.is_success() {
            return Ok(format!("created bucket {bucket}"));
        }
        match answer.code().as_deref() {
            Some("BucketAlreadyOwnedByYou") => Ok(format!(
                "bucket {bucket} exists and is owned by the warehouse's account; kept as it is"
            )),
            Some("BucketAlreadyExists") => Err(format!(
                "bucket {bucket} exists and belongs to another account"
            )),
            _ => Err(format!(
                "cannot create bucket {bucket}: {}",
                answer.describe()
            )),
        }
    }

    /// The bucket's lifecycle rules, each as its `<Rule>` element.
    async fn rules(&self) -> Result<Vec<String>, String> {
        let answer = self
            .send(Method::GET, Some("lifecycle"), Vec::new())
            .await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        if !answer.status.is_success() {
            return Err(format!(
                "cannot read the bucket's lifecycle rules: {}",
                answer.describe()
            ));
        }
        Ok(rule_elements(&answer.body))
    }

    async fn put_rules(&self, rules: &[String]) -> Result<Answer, String> {
        let body = format!(
            "<LifecycleConfiguration xmlns=\"{S3_XMLNS}\">{}</LifecycleConfiguration>",
            rules.concat()
        );
        self.send(Method::PUT, Some("lifecycle"), body.into_bytes())
            .await
    }

    async fn apply_lifecycle(&self) -> Result<String, String> {
        let versioning = self
            .send(Method::GET, Some("versioning"), Vec::new())
            .await?;
        if !versioning.status.is_success() {
            return Err(format!(
                "cannot read the bucket's versioning: {}",
                versioning.describe()
            ));
        }
        let versioned = matches!(
            xml_value(&versioning.body, "Status").as_deref(),
            Some("Enabled" | "Suspended")
        );
        let prefix = rule_prefix(self.s3);
        let mut wanted = floe_rules(&prefix, versioned);
        let others: Vec<String> = self
            .rules()
            .await?
            .into_iter()
            .filter(|rule| !is_floe_rule(rule, &prefix))
            .collect();
        let mut notes = Vec::new();
        let mut answer = self.put_rules(&merged(&others, &wanted)).await?;
        // MinIO answers an AbortIncompleteMultipartUpload rule with 400 InvalidArgument
        // ("The XML you provided was not well-formed…"): sent again without it, a rule
        // MinIO does keep is still refused if it is at fault.
        if answer.status == StatusCode::BAD_REQUEST && answer.minio {
            wanted.retain(|rule| rule.action != Action::AbortIncompleteUploads);
            notes.push(
                "MinIO takes no rule to abort incomplete multipart uploads: it removes them \
                 itself after MINIO_API_STALE_UPLOADS_EXPIRY (24 h by default)"
                    .to_string(),
            );
            answer = if wanted.is_empty() && others.is_empty() {
                // Nothing to set, and no configuration to keep: leave the bucket without one.
                Answer {
                    status: StatusCode::OK,
                    minio: true,
                    body: String::new(),
                }
            } else {
                self.put_rules(&merged(&others, &wanted)).await?
            };
        }
        if !answer.status.is_success() {
            return Err(format!(
                "the store refused the lifecycle rules: {}",
                answer.describe()
            ));
        }
        let kept = self.rules().await?;
        for rule in &wanted {
            if !kept
                .iter()
                .any(|k| xml_value(k, "ID").as_deref() == Some(rule.id.as_str()))
            {
                return Err(format!(
                    "the store accepted lifecycle rule {} but does not keep it",
                    rule.id
                ));
            }
        }
        let mut said: Vec<String> = wanted.iter().map(|rule| rule.describe()).collect();
        if !versioned {
            said.push("versioning is off: no noncurrent versions to expire".to_string());
        }
        said.extend(notes);
        if !others.is_empty() {
            said.push(format!("kept {} other rules of the bucket", others.len()));
        }
        let scope = if prefix.is_empty() {
            "the whole bucket".to_string()
        } else {
            format!("prefix {prefix}")
        };
        Ok(format!("{scope}: {}", said.join("; ")))
    }
}

/// The key prefix Floe's rules apply to: the warehouse's, with a trailing `/` (empty for a
/// warehouse at the bucket's root).
fn rule_prefix(s3: &S3Profile) -> String {
    let key = s3
        .key_prefix
        .as_deref()
        .unwrap_or_default()
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/");
    if key.is_empty() {
        key
    } else {
        format!("{key}/")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    AbortIncompleteUploads,
    ExpireNoncurrentVersions,
}

/// One of Floe's lifecycle rules.
#[derive(Debug, Clone)]
struct FloeRule {
    id: String,
    action: Action,
    xml: String,
}

impl FloeRule {
    fn describe(&self) -> String {
        match self.action {
            Action::AbortIncompleteUploads => format!(
                "incomplete multipart uploads are aborted after {ABORT_INCOMPLETE_UPLOAD_DAYS} days (rule {})",
                self.id
            ),
            Action::ExpireNoncurrentVersions => format!(
                "noncurrent versions expire after {NONCURRENT_VERSION_DAYS} days (rule {})",
                self.id
            ),
        }
    }
}

/// The start of the IDs of Floe's rules for `prefix`: named by a digest of it (IDs are at
/// most 255 characters; prefixes may be longer).
fn rule_id_stem(prefix: &str) -> String {
    let digest = sha256_hex(prefix.as_bytes());
    format!("floe-{}-", &digest[..12])
}

fn is_floe_rule(rule: &str, prefix: &str) -> bool {
    xml_value(rule, "ID").is_some_and(|id| id.starts_with(&rule_id_stem(prefix)))
}

fn floe_rules(prefix: &str, versioned: bool) -> Vec<FloeRule> {
    let stem = rule_id_stem(prefix);
    let filter = format!("<Filter><Prefix>{}</Prefix></Filter>", xml_escape(prefix));
    let mut rules = vec![FloeRule {
        id: format!("{stem}abort-incomplete-uploads"),
        action: Action::AbortIncompleteUploads,
        xml: format!(
            "<AbortIncompleteMultipartUpload><DaysAfterInitiation>{ABORT_INCOMPLETE_UPLOAD_DAYS}</DaysAfterInitiation></AbortIncompleteMultipartUpload>"
        ),
    }];
    if versioned {
        rules.push(FloeRule {
            id: format!("{stem}expire-noncurrent-versions"),
            action: Action::ExpireNoncurrentVersions,
            xml: format!(
                "<NoncurrentVersionExpiration><NoncurrentDays>{NONCURRENT_VERSION_DAYS}</NoncurrentDays></NoncurrentVersionExpiration>"
            ),
        });
    }
    for rule in &mut rules {
        rule.xml = format!(
            "<Rule><ID>{}</ID>{filter}<Status>Enabled</Status>{}</Rule>",
            rule.id, rule.xml
        );
    }
    rules
}

fn merged(others: &[String], wanted: &[FloeRule]) -> Vec<String> {
    others
        .iter()
        .cloned()
        .chain(wanted.iter().map(|rule| rule.xml.clone()))
        .collect()
}

/// Each `<Rule>…</Rule>` element of a lifecycle configuration, verbatim.
fn rule_elements(xml: &str) -> Vec<String> {
    let mut rules = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find("<Rule>") {
        let Some(length) = rest[start..].find("</Rule>") else {
            break;
        };
        let end = start + length + "</Rule>".len();
        rules.push(rest[start..end].to_string());
        rest = &rest[end..];
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(fields: serde_json::Value) -> S3Profile {
        let mut base = serde_json::json!({"bucket": "lake", "region": "eu-west-1"});
        base.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn floe_rules_cover_the_prefix_and_replace_only_their_own() {
        let s3 = profile(serde_json::json!({"key-prefix": "/wh//a&b/"}));
        let prefix = rule_prefix(&s3);
        assert_eq!(prefix, "wh/a&b/");
        let plain = floe_rules(&prefix, false);
        assert_eq!(plain.len(), 1);
        assert!(
            plain[0]
                .xml
                .contains("<Filter><Prefix>wh/a&amp;b/</Prefix></Filter>")
        );
        assert!(
            plain[0]
                .xml
                .contains("<DaysAfterInitiation>7</DaysAfterInitiation>")
        );
        let versioned = floe_rules(&prefix, true);
        assert_eq!(versioned[1].action, Action::ExpireNoncurrentVersions);
        assert!(
            versioned[1]
                .xml
                .contains("<NoncurrentDays>7</NoncurrentDays>")
        );

        let existing = format!(
            "<LifecycleConfiguration xmlns=\"{S3_XMLNS}\"><Rule><ID>theirs</ID><Status>Enabled</Status>\
             <Expiration><Days>30</Days></Expiration></Rule>{}</LifecycleConfiguration>",
            versioned[1].xml
        );
        let rules = rule_elements(&existing);
        assert_eq!(rules.len(), 2);
        let others: Vec<_> = rules
            .into_iter()
            .filter(|r| !is_floe_rule(r, &prefix))
            .collect();
        assert_eq!(others.len(), 1);
        assert!(others[0].contains("<ID>theirs</ID>"));
        // Another warehouse's rules in the same bucket are not this one's.
        assert!(!is_floe_rule(&versioned[1].xml, "other/"));
        let all = merged(&others, &plain);
        assert_eq!(all.len(), 2);
        assert_eq!(rule_prefix(&profile(serde_json::json!({}))), "");
    }
}
