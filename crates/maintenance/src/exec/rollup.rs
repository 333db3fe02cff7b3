//! The rollup job: for each rollup of a source table ([`crate::rollup`]), the rows the
//! source's new `append` snapshots added, aggregated in the engine's background session, and
//! appended to the rollup table in one snapshot that records the source snapshot covered —
//! committed on the rollup table exactly as it was read, so two runs never both count the
//! same rows.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::prelude::SessionContext;
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_catalog::manifests::load_manifest;
use floe_catalog::service::{CreateTable, LoadedTable};
use floe_sql::scan::IcebergTableProvider;
use iceberg::TableIdent;
use iceberg::spec::{DataContentType, ManifestStatus, TableMetadata};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use serde::Serialize;

use super::state::read_manifest_list;
use super::{Maintainer, MaintenanceError, Result, Target, io};
use crate::rollup::{Plan, Rollup, SOURCE_SNAPSHOT, plan, rollups_of};

/// What one rollup's run did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RollupRun {
    pub rollup: String,
    /// The source snapshot covered before the run and after it.
    pub covered_before: Option<i64>,
    pub covered_after: Option<i64>,
    pub source_snapshots_read: usize,
    pub source_files_read: usize,
    pub source_rows: u64,
    pub rollup_rows: u64,
    pub seconds: f64,
}

/// Brings every rollup of source table `ident` of `warehouse` up to date.
pub async fn roll_up(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    memory_limit: usize,
) -> Result<Vec<RollupRun>> {
    let rollups = rollups_of(ident.name());
    if rollups.is_empty() {
        return Err(MaintenanceError::Unsupported(format!(
            "table {ident} has no rollups (otel.logs, otel.spans and otel.metrics do)"
        )));
    }
    let mut runs = Vec::new();
    for rollup in rollups {
        runs.push(run_one(maintainer, warehouse, ident, &rollup, memory_limit).await?);
    }
    Ok(runs)
}

/// The source snapshot the rollup table's newest snapshot that records one covers.
fn covered(metadata: &TableMetadata) -> Option<i64> {
    let mut at = metadata.current_snapshot();
    // At most every snapshot once, whatever parent links the metadata holds.
    let mut steps = metadata.snapshots().count();
    while let Some(snapshot) = at {
        if steps == 0 {
            return None;
        }
        steps -= 1;
        if let Some(id) = snapshot
            .summary()
            .additional_properties
            .get(SOURCE_SNAPSHOT)
        {
            return id.parse().ok();
        }
        at = snapshot
            .parent_snapshot_id()
            .and_then(|id| metadata.snapshot_by_id(id));
    }
    None
}

