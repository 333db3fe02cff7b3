//! Log entries a table can no longer take: moved beside the log as they were acknowledged
//! (for replay), and their rows kept as letters of the table's dead-letter table (one per
//! row, as JSON, appended through the dead-letter table's own log) for reading.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use floe_catalog::governance::authz::Caller;
use iceberg::TableIdent;
use tokio::sync::mpsc::UnboundedReceiver;

use super::Letter;
use crate::core::IngestError;
use crate::core::conform::{Match, conform};
use crate::core::dead_letter;
use crate::core::log::{Ingest, Receipt, TableLog, Unfit, read_raw};

/// The most JSON one entry's letters may hold: a larger entry is kept beside the log only.
const MOST_LETTER_BYTES: usize = 64 << 20;

/// Rows for dead-letter table `ident` of `warehouse`, and who waits for their receipt.
pub(crate) struct LettersToKeep {
    warehouse: String,
    ident: TableIdent,
    rows: RecordBatch,
    done: tokio::sync::oneshot::Sender<Result<Receipt, IngestError>>,
}

/// The task that appends letters for `ingest`'s committers (appending may start a
/// dead-letter table's committer, whose loop must not hold the future that waits for it).
pub(crate) fn start(ingest: &Arc<Ingest>, mut to_keep: UnboundedReceiver<LettersToKeep>) {
    let this = Arc::downgrade(ingest);
    tokio::spawn(async move {
        while let Some(job) = to_keep.recv().await {
            let Some(ingest) = this.upgrade() else { break };
            let receipt = ingest
                .append(&job.warehouse, &job.ident, std::slice::from_ref(&job.rows))
                .await;
            drop(ingest);
            let _ = job.done.send(receipt);
        }
    });
}

impl Ingest {
    /// Entry `sequence` of `log` (its batches `raw` when at hand), which its table cannot
    /// take for `reason`, set aside before the commit that skips it: its rows kept as letters
    /// of the table's dead-letter table (one per row, as JSON, through that table's log, made
    /// on first use: [`dead_letter`]) for reading, and the entry itself moved beside the log
    /// ([`super::files`]), exactly as acknowledged, for `floe ingest replay`. The letters are
    /// a view: when the dead-letter table cannot take them (its namespace is gone, a table of
    /// its name is not Floe's, the entry is a dead-letter table's own, the entry's JSON would
    /// be too large) that is logged, and the entry is kept all the same.
    pub(crate) async fn set_aside(
        &self,
        log: &TableLog,
        sequence: u64,
        raw: Option<&[RecordBatch]>,
        reason: &str,
    ) -> std::io::Result<()> {
        if let Err(e) = self.keep_as_letters(log, sequence, raw, reason).await {
            tracing::warn!(
                table = %log.ident,
                sequence,
                error = %e,
                "a log entry's rows are not in its dead-letter table (the entry is kept beside the log)"
            );
        }
        dead_letter::move_aside(&log.dir, sequence, reason)
    }

    async fn keep_as_letters(
        &self,
        log: &TableLog,
        sequence: u64,
        raw: Option<&[RecordBatch]>,
        reason: &str,
    ) -> Result<(), IngestError> {
        if dead_letter::is_dead_letters(&log.ident) {
            return Err(IngestError::Invalid(format!(
                "{} is a dead-letter table",
                log.ident
            )));
        }
        let read;
        let raw = match raw {
            Some(raw) => raw,
            None => {
                read = match log.recent.get(sequence) {
                    Some(batches) => batches.as_ref().clone(),
                    None => read_raw(&log.dir, sequence).map_err(|e| match e {
                        Unfit::Misfit(e) => IngestError::Invalid(e),
                        Unfit::Io(e) => IngestError::Storage(e.to_string()),
                    })?,
                };
                &read[..]
            }
        };
        let door = dead_letter::door_of(raw);
        // An upsert table's deletes are kept as keys without a record, as Kafka's
        // tombstones are.
        let deletes = crate::core::upsert::deletes(raw);
        let letters: Vec<Letter> = dead_letter::rows_as_json(raw, MOST_LETTER_BYTES)?
            .into_iter()
            .map(|row| {
                let mut letter = match deletes {
                    true => {
                        let mut letter = Letter::new(door, reason, None);
                        letter.key = Some(row);
                        letter
                    }
                    false => Letter::new(door, reason, Some(row)),
                };
                letter.source = Some(self.log_id.clone());
                letter.offset = i64::try_from(sequence).ok();
                letter
            })
            .collect();
        let (ident, schema) =
            dead_letter::ready(&self.catalog, &Caller::system(), &log.warehouse, &log.ident)
                .await?;
        let rows = dead_letter::batch(&letters, floe_catalog::clock::now_micros());
        let rows = conform(&rows, &schema, Match::Name).map_err(IngestError::from)?;
        // Appended by the letters' task: appending may start the dead-letter table's
        // committer, whose loop would otherwise hold this future.
        let (done, answer) = tokio::sync::oneshot::channel();
        self.letters
            .send(LettersToKeep {
                warehouse: log.warehouse.clone(),
                ident,
                rows,
                done,
            })
            .map_err(|_| IngestError::Storage("the ingest log is closing".into()))?;
        answer
            .await
            .map_err(|_| IngestError::Storage("the ingest log is closing".into()))??;
        Ok(())
    }
}
