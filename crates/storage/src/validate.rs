//! Storage validation: before a warehouse is created (and whenever an admin asks), Floe acts
//! on its storage the way it will later and reports each step.
//!
//! 1. `write` — two probe objects, one in each of two table-like prefixes, under a fresh
//!    directory inside Floe's own directory of the warehouse ([`crate::FLOE_DIR`]);
//! 2. `read` — one of them back, byte for byte;
//! 3. `list` — the probe directory, which must show both;
//! 4. `sts` — STS `AssumeRole` for a write credential scoped to the first prefix, with the
//!    session policy credential vending uses ([`crate::sts::session_policy`]);
//! 5. `scoped-access` — that credential reads, lists and writes its own prefix;
//! 6. `scoped-isolation` — that credential is refused reading, listing and writing the other
//!    prefix: a store (or a warehouse credential) that ignores session policies would hand
//!    every engine every table's files;
//! 7. `delete` — everything under the probe directory, which must then list empty. It runs
//!    whatever failed before, so a probe leaves nothing behind.
//!
//! Steps 4-6 run only where the warehouse vends credentials (an S3 warehouse with
//! `sts-enabled`, the default) and are reported `skipped` elsewhere; steps whose inputs an
//! earlier failure took away are `skipped` too. Every path lies inside the warehouse root.
//! Details never carry a secret: the warehouse's and the vended ones are masked if a store's
//! message should echo them.

use std::time::Duration;

use bytes::Bytes;
use object_store::RetryConfig;
use reqwest::Method;
use serde::Serialize;

use crate::s3_client::{Answer, Keys, S3Client};
use crate::sts::{VendedCredentials, assume_role, session_policy};
use crate::{Location, S3Profile, StorageProfile, WarehouseStorage};

/// How one step went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepStatus {
    Ok,
    Failed,
    Skipped,
}

/// One step of a validation (or of bucket provisioning) and what it found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepReport {
    pub step: &'static str,
    pub status: StepStatus,
    pub detail: String,
}

impl StepReport {
    pub fn ok(step: &'static str, detail: impl Into<String>) -> Self {
        Self {
            step,
            status: StepStatus::Ok,
            detail: detail.into(),
        }
    }

    pub fn failed(step: &'static str, detail: impl Into<String>) -> Self {
        Self {
            step,
            status: StepStatus::Failed,
            detail: detail.into(),
        }
    }

    pub fn skipped(step: &'static str, detail: impl Into<String>) -> Self {
        Self {
            step,
            status: StepStatus::Skipped,
            detail: detail.into(),
        }
    }
}

/// Every step, in order; the storage passed when no step failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ValidationReport {
    pub ok: bool,
    /// The warehouse root that was validated.
    pub location: String,
    pub steps: Vec<StepReport>,
}

impl ValidationReport {
    fn new(location: String, steps: Vec<StepReport>) -> Self {
        let ok = steps.iter().all(|s| s.status != StepStatus::Failed);
        Self {
            ok,
            location,
            steps,
        }
    }

    /// A report of `steps` alone (a provisioning that failed before validation could run).
    pub fn from_steps(location: String, steps: Vec<StepReport>) -> Self {
        Self::new(location, steps)
    }

    /// The first step that failed.
    pub fn failed_step(&self) -> Option<&StepReport> {
        self.steps.iter().find(|s| s.status == StepStatus::Failed)
    }

    /// This report with `steps` (bucket provisioning's) in front.
    pub fn after(self, mut steps: Vec<StepReport>) -> Self {
        steps.extend(self.steps);
        Self::new(self.location, steps)
    }
}

/// The steps' names, as reports and refusals give them.
pub mod steps {
    pub const WRITE: &str = "write";
    pub const READ: &str = "read";
    pub const LIST: &str = "list";
    pub const STS: &str = "sts";
    pub const SCOPED_ACCESS: &str = "scoped-access";
    pub const SCOPED_ISOLATION: &str = "scoped-isolation";
    pub const DELETE: &str = "delete";
}
use steps::*;

