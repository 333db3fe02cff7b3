//! Table checks: what a table's metadata references that storage no longer holds or holds
//! otherwise, and what storage holds that nothing references.
//!
//! In order, stopping where nothing further can be read:
//! 1. the current metadata file, read from storage (not memory) — when it does not read, the
//!    newest earlier metadata file of the table that does is named for the repair;
//! 2. the metadata log: earlier metadata files that are gone;
//! 3. every snapshot of `main`'s history and every other ref's head: its manifest list and
//!    manifests read, and the counts the manifest list keeps against the manifests' entries;
//! 4. the current snapshot's live data and delete files: present, of the size the manifest
//!    says, and (`deep`) holding the rows it says (from each Parquet footer, bounded);
//! 5. files under the table's location nothing references (orphan cleanup deletes those
//!    older than its minimum age).

use std::collections::HashSet;

use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::manifests::load_manifest;
use floe_catalog::service::TableFiles;
use iceberg::TableIdent;
use iceberg::spec::{ManifestStatus, TableMetadata};
use serde::Serialize;

use super::orphans::{OrphanOptions, remove_orphan_files};
use super::state::{read_manifest_list, read_snapshot};
use super::{Maintainer, Result};

/// Unreferenced files named in a report at most (all are counted).
const LISTED_UNREFERENCED: usize = 100;

/// What kind of damage a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Damage {
    /// The current metadata file is missing or does not read as Iceberg metadata.
    UnreadableMetadata,
    /// An earlier metadata file the metadata log names is gone.
    MissingMetadataLogFile,
    /// A snapshot's manifest list is missing or does not read.
    UnreadableManifestList,
    /// A manifest a manifest list names is missing or does not read.
    UnreadableManifest,
    /// A manifest list's file or row counts for a manifest disagree with its entries.
    ManifestCountMismatch,
    /// A live data or delete file of the current snapshot is gone.
    MissingFile,
    /// A live file's size differs from the size its manifest records.
    FileSizeMismatch,
    /// A live Parquet file's footer declares another row count than its manifest records.
    RecordCountMismatch,
    /// A file under the table's location no metadata references.
    UnreferencedFile,
}

/// One thing found wrong.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Finding {
    pub damage: Damage,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<i64>,
    pub detail: String,
}

/// What a check read and found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CheckReport {
    pub table: String,
    pub metadata_location: String,
    /// When the current metadata does not read: the newest earlier metadata file that does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readable_earlier_metadata: Option<String>,
    pub snapshots_checked: usize,
    pub manifests_checked: usize,
    pub files_checked: usize,
    pub unreferenced_files: usize,
    /// Why unreferenced files were not listed (a manifest that does not read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreferenced_not_listed: Option<String>,
    pub findings: Vec<Finding>,
    /// Nothing found but unreferenced files (which are harmless).
    pub healthy: bool,
    /// `main`'s current snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_snapshot: Option<i64>,
    /// Snapshots whose manifest list and manifests read (`main`'s history, newest first).
    #[serde(skip)]
    pub readable_snapshots: Vec<i64>,
}

impl CheckReport {
    pub fn has(&self, damage: Damage) -> bool {
        self.findings.iter().any(|f| f.damage == damage)
    }
}

/// The table's record and storage as the system (the caller was authorized before).
pub(crate) async fn files_of(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
) -> Result<TableFiles> {
    Ok(maintainer
        .catalog
        .table_files(
            &Caller::system(),
            warehouse,
            ident,
            Privilege::ManageMaintenance,
        )
        .await?)
}

/// The table's metadata files, newest version first.
async fn metadata_files(files: &TableFiles) -> Vec<String> {
    let prefix = format!("{}/metadata/", files.record.location.trim_end_matches('/'));
    let mut listed: Vec<(u64, String)> = files
        .storage
        .list(&prefix)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.ends_with(".metadata.json"))
        .filter_map(|p| floe_catalog::metadata::metadata_version(&p).map(|v| (v, p)))
        .collect();
    listed.sort_by(|a, b| b.cmp(a));
    listed.into_iter().map(|(_, p)| p).collect()
}

