//! The audit trail: one record per request, hash-chained so that editing, deleting or
//! reordering any record is detectable.
//!
//! Each record's hash is SHA-256 over the previous record's hash and the record's own fields
//! in a fixed order; the first record chains from [`GENESIS`]. [`verify`] recomputes the chain
//! and names the first record where it breaks.
//!
//! A chain alone cannot stop someone who can write the database from deleting its newest
//! records or rewriting it from some record on with fresh hashes. So the server also notes the
//! chain's head outside the database every few seconds ([`Checkpoint`], the line in
//! `<data-dir>/audit-checkpoints` or another file), and [`verify_checkpoints`] holds the trail
//! to every noted point: each must still be there with the same hash.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Result;

/// The file under the data directory where the server notes checkpoints.
pub const CHECKPOINT_FILE: &str = "audit-checkpoints";

/// The hash the first record chains from.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What happened, before it is sequenced and chained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AuditEvent {
    pub at_ms: i64,
    pub request_id: String,
    /// Principal name, or `anonymous`.
    pub principal: String,
    /// The operation: method and route template, e.g. `POST /catalog/v1/{prefix}/namespaces`.
    pub action: String,
    /// The concrete resource: the request path.
    pub resource: String,
    /// `allow` or `deny`.
    pub decision: String,
    pub status: u16,
    /// The client's address.
    pub client: String,
    /// Extra facts as JSON text (never secrets).
    pub details: String,
}

/// A stored, chained record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AuditRecord {
    pub seq: i64,
    #[serde(flatten)]
    pub event: AuditEvent,
    pub prev_hash: String,
    pub hash: String,
}

/// The hash of a record with sequence number `seq` following `prev_hash`.
pub fn record_hash(prev_hash: &str, seq: i64, event: &AuditEvent) -> String {
    let mut hasher = Sha256::new();
    for field in [
        prev_hash,
        &seq.to_string(),
        &event.at_ms.to_string(),
        &event.request_id,
        &event.principal,
        &event.action,
        &event.resource,
        &event.decision,
        &event.status.to_string(),
        &event.client,
        &event.details,
    ] {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Chains `events` after the record `(last_seq, last_hash)`.
pub fn chain(last_seq: i64, last_hash: &str, events: Vec<AuditEvent>) -> Vec<AuditRecord> {
    let mut prev = last_hash.to_string();
    let mut seq = last_seq;
    events
        .into_iter()
        .map(|event| {
            seq += 1;
            let hash = record_hash(&prev, seq, &event);
            AuditRecord {
                seq,
                event,
                prev_hash: std::mem::replace(&mut prev, hash.clone()),
                hash,
            }
        })
        .collect()
}

/// Where the chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "problem", rename_all = "kebab-case")]
pub enum ChainBreak {
    /// The record's contents do not match its hash: it was edited.
    Edited { seq: i64 },
    /// Records are missing before `seq` (deleted), or `seq` does not follow its predecessor.
    Missing { after: i64, seq: i64 },
    /// The record does not chain from its predecessor: records were reordered or replaced.
    Unchained { seq: i64 },
    /// The trail ends at `last`, but record `seq` was noted in a checkpoint: records were
    /// deleted from its end.
    Truncated { last: i64, seq: i64 },
    /// Record `seq` is not the record a checkpoint noted at `at_ms`: the trail was rewritten
    /// from there on (with hashes recomputed, or the chain would show it).
    Rewritten { seq: i64, at_ms: i64 },
}

impl std::fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainBreak::Edited { seq } => write!(
                f,
                "record {seq} was edited: its hash does not match its contents"
            ),
            ChainBreak::Missing { after, seq } => {
                write!(f, "records between {after} and {seq} are missing (deleted)")
            }
            ChainBreak::Unchained { seq } => {
                write!(
                    f,
                    "record {seq} does not chain from the record before it (reordered or replaced)"
                )
            }
            ChainBreak::Truncated { last, seq } => write!(
                f,
                "the trail ends at record {last}, but a checkpoint noted record {seq}: \
                 records after {last} were deleted"
            ),
            ChainBreak::Rewritten { seq, at_ms } => write!(
                f,
                "record {seq} is not the record checkpointed at {} (ms since the epoch {at_ms}): \
                 the trail was rewritten from there on",
                chrono::DateTime::from_timestamp_millis(*at_ms)
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_default()
            ),
        }
    }
}