/// The refusal a table-scoped credential that reached another table's files earns.
pub const NOT_ISOLATED: &str = "a credential scoped to one table could read another's prefix";

/// Retries for probes: a store that does not answer should say so in seconds, not after
/// object_store's default three minutes.
pub(crate) fn probe_retry() -> RetryConfig {
    RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            base: 2.0,
        },
        max_retries: 2,
        retry_timeout: Duration::from_secs(15),
    }
}

/// How long the probe's STS credential lives (the least STS grants).
const PROBE_CREDENTIAL_SECS: u64 = crate::sts::STS_MIN_DURATION_SECS;
/// The longest an STS call may take before its step fails.
const STS_TIMEOUT: Duration = Duration::from_secs(30);

/// The probe's objects: two table-like prefixes under one fresh directory.
struct Probe {
    dir: Location,
    own: Location,
    other: Location,
    content: Bytes,
}

impl Probe {
    fn new(root: &Location) -> Self {
        let id = uuid::Uuid::new_v4();
        let dir = root.join(&format!("{}/validate/{id}", crate::FLOE_DIR));
        Self {
            own: dir.join("table-a"),
            other: dir.join("table-b"),
            dir,
            content: Bytes::from(format!("floe storage probe {id}")),
        }
    }

    fn object(prefix: &Location) -> String {
        prefix.join("probe").to_string()
    }
}

/// Masks secrets in what a store said.
struct Masker(Vec<String>);

impl Masker {
    fn mask(&self, text: impl std::fmt::Display) -> String {
        let mut text = text.to_string();
        for secret in self.0.iter().filter(|s| s.len() >= 4) {
            text = text.replace(secret.as_str(), "<redacted>");
        }
        text
    }
}

/// Runs every step against `profile` (already checked by [`StorageProfile::validate`]).
pub async fn validate(profile: &StorageProfile) -> ValidationReport {
    let mut masker = Masker(match profile {
        StorageProfile::S3(s3) => s3.secret_access_key.iter().cloned().collect(),
        StorageProfile::Local { .. } => Vec::new(),
    });
    let location = profile
        .root_location()
        .map(|l| l.to_string())
        .unwrap_or_default();
    let storage = match WarehouseStorage::with_retry(profile.clone(), Some(probe_retry())) {
        Ok(storage) => storage,
        Err(e) => {
            let mut steps = vec![StepReport::failed(
                WRITE,
                masker.mask(format!("cannot open the storage: {e}")),
            )];
            steps.extend(
                [READ, LIST, STS, SCOPED_ACCESS, SCOPED_ISOLATION, DELETE]
                    .map(|step| StepReport::skipped(step, "the storage could not be opened")),
            );
            return ValidationReport::new(location, steps);
        }
    };
    let probe = Probe::new(storage.root());
    let mut steps = Vec::new();

    let written = write_probe(&storage, &probe).await;
    let wrote = written.is_ok();
    steps.push(outcome(WRITE, written, &masker));
    if wrote {
        steps.push(outcome(READ, read_probe(&storage, &probe).await, &masker));
        steps.push(outcome(LIST, list_probe(&storage, &probe).await, &masker));
    } else {
        steps.push(StepReport::skipped(READ, "the write step failed"));
        steps.push(StepReport::skipped(LIST, "the write step failed"));
    }

    let vended = match profile {
        StorageProfile::Local { .. } => {
            steps.push(StepReport::skipped(
                STS,
                "a local warehouse vends no credentials",
            ));
            None
        }
        StorageProfile::S3(s3) if !s3.sts_enabled => {
            steps.push(StepReport::skipped(
                STS,
                "sts-enabled is false: this warehouse vends no credentials",
            ));
            None
        }
        StorageProfile::S3(s3) => match vend(s3, &probe.own).await {
            Ok(credentials) => {
                masker.0.push(credentials.secret_access_key.clone());
                masker.0.push(credentials.session_token.clone());
                steps.push(StepReport::ok(
                    STS,
                    format!(
                        "AssumeRole issued a credential scoped to {} (expires at {} ms)",
                        probe.own, credentials.expires_at_ms
                    ),
                ));
                Some((s3, credentials))
            }
            Err(e) => {
                steps.push(StepReport::failed(STS, masker.mask(e)));
                None
            }
        },
    };
    match (vended, wrote) {
        (Some((s3, credentials)), true) => {
            let keys = Keys {
                access_key: &credentials.access_key_id,
                secret_key: &credentials.secret_access_key,
                session_token: Some(&credentials.session_token),
            };
            match S3Client::new(s3, keys) {
                Ok(client) => {
                    let access = scoped_access(&client, &probe).await;
                    let accessed = access.is_ok();
                    steps.push(outcome(SCOPED_ACCESS, access, &masker));
                    steps.push(if accessed {
                        outcome(
                            SCOPED_ISOLATION,
                            scoped_isolation(&client, &probe).await,
                            &masker,
                        )
                    } else {
                        StepReport::skipped(
                            SCOPED_ISOLATION,
                            "the scoped credential could not reach its own prefix",
                        )
                    });
                }
                Err(e) => {
                    steps.push(StepReport::failed(SCOPED_ACCESS, masker.mask(e)));
                    steps.push(StepReport::skipped(
                        SCOPED_ISOLATION,
                        "the scoped credential could not be used",
                    ));
                }
            }
        }
        (Some(_), false) => {
            for step in [SCOPED_ACCESS, SCOPED_ISOLATION] {
                steps.push(StepReport::skipped(step, "the write step failed"));
            }
        }
        (None, _) => {
            for step in [SCOPED_ACCESS, SCOPED_ISOLATION] {
                steps.push(StepReport::skipped(step, "no scoped credential was issued"));
            }
        }
    }

    steps.push(outcome(
        DELETE,
        delete_probe(&storage, &probe).await,
        &masker,
    ));
    ValidationReport::new(location, steps)
}

