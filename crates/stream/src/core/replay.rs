//! Replay: entries of a table's log taken again after a bad deploy, without duplicating what
//! the table already holds.
//!
//! Committed entries are kept beside the log for `retain_committed`, at most
//! `retain_committed_bytes` a table (`retained/`, oldest dropped first), dead
//! letters until an operator removes them (`dead-letter/`). A replay of sequences `from..=to`
//! takes each such entry that the table does not hold:
//! - a retained entry is held when a snapshot of `main`'s history committed it (each commit's
//!   summary records the first and last sequence it covers): one rolled back or dropped with
//!   a bad commit is not, and is taken again;
//! - a dead letter was never committed, so it is taken again (and goes back to the dead
//!   letters if the table still cannot take it); its letters leave the table's dead-letter
//!   table.
//!
//! An entry taken again is appended to the log as a new entry — acknowledged, committed
//! exactly once like any other — and moved to `replayed/`, so a second replay of the same
//! range takes nothing twice; replays on a node run one at a time. (A crash between an
//! entry's append and its move leaves it to be taken once more by the next replay.) A dry
//! run says what it would take.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use iceberg::TableIdent;
use serde::Serialize;

use super::IngestError;
use super::dead_letter;
use super::dead_letter::held::Held;
use super::log::{Ingest, Unfit, read_raw};

/// Committed entries kept for replay, beside the log.
pub(super) const RETAINED: &str = "retained";
/// Entries taken again by a replay.
pub(super) const REPLAYED: &str = "replayed";

/// What a replay did (or would do) with one entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Replayed {
    pub sequence: u64,
    /// `retained` or `dead-letter`.
    pub kept_as: &'static str,
    pub rows: usize,
    /// `replayed`, `would-replay`, `in-table` (the table holds it) or `unreadable`.
    pub outcome: &'static str,
    /// The entry it was appended as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_sequence: Option<u64>,
    /// A dead letter taken again: whether its letters left the table's dead-letter table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub letters: Option<String>,
}

/// Keeps the committed entry `sequence` of the log in `log_dir` for replay (or deletes it
/// when nothing is retained), and forgets retained entries older than `retain`.
pub(super) fn retain(log_dir: &Path, sequence: u64, retain: Duration) {
    let name = format!("{sequence:020}.arrow");
    if retain.is_zero() {
        let _ = std::fs::remove_file(log_dir.join(&name));
        return;
    }
    let dir = log_dir.join(RETAINED);
    if std::fs::create_dir_all(&dir).is_err()
        || std::fs::rename(log_dir.join(&name), dir.join(&name)).is_err()
    {
        let _ = std::fs::remove_file(log_dir.join(&name));
    }
}

/// Forgets entries kept in `dir` older than `retain`, then the oldest while they hold more
/// than `most_bytes`.
pub(super) fn prune(dir: &Path, retain: Duration, most_bytes: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    let mut kept: Vec<(SystemTime, u64, std::path::PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        let modified = meta.modified().unwrap_or(now);
        let old = now.duration_since(modified).is_ok_and(|age| age > retain);
        if old {
            let _ = std::fs::remove_file(entry.path());
        } else {
            kept.push((modified, meta.len(), entry.path()));
        }
    }
    kept.sort();
    let mut total: u64 = kept.iter().map(|(_, size, _)| size).sum();
    for (_, size, path) in kept {
        if total <= most_bytes {
            break;
        }
        let _ = std::fs::remove_file(path);
        total -= size;
    }
}

impl Ingest {
    /// Replays entries `from..=to` of table `ident`'s log on this node (see the module).
    pub async fn replay(
        self: &Arc<Self>,
        warehouse: &str,
        ident: &TableIdent,
        from: u64,
        to: u64,
        dry_run: bool,
    ) -> Result<Vec<Replayed>, IngestError> {
        let _one_at_a_time = self.replays.lock().await;
        let log_dir = self.log_dir(warehouse, ident).await?;
        let metadata = self.table_metadata(warehouse, ident).await?;
        let mut candidates: Vec<(u64, &'static str, std::path::PathBuf)> = Vec::new();
        for (kept_as, dir) in [
            ("retained", log_dir.join(RETAINED)),
            ("dead-letter", dead_letter::dir(&log_dir)),
        ] {
            for sequence in dead_letter::entries_in(&dir) {
                if (from..=to).contains(&sequence) {
                    candidates.push((sequence, kept_as, dir.clone()));
                }
            }
        }
        candidates.sort_by_key(|(sequence, _, _)| *sequence);
        let mut report = Vec::new();
        for (sequence, kept_as, dir) in candidates {
            let mut line = Replayed {
                sequence,
                kept_as,
                rows: 0,
                outcome: "in-table",
                new_sequence: None,
                letters: None,
            };
            let batches = match read_raw(&dir, sequence) {
                Ok(batches) => batches,
                Err(Unfit::Misfit(_)) | Err(Unfit::Io(_)) => {
                    line.outcome = "unreadable";
                    report.push(line);
                    continue;
                }
            };
            line.rows = batches.iter().map(|b| b.num_rows()).sum();
            let held = kept_as == "retained" && self.holds(&metadata, sequence);
            if held {
                report.push(line);
                continue;
            }
            if dry_run {
                line.outcome = "would-replay";
                report.push(line);
                continue;
            }
            let receipt = self.append(warehouse, ident, &batches).await?;
            line.new_sequence = Some(receipt.sequence);
            line.outcome = "replayed";
            let replayed = log_dir.join(REPLAYED);
            let name = format!("{sequence:020}.arrow");
            std::fs::create_dir_all(&replayed)
                .and_then(|_| std::fs::rename(dir.join(&name), replayed.join(&name)))
                .map_err(|e| IngestError::Storage(format!("set entry {sequence} aside: {e}")))?;
            let _ = std::fs::remove_file(dir.join(format!("{sequence:020}.json")));
            if kept_as == "dead-letter" {
                line.letters = Some(self.forget_letters(warehouse, ident, sequence).await);
            }
            report.push(line);
        }
        Ok(report)
    }

    /// Removes the letters of this log's entry `sequence` from table `ident`'s dead-letter
    /// table, now that the entry was taken again: `removed`, or why they stay.
    async fn forget_letters(&self, warehouse: &str, ident: &TableIdent, sequence: u64) -> String {
        let log_id = self.log_id.clone();
        let Ok(offset) = i64::try_from(sequence) else {
            return "removed".into();
        };
        let of_entry = move |letter: &Held| {
            letter.pipeline.is_none()
                && letter.offset == Some(offset)
                && letter.source.as_deref() == Some(log_id.as_str())
        };
        match dead_letter::held::remove(&self.catalog, &self.sql, warehouse, ident, &of_entry).await
        {
            Ok(()) => "removed".into(),
            Err(e) => {
                tracing::warn!(table = %ident, sequence, error = %e, "remove replayed letters");
                format!("they stay in the dead-letter table: {e}")
            }
        }
    }
}