/// Checks a whole trail, in sequence order. `Ok(n)` is the number of records proven intact.
pub fn verify(records: &[AuditRecord]) -> std::result::Result<usize, ChainBreak> {
    let mut prev_hash = GENESIS.to_string();
    let mut prev_seq = 0;
    for record in records {
        if record_hash(&record.prev_hash, record.seq, &record.event) != record.hash {
            return Err(ChainBreak::Edited { seq: record.seq });
        }
        if record.seq != prev_seq + 1 {
            return Err(ChainBreak::Missing {
                after: prev_seq,
                seq: record.seq,
            });
        }
        if record.prev_hash != prev_hash {
            return Err(ChainBreak::Unchained { seq: record.seq });
        }
        prev_hash = record.hash.clone();
        prev_seq = record.seq;
    }
    Ok(records.len())
}

/// A point of the chain noted outside the database: record `seq` had hash `hash` at `at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub seq: i64,
    pub hash: String,
    pub at_ms: i64,
}

impl Checkpoint {
    /// The checkpoint as a line of the checkpoint file: `seq hash at_ms`.
    pub fn line(&self) -> String {
        format!("{} {} {}\n", self.seq, self.hash, self.at_ms)
    }

    /// Parses a checkpoint file; an unreadable line is an error naming it.
    pub fn parse_file(text: &str) -> std::result::Result<Vec<Checkpoint>, String> {
        text.lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(i, line)| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let parsed = match fields[..] {
                    [seq, hash, at_ms] if hash.len() == 64 => seq
                        .parse()
                        .ok()
                        .zip(at_ms.parse().ok())
                        .map(|(seq, at_ms)| Checkpoint {
                            seq,
                            hash: hash.to_string(),
                            at_ms,
                        }),
                    _ => None,
                };
                parsed.ok_or_else(|| {
                    format!("line {} is not \"<seq> <hash> <at-ms>\": {line:?}", i + 1)
                })
            })
            .collect()
    }
}

/// Holds a trail that [`verify`] found intact to checkpoints noted while it was written:
/// every checkpointed record must still be there, with the hash it had then.
pub fn verify_checkpoints(
    records: &[AuditRecord],
    checkpoints: &[Checkpoint],
) -> std::result::Result<(), ChainBreak> {
    let last = records.last().map_or(0, |r| r.seq);
    for checkpoint in checkpoints {
        // An intact trail numbers its records 1, 2, 3, ...: record `seq` is at `seq - 1`.
        let Some(record) = checkpoint
            .seq
            .checked_sub(1)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| records.get(i))
        else {
            return Err(ChainBreak::Truncated {
                last,
                seq: checkpoint.seq,
            });
        };
        if record.hash != checkpoint.hash {
            return Err(ChainBreak::Rewritten {
                seq: checkpoint.seq,
                at_ms: checkpoint.at_ms,
            });
        }
    }
    Ok(())
}

/// Filters of an audit query.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AuditQuery {
    pub principal: Option<String>,
    pub action: Option<String>,
    /// Records whose resource starts with this.
    pub resource: Option<String>,
    pub decision: Option<String>,
    /// Records whose status lies in this class (`4xx` is 400 to 499).
    pub status_class: Option<StatusClass>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// Records after this sequence number (paging oldest first).
    pub after_seq: Option<i64>,
    /// Records before this sequence number (paging newest first).
    pub before_seq: Option<i64>,
    /// Oldest first (the default) or newest first.
    #[serde(default)]
    pub order: AuditOrder,
    pub limit: Option<usize>,
}

/// The order records come in: by sequence number, ascending or descending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuditOrder {
    #[default]
    Asc,
    Desc,
}

impl<'de> Deserialize<'de> for AuditOrder {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "asc" => Ok(AuditOrder::Asc),
            "desc" => Ok(AuditOrder::Desc),
            other => Err(serde::de::Error::custom(format!(
                "order must be asc or desc, not {other:?}"
            ))),
        }
    }
}

/// A class of HTTP status: `1xx` to `5xx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    Informational,
    Success,
    Redirection,
    ClientError,
    ServerError,
}