fn outcome(step: &'static str, result: Result<String, String>, masker: &Masker) -> StepReport {
    match result {
        Ok(detail) => StepReport::ok(step, masker.mask(detail)),
        Err(detail) => StepReport::failed(step, masker.mask(detail)),
    }
}

async fn write_probe(storage: &WarehouseStorage, probe: &Probe) -> Result<String, String> {
    for prefix in [&probe.own, &probe.other] {
        let object = Probe::object(prefix);
        storage
            .write(&object, probe.content.clone())
            .await
            .map_err(|e| format!("cannot write {object}: {e}"))?;
    }
    Ok(format!("wrote 2 probe objects under {}", probe.dir))
}

async fn read_probe(storage: &WarehouseStorage, probe: &Probe) -> Result<String, String> {
    let object = Probe::object(&probe.own);
    let read = storage
        .read(&object)
        .await
        .map_err(|e| format!("cannot read {object}: {e}"))?;
    if read != probe.content {
        return Err(format!(
            "{object} read back {} bytes that differ from the {} written",
            read.len(),
            probe.content.len()
        ));
    }
    Ok(format!("read {object} back unchanged"))
}

async fn list_probe(storage: &WarehouseStorage, probe: &Probe) -> Result<String, String> {
    let dir = probe.dir.to_string();
    let listed = storage
        .list(&dir)
        .await
        .map_err(|e| format!("cannot list {dir}: {e}"))?;
    for prefix in [&probe.own, &probe.other] {
        let object = Probe::object(prefix);
        if !listed.contains(&object) {
            return Err(format!("listing {dir} does not show {object}"));
        }
    }
    Ok(format!("listing {dir} shows both probe objects"))
}

async fn delete_probe(storage: &WarehouseStorage, probe: &Probe) -> Result<String, String> {
    let dir = probe.dir.to_string();
    let deleted = storage
        .delete_prefix(&dir)
        .await
        .map_err(|e| format!("cannot delete under {dir}: {e}"))?;
    let left = storage
        .list(&dir)
        .await
        .map_err(|e| format!("cannot list {dir} after deleting: {e}"))?;
    if !left.is_empty() {
        return Err(format!(
            "{} objects are left under {dir} after deleting",
            left.len()
        ));
    }
    Ok(format!(
        "deleted {deleted} objects; nothing is left under {dir}"
    ))
}

