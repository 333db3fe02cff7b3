//! Log entries a table can no longer take, kept beside its log exactly as acknowledged (their
//! rows are also letters of the table's dead-letter table, [`super::keep`]): `dead-letter/<sequence>.arrow`
//! (the entry as it was acknowledged, an Arrow IPC stream) and `dead-letter/<sequence>.json`
//! (why, and when). Nothing in them is lost: `floe ingest replay` takes them again once the
//! table takes them (or an operator reads them with `pyarrow.ipc.open_stream`).
//!
//! An entry is moved before the commit that skips it: the reason is written and synced, the
//! entry renamed into the directory, and the directory synced. A crash in between leaves the
//! entry in the log (its reason is written again next time); after the move the entry is no
//! longer pending, so the commit that covers later sequences never drops it.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::core::log::write_durably;

pub(crate) const DIR: &str = "dead-letter";

/// Moves the log entry `sequence` of the log in `log_dir` aside, with `reason`.
pub(crate) fn move_aside(log_dir: &Path, sequence: u64, reason: &str) -> std::io::Result<()> {
    let dir = log_dir.join(DIR);
    std::fs::create_dir_all(&dir)?;
    let note = json!({
        "sequence": sequence,
        "error": reason,
        "dead-lettered-at": chrono::Utc::now().to_rfc3339(),
    });
    write_durably(
        &dir.join(format!("{sequence:020}.json")),
        &serde_json::to_vec_pretty(&note).expect("a note serializes"),
    )?;
    std::fs::rename(
        log_dir.join(format!("{sequence:020}.arrow")),
        dir.join(format!("{sequence:020}.arrow")),
    )?;
    std::fs::File::open(&dir)?.sync_all()?;
    std::fs::File::open(log_dir)?.sync_all()
}

/// The sequences of the entries dead-lettered in the log in `log_dir`.
pub(crate) fn sequences(log_dir: &Path) -> Vec<u64> {
    entries_in(&log_dir.join(DIR))
}

/// The sequences of the log entries (`<sequence>.arrow`) in `dir`, in order.
pub(crate) fn entries_in(dir: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut sequences: Vec<u64> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".arrow"))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    sequences.sort_unstable();
    sequences
}

/// Where the dead letters of the log in `log_dir` are.
pub(crate) fn dir(log_dir: &Path) -> PathBuf {
    log_dir.join(DIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_moved_aside_keeps_its_bytes_and_its_reason() {
        let log = tempfile::tempdir().unwrap();
        std::fs::write(log.path().join(format!("{:020}.arrow", 7)), b"entry").unwrap();
        move_aside(log.path(), 7, "required column tenant is missing").unwrap();
        assert!(!log.path().join(format!("{:020}.arrow", 7)).exists());
        let kept = dir(log.path()).join(format!("{:020}.arrow", 7));
        assert_eq!(std::fs::read(kept).unwrap(), b"entry");
        let note: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir(log.path()).join(format!("{:020}.json", 7))).unwrap(),
        )
        .unwrap();
        assert_eq!(note["error"], "required column tenant is missing");
        assert_eq!(sequences(log.path()), [7]);
    }
}