impl<'de> Deserialize<'de> for StatusClass {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "1xx" => Ok(StatusClass::Informational),
            "2xx" => Ok(StatusClass::Success),
            "3xx" => Ok(StatusClass::Redirection),
            "4xx" => Ok(StatusClass::ClientError),
            "5xx" => Ok(StatusClass::ServerError),
            other => Err(serde::de::Error::custom(format!(
                "status-class must be 1xx, 2xx, 3xx, 4xx or 5xx, not {other:?}"
            ))),
        }
    }
}

impl StatusClass {
    /// The statuses of the class: from the first, up to but not including the second.
    pub fn range(self) -> (u16, u16) {
        let first = match self {
            StatusClass::Informational => 100,
            StatusClass::Success => 200,
            StatusClass::Redirection => 300,
            StatusClass::ClientError => 400,
            StatusClass::ServerError => 500,
        };
        (first, first + 100)
    }
}

/// The audit record of the request being served, for the store to write inside the same
/// transaction as the change the request makes.
///
/// The HTTP layer opens a scope per request ([`AuditScope::run`]) holding the record as it
/// will read if the request succeeds. The first store transaction that changes state within
/// the scope appends that record to the chain before committing, so the change and its record
/// land together or not at all; later transactions of the same request add nothing. A request
/// that changes nothing leaves the record to the HTTP layer, which writes it after responding.
#[derive(Debug)]
pub struct AuditScope {
    event: Mutex<AuditEvent>,
    /// The record written with a change, and its sequence number.
    committed: Mutex<Option<(i64, AuditEvent)>>,
}

tokio::task_local! {
    static SCOPE: Arc<AuditScope>;
}

impl AuditScope {
    /// A scope whose record reads `event` (its `status` the one success would return).
    pub fn new(event: AuditEvent) -> Arc<Self> {
        Arc::new(Self {
            event: Mutex::new(event),
            committed: Mutex::new(None),
        })
    }

    /// Runs `work` inside this scope.
    pub async fn run<F: std::future::Future>(self: &Arc<Self>, work: F) -> F::Output {
        SCOPE.scope(self.clone(), work).await
    }

    /// The scope of the request being served on this task, if any.
    pub fn current() -> Option<Arc<Self>> {
        SCOPE.try_with(|scope| scope.clone()).ok()
    }

    /// Names the principal once authentication has established it.
    pub fn set_principal(&self, principal: &str) {
        self.event.lock().expect("audit scope lock").principal = principal.to_string();
    }

    /// Sets the record's extra facts (JSON text, never secrets), e.g. a SQL statement.
    pub fn set_details(&self, details: String) {
        self.event.lock().expect("audit scope lock").details = details;
    }

    /// Adds one fact to the record's details, keeping those already noted (a SQL statement,
    /// say). Never pass secrets.
    pub fn add_detail(&self, key: &str, value: serde_json::Value) {
        let mut event = self.event.lock().expect("audit scope lock");
        let mut details = serde_json::from_str::<serde_json::Value>(&event.details)
            .ok()
            .filter(serde_json::Value::is_object)
            .unwrap_or_else(|| serde_json::json!({}));
        details[key] = value;
        event.details = details.to_string();
    }

    /// The record as it stands.
    pub fn event(&self) -> AuditEvent {
        self.event.lock().expect("audit scope lock").clone()
    }

    /// The record to write with a change, unless one was already written.
    pub fn pending(&self) -> Option<AuditEvent> {
        self.committed().is_none().then(|| self.event())
    }

    /// Notes that `event` was committed as record number `seq`.
    pub fn mark_committed(&self, seq: i64, event: AuditEvent) {
        *self.committed.lock().expect("audit scope lock") = Some((seq, event));
    }

    /// The record committed with a change, if one was, and its sequence number.
    pub fn committed(&self) -> Option<(i64, AuditEvent)> {
        self.committed.lock().expect("audit scope lock").clone()
    }
}