/// A write credential for `prefix`, as vending would issue one.
async fn vend(s3: &S3Profile, prefix: &Location) -> Result<VendedCredentials, String> {
    let policy = session_policy(prefix, true);
    let call = assume_role(
        s3,
        s3.sts_role_arn.as_deref(),
        &policy,
        PROBE_CREDENTIAL_SECS,
    );
    match tokio::time::timeout(STS_TIMEOUT, call).await {
        Ok(Ok(credentials)) => Ok(credentials),
        Ok(Err(e)) => Err(format!("STS did not issue a scoped credential: {e}")),
        Err(_) => Err(format!(
            "STS did not answer within {} s",
            STS_TIMEOUT.as_secs()
        )),
    }
}

/// What a scoped credential did with one request.
enum Tried {
    Allowed(Answer),
    Refused,
}

/// Sends one request with the scoped credential: allowed (2xx), refused (401/403), or an
/// error saying what else the store answered.
async fn attempt(
    client: &S3Client<'_>,
    method: Method,
    key: &str,
    query: &[(&str, &str)],
    body: &[u8],
) -> Result<Tried, String> {
    let answer = client.send(method, key, query, body.to_vec()).await?;
    if answer.status.is_success() {
        Ok(Tried::Allowed(answer))
    } else if answer.refused() {
        Ok(Tried::Refused)
    } else {
        Err(answer.describe())
    }
}

/// Lists `prefix` (a directory: with its trailing `/`) with the scoped credential, as
/// [`attempt`] sends it.
async fn attempt_list(client: &S3Client<'_>, prefix: &str) -> Result<Tried, String> {
    let directory = format!("{prefix}/");
    attempt(
        client,
        Method::GET,
        "",
        &[("list-type", "2"), ("prefix", &directory)],
        b"",
    )
    .await
}

async fn scoped_access(client: &S3Client<'_>, probe: &Probe) -> Result<String, String> {
    let object = Probe::object(&probe.own);
    let own_key = probe.own.path().to_string();
    let object_key = format!("{own_key}/probe");
    let cannot = |what: &str, why: String| {
        format!(
            "the scoped credential cannot {what} in its own prefix {}: {why}",
            probe.own
        )
    };
    match attempt(client, Method::GET, &object_key, &[], b"").await {
        Ok(Tried::Allowed(answer)) if answer.body.as_bytes() == probe.content.as_ref() => {}
        Ok(Tried::Allowed(_)) => {
            return Err(format!(
                "{object} read with the scoped credential differs from what was written"
            ));
        }
        Ok(Tried::Refused) => return Err(cannot("read", "refused".into())),
        Err(e) => return Err(cannot("read", e)),
    }
    match attempt_list(client, &own_key).await {
        Ok(Tried::Allowed(answer)) if answer.body.contains(&format!("<Key>{object_key}</Key>")) => {
        }
        Ok(Tried::Allowed(_)) => {
            return Err(format!(
                "listing its own prefix with the scoped credential does not show {object}"
            ));
        }
        Ok(Tried::Refused) => return Err(cannot("list", "refused".into())),
        Err(e) => return Err(cannot("list", e)),
    }
    let written = format!("{own_key}/written-with-scoped-credential");
    match attempt(client, Method::PUT, &written, &[], &probe.content).await {
        Ok(Tried::Allowed(_)) => {}
        Ok(Tried::Refused) => return Err(cannot("write", "refused".into())),
        Err(e) => return Err(cannot("write", e)),
    }
    Ok(format!(
        "the scoped credential reads, lists and writes {}",
        probe.own
    ))
}

