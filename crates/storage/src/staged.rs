//! A local warehouse's staged uploads. `object_store`'s local file system writes an object
//! as `<name>#<n>` and renames it to `<name>` when the upload completes; it hides such names
//! from listings and refuses them as paths. A writer that dies mid-upload (a killed
//! compaction, a crash during a commit) leaves one behind, which only orphan cleanup and
//! purge would ever remove — so for local warehouses they are listed and deleted here,
//! through the file system, inside the same reach as every other path.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::{Result, StorageError};

/// Whether a path (or a bare file name) names a staged upload: its file name ends in `#`
/// followed by digits only, as `object_store` names them.
pub(crate) fn is_staged(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rsplit_once('#') {
        Some((_, suffix)) => !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

/// Every staged upload below `relative` (a directory relative to the warehouse directory
/// `root`), as paths relative to `root` with their modification times (epoch milliseconds).
/// Symbolic links are not followed.
pub(crate) async fn list(root: PathBuf, relative: String) -> Result<Vec<(String, i64)>> {
    tokio::task::spawn_blocking(move || {
        let mut found = Vec::new();
        let start = root.join(&relative);
        walk(&root, &start, &mut found).map_err(|e| io_error(&start, e))?;
        Ok(found)
    })
    .await
    .map_err(|e| StorageError::InvalidProfile(format!("listing staged uploads failed: {e}")))?
}

fn walk(root: &Path, dir: &Path, found: &mut Vec<(String, i64)>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            walk(root, &path, found)?;
        } else if kind.is_file() && entry.file_name().to_str().is_some_and(is_staged) {
            let Some(relative) = path.strip_prefix(root).ok().and_then(|p| p.to_str()) else {
                continue;
            };
            let modified = entry
                .metadata()?
                .modified()?
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            found.push((relative.to_string(), modified));
        }
    }
    Ok(())
}

/// Deletes the staged upload at `relative` below the warehouse directory `root`; one that is
/// already gone (its upload completed, or another cleanup took it) is not an error.
pub(crate) async fn remove(root: PathBuf, relative: String) -> Result<()> {
    let path = root.join(relative);
    tokio::task::spawn_blocking(move || match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(&path, e)),
    })
    .await
    .map_err(|e| StorageError::InvalidProfile(format!("deleting a staged upload failed: {e}")))?
}

fn io_error(path: &Path, e: std::io::Error) -> StorageError {
    StorageError::InvalidLocation {
        location: path.display().to_string(),
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_names_are_a_hash_and_digits() {
        assert!(is_staged("a.parquet#1"));
        assert!(is_staged("a#b.parquet#12"));
        assert!(!is_staged("a.parquet"));
        assert!(!is_staged("a.parquet#"));
        assert!(!is_staged("a#x1"));
        assert!(is_staged("file:///w/t/data/a.parquet#3"));
        assert!(!is_staged("file:///w/t#1/data/a.parquet"));
    }
}
