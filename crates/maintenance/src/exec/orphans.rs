//! Orphan cleanup: delete files under a table's location that no metadata references and
//! that are older than the minimum age.

use std::collections::HashSet;

use iceberg::TableIdent;
use serde::Serialize;

use super::{Maintainer, MaintenanceError, Result, io};
use crate::orphans::{ListedFile, plan_orphans};

/// Files younger than this are never orphans by default (a writer may not have committed
/// them yet).
pub const DEFAULT_MIN_AGE_MS: i64 = 3 * 24 * 3600 * 1000;

/// The youngest a file may be for any cleanup to delete it, on demand or scheduled (a
/// policy's `orphan-min-age-ms` has the same floor). Writers commit within minutes of writing
/// their files; an hour leaves room for slow ones. Operators may lower it
/// (`floe serve --orphan-min-age-floor-secs`), e.g. for tests.
pub const DEFAULT_MIN_AGE_FLOOR_MS: i64 = 3_600_000;

#[derive(Debug, Clone)]
pub struct OrphanOptions {
    pub dry_run: bool,
    pub older_than_ms: i64,
}

impl Default for OrphanOptions {
    fn default() -> Self {
        Self {
            dry_run: true,
            older_than_ms: DEFAULT_MIN_AGE_MS,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct OrphanReport {
    pub dry_run: bool,
    pub listed_files: usize,
    pub referenced_files: usize,
    pub older_than_ms: i64,
    pub orphan_files: Vec<String>,
    pub deleted_files: usize,
    pub failed_deletes: Vec<serde_json::Value>,
}

/// A location in one spelling, for comparing what metadata says with what a listing says.
fn normalized(location: &str) -> String {
    floe_storage::Location::parse(location)
        .map(|l| l.to_string())
        .unwrap_or_else(|_| location.to_string())
}

/// Lists (and unless a dry run, deletes) the orphans of `ident` in `warehouse`: files that
/// no snapshot's manifest list, manifests, data or delete files or statistics, and no
/// metadata file in the log reference.
pub async fn remove_orphan_files(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    options: &OrphanOptions,
) -> Result<OrphanReport> {
    if !options.dry_run {
        maintainer.check_orphan_age(options.older_than_ms)?;
    }
    let target = maintainer.load(warehouse, ident).await?;
    let metadata = target.table.metadata();
    if !options.dry_run && !super::gc_enabled(metadata) {
        // gc.enabled=false: the table's directory holds files of another system too (a table
        // converted in place shares it with the Hive table its writers still add to).
        return Err(MaintenanceError::Invalid(format!(
            "table {ident} has gc.enabled=false (its files may belong to others, as a table \
             converted in place shares its directory with its source); orphan cleanup does \
             not run on it"
        )));
    }
    let mut referenced: HashSet<String> = super::expire::reachable_files(&target.table)
        .await?
        .into_values()
        .flatten()
        .map(|f| normalized(&f))
        .collect();
    if let Some(current) = &target.loaded.metadata_location {
        referenced.insert(normalized(current));
    }
    for entry in metadata.metadata_log() {
        referenced.insert(normalized(&entry.metadata_file));
    }
    let storage = target.files()?;
    let prefix = format!("{}/", metadata.location().trim_end_matches('/'));
    let listed: Vec<ListedFile> = storage
        .list_with_times(&prefix)
        .await
        .map_err(|e| io("list the table's files", e))?
        .into_iter()
        .map(|(path, modified_ms)| ListedFile {
            path: normalized(&path),
            modified_ms,
        })
        .collect();
    let now = floe_catalog::clock::now_ms();
    let min_age = options.older_than_ms.max(0);
    let orphans: Vec<String> = plan_orphans(&listed, &referenced, now, min_age)
        .into_iter()
        .map(str::to_string)
        .collect();
    let mut deleted = 0usize;
    let mut failed = Vec::new();
    if !options.dry_run {
        super::delete_each(&orphans, |f| storage.delete(f), &mut deleted, &mut failed).await;
    }
    Ok(OrphanReport {
        dry_run: options.dry_run,
        listed_files: listed.len(),
        referenced_files: referenced.len(),
        older_than_ms: min_age,
        orphan_files: orphans,
        deleted_files: deleted,
        failed_deletes: failed,
    })
}