async fn scoped_isolation(client: &S3Client<'_>, probe: &Probe) -> Result<String, String> {
    let other = &probe.other;
    let other_key = other.path().to_string();
    let undecided = |what: &str, why: String| {
        format!("could not tell whether the scoped credential may {what} {other}: {why}")
    };
    let object = Probe::object(other);
    match attempt(client, Method::GET, &format!("{other_key}/probe"), &[], b"").await {
        Ok(Tried::Allowed(_)) => return Err(format!("{NOT_ISOLATED} (it read {object})")),
        Ok(Tried::Refused) => {}
        Err(e) => return Err(undecided("read", e)),
    }
    match attempt_list(client, &other_key).await {
        Ok(Tried::Allowed(_)) => return Err(format!("{NOT_ISOLATED} (it listed {other})")),
        Ok(Tried::Refused) => {}
        Err(e) => return Err(undecided("list", e)),
    }
    let planted = format!("{other_key}/written-with-scoped-credential");
    match attempt(client, Method::PUT, &planted, &[], b"x").await {
        Ok(Tried::Allowed(_)) => {
            return Err(format!(
                "a credential scoped to one table could write into another's prefix (it wrote {})",
                other.join("written-with-scoped-credential")
            ));
        }
        Ok(Tried::Refused) => {}
        Err(e) => return Err(undecided("write", e)),
    }
    Ok(format!(
        "the scoped credential is refused reading, listing and writing {other}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_local_warehouse_passes_and_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wh").to_string_lossy().into_owned();
        let report = validate(&StorageProfile::Local { path: path.clone() }).await;
        assert!(report.ok, "{report:?}");
        let names: Vec<_> = report.steps.iter().map(|s| (s.step, s.status)).collect();
        assert_eq!(
            names,
            vec![
                (WRITE, StepStatus::Ok),
                (READ, StepStatus::Ok),
                (LIST, StepStatus::Ok),
                (STS, StepStatus::Skipped),
                (SCOPED_ACCESS, StepStatus::Skipped),
                (SCOPED_ISOLATION, StepStatus::Skipped),
                (DELETE, StepStatus::Ok),
            ]
        );
        let validate_dir = std::path::Path::new(&path).join(".floe/validate");
        let left: Vec<_> = walk(&validate_dir);
        assert!(left.is_empty(), "{left:?}");
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .flat_map(|e| {
                let path = e.path();
                if path.is_dir() {
                    walk(&path)
                } else {
                    vec![path]
                }
            })
            .collect()
    }

    #[tokio::test]
    async fn an_unwritable_store_fails_at_write_and_masks_the_secret() {
        // Nothing listens on port 9: every request fails at once.
        let profile: StorageProfile = serde_json::from_value(serde_json::json!({
            "type": "s3", "bucket": "probe-bucket", "endpoint": "http://127.0.0.1:9",
            "path-style-access": true, "access-key-id": "AKIDPROBE",
            "secret-access-key": "probe-secret-value"
        }))
        .unwrap();
        let report = validate(&profile).await;
        assert!(!report.ok);
        assert_eq!(report.failed_step().unwrap().step, WRITE);
        let sts = report.steps.iter().find(|s| s.step == STS).unwrap();
        assert_eq!(sts.status, StepStatus::Failed, "{sts:?}");
        let shown = serde_json::to_string(&report).unwrap();
        assert!(!shown.contains("probe-secret-value"), "{shown}");
    }

    #[test]
    fn reports_serialize_in_kebab_case_and_prepend_steps() {
        let report = ValidationReport::new("s3://b/wh".into(), vec![StepReport::ok(WRITE, "fine")])
            .after(vec![StepReport::failed("create-bucket", "taken")]);
        assert!(!report.ok);
        assert_eq!(report.failed_step().unwrap().step, "create-bucket");
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            serde_json::json!({
                "ok": false, "location": "s3://b/wh",
                "steps": [
                    {"step": "create-bucket", "status": "failed", "detail": "taken"},
                    {"step": "write", "status": "ok", "detail": "fine"}
                ]
            })
        );
        assert_eq!(
            Masker(vec!["s3cr3t".into()]).mask("it said s3cr3t twice: s3cr3t"),
            "it said <redacted> twice: <redacted>"
        );
    }
}
