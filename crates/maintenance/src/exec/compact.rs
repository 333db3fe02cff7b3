//! Compaction: rewrite groups of small data files (and files with deletes) into target-sized
//! files and commit one `replace` snapshot whose manifests Floe writes itself.
//!
//! 1. Plan on the current snapshot (the base) with [`crate::compaction::plan_compaction`].
//! 2. Per group, read the files through the SQL engine's scan — position deletes, deletion
//!    vectors and equality deletes applied — sorted by the table's sort order when it has
//!    one, and stream the rows into new Parquet files (memory stays bounded: nothing but the
//!    sort holds rows, and the sort spills).
//! 3. Commit on whatever `main` is by then. Appends that landed meanwhile are kept (their
//!    manifests are carried over). A group is dropped — its new files deleted, the group left
//!    for a later run — when one of its files is gone or a delete that may apply to one of
//!    them was committed after the base: its rows could come back otherwise. Delete files
//!    that only applied to rewritten files are removed in the same snapshot. Small manifests
//!    are merged. A lost race re-reads `main` and tries again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use datafusion::prelude::SessionContext;
use floe_catalog::CatalogError;
use floe_sql::scan::IcebergTableProvider;
use floe_sql::write::{SnapshotWriter, spec_of};
use iceberg::TableIdent;
use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, ManifestContentType, ManifestEntry, ManifestWriter,
    Operation, Snapshot, SortDirection, TableMetadata, Transform,
};
use serde::Serialize;

use super::state::{DeleteIndex, LiveFile, SnapshotState, read_snapshot, referenced_file};
use super::{Maintainer, MaintenanceError, Result, Target, commit_on_main, io};
use crate::compaction::{CompactionPolicy, DataFileInfo, RewriteGroup, plan_compaction};

/// Manifests smaller than this are merged with their like.
const SMALL_MANIFEST_BYTES: i64 = 8 << 20;

#[derive(Debug, Clone)]
pub struct CompactOptions {
    pub policy: CompactionPolicy,
    /// Memory the rewrite's scan and sort may hold before spilling.
    pub memory_limit: usize,
    /// Parallel partitions of the rewrite's scan.
    pub partitions: usize,
    /// Times a commit that lost a race is tried again on the new `main`.
    pub commit_retries: usize,
    /// Plan only.
    pub dry_run: bool,
}

impl Default for CompactOptions {
    fn default() -> Self {
        Self {
            policy: CompactionPolicy::default(),
            memory_limit: 1 << 30,
            partitions: 1,
            commit_retries: 8,
            dry_run: false,
        }
    }
}

/// A group left out of the commit, and why.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct AbortedGroup {
    pub partition: String,
    pub files: usize,
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CompactReport {
    pub dry_run: bool,
    pub data_files_before: usize,
    pub groups_planned: usize,
    pub groups_committed: usize,
    pub aborted_groups: Vec<AbortedGroup>,
    pub rewritten_files: usize,
    pub rewritten_bytes: u64,
    pub added_files: usize,
    pub added_bytes: u64,
    pub rows_written: u64,
    pub removed_delete_files: usize,
    pub merged_manifests: usize,
    pub snapshot_id: Option<i64>,
    pub commit_attempts: usize,
    pub seconds: f64,
}

/// One group, rewritten.
pub(crate) struct Rewritten {
    pub group: RewriteGroup,
    pub inputs: HashSet<String>,
    pub outputs: Vec<DataFile>,
    pub rows: u64,
}

