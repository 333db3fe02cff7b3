//! Change events: every committed change to the catalog (a table or view created, committed,
//! renamed, dropped, undropped or purged; a namespace created, changed or dropped; a grant or
//! a row and column policy changed) as one event, written to an outbox in the catalog
//! database by the transaction that makes the change — so a change and its event commit
//! together or not at all — and published from there, in order, as CloudEvents
//! (floe-stream's `events` publisher).
//!
//! Events are numbered in commit order (`seq`, one sequence for the whole catalog, assigned
//! under the writer's lock), so the order of a table's events is its commits' order.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::Result;

/// The `type` prefix of Floe's events (`io.floe.table.committed`, …).
pub const TYPE_PREFIX: &str = "io.floe.";

/// An event a store transaction emits with its change.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// What happened, e.g. `table.committed` (the CloudEvent's type without its prefix).
    pub kind: String,
    /// What it happened to, e.g. `default/sales.orders` (warehouse, then the object).
    pub subject: String,
    /// The event's details (ids, metadata locations, …).
    pub data: Value,
}

/// An event in the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Its place in the catalog's one sequence of events.
    pub seq: i64,
    /// Its CloudEvent id (a UUID, fixed when it was written).
    pub id: String,
    pub kind: String,
    pub subject: String,
    pub time_ms: i64,
    pub data: Value,
}

impl StoredEvent {
    /// The event as a structured-mode CloudEvent 1.0 (`source` names this catalog), with
    /// its sequence number as the `floeseq` extension attribute.
    pub fn cloud_event(&self, source: &str) -> Value {
        let time = chrono::DateTime::from_timestamp_millis(self.time_ms)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        json!({
            "specversion": "1.0",
            "id": self.id,
            "source": source,
            "type": format!("{TYPE_PREFIX}{}", self.kind),
            "subject": self.subject,
            "time": time,
            "datacontenttype": "application/json",
            "floeseq": self.seq,
            "data": self.data,
        })
    }
}

/// The outbox and the publishers' progress. Implemented by `floe-store`.
#[async_trait]
pub trait EventStore: Send + Sync + std::fmt::Debug {
    /// Up to `limit` events after `seq`, in order.
    async fn events_after(&self, seq: i64, limit: usize) -> Result<Vec<StoredEvent>>;
    /// The last event sink `sink` has delivered (0 before any).
    async fn event_cursor(&self, sink: &str) -> Result<i64>;
    /// Records that `sink` has delivered every event up to `seq`; never moves it back.
    async fn set_event_cursor(&self, sink: &str, seq: i64) -> Result<()>;
    /// Takes (or keeps) the right to publish to `sink` for `lease_ms` as `holder`; false when
    /// another holder's lease is still running.
    async fn lease_event_sink(&self, sink: &str, holder: &str, lease_ms: i64) -> Result<bool>;
    /// Removes the events every sink in `sinks` has delivered (none when there is no sink)
    /// and those written before `older_than_ms`; returns how many went.
    async fn prune_events(&self, sinks: &[String], older_than_ms: i64) -> Result<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_event_reads_as_a_cloud_event() {
        let event = StoredEvent {
            seq: 7,
            id: "0190a1b2-0000-7000-8000-000000000001".into(),
            kind: "table.committed".into(),
            subject: "default/sales.orders".into(),
            time_ms: 1_700_000_000_123,
            data: json!({"metadata-location": "s3://b/m.json"}),
        };
        let cloud = event.cloud_event("urn:floe:test");
        assert_eq!(cloud["specversion"], "1.0");
        assert_eq!(cloud["type"], "io.floe.table.committed");
        assert_eq!(cloud["time"], "2023-11-14T22:13:20.123Z");
        assert_eq!(cloud["floeseq"], 7);
        assert_eq!(cloud["data"]["metadata-location"], "s3://b/m.json");
    }
}
