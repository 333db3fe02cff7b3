//! Table repair: what a check found, mended where that is safe — always as a new catalog
//! commit (audited, compare-and-swap on what the check saw), never by editing files.
//!
//! - The current metadata file does not read: the table is pointed back at the newest
//!   earlier metadata file of its own that does (commits after it are lost; their data files
//!   stay for orphan cleanup).
//! - A manifest list or manifest of the current snapshot does not read: `main` is rolled
//!   back to the newest snapshot of its history whose manifests all read, and the snapshots
//!   whose manifests do not read are removed (as they are when only older snapshots are
//!   damaged).
//! - Live files of the current snapshot are gone: a `delete` snapshot drops their
//!   references (their rows were lost with them; everything else stays readable).
//!
//! Anything else (count mismatches, sizes that differ, missing metadata-log files,
//! unreferenced files) is reported and left: no commit can mend it without guessing.
//! A dry run (the default) says what it would do.

use std::collections::HashSet;

use floe_catalog::governance::authz::Caller;
use iceberg::TableIdent;
use iceberg::TableUpdate;
use iceberg::spec::Operation;
use serde::Serialize;

use super::check::{CheckReport, Damage, check_table};
use super::compact::{CompactReport, Rewritten, commit_groups};
use super::state::read_snapshot;
use super::{Maintainer, MaintenanceError, Result, commit_on_main};
use crate::compaction::RewriteGroup;
use floe_sql::write::main_ref;

/// One mend, done or (in a dry run) planned.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Action {
    pub action: &'static str,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RepairReport {
    pub dry_run: bool,
    pub actions: Vec<Action>,
    /// What the check found before the repair.
    pub before: CheckReport,
    /// What a check finds after it (not in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<CheckReport>,
}

/// Repairs `ident` of `warehouse` (or with `dry_run` says how it would).
pub async fn repair_table(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    dry_run: bool,
) -> Result<RepairReport> {
    let before = check_table(maintainer, warehouse, ident, false).await?;
    let mut actions = Vec::new();
    if before.has(Damage::UnreadableMetadata) {
        let Some(earlier) = before.readable_earlier_metadata.clone() else {
            return Err(MaintenanceError::Unsupported(
                "the current metadata file does not read and no earlier one of the table does: \
                 nothing to repair from"
                    .into(),
            ));
        };
        actions.push(Action {
            action: "repoint-metadata",
            detail: format!(
                "point the table from {} back at {earlier}",
                before.metadata_location
            ),
        });
        if !dry_run {
            maintainer
                .catalog
                .repoint_table(
                    &Caller::system(),
                    warehouse,
                    ident,
                    &before.metadata_location,
                    &earlier,
                )
                .await?;
        }
    } else if let Some(broken) = broken_head(&before) {
        let Some(&good) = before.readable_snapshots.first() else {
            return Err(MaintenanceError::Unsupported(
                "no snapshot of main's history has manifests that all read: nothing to roll \
                 back to"
                    .into(),
            ));
        };
        let unreadable = unreadable_snapshots(&before);
        actions.push(Action {
            action: "roll-back",
            detail: format!(
                "roll main back from snapshot {broken} (its manifests do not read) to {good}, \
                 removing the snapshots whose manifests do not read: {unreadable:?}"
            ),
        });
        if !dry_run {
            roll_back(maintainer, warehouse, ident, broken, good, unreadable).await?;
        }
    } else if !unreadable_snapshots(&before).is_empty() {
        let unreadable = unreadable_snapshots(&before);
        actions.push(Action {
            action: "remove-unreadable-snapshots",
            detail: format!(
                "remove snapshots outside main's current state whose manifests do not read: \
                 {unreadable:?}"
            ),
        });
        if !dry_run {
            remove_snapshots(maintainer, warehouse, ident, unreadable).await?;
        }
    } else {
        let missing: Vec<String> = before
            .findings
            .iter()
            .filter(|f| f.damage == Damage::MissingFile)
            .map(|f| f.path.clone())
            .collect();
        if !missing.is_empty() {
            actions.push(Action {
                action: "drop-missing-files",
                detail: format!(
                    "commit a delete snapshot dropping {} references to files storage no longer \
                     holds: {}",
                    missing.len(),
                    missing.join(", ")
                ),
            });
            if !dry_run {
                drop_missing(maintainer, warehouse, ident, &missing).await?;
            }
        }
    }
    let after = if dry_run || actions.is_empty() {
        None
    } else {
        Some(check_table(maintainer, warehouse, ident, false).await?)
    };
    Ok(RepairReport {
        dry_run,
        actions,
        before,
        after,
    })
}

