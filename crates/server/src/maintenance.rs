//! Maintenance executors over the planners of `floe-maintenance`. Today: snapshot expiry
//! (`POST /api/v1/maintenance/expire-snapshots`), run on request.

use std::collections::{BTreeSet, HashMap};

use axum::Extension;
use axum::Json;
use axum::extract::State;
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::service::{LoadedTable, TableCommitRequest};
use floe_maintenance::expiry::{self, ExpiryPolicy, RefInfo, SnapshotInfo};
use iceberg::spec::{ManifestList, TableMetadata};
use iceberg::{NamespaceIdent, TableIdent, TableUpdate};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ExpireRequest {
    pub warehouse: String,
    /// Namespace levels.
    pub namespace: Vec<String>,
    pub table: String,
    /// List what would expire and be deleted, change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Overrides the table's `history.expire.max-snapshot-age-ms` for this run.
    pub max_snapshot_age_ms: Option<i64>,
    /// Overrides the table's `history.expire.min-snapshots-to-keep` for this run.
    pub min_snapshots_to_keep: Option<usize>,
}

fn internal(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError(CatalogError::internal(
        what,
        std::io::Error::other(e.to_string()),
    ))
}

/// The table's retention policy: its properties, else the defaults (5 days, 1 snapshot).
fn policy_of(metadata: &TableMetadata, request: &ExpireRequest) -> ExpiryPolicy {
    let defaults = ExpiryPolicy::default();
    let property = |key: &str| metadata.properties().get(key).and_then(|v| v.parse().ok());
    ExpiryPolicy {
        max_snapshot_age_ms: request
            .max_snapshot_age_ms
            .or_else(|| property("history.expire.max-snapshot-age-ms"))
            .unwrap_or(defaults.max_snapshot_age_ms),
        min_snapshots_to_keep: request
            .min_snapshots_to_keep
            .or_else(|| property("history.expire.min-snapshots-to-keep").map(|v: i64| v as usize))
            .unwrap_or(defaults.min_snapshots_to_keep),
    }
}