/// Compacts `ident` of `warehouse` as planned by `options.policy`.
pub async fn compact(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    options: &CompactOptions,
) -> Result<CompactReport> {
    let started = Instant::now();
    let target = maintainer.load(warehouse, ident).await?;
    let metadata = target.table.metadata();
    if metadata.format_version() == FormatVersion::V1 {
        return Err(MaintenanceError::Unsupported(format!(
            "table {ident} is format version 1; compaction needs version 2 or later"
        )));
    }
    let mut report = CompactReport {
        dry_run: options.dry_run,
        ..Default::default()
    };
    let Some(base) = metadata.current_snapshot() else {
        return Ok(report);
    };
    let base_state = read_snapshot(&target.table, base).await?;
    let data: Vec<LiveFile> = base_state.live_data().collect();
    let deletes: Vec<LiveFile> = base_state.live_deletes().collect();
    report.data_files_before = data.len();
    let index = DeleteIndex::new(metadata, deletes);
    let infos: Vec<DataFileInfo> = data
        .iter()
        .map(|file| DataFileInfo {
            path: file.path().to_string(),
            size_bytes: file.entry.file_size_in_bytes(),
            partition: file.partition_key(),
            spec_id: file.spec_id,
            has_deletes: index.applying(file).next().is_some(),
        })
        .collect();
    let mut groups = plan_compaction(&infos, &options.policy);
    // Rows are rewritten in the order they were committed (sequence number, then path), so
    // an event stream's files stay ordered by time and keep pruning well.
    let order: HashMap<&str, (i64, &str)> = data
        .iter()
        .map(|f| (f.path(), (f.sequence_number(), f.path())))
        .collect();
    for group in &mut groups {
        group.files.sort_by_key(|f| order.get(f.as_str()).copied());
    }
    report.groups_planned = groups.len();
    if options.dry_run || groups.is_empty() {
        report.seconds = started.elapsed().as_secs_f64();
        return Ok(report);
    }

    let mut rewritten = Vec::with_capacity(groups.len());
    for group in groups {
        match rewrite_group(
            maintainer,
            &target,
            base.snapshot_id(),
            &group,
            None,
            options,
        )
        .await
        {
            Ok(done) => rewritten.push(done),
            Err(e) => {
                // Files written before the failure are orphans for cleanup to take.
                tracing::warn!(table = %ident, error = %e, "rewrite a compaction group");
                report.aborted_groups.push(AbortedGroup {
                    partition: group.partition.clone(),
                    files: group.files.len(),
                    reason: e.to_string(),
                });
            }
        }
    }

    commit_groups(
        maintainer,
        warehouse,
        ident,
        &base_state,
        rewritten,
        Operation::Replace,
        options.commit_retries,
        &mut report,
    )
    .await?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Commits rewritten groups on whatever `main` is by then, dropping groups a concurrent
/// commit invalidated, and trying again when the commit loses a race.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn commit_groups(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    base_state: &SnapshotState,
    mut rewritten: Vec<Rewritten>,
    operation: Operation,
    commit_retries: usize,
    report: &mut CompactReport,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        report.commit_attempts = attempt;
        let current = maintainer.load(warehouse, ident).await?;
        let metadata = current.table.metadata();
        let Some(head) = metadata.current_snapshot() else {
            return Err(io("compaction", "the table lost its snapshots meanwhile"));
        };
        let head_state = if head.snapshot_id() == base_state.snapshot_id {
            None
        } else {
            Some(read_snapshot(&current.table, head).await?)
        };
        let state = head_state.as_ref().unwrap_or(base_state);
        let (keep, dropped) = validate(metadata, base_state, state, std::mem::take(&mut rewritten));
        for (group, reason) in dropped {
            delete_outputs(&current, &group.outputs).await;
            report.aborted_groups.push(AbortedGroup {
                partition: group.group.partition.clone(),
                files: group.inputs.len(),
                reason,
            });
        }
        rewritten = keep;
        if rewritten.is_empty() {
            break;
        }
        match commit(
            maintainer,
            warehouse,
            &current,
            head,
            state,
            &rewritten,
            operation.clone(),
        )
        .await
        {
            Ok(committed) => {
                report.snapshot_id = Some(committed.snapshot_id);
                report.removed_delete_files = committed.removed_delete_files;
                report.merged_manifests = committed.merged_manifests;
                report.groups_committed = rewritten.len();
                for group in &rewritten {
                    report.rewritten_files += group.inputs.len();
                    report.rewritten_bytes += group.group.input_bytes;
                    report.added_files += group.outputs.len();
                    report.added_bytes += group
                        .outputs
                        .iter()
                        .map(|f| f.file_size_in_bytes())
                        .sum::<u64>();
                    report.rows_written += group.rows;
                }
                break;
            }
            Err(MaintenanceError::Catalog(CatalogError::CommitFailed(message)))
                if attempt <= commit_retries =>
            {
                tracing::info!(table = %ident, attempt, %message, "retry compaction commit");
            }
            Err(e) => {
                // Only a refused commit is known not to have happened; after any other error
                // the files may be live, and orphan cleanup takes them if they are not.
                if matches!(e, MaintenanceError::Catalog(CatalogError::CommitFailed(_))) {
                    for group in &rewritten {
                        delete_outputs(&current, &group.outputs).await;
                    }
                }
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Reads one group's rows (deletes applied, those matching `filter` only, sorted by the sort
/// order) into new files.
pub(crate) async fn rewrite_group(
    maintainer: &Maintainer,
    target: &Target,
    base_snapshot: i64,
    group: &RewriteGroup,
    filter: Option<datafusion::logical_expr::Expr>,
    options: &CompactOptions,
) -> Result<Rewritten> {
    let inputs: HashSet<String> = group.files.iter().cloned().collect();
    let provider = IcebergTableProvider::try_new(target.access.clone(), target.loaded.clone())
        .map_err(|e| io("read the table", e))?
        .for_rewrite(base_snapshot, &group.files);
    let ctx: SessionContext = maintainer
        .sql
        .background_session(options.memory_limit, options.partitions)
        .map_err(|e| io("start the rewrite", e.message))?;
    ctx.register_table("input", Arc::new(provider))
        .map_err(|e| io("start the rewrite", e))?;
    let mut frame = ctx
        .table("input")
        .await
        .map_err(|e| io("start the rewrite", e))?;
    if let Some(filter) = filter {
        frame = frame
            .filter(filter)
            .map_err(|e| io("filter the rewrite", e))?;
    }
    let sort = sort_exprs(target.table.metadata());
    if !sort.is_empty() {
        frame = frame.sort(sort).map_err(|e| io("sort the rewrite", e))?;
    }
    let stream = frame
        .execute_stream()
        .await
        .map_err(|e| io("read the rewrite group", e))?;
    let target_size = options.policy.target_size_bytes as usize;
    let (outputs, rows) =
        floe_sql::write::write_data_files(&target.table, stream, Some(target_size))
            .await
            .map_err(|e| io("write the compacted files", e))?;
    Ok(Rewritten {
        group: group.clone(),
        inputs,
        outputs,
        rows,
    })
}

/// The default sort order's identity fields as sort expressions (other transforms are
/// skipped: they order rows only coarsely anyway).
fn sort_exprs(metadata: &TableMetadata) -> Vec<datafusion::logical_expr::SortExpr> {
    let schema = metadata.current_schema();
    metadata
        .default_sort_order()
        .fields
        .iter()
        .filter(|f| f.transform == Transform::Identity)
        .filter_map(|f| {
            let name = schema.name_by_field_id(f.source_id)?;
            Some(
                datafusion::prelude::col(datafusion::common::Column::from_name(name)).sort(
                    f.direction == SortDirection::Ascending,
                    f.null_order == iceberg::spec::NullOrder::First,
                ),
            )
        })
        .collect()
}

/// Splits the rewritten groups into those still valid on `state` and those to drop.
fn validate(
    metadata: &TableMetadata,
    base: &SnapshotState,
    state: &SnapshotState,
    groups: Vec<Rewritten>,
) -> (Vec<Rewritten>, Vec<(Rewritten, String)>) {
    if state.snapshot_id == base.snapshot_id {
        return (groups, Vec::new());
    }
    let live: HashMap<String, LiveFile> = state
        .live_data()
        .map(|f| (f.path().to_string(), f))
        .collect();
    let new_deletes = DeleteIndex::new(
        metadata,
        state
            .live_deletes()
            .filter(|d| d.sequence_number() > base.sequence_number),
    );
    let mut keep = Vec::new();
    let mut dropped = Vec::new();
    for group in groups {
        let mut reason = None;
        for path in &group.inputs {
            let Some(file) = live.get(path) else {
                reason = Some(format!("{path} was removed by a concurrent commit"));
                break;
            };
            if let Some(delete) = new_deletes.applying(file).next() {
                reason = Some(format!(
                    "delete file {} committed meanwhile may apply to {path}",
                    delete.path()
                ));
                break;
            }
        }
        match reason {
            Some(reason) => dropped.push((group, reason)),
            None => keep.push(group),
        }
    }
    (keep, dropped)
}

async fn delete_outputs(target: &Target, outputs: &[DataFile]) {
    for file in outputs {
        if let Err(e) = target.table.file_io().delete(file.file_path()).await {
            tracing::warn!(file = file.file_path(), error = %e, "delete an uncommitted compaction file");
        }
    }
}

struct Committed {
    snapshot_id: i64,
    removed_delete_files: usize,
    merged_manifests: usize,
}

/// Writes the `replace` snapshot on top of `head` and commits it.
async fn commit(
    maintainer: &Maintainer,
    warehouse: &str,
    target: &Target,
    head: &Snapshot,
    state: &SnapshotState,
    groups: &[Rewritten],
    operation: Operation,
) -> Result<Committed> {
    let metadata = target.table.metadata();
    let removed_data: HashSet<&str> = groups
        .iter()
        .flat_map(|g| g.inputs.iter().map(String::as_str))
        .collect();
    let added: Vec<DataFile> = groups
        .iter()
        .flat_map(|g| g.outputs.iter().cloned())
        .collect();
    let removed_deletes = dead_deletes(metadata, state, &removed_data);

    let schema = metadata.current_schema().clone();
    let mut snapshot = SnapshotWriter::new(&target.table);
    let snapshot_id = snapshot.snapshot_id();
    let written = |e| io("write a manifest", e);
    // Per kind and spec, manifests holding a removed file and small manifests become one
    // manifest: removed files marked deleted, the rest existing. Large untouched manifests
    // are carried over as they are.
    let mut rewrite: BTreeMap<(bool, i32), Vec<&super::state::ManifestState>> = BTreeMap::new();
    for manifest in &state.manifests {
        let touched = manifest.entries.iter().any(|e| {
            e.is_alive()
                && (removed_data.contains(e.data_file().file_path())
                    || removed_deletes.contains(e.data_file().file_path()))
        });
        let deletes = manifest.file.content == ManifestContentType::Deletes;
        if touched || manifest.file.manifest_length < SMALL_MANIFEST_BYTES {
            rewrite
                .entry((deletes, manifest.file.partition_spec_id))
                .or_default()
                .push(manifest);
        } else {
            snapshot.carry(manifest.file.clone());
        }
    }
    let mut merged_manifests = 0;
    for ((deletes, spec_id), group) in rewrite {
        let touched = group.iter().any(|m| {
            m.entries.iter().any(|e| {
                e.is_alive()
                    && (removed_data.contains(e.data_file().file_path())
                        || removed_deletes.contains(e.data_file().file_path()))
            })
        });
        if group.len() < 2 && !touched {
            for manifest in &group {
                snapshot.carry(manifest.file.clone());
            }
            continue;
        }
        let spec = spec_of(metadata, spec_id).map_err(written)?;
        let mut writer = snapshot
            .manifest_writer(spec_id, deletes)
            .map_err(written)?;
        for manifest in &group {
            for entry in manifest.entries.iter().filter(|e| e.is_alive()) {
                let path = entry.data_file().file_path();
                if removed_data.contains(path) || removed_deletes.contains(path) {
                    snapshot
                        .summary
                        .remove_file(entry.data_file(), schema.clone(), spec.clone());
                    writer
                        .add_delete_file(
                            entry.data_file().clone(),
                            entry.sequence_number().unwrap_or(0),
                            entry.file_sequence_number,
                        )
                        .map_err(written)?;
                } else {
                    add_existing(&mut writer, entry)?;
                }
            }
        }
        if group.len() > 1 {
            merged_manifests += group.len();
        }
        snapshot.close(writer).await.map_err(written)?;
    }
    snapshot
        .add_files(metadata.default_partition_spec_id(), added)
        .await
        .map_err(written)?;
    let updates = snapshot
        .finish(Some(head), operation, HashMap::new())
        .await
        .map_err(|e| io("write the manifest list", e))?;
    commit_on_main(
        maintainer,
        warehouse,
        &target.ident,
        metadata,
        Some(head.snapshot_id()),
        updates,
    )
    .await?;
    Ok(Committed {
        snapshot_id,
        removed_delete_files: removed_deletes.len(),
        merged_manifests,
    })
}

fn add_existing(writer: &mut ManifestWriter, entry: &ManifestEntry) -> Result<()> {
    writer
        .add_existing_file(
            entry.data_file().clone(),
            entry.snapshot_id().unwrap_or_default(),
            entry.sequence_number().unwrap_or(0),
            entry.file_sequence_number,
        )
        .map_err(|e| io("write a manifest", e))
}

/// Delete files that no longer apply to any data file once `removed` data files are gone:
/// deletion vectors and position delete files naming only removed files, and equality
/// deletes no remaining older data file in their scope could match.
fn dead_deletes(
    metadata: &TableMetadata,
    state: &SnapshotState,
    removed: &HashSet<&str>,
) -> HashSet<String> {
    let remaining: Vec<LiveFile> = state
        .live_data()
        .filter(|f| !removed.contains(f.path()))
        .collect();
    state
        .live_deletes()
        .filter(|delete| match delete.entry.content_type() {
            DataContentType::EqualityDeletes => !remaining
                .iter()
                .any(|data| super::state::applies(metadata, delete, data)),
            _ => referenced_file(delete).is_some_and(|path| removed.contains(path.as_str())),
        })
        .map(|d| d.path().to_string())
        .collect()
}