/// Checks `ident` of `warehouse`; `deep` also reads every live Parquet file's footer.
pub async fn check_table(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    deep: bool,
) -> Result<CheckReport> {
    let files = files_of(maintainer, warehouse, ident).await?;
    let current = files.record.metadata_location.clone();
    let mut report = CheckReport {
        table: format!("{warehouse}.{ident}"),
        metadata_location: current.clone(),
        readable_earlier_metadata: None,
        snapshots_checked: 0,
        manifests_checked: 0,
        files_checked: 0,
        unreferenced_files: 0,
        unreferenced_not_listed: None,
        findings: Vec::new(),
        healthy: true,
        current_snapshot: None,
        readable_snapshots: Vec::new(),
    };
    let catalog = &maintainer.catalog;
    let metadata = match catalog.verify_table_metadata(&files, &current).await {
        Ok(metadata) => metadata,
        // Only a file that is gone or does not decode is damage; storage that fails for now
        // is an error of the check (a repair must never act on it).
        Err(e)
            if !matches!(
                e.code(),
                floe_catalog::ErrorCode::NotFound | floe_catalog::ErrorCode::InvalidArgument
            ) =>
        {
            return Err(e.into());
        }
        Err(e) => {
            report.findings.push(Finding {
                damage: Damage::UnreadableMetadata,
                path: current.clone(),
                snapshot_id: None,
                detail: e.to_string(),
            });
            // The newest metadata file of an earlier version than the current one (files of
            // the same or a later version were never committed: a commit that lost its race).
            let version = floe_catalog::metadata::metadata_version(&current);
            for earlier in metadata_files(&files).await {
                let older = floe_catalog::metadata::metadata_version(&earlier)
                    .zip(version)
                    .is_some_and(|(v, current)| v < current);
                if older
                    && catalog
                        .verify_table_metadata(&files, &earlier)
                        .await
                        .is_ok()
                {
                    report.readable_earlier_metadata = Some(earlier);
                    break;
                }
            }
            report.healthy = false;
            return Ok(report);
        }
    };
    for entry in metadata.metadata_log() {
        if !files
            .storage
            .exists(&entry.metadata_file)
            .await
            .unwrap_or(false)
        {
            report.findings.push(Finding {
                damage: Damage::MissingMetadataLogFile,
                path: entry.metadata_file.clone(),
                snapshot_id: None,
                detail: "the metadata log names it, storage does not hold it".into(),
            });
        }
    }
    check_snapshots(
        maintainer,
        warehouse,
        ident,
        &files,
        &metadata,
        deep,
        &mut report,
    )
    .await?;
    // Unreferenced files can be told only when every manifest reads.
    let orphans = remove_orphan_files(
        maintainer,
        warehouse,
        ident,
        &OrphanOptions {
            dry_run: true,
            older_than_ms: 0,
        },
    )
    .await;
    match orphans {
        Ok(orphans) => {
            report.unreferenced_files = orphans.orphan_files.len();
            for path in orphans.orphan_files.into_iter().take(LISTED_UNREFERENCED) {
                report.findings.push(Finding {
                    damage: Damage::UnreferencedFile,
                    path,
                    snapshot_id: None,
                    detail: "no metadata references it (orphan cleanup deletes it once old \
                             enough)"
                        .into(),
                });
            }
        }
        Err(e) => report.unreferenced_not_listed = Some(e.to_string()),
    }
    report.healthy = report
        .findings
        .iter()
        .all(|f| f.damage == Damage::UnreferencedFile);
    Ok(report)
}

