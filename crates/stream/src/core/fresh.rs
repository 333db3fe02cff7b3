//! Read-your-writes: the rows this node's log acknowledged that a table's snapshot does not
//! cover yet, for Floe SQL on this node ([`floe_sql::scan::PendingRows`]).
//!
//! The log keeps each entry's rows in memory from its acknowledgement until a while after the
//! snapshot that covers it is committed (within a budget; an entry over it is read back from
//! its file while it is pending). A read gives the entries after the last one the snapshot it
//! reads says it covers — by the log position recorded in that snapshot's summary, the same
//! one recovery trusts — so a row is in the snapshot's files or in these, never both, and an
//! entry committed after the reader loaded the table is still handed over (it is kept
//! [`RETAIN`] after its commit).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use iceberg::TableIdent;
use iceberg::spec::TableMetadata;

use super::conform::{Match, conform};
use super::log::Ingest;

/// How long an entry's rows stay in memory after the snapshot covering them is committed:
/// longer than a query takes from loading the table to planning its scan.
pub(crate) const RETAIN: Duration = Duration::from_secs(5);

/// Most bytes (as written to the log) of rows all tables keep in memory.
pub(crate) const MOST_KEPT_BYTES: u64 = 256 << 20;

/// An entry's rows kept in memory.
struct Kept {
    batches: Arc<Vec<RecordBatch>>,
    bytes: u64,
    /// When the snapshot covering the entry was committed, and the table's last sequence
    /// number then (when this log committed it).
    committed: Option<(Instant, Option<i64>)>,
}

/// The entries of one table's log kept in memory, by sequence.
#[derive(Default)]
pub(crate) struct Recent {
    entries: std::sync::Mutex<BTreeMap<u64, Kept>>,
}

impl Recent {
    /// Keeps an acknowledged entry's rows, when the budget `kept` (shared by every table)
    /// has room for them.
    pub(crate) fn keep(
        &self,
        sequence: u64,
        batches: &[RecordBatch],
        bytes: u64,
        kept: &AtomicU64,
    ) {
        if kept.fetch_add(bytes, Ordering::Relaxed) + bytes > MOST_KEPT_BYTES {
            kept.fetch_sub(bytes, Ordering::Relaxed);
            return;
        }
        let entry = Kept {
            batches: Arc::new(batches.to_vec()),
            bytes,
            committed: None,
        };
        self.entries
            .lock()
            .expect("recent entries")
            .insert(sequence, entry);
    }

    /// Marks the entries up to `sequence` committed — by a snapshot that brought the table's
    /// last sequence number to `number`, when this log committed them — and lets go of those
    /// committed longer than [`RETAIN`] ago.
    pub(crate) fn committed_through(&self, sequence: u64, number: Option<i64>, kept: &AtomicU64) {
        let now = Instant::now();
        let mut entries = self.entries.lock().expect("recent entries");
        for (_, entry) in entries.range_mut(..=sequence) {
            entry.committed.get_or_insert((now, number));
        }
        entries.retain(|_, entry| {
            let keep = entry.committed.is_none_or(|(at, _)| now - at < RETAIN);
            if !keep {
                kept.fetch_sub(entry.bytes, Ordering::Relaxed);
            }
            keep
        });
    }

    /// Forgets an entry (moved to the dead-letter directory).
    pub(crate) fn forget(&self, sequence: u64, kept: &AtomicU64) {
        if let Some(entry) = self
            .entries
            .lock()
            .expect("recent entries")
            .remove(&sequence)
        {
            kept.fetch_sub(entry.bytes, Ordering::Relaxed);
        }
    }

    /// An entry's rows, when they are kept.
    pub(crate) fn get(&self, sequence: u64) -> Option<Arc<Vec<RecordBatch>>> {
        let entries = self.entries.lock().expect("recent entries");
        entries.get(&sequence).map(|entry| entry.batches.clone())
    }

    /// The kept entries after `sequence` that a table state whose last sequence number is
    /// `number` does not have (an entry whose snapshot is among that state's ancestors is
    /// had even when expiry removed the snapshot naming the log position).
    fn after(&self, sequence: u64, number: i64) -> BTreeMap<u64, Arc<Vec<RecordBatch>>> {
        self.entries
            .lock()
            .expect("recent entries")
            .range(sequence + 1..)
            .filter(|(_, entry)| !matches!(entry.committed, Some((_, Some(n))) if n <= number))
            .map(|(s, entry)| (*s, entry.batches.clone()))
            .collect()
    }
}

/// The log as Floe SQL's source of fresh rows; it does not keep the log alive (the log holds
/// the engine).
#[derive(Debug)]
pub struct FreshRows(pub Weak<Ingest>);

#[async_trait]
impl floe_sql::scan::PendingRows for FreshRows {
    async fn rows_after(
        &self,
        warehouse: &str,
        ident: &TableIdent,
        metadata: &TableMetadata,
        schema: &SchemaRef,
    ) -> Result<Vec<RecordBatch>> {
        let Some(ingest) = self.0.upgrade() else {
            return Ok(Vec::new());
        };
        // An upsert table's pending rows would stand beside the rows they replace: its reads
        // see changes once they are committed.
        if !matches!(super::upsert::key_of(metadata), Ok(None)) {
            return Ok(Vec::new());
        }
        let Some(log) = ingest.existing_log(warehouse, ident).await else {
            return Ok(Vec::new());
        };
        let covered = ingest.sequence_in(metadata);
        let mut entries = log.recent.after(covered, metadata.last_sequence_number());
        // Entries over the memory budget are read back while they are pending.
        let unkept: Vec<u64> = log
            .pending_after(covered)
            .await
            .into_iter()
            .filter(|s| !entries.contains_key(s))
            .collect();
        if !unkept.is_empty() {
            let dir = log.dir.clone();
            let read = tokio::task::spawn_blocking(move || {
                unkept
                    .into_iter()
                    .filter_map(|s| Some((s, super::log::read_raw(&dir, s).ok()?)))
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            entries.extend(read.into_iter().map(|(s, b)| (s, Arc::new(b))));
        }
        // The schema the engine plans with carries no field ids (floe_sql::scan::field_ids),
        // so entries are matched by id to the table's own Arrow schema, then by name to it.
        let with_ids: SchemaRef =
            match iceberg::arrow::schema_to_arrow_schema(metadata.current_schema()) {
                Ok(arrow) => Arc::new(arrow),
                Err(e) => {
                    tracing::debug!(table = %ident, error = %e, "fresh rows left out");
                    return Ok(Vec::new());
                }
            };
        let mut rows = Vec::new();
        for (sequence, batches) in entries {
            if log.dead_lettered(sequence).await {
                continue;
            }
            // An entry the table can no longer take is left out (its committer dead-letters
            // it); the others are read in the table's current schema.
            let conformed: std::result::Result<Vec<_>, crate::Refusal> = batches
                .iter()
                .map(|b| {
                    let by_id = conform(b, &with_ids, Match::for_entry(&b.schema()))?;
                    conform(&by_id, schema, Match::Name)
                })
                .collect();
            match conformed {
                Ok(batches) => rows.extend(batches),
                Err(reason) => {
                    tracing::debug!(table = %ident, sequence, %reason, "fresh rows left out")
                }
            }
        }
        Ok(rows)
    }
}