/// Branches and tags with their retention settings (iceberg keeps the map private; its JSON
/// form is public).
fn refs_of(metadata: &TableMetadata) -> Result<Vec<RefInfo>, ApiError> {
    let json = serde_json::to_value(metadata).map_err(|e| internal("table metadata", e))?;
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
async fn reachable_files(table: &iceberg::table::Table) -> ApiResult<HashMap<i64, Vec<String>>> {
    let metadata = table.metadata();
    let file_io = table.file_io();
    let mut manifest_files: HashMap<String, Vec<String>> = HashMap::new();
    let mut files_of: HashMap<i64, Vec<String>> = HashMap::new();
    for snapshot in metadata.snapshots() {
        let mut files = vec![snapshot.manifest_list().to_string()];
        let bytes = file_io
            .new_input(snapshot.manifest_list())
            .map_err(|e| internal("manifest list", e))?
            .read()
            .await
            .map_err(|e| internal("manifest list", e))?;
        let list = ManifestList::parse_with_version(&bytes, metadata.format_version())
            .map_err(|e| internal("manifest list", e))?;
        for manifest_file in list.entries() {
            files.push(manifest_file.manifest_path.clone());
            if !manifest_files.contains_key(&manifest_file.manifest_path) {
                let manifest = manifest_file
                    .load_manifest(file_io)
                    .await
                    .map_err(|e| internal("manifest", e))?;
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

/// A table the caller may maintain (`manage-maintenance`), loaded, and as iceberg's `Table`.
async fn maintained_table(
    state: &AppState,
    caller: &Caller,
    warehouse: &str,
    namespace: &[String],
    table: &str,
) -> ApiResult<(TableIdent, LoadedTable, iceberg::table::Table)> {
    let namespace = NamespaceIdent::from_vec(namespace.to_vec()).map_err(|e| {
        ApiError(CatalogError::BadRequest {
            message: format!("namespace: {e}"),
        })
    })?;
    let ident = TableIdent::new(namespace, table.to_string());
    state
        .catalog
        .authorize_table(caller, warehouse, &ident, Privilege::ManageMaintenance)
        .await?;
    // `manage-maintenance` is what maintenance needs: once it is checked, the table is read
    // (and changed) as the system; the request's audit record still names the caller.
    let system = Caller::system();
    let loaded = state.catalog.load_table(&system, warehouse, &ident).await?;
    let access = state
        .sql
        .access(&system, warehouse)
        .await
        .map_err(|e| internal("storage access", e.message))?;
    let table =
        floe_sql::write::table_of(&access, loaded.clone()).map_err(|e| internal("table", e))?;
    Ok((ident, loaded, table))
}

/// A location in one spelling, for comparing what metadata says with what a listing says.
fn normalized(location: &str) -> String {
    floe_storage::Location::parse(location)
        .map(|l| l.to_string())
        .unwrap_or_else(|_| location.to_string())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OrphanRequest {
    pub warehouse: String,
    pub namespace: Vec<String>,
    pub table: String,
    /// List what would be deleted, change nothing (the default).
    #[serde(default = "yes")]
    pub dry_run: bool,
    /// Only files older than this are orphans (default 3 days).
    pub older_than_ms: Option<i64>,
}

fn yes() -> bool {
    true
}

/// `POST /api/v1/maintenance/remove-orphan-files`: deletes files under the table's location
/// that no metadata references — no snapshot's manifest list, manifests, data or delete files
/// or statistics, no metadata file in the log — and that are older than the minimum age.
/// A dry run (the default) lists them. Needs `manage-maintenance` on the table.
pub async fn remove_orphan_files(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<OrphanRequest>,
) -> ApiResult<Json<Value>> {
    const DEFAULT_MIN_AGE_MS: i64 = 3 * 24 * 3600 * 1000;
    let (_, loaded, table) = maintained_table(
        &state,
        &caller,
        &request.warehouse,
        &request.namespace,
        &request.table,
    )
    .await?;
    let metadata = table.metadata();
    let mut referenced: std::collections::HashSet<String> = reachable_files(&table)
        .await?
        .into_values()
        .flatten()
        .map(|f| normalized(&f))
        .collect();
    if let Some(current) = &loaded.metadata_location {
        referenced.insert(normalized(current));
    }
    for entry in metadata.metadata_log() {
        referenced.insert(normalized(&entry.metadata_file));
    }
    let storage = state
        .catalog
        .warehouse(&request.warehouse)
        .await?
        .storage
        .clone();
    let prefix = format!("{}/", metadata.location().trim_end_matches('/'));
    let listed: Vec<floe_maintenance::orphans::ListedFile> = storage
        .list_with_times(&prefix)
        .await
        .map_err(|e| internal("list the table's files", e))?
        .into_iter()
        .map(
            |(path, modified_ms)| floe_maintenance::orphans::ListedFile {
                path: normalized(&path),
                modified_ms,
            },
        )
        .collect();
    let now = chrono::Utc::now().timestamp_millis();
    let min_age = request.older_than_ms.unwrap_or(DEFAULT_MIN_AGE_MS).max(0);
    let orphans: Vec<String> =
        floe_maintenance::orphans::plan_orphans(&listed, &referenced, now, min_age)
            .into_iter()
            .map(str::to_string)
            .collect();
    let mut deleted = 0usize;
    let mut failed = Vec::new();
    if !request.dry_run {
        for file in &orphans {
            match storage.delete(file).await {
                Ok(()) => deleted += 1,
                Err(e) => failed.push(json!({"file": file, "error": e.to_string()})),
            }
        }
    }
    Ok(Json(json!({
        "dry-run": request.dry_run,
        "listed-files": listed.len(),
        "referenced-files": referenced.len(),
        "older-than-ms": min_age,
        "orphan-files": orphans,
        "deleted-files": deleted,
        "failed-deletes": failed,
    })))
}

/// `POST /api/v1/maintenance/expire-snapshots`: expires snapshots per the table's retention
/// policy, then deletes the files only they reached. Needs `manage-maintenance` on the table.
pub async fn expire_snapshots(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<ExpireRequest>,
) -> ApiResult<Json<Value>> {
    let (ident, _, table) = maintained_table(
        &state,
        &caller,
        &request.warehouse,
        &request.namespace,
        &request.table,
    )
    .await?;
    let metadata = table.metadata();
    let snapshots: Vec<SnapshotInfo> = metadata
        .snapshots()
        .map(|s| SnapshotInfo {
            id: s.snapshot_id(),
            parent: s.parent_snapshot_id(),
            timestamp_ms: s.timestamp_ms(),
        })
        .collect();
    let refs = refs_of(metadata)?;
    let now = chrono::Utc::now().timestamp_millis();
    let plan = expiry::plan_expiry(
        &snapshots,
        &refs,
        metadata.current_snapshot_id(),
        &policy_of(metadata, &request),
        now,
    );

    let file_io = table.file_io();
    let files_of = reachable_files(&table).await?;
    let freed: BTreeSet<String> = expiry::freed_files(&plan, &files_of)
        .into_iter()
        .map(str::to_string)
        .collect();

    let mut deleted = 0usize;
    let mut failed = Vec::new();
    if !request.dry_run && (!plan.expired.is_empty() || !plan.expired_refs.is_empty()) {
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
        state
            .catalog
            .commit_table(
                &Caller::system(),
                &request.warehouse,
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
        for file in &freed {
            match file_io.delete(file).await {
                Ok(()) => deleted += 1,
                Err(e) => failed.push(json!({"file": file, "error": e.to_string()})),
            }
        }
    }
    Ok(Json(json!({
        "dry-run": request.dry_run,
        "retained-snapshots": plan.retained,
        "expired-snapshots": plan.expired,
        "expired-refs": plan.expired_refs,
        "freed-files": freed,
        "deleted-files": deleted,
        "failed-deletes": failed,
    })))
}