/// Storage of the audit trail. Implemented by `floe-store`.
#[async_trait]
pub trait AuditStore: Send + Sync + std::fmt::Debug {
    /// Sequences, chains and stores events after the current last record, atomically.
    async fn append_audit(&self, events: Vec<AuditEvent>) -> Result<()>;
    async fn query_audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>>;
    /// Every record in sequence order, for verification.
    async fn audit_trail(&self) -> Result<Vec<AuditRecord>>;
    /// The last record's sequence number and hash, if there is a record.
    async fn audit_head(&self) -> Result<Option<(i64, String)>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(i: i64) -> AuditEvent {
        AuditEvent {
            at_ms: i,
            request_id: format!("r{i}"),
            principal: "p".into(),
            action: "GET /x".into(),
            resource: "/x".into(),
            decision: "allow".into(),
            status: 200,
            client: "127.0.0.1".into(),
            details: "{}".into(),
        }
    }

    #[test]
    fn intact_chain_verifies_and_tampering_is_pinpointed() {
        let mut records = chain(0, GENESIS, (1..=5).map(event).collect());
        let more = chain(5, &records[4].hash.clone(), vec![event(6)]);
        records.extend(more);
        assert_eq!(verify(&records), Ok(6));

        let mut edited = records.clone();
        edited[2].event.principal = "mallory".into();
        assert_eq!(verify(&edited), Err(ChainBreak::Edited { seq: 3 }));

        let mut deleted = records.clone();
        deleted.remove(3);
        assert_eq!(
            verify(&deleted),
            Err(ChainBreak::Missing { after: 3, seq: 5 })
        );

        let mut reordered = records.clone();
        reordered.swap(1, 2);
        assert!(verify(&reordered).is_err());

        // Rewriting a record with a fresh hash still breaks the link to its successor.
        let mut forged = records.clone();
        forged[2].event.status = 500;
        forged[2].hash = record_hash(&forged[2].prev_hash, 3, &forged[2].event);
        assert_eq!(verify(&forged), Err(ChainBreak::Unchained { seq: 4 }));

        let mut truncated_head = records.clone();
        truncated_head.remove(0);
        assert!(verify(&truncated_head).is_err());
    }

    #[test]
    fn queries_name_a_bad_order_or_status_class() {
        let parse = |json: &str| serde_json::from_str::<AuditQuery>(json);
        assert_eq!(parse("{}").unwrap().order, AuditOrder::Asc);
        let query = parse(r#"{"order": "desc", "status-class": "4xx"}"#).unwrap();
        assert_eq!(query.order, AuditOrder::Desc);
        assert_eq!(query.status_class.map(StatusClass::range), Some((400, 500)));
        let bad = parse(r#"{"order": "sideways"}"#).unwrap_err().to_string();
        assert!(bad.contains("order must be asc or desc"), "{bad}");
        let bad = parse(r#"{"status-class": "418"}"#).unwrap_err().to_string();
        assert!(bad.contains("status-class must be"), "{bad}");
    }

    #[test]
    fn checkpoints_catch_deleted_ends_and_rewritten_chains() {
        let records = chain(0, GENESIS, (1..=6).map(event).collect());
        let noted = |seq: i64| Checkpoint {
            seq,
            hash: records[seq as usize - 1].hash.clone(),
            at_ms: 1_000 * seq,
        };
        let checkpoints = Checkpoint::parse_file(&(noted(2).line() + &noted(5).line())).unwrap();
        assert_eq!(checkpoints, vec![noted(2), noted(5)]);
        assert_eq!(verify_checkpoints(&records, &checkpoints), Ok(()));

        // Deleting the newest records leaves an intact chain, but not the checkpointed one.
        let truncated = &records[..4];
        assert_eq!(verify(truncated), Ok(4));
        assert_eq!(
            verify_checkpoints(truncated, &checkpoints),
            Err(ChainBreak::Truncated { last: 4, seq: 5 })
        );

        // Rewriting record 4 and chaining everything after it afresh fools the chain alone.
        let mut edited: Vec<AuditEvent> = records.iter().map(|r| r.event.clone()).collect();
        edited[3].principal = "mallory".into();
        let rewritten = chain(0, GENESIS, edited);
        assert_eq!(verify(&rewritten), Ok(6));
        assert_eq!(
            verify_checkpoints(&rewritten, &checkpoints),
            Err(ChainBreak::Rewritten {
                seq: 5,
                at_ms: 5_000
            })
        );

        assert!(
            Checkpoint::parse_file("7 abc 1\n")
                .unwrap_err()
                .contains("line 1")
        );
    }
}