/// Steps 3 and 4: the snapshots' manifests and the current snapshot's files.
async fn check_snapshots(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    files: &TableFiles,
    metadata: &TableMetadata,
    deep: bool,
    report: &mut CheckReport,
) -> Result<()> {
    let target = maintainer.load(warehouse, ident).await?;
    let table = &target.table;
    report.current_snapshot = metadata.current_snapshot().map(|s| s.snapshot_id());
    // `main`'s history newest first, then the other snapshots.
    let mut order: Vec<i64> = Vec::new();
    let mut next = metadata.current_snapshot().map(|s| s.snapshot_id());
    while let Some(id) = next {
        if order.contains(&id) {
            break;
        }
        order.push(id);
        next = metadata
            .snapshot_by_id(id)
            .and_then(|s| s.parent_snapshot_id());
    }
    let main = order.len();
    let mut others: Vec<i64> = metadata
        .snapshots()
        .map(|s| s.snapshot_id())
        .filter(|id| !order.contains(id))
        .collect();
    others.sort();
    order.extend(others);
    let mut seen_manifests = HashSet::new();
    // Manifests that did not read: every snapshot naming one is unreadable too.
    let mut bad_manifests: HashSet<String> = HashSet::new();
    for (at, id) in order.iter().enumerate() {
        let Some(snapshot) = metadata.snapshot_by_id(*id) else {
            continue;
        };
        report.snapshots_checked += 1;
        let finding = |damage, path: &str, detail: String| Finding {
            damage,
            path: path.to_string(),
            snapshot_id: Some(*id),
            detail,
        };
        let list = match read_manifest_list(table, snapshot).await {
            Ok(list) => list,
            Err(e) => {
                report.findings.push(finding(
                    Damage::UnreadableManifestList,
                    snapshot.manifest_list(),
                    e.to_string(),
                ));
                continue;
            }
        };
        let mut readable = true;
        for manifest in list.entries() {
            if bad_manifests.contains(&manifest.manifest_path) {
                readable = false;
                report.findings.push(finding(
                    Damage::UnreadableManifest,
                    &manifest.manifest_path,
                    "does not read (as found for a newer snapshot naming it too)".into(),
                ));
                continue;
            }
            if !seen_manifests.insert(manifest.manifest_path.clone()) {
                continue;
            }
            report.manifests_checked += 1;
            let read = match super::require_in_table(table, &manifest.manifest_path, "manifest") {
                Ok(()) => load_manifest(table.file_io(), table.metadata(), manifest)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let entries = match read {
                Ok(m) => m.into_parts().0,
                Err(e) => {
                    readable = false;
                    bad_manifests.insert(manifest.manifest_path.clone());
                    report.findings.push(finding(
                        Damage::UnreadableManifest,
                        &manifest.manifest_path,
                        e,
                    ));
                    continue;
                }
            };
            let count = |status: ManifestStatus| {
                let of: Vec<_> = entries.iter().filter(|e| e.status() == status).collect();
                let rows: u64 = of.iter().map(|e| e.data_file().record_count()).sum();
                (of.len() as u64, rows)
            };
            let counted = [
                (
                    "added",
                    manifest.added_files_count,
                    manifest.added_rows_count,
                    count(ManifestStatus::Added),
                ),
                (
                    "existing",
                    manifest.existing_files_count,
                    manifest.existing_rows_count,
                    count(ManifestStatus::Existing),
                ),
                (
                    "deleted",
                    manifest.deleted_files_count,
                    manifest.deleted_rows_count,
                    count(ManifestStatus::Deleted),
                ),
            ];
            for (what, files_said, rows_said, (files_found, rows_found)) in counted {
                let files_wrong = files_said.is_some_and(|n| u64::from(n) != files_found);
                let rows_wrong = rows_said.is_some_and(|n| n != rows_found);
                if files_wrong || rows_wrong {
                    report.findings.push(finding(
                        Damage::ManifestCountMismatch,
                        &manifest.manifest_path,
                        format!(
                            "the manifest list counts {} {what} files and {} rows, the manifest \
                             holds {files_found} and {rows_found}",
                            files_said.map_or("?".into(), |n| n.to_string()),
                            rows_said.map_or("?".into(), |n| n.to_string()),
                        ),
                    ));
                }
            }
        }
        if readable && at < main {
            report.readable_snapshots.push(*id);
        }
    }
    if let Some(current) = metadata.current_snapshot()
        && report.readable_snapshots.first() == Some(&current.snapshot_id())
    {
        let state = read_snapshot(table, current).await?;
        check_files(files, &state, current.snapshot_id(), deep, report).await?;
    }
    Ok(())
}

/// Step 4: the current snapshot's live files are there, of their size (and rows).
async fn check_files(
    files: &TableFiles,
    state: &super::state::SnapshotState,
    snapshot_id: i64,
    deep: bool,
    report: &mut CheckReport,
) -> Result<()> {
    let live: Vec<_> = state.live_data().chain(state.live_deletes()).collect();
    for file in live {
        report.files_checked += 1;
        let data = file.entry.data_file();
        let path = data.file_path();
        let mut finding = |damage, detail: String| {
            report.findings.push(Finding {
                damage,
                path: path.to_string(),
                snapshot_id: Some(snapshot_id),
                detail,
            })
        };
        let size = match files.storage.size(path).await {
            Ok(Some(size)) => size,
            Ok(None) => {
                finding(
                    Damage::MissingFile,
                    "the current snapshot references it, storage does not hold it".into(),
                );
                continue;
            }
            Err(e) => {
                // Storage failing for now is not a lost file: the check fails instead, so a
                // repair never drops a file it could not reach.
                return Err(super::io(format!("reach {path}"), e));
            }
        };
        if size != data.file_size_in_bytes() {
            finding(
                Damage::FileSizeMismatch,
                format!(
                    "{size} bytes in storage, {} in its manifest",
                    data.file_size_in_bytes()
                ),
            );
            continue;
        }
        if deep && data.file_format() == iceberg::spec::DataFileFormat::Parquet {
            let Ok(object) = files.storage.object_path(path) else {
                continue;
            };
            match floe_sql::scan::parquet_rows(files.storage.object_store(), object, size).await {
                Ok(rows) if rows as u64 == data.record_count() => {}
                Ok(rows) => finding(
                    Damage::RecordCountMismatch,
                    format!(
                        "its footer declares {rows} rows, its manifest {}",
                        data.record_count()
                    ),
                ),
                Err(e) => finding(
                    Damage::RecordCountMismatch,
                    format!("its footer does not read: {e}"),
                ),
            }
        }
    }
    Ok(())
}
