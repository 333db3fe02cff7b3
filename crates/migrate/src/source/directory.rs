//! A directory of Iceberg tables (Hadoop-catalog style, or tables copied off another
//! catalog): every directory below the root holding `metadata/*.metadata.json` is a table,
//! named by its path (`<root>/sales/orders` is `sales.orders`). The newest metadata file is the
//! one `metadata/version-hint.text` names, else the highest version number.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use async_trait::async_trait;

use super::{Source, SourceTable};

/// Deepest a table may lie below the root.
const MAX_DEPTH: usize = 6;

pub struct DirectorySource {
    root: PathBuf,
}

impl DirectorySource {
    pub fn open(uri: &str) -> anyhow::Result<Self> {
        let path = match uri.strip_prefix("file://") {
            Some(rest) => rest,
            None => uri.strip_prefix("file:").unwrap_or(uri),
        };
        let root = std::fs::canonicalize(path)
            .with_context(|| format!("source directory {uri} cannot be opened"))?;
        if !root.is_dir() {
            bail!("source {uri} is not a directory");
        }
        Ok(Self { root })
    }

    fn walk(&self, dir: &Path, depth: usize, found: &mut Vec<String>) -> anyhow::Result<()> {
        if depth > MAX_DEPTH {
            return Ok(());
        }
        if depth >= 2 && newest_metadata(dir)?.is_some() {
            let relative = dir.strip_prefix(&self.root)?;
            let parts: Vec<String> = relative
                .components()
                .map(|c| {
                    let name = c.as_os_str().to_string_lossy();
                    name.strip_suffix(".db").unwrap_or(&name).to_string()
                })
                .collect();
            found.push(parts.join("."));
            return Ok(());
        }
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .map(|e| e.path())
            .collect();
        entries.sort();
        for entry in entries {
            let name = entry.file_name().map(|n| n.to_string_lossy().into_owned());
            // `<namespace>.db` is Hive's, Spark's and PyIceberg's namespace directory; any other
            // dotted name could not be told apart from a nested namespace.
            let hidden = |n: &str| {
                n.starts_with('.')
                    || n.starts_with('_')
                    || n == "metadata"
                    || n == "data"
                    || n.trim_end_matches(".db").contains('.')
            };
            if name.is_some_and(|n| hidden(&n)) {
                continue;
            }
            self.walk(&entry, depth + 1, found)?;
        }
        Ok(())
    }
}

/// The newest metadata file of the table at `dir`, if it is one.
fn newest_metadata(dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let metadata = dir.join("metadata");
    if !metadata.is_dir() {
        return Ok(None);
    }
    if let Ok(hint) = std::fs::read_to_string(metadata.join("version-hint.text")) {
        let version = hint.trim();
        let file = metadata.join(format!("v{version}.metadata.json"));
        if file.is_file() {
            return Ok(Some(file));
        }
    }
    let mut best: Option<(u64, PathBuf)> = None;
    for entry in std::fs::read_dir(&metadata)?.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".metadata.json") else {
            continue;
        };
        let digits: String = stem
            .trim_start_matches('v')
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let Ok(version) = digits.parse::<u64>() else {
            continue;
        };
        if best.as_ref().is_none_or(|(v, _)| version > *v) {
            best = Some((version, entry.path()));
        }
    }
    Ok(best.map(|(_, p)| p))
}

#[async_trait]
impl Source for DirectorySource {
    async fn list(&self) -> anyhow::Result<Vec<String>> {
        let mut found = Vec::new();
        self.walk(&self.root, 0, &mut found)?;
        Ok(found)
    }

    async fn describe(&self, table: &str) -> anyhow::Result<SourceTable> {
        let parts: Vec<&str> = table.split('.').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || p.contains('/') || *p == "..")
        {
            bail!("{table:?} is not a table of this directory");
        }
        // Each namespace part is a directory of its name, or of its name and `.db`.
        let mut dir = self.root.clone();
        for (i, part) in parts.iter().enumerate() {
            let plain = dir.join(part);
            let db = dir.join(format!("{part}.db"));
            dir = if i + 1 < parts.len() && !plain.is_dir() && db.is_dir() {
                db
            } else {
                plain
            };
        }
        match newest_metadata(&dir)? {
            Some(file) => Ok(SourceTable::Iceberg {
                metadata_location: format!("file://{}", file.display()),
            }),
            None => bail!("{} holds no table metadata", dir.display()),
        }
    }
}