/// The current snapshot, when its manifest list or a manifest does not read.
fn broken_head(report: &CheckReport) -> Option<i64> {
    let head = report.current_snapshot?;
    (!report.readable_snapshots.contains(&head) && unreadable_snapshots(report).contains(&head))
        .then_some(head)
}

/// Snapshots whose manifest list or a manifest does not read.
fn unreadable_snapshots(report: &CheckReport) -> Vec<i64> {
    let mut ids: Vec<i64> = report
        .findings
        .iter()
        .filter(|f| {
            matches!(
                f.damage,
                Damage::UnreadableManifestList | Damage::UnreadableManifest
            )
        })
        .filter_map(|f| f.snapshot_id)
        .filter(|id| !report.readable_snapshots.contains(id))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Removes `snapshots` (none of them `main`'s current one).
async fn remove_snapshots(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    snapshots: Vec<i64>,
) -> Result<()> {
    let target = maintainer.load(warehouse, ident).await?;
    let metadata = target.table.metadata();
    let updates = vec![TableUpdate::RemoveSnapshots {
        snapshot_ids: snapshots,
    }];
    commit_on_main(
        maintainer,
        warehouse,
        ident,
        metadata,
        metadata.current_snapshot_id(),
        updates,
    )
    .await
}

/// Points `main` from `broken` at `good`, if it is still at `broken`, and removes
/// `unreadable` snapshots.
async fn roll_back(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    broken: i64,
    good: i64,
    unreadable: Vec<i64>,
) -> Result<()> {
    let target = maintainer.load(warehouse, ident).await?;
    let metadata = target.table.metadata();
    let updates = vec![
        TableUpdate::SetSnapshotRef {
            ref_name: "main".into(),
            reference: main_ref(metadata, good),
        },
        TableUpdate::RemoveSnapshots {
            snapshot_ids: unreadable,
        },
    ];
    commit_on_main(
        maintainer,
        warehouse,
        ident,
        metadata,
        Some(broken),
        updates,
    )
    .await
}

/// Commits a `delete` snapshot without the live files at `missing`.
async fn drop_missing(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    missing: &[String],
) -> Result<()> {
    let target = maintainer.load(warehouse, ident).await?;
    let Some(head) = target.table.metadata().current_snapshot() else {
        return Ok(());
    };
    let state = read_snapshot(&target.table, head).await?;
    let missing: HashSet<&str> = missing.iter().map(String::as_str).collect();
    let groups: Vec<Rewritten> = state
        .live_data()
        .chain(state.live_deletes())
        .filter(|f| missing.contains(f.path()))
        .map(|f| Rewritten {
            group: RewriteGroup {
                spec_id: f.spec_id,
                partition: f.partition_key(),
                files: vec![f.path().to_string()],
                input_bytes: f.entry.data_file().file_size_in_bytes(),
                expected_outputs: 0,
            },
            inputs: [f.path().to_string()].into(),
            outputs: Vec::new(),
            rows: 0,
        })
        .collect();
    let mut report = CompactReport::default();
    commit_groups(
        maintainer,
        warehouse,
        ident,
        &state,
        groups,
        Operation::Delete,
        3,
        &mut report,
    )
    .await
}
