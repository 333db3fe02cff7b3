//! Snapshot expiry: remove snapshots per the table's retention, then every file only they
//! reached (and the token indexes of the data files among them), then the metadata files
//! that fell out of the metadata log.

use std::collections::{BTreeSet, HashMap};

use floe_catalog::governance::authz::Caller;
use floe_catalog::manifests::load_manifest;
use floe_catalog::service::TableCommitRequest;
use iceberg::spec::{ManifestList, TableMetadata};
use iceberg::{TableIdent, TableUpdate};
use serde::Serialize;

use super::{Maintainer, Result, io};
use crate::expiry::{self, ExpiryPolicy, RefInfo, SnapshotInfo};

/// Overrides of the table's retention for one run.
#[derive(Debug, Clone, Default)]
pub struct ExpireOptions {
    pub dry_run: bool,
    pub max_snapshot_age_ms: Option<i64>,
    pub min_snapshots_to_keep: Option<usize>,
    /// Metadata files kept behind the current one besides those the metadata log lists.
    pub metadata_files_to_keep: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ExpireReport {
    pub dry_run: bool,
    pub retained_snapshots: Vec<i64>,
    pub expired_snapshots: Vec<i64>,
    pub expired_refs: Vec<String>,
    /// Files only expired snapshots reached, with the token indexes of the data files among
    /// them.
    pub freed_files: BTreeSet<String>,
    /// Metadata files no longer in the metadata log.
    pub old_metadata_files: Vec<String>,
    pub deleted_files: usize,
    pub failed_deletes: Vec<serde_json::Value>,
}

/// The table's retention policy: the run's overrides, its properties, else the defaults
/// (5 days, 1 snapshot).
fn policy_of(metadata: &TableMetadata, options: &ExpireOptions) -> ExpiryPolicy {
    let defaults = ExpiryPolicy::default();
    let property = |key: &str| metadata.properties().get(key).and_then(|v| v.parse().ok());
    ExpiryPolicy {
        max_snapshot_age_ms: options
            .max_snapshot_age_ms
            .or_else(|| property("history.expire.max-snapshot-age-ms"))
            .unwrap_or(defaults.max_snapshot_age_ms),
        min_snapshots_to_keep: options
            .min_snapshots_to_keep
            .or_else(|| property("history.expire.min-snapshots-to-keep").map(|v: i64| v as usize))
            .unwrap_or(defaults.min_snapshots_to_keep),
    }
}

/// Branches and tags with their retention settings (iceberg keeps the map private; its JSON
/// form is public).
fn refs_of(metadata: &TableMetadata) -> Result<Vec<RefInfo>> {
    let json = serde_json::json!({
        "refs": floe_catalog::metadata::table_refs(metadata).map_err(|e| io("table metadata", e))?
    });
    let max_ref_age = metadata
        .properties()
        .get("history.expire.max-ref-age-ms")
        .and_then(|v| v.parse().ok());
    Ok(json["refs"]
        .as_object()
        .map(|refs| {
            refs.iter()
                .filter_map(|(name, r)| {
                    Some(RefInfo {
                        name: name.clone(),
                        snapshot_id: r["snapshot-id"].as_i64()?,
                        is_branch: r["type"].as_str() == Some("branch"),
                        min_snapshots_to_keep: r["min-snapshots-to-keep"]
                            .as_i64()
                            .map(|v| v as usize),
                        max_snapshot_age_ms: r["max-snapshot-age-ms"].as_i64(),
                        max_ref_age_ms: r["max-ref-age-ms"].as_i64().or(max_ref_age),
                    })
                })
                .collect()
        })
        .unwrap_or_default())
}

/// What each snapshot reaches: its manifest list, manifests, live data and delete files, and
/// statistics files. Manifests shared by snapshots are read once.
pub async fn reachable_files(table: &iceberg::table::Table) -> Result<HashMap<i64, Vec<String>>> {
    let metadata = table.metadata();
    let file_io = table.file_io();
    let mut manifest_files: HashMap<String, Vec<String>> = HashMap::new();
    let mut files_of: HashMap<i64, Vec<String>> = HashMap::new();
    for snapshot in metadata.snapshots() {
        let mut files = vec![snapshot.manifest_list().to_string()];
        super::require_in_table(table, snapshot.manifest_list(), "manifest list")?;
        let bytes = file_io
            .new_input(snapshot.manifest_list())
            .map_err(|e| io("manifest list", e))?
            .read()
            .await
            .map_err(|e| io("manifest list", e))?;
        let list = ManifestList::parse_with_version(&bytes, metadata.format_version())
            .map_err(|e| io("manifest list", e))?;
        for manifest_file in list.entries() {
            files.push(manifest_file.manifest_path.clone());
            if !manifest_files.contains_key(&manifest_file.manifest_path) {
                super::require_in_table(table, &manifest_file.manifest_path, "manifest")?;
                let manifest = load_manifest(file_io, metadata, manifest_file)
                    .await
                    .map_err(|e| io("manifest", e))?;
                let live = manifest
                    .entries()
                    .iter()
                    .filter(|e| e.is_alive())
                    .map(|e| e.data_file().file_path().to_string())
                    .collect();
                manifest_files.insert(manifest_file.manifest_path.clone(), live);
            }
            files.extend(manifest_files[&manifest_file.manifest_path].iter().cloned());
        }
        for statistics in metadata.statistics_iter() {
            if statistics.snapshot_id == snapshot.snapshot_id() {
                files.push(statistics.statistics_path.clone());
            }
        }
        for statistics in metadata.partition_statistics_iter() {
            if statistics.snapshot_id == snapshot.snapshot_id() {
                files.push(statistics.statistics_path.clone());
            }
        }
        files_of.insert(snapshot.snapshot_id(), files);
    }
    Ok(files_of)
}

/// Expires snapshots of `ident` in `warehouse`.
pub async fn expire_snapshots(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    options: &ExpireOptions,
) -> Result<ExpireReport> {
    let mut attempts = 0;
    let (target, files_of) = loop {
        let target = maintainer.load(warehouse, ident).await?;
        match reachable_files(&target.table).await {
            Ok(files_of) => break (target, files_of),
            Err(e) => {
                // Another expiry (or a drop and re-create) may have removed snapshots, and
                // their files, since the load: on a table that moved on, try again as it is
                // now; on one that did not, its files are missing and that is the answer.
                attempts += 1;
                let now = maintainer.load(warehouse, ident).await?;
                if attempts >= 3 || now.loaded.metadata_location == target.loaded.metadata_location
                {
                    return Err(e);
                }
            }
        }
    };
    let metadata = target.table.metadata();
    let snapshots: Vec<SnapshotInfo> = metadata
        .snapshots()
        .map(|s| SnapshotInfo {
            id: s.snapshot_id(),
            parent: s.parent_snapshot_id(),
            timestamp_ms: s.timestamp_ms(),
        })
        .collect();
    let refs = refs_of(metadata)?;
    let now = floe_catalog::clock::now_ms();
    let plan = expiry::plan_expiry(
        &snapshots,
        &refs,
        metadata.current_snapshot_id(),
        &policy_of(metadata, options),
        now,
    );
    let file_io = target.table.file_io();
    // gc.enabled=false: snapshots expire, their files stay (they may belong to others).
    let mut freed: BTreeSet<String> = if super::gc_enabled(metadata) {
        expiry::freed_files(&plan, &files_of)
            .into_iter()
            .map(str::to_string)
            .collect()
    } else {
        BTreeSet::new()
    };
    let indexes = token_indexes(&target.files()?, &freed).await;
    freed.extend(indexes);
    let old_metadata = fallen_out_metadata(&target, options).await?;

    let mut deleted = 0usize;
    let mut failed = Vec::new();
    if !options.dry_run {
        if !plan.expired.is_empty() || !plan.expired_refs.is_empty() {
            let mut updates: Vec<TableUpdate> = plan
                .expired_refs
                .iter()
                .map(|name| TableUpdate::RemoveSnapshotRef {
                    ref_name: name.clone(),
                })
                .collect();
            if !plan.expired.is_empty() {
                updates.push(TableUpdate::RemoveSnapshots {
                    snapshot_ids: plan.expired.iter().copied().collect(),
                });
            }
            maintainer
                .catalog
                .commit_table(
                    &Caller::system(),
                    warehouse,
                    TableCommitRequest {
                        ident: ident.clone(),
                        requirements: vec![iceberg::TableRequirement::UuidMatch {
                            uuid: metadata.uuid(),
                        }],
                        updates,
                    },
                )
                .await?;
            // Only once the snapshots are gone from the table are their files deleted.
            super::delete_each(&freed, |f| file_io.delete(f), &mut deleted, &mut failed).await;
        }
        let storage = target.files()?;
        super::delete_each(
            &old_metadata,
            |f| storage.delete(f),
            &mut deleted,
            &mut failed,
        )
        .await;
    }
    Ok(ExpireReport {
        dry_run: options.dry_run,
        retained_snapshots: plan.retained.into_iter().collect(),
        expired_snapshots: plan.expired.into_iter().collect(),
        expired_refs: plan.expired_refs.into_iter().collect(),
        freed_files: freed,
        old_metadata_files: old_metadata,
        deleted_files: deleted,
        failed_deletes: failed,
    })
}

/// The token indexes ([`floe_sql::token_index`]) of the Parquet data files among `freed`
/// that have one: they go with their data files. Only Floe's files have one, found by name.
async fn token_indexes(
    storage: &floe_storage::WarehouseStorage,
    freed: &BTreeSet<String>,
) -> Vec<String> {
    let candidates: Vec<String> = freed
        .iter()
        .filter(|f| f.ends_with(".parquet"))
        .map(|data| floe_sql::token_index::index_location(data))
        .collect();
    let mut found = Vec::new();
    for chunk in candidates.chunks(16) {
        let sizes = futures::future::join_all(chunk.iter().cloned().map(|index| {
            let storage = storage.clone();
            async move { (storage.size(&index).await, index) }
        }))
        .await;
        found.extend(
            sizes
                .into_iter()
                .filter(|(size, _)| matches!(size, Ok(Some(_))))
                .map(|(_, index)| index),
        );
    }
    found
}

/// Metadata files of the table older than every file its metadata log still lists (and
/// than the last `metadata_files_to_keep`, when given): they fell out of the log (`write.metadata.previous-versions-max`, default 100) and nothing
/// reads them. A file being written by a commit in flight has a higher version and is safe.
async fn fallen_out_metadata(
    target: &super::Target,
    options: &ExpireOptions,
) -> Result<Vec<String>> {
    use floe_catalog::metadata::metadata_version;
    let metadata = target.table.metadata();
    let Some(current) = &target.loaded.metadata_location else {
        return Ok(Vec::new());
    };
    let oldest_logged = metadata
        .metadata_log()
        .iter()
        .filter_map(|l| metadata_version(&l.metadata_file))
        .chain(metadata_version(current))
        .min();
    let Some(mut oldest_logged) = oldest_logged else {
        return Ok(Vec::new());
    };
    if let (Some(keep), Some(current)) = (options.metadata_files_to_keep, metadata_version(current))
    {
        oldest_logged = oldest_logged.min(current.saturating_sub(keep));
    }
    let storage = target.files()?;
    let prefix = format!("{}/metadata/", metadata.location().trim_end_matches('/'));
    let listed = storage
        .list_with_times(&prefix)
        .await
        .map_err(|e| io("list the table's metadata files", e))?;
    Ok(listed
        .into_iter()
        .map(|(path, _)| path)
        .filter(|path| path.ends_with(".metadata.json"))
        .filter(|path| metadata_version(path).is_some_and(|v| v < oldest_logged))
        .collect())
}