async fn run_one(
    maintainer: &Maintainer,
    warehouse: &str,
    source_ident: &TableIdent,
    rollup: &Rollup,
    memory_limit: usize,
) -> Result<RollupRun> {
    let started = Instant::now();
    let rollup_ident = TableIdent::new(source_ident.namespace().clone(), rollup.table.clone());
    let system = Caller::system();
    let existing = match maintainer
        .catalog
        .load_table(&system, warehouse, &rollup_ident)
        .await
    {
        Ok(loaded) => Some(loaded),
        Err(CatalogError::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let covered_before = existing.as_ref().and_then(|l| covered(&l.metadata));
    // Rows in the rollup table but no record of what they cover: starting over would count
    // them twice.
    if covered_before.is_none()
        && existing
            .as_ref()
            .is_some_and(|l| l.metadata.current_snapshot().is_some())
    {
        return Err(MaintenanceError::Unsupported(format!(
            "rollup table {rollup_ident} holds rows but no snapshot records the source snapshot \
             they cover: drop it to build it again"
        )));
    }
    let source = maintainer.load(warehouse, source_ident).await?;
    let mut run = RollupRun {
        rollup: format!("{warehouse}.{rollup_ident}"),
        covered_before,
        covered_after: covered_before,
        source_snapshots_read: 0,
        source_files_read: 0,
        source_rows: 0,
        rollup_rows: 0,
        seconds: 0.0,
    };
    let ctx = maintainer
        .sql
        .background_session(memory_limit, 2)
        .map_err(|e| io("start the rollup", e.message))?;
    let through = match plan(source.table.metadata(), covered_before) {
        Plan::Nothing => {
            run.seconds = started.elapsed().as_secs_f64();
            return Ok(run);
        }
        Plan::Lost(id) => {
            return Err(MaintenanceError::Unsupported(format!(
                "rollup {rollup_ident} covers source snapshot {id}, which is no longer in \
                 {source_ident}'s history (expired before the rollup ran, or rolled back): drop \
                 {rollup_ident} to build it again from the rows the source holds"
            )));
        }
        Plan::Everything(head) => {
            // As of the snapshot the run covers exactly: rows acknowledged but not committed
            // yet (which reads on this node see) come in a later append.
            let provider =
                IcebergTableProvider::try_new(source.access.clone(), source.loaded.clone())
                    .and_then(|p| p.at_snapshot(head))
                    .map_err(|e| io("read the source", e))?;
            register(&ctx, "input", provider)?;
            run.source_snapshots_read = 1;
            head
        }
        Plan::Appends { snapshots, through } => {
            let mut parts = Vec::new();
            for (i, id) in snapshots.iter().enumerate() {
                let files = added_files(&source, *id).await?;
                if files.is_empty() {
                    continue;
                }
                run.source_files_read += files.len();
                let provider =
                    IcebergTableProvider::try_new(source.access.clone(), source.loaded.clone())
                        .map_err(|e| io("read the source", e))?
                        .for_rewrite(*id, &files);
                let name = format!("input_{i}");
                register(&ctx, &name, provider)?;
                parts.push(format!("SELECT * FROM {name}"));
            }
            run.source_snapshots_read = snapshots.len();
            if parts.is_empty() {
                // Nothing appended (compactions, expiries): the rollup stays where it is until
                // rows come.
                run.seconds = started.elapsed().as_secs_f64();
                return Ok(run);
            }
            ctx.sql(&format!(
                "CREATE VIEW input AS {}",
                parts.join(" UNION ALL ")
            ))
            .await
            .map_err(|e| io("gather the new rows", e))?;
            through
        }
    };
    run.source_rows = ctx
        .sql("SELECT count(*) FROM input")
        .await
        .map_err(|e| io("count the new rows", e))?
        .collect()
        .await
        .map_err(|e| io("count the new rows", e))?
        .first()
        .and_then(|b| datafusion::common::ScalarValue::try_from_array(b.column(0), 0).ok())
        .and_then(|v| match v {
            datafusion::common::ScalarValue::Int64(Some(n)) => Some(n as u64),
            _ => None,
        })
        .unwrap_or(0);
    let frame = ctx
        .sql(&rollup.select)
        .await
        .map_err(|e| io("plan the rollup", e))?;
    let schema = Arc::new(frame.schema().as_arrow().clone());
    let batches = frame.collect().await.map_err(|e| io("aggregate", e))?;
    let batch = concat_batches(&schema, &batches).map_err(|e| io("gather the rollup", e))?;
    run.rollup_rows = batch.num_rows() as u64;
    if batch.num_rows() == 0 {
        run.seconds = started.elapsed().as_secs_f64();
        return Ok(run);
    }
    let target = match existing {
        Some(loaded) => loaded,
        None => create(maintainer, warehouse, &rollup_ident, rollup, &batch).await?,
    };
    commit(maintainer, warehouse, target, batch, through).await?;
    run.covered_after = Some(through);
    run.seconds = started.elapsed().as_secs_f64();
    Ok(run)
}

fn register(ctx: &SessionContext, name: &str, provider: IcebergTableProvider) -> Result<()> {
    ctx.register_table(name, Arc::new(provider))
        .map(|_| ())
        .map_err(|e| io("read the source", e))
}

/// The data files snapshot `id` of the source added.
async fn added_files(source: &Target, id: i64) -> Result<Vec<String>> {
    let table = &source.table;
    let Some(snapshot) = table.metadata().snapshot_by_id(id) else {
        return Ok(Vec::new());
    };
    let list = read_manifest_list(table, snapshot).await?;
    let mut files = Vec::new();
    for manifest in list.entries() {
        if manifest.added_snapshot_id != id {
            continue;
        }
        super::require_in_table(table, &manifest.manifest_path, "manifest")?;
        let read = load_manifest(table.file_io(), table.metadata(), manifest)
            .await
            .map_err(|e| io(format!("read manifest {}", manifest.manifest_path), e))?;
        for entry in read.entries() {
            if entry.status() == ManifestStatus::Added
                && entry.content_type() == DataContentType::Data
            {
                files.push(entry.data_file().file_path().to_string());
            }
        }
    }
    Ok(files)
}

/// Creates the rollup table with the columns of its first rows.
async fn create(
    maintainer: &Maintainer,
    warehouse: &str,
    ident: &TableIdent,
    rollup: &Rollup,
    batch: &RecordBatch,
) -> Result<LoadedTable> {
    let schema = floe_sql::write::iceberg_schema(&batch.schema())
        .map_err(|e| io("the rollup's columns", e))?;
    let created = maintainer
        .catalog
        .create_table(
            &Caller::system(),
            warehouse,
            ident.namespace(),
            CreateTable {
                name: ident.name().to_string(),
                location: None,
                schema,
                partition_spec: None,
                write_order: None,
                stage_create: false,
                properties: HashMap::from([
                    (
                        "floe.rollup.interval".to_string(),
                        format!("{:?}", rollup.interval).to_lowercase(),
                    ),
                    ("write.parquet.compression-codec".into(), "zstd".into()),
                ]),
            },
        )
        .await;
    match created {
        Ok(loaded) => Ok(loaded),
        Err(CatalogError::AlreadyExists { .. }) => {
            // Another run created it first; if that run committed, this one's rows are
            // already counted there.
            let loaded = maintainer
                .catalog
                .load_table(&Caller::system(), warehouse, ident)
                .await?;
            if loaded.metadata.current_snapshot().is_some() {
                return Err(CatalogError::CommitFailed(format!(
                    "another run created rollup {ident} meanwhile; the next run goes on from it"
                ))
                .into());
            }
            Ok(loaded)
        }
        Err(e) => Err(e.into()),
    }
}

/// Appends `batch` to the rollup table as it was read, recording `through`.
async fn commit(
    maintainer: &Maintainer,
    warehouse: &str,
    loaded: LoadedTable,
    batch: RecordBatch,
    through: i64,
) -> Result<()> {
    let access = maintainer
        .sql
        .access(&Caller::system(), warehouse)
        .await
        .map_err(|e| io("storage access", e.message))?;
    let table = floe_sql::write::table_of(&access, loaded).map_err(|e| io("rollup table", e))?;
    let files = floe_sql::write::write_batch_files(&table, &batch)
        .await
        .map_err(|e| io("write the rollup's rows", e))?;
    let transaction = Transaction::new(&table);
    let transaction = transaction
        .fast_append()
        .with_check_duplicate(false)
        .set_snapshot_properties(HashMap::from([(
            SOURCE_SNAPSHOT.to_string(),
            through.to_string(),
        )]))
        .add_data_files(files)
        .apply(transaction)
        .map_err(|e| io("the rollup's snapshot", e))?;
    // On the table exactly as read: a run that lost its race to another commits nothing
    // (its files are left to orphan cleanup) and the next run starts from the newer cover.
    floe_sql::write::commit_transaction_on(&access, &table, transaction)
        .await
        .map_err(|e| io("commit the rollup", e))?;
    Ok(())
}
