//! Log entries a table can no longer take, kept as rows of its dead-letter table: one row
//! per row of the entry, as JSON, appended through the dead-letter table's own log.

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

/// How long setting an entry aside waits for its letters' commit.
const LETTERS_COMMITTED: std::time::Duration = std::time::Duration::from_secs(10);

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
    /// take for `reason`, set aside before the commit that skips it: kept as rows of the
    /// table's dead-letter table — one per row, as JSON, through that table's log, made on
    /// first use ([`dead_letter`]) — and then dropped from the log. When the dead-letter
    /// table cannot take them (its namespace is gone, a table of its name is not Floe's, a
    /// dead-letter table's own entry), the entry is moved beside the log instead
    /// ([`super::files`]): nothing acknowledged is lost either way.
    pub(crate) async fn set_aside(
        &self,
        log: &TableLog,
        sequence: u64,
        raw: Option<&[RecordBatch]>,
        reason: &str,
    ) -> std::io::Result<()> {
        match self.keep_as_letters(log, sequence, raw, reason).await {
            Ok(()) => dead_letter::files::drop_entry(&log.dir, sequence),
            Err(e) => {
                tracing::warn!(
                    table = %log.ident,
                    sequence,
                    error = %e,
                    "the dead-letter table cannot take a log entry: it goes beside the log"
                );
                dead_letter::move_aside(&log.dir, sequence, reason)
            }
        }
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
        let letters: Vec<Letter> = dead_letter::rows_as_json(raw)
            .map_err(IngestError::Invalid)?
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
        let rows = dead_letter::batch(&letters, floe_catalog::clock::now_ms() * 1000);
        let rows = conform(&rows, &schema, Match::Name).map_err(IngestError::Invalid)?;
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
        let receipt = answer
            .await
            .map_err(|_| IngestError::Storage("the ingest log is closing".into()))??;
        // Durable already; waited for (a while) so that the letters can be read, and
        // replayed, once the entry has left the log.
        receipt.committed(LETTERS_COMMITTED).await;
        Ok(())
    }
}
