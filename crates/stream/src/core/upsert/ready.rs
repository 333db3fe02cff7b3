//! A key index made to describe a table's current snapshot, at the least cost that is sure:
//!
//! 1. the index held, when it describes that snapshot (this node made the last commit);
//! 2. the index held — or else the table's checkpoint ([`super::checkpoint`]) — caught up,
//!    when it describes the same table and key at a snapshot on the line of `main`: data files
//!    that left the table (compaction, another writer's overwrite) are forgotten with their
//!    keys, rows removed by delete files newer than that snapshot are forgotten, and only data
//!    files new since then are read (a file of a data sequence number above that snapshot's —
//!    one removed and added again — counts as new);
//! 3. the index built from the table's rows.
//!
//! Catching up is exact because a snapshot's live rows are its ancestor's live rows, less the
//! files it no longer lists and the positions its newer delete files name, plus the rows of
//! its new files (read less their deletes). That holds as long as a delete file leaves the
//! table only with its data file or for one that deletes at least as much (a deletion vector
//! replaced by its union with new positions, rewritten position deletes) — what the Iceberg
//! spec asks of writers; a commit that drops deletes and so brings rows back is not seen
//! until the index is next built. A snapshot off `main`'s line (a rollback), an index of an
//! empty table, or an equality delete anywhere leaves it to building. Places beyond a file's
//! row count are dropped.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use floe_catalog::service::LoadedTable;
use floe_sql::scan::{IcebergTableProvider, LiveFile, Reading, TableAccess};

use super::checkpoint;
use super::index::{Described, KeyIndex, READIED};
use super::refused;
use crate::core::IngestError;

/// The index of `loaded`'s table and key describing its current snapshot, as `wanted` says,
/// from `held` (the index this node holds for the table, if any, describing anything else)
/// where it can be.
pub(super) async fn ready(
    access: &TableAccess,
    loaded: LoadedTable,
    held: Option<KeyIndex>,
    wanted: Described,
) -> Result<KeyIndex, IngestError> {
    let (from, how) = match held.filter(|h| h.described.same_table(&wanted)) {
        Some(held) => (Some(held), &READIED.caught_up),
        None => (
            checkpoint::read(access, loaded.metadata.clone(), &wanted).await,
            &READIED.loaded,
        ),
    };
    let provider =
        IcebergTableProvider::try_new(access.clone(), loaded.clone()).map_err(refused)?;
    if let Some(from) = from
        && let Some(index) = catch_up(&provider, &loaded, from, &wanted).await?
    {
        how.fetch_add(1, Ordering::Relaxed);
        return Ok(index);
    }
    let index = build(&provider, &loaded, wanted).await?;
    READIED.built.fetch_add(1, Ordering::Relaxed);
    Ok(index)
}

/// `index` (of the table and key `wanted` describes, at an earlier snapshot) made to describe
/// `wanted`'s snapshot; none when it cannot be caught up (see the module's doc).
async fn catch_up(
    provider: &IcebergTableProvider,
    loaded: &LoadedTable,
    mut index: KeyIndex,
    wanted: &Described,
) -> Result<Option<KeyIndex>, IngestError> {
    let metadata = &loaded.metadata;
    let (Some(from), Some(to)) = (index.described.snapshot_id, wanted.snapshot_id) else {
        return Ok(None);
    };
    if !checkpoint::on_line(metadata, to, from) {
        return Ok(None);
    }
    let Some(sequence) = metadata.snapshot_by_id(from).map(|s| s.sequence_number()) else {
        return Ok(None);
    };
    let started = std::time::Instant::now();
    let live = provider.live_files(sequence).await.map_err(refused)?;
    if live.files.iter().any(|f| f.equality_deletes) {
        return Ok(None);
    }
    // Files indexed that are still the files indexed: live, and not added since.
    let kept: HashMap<&str, &LiveFile> = live
        .files
        .iter()
        .filter(|f| f.sequence.is_some_and(|s| s <= sequence))
        .map(|f| (f.data_file.as_str(), f))
        .collect();
    let gone: HashSet<String> = index
        .files()
        .filter(|path| !kept.contains_key(path))
        .map(str::to_string)
        .collect();
    index.forget_files(&gone);
    index.forget_positions(&live.deleted_since);
    let rows: HashMap<String, u64> = kept
        .values()
        .map(|f| (f.data_file.clone(), f.record_count))
        .collect();
    index.forget_beyond(&rows);
    let indexed: HashSet<String> = index.files().map(str::to_string).collect();
    let mut new = HashSet::new();
    for file in &live.files {
        if indexed.contains(&file.data_file) {
            index.locate(&file.data_file, file.spec_id, &file.partition);
        } else {
            new.insert(file.data_file.clone());
        }
    }
    if !new.is_empty() {
        let reading = Reading {
            only: Some(&new),
            ..Reading::default()
        };
        let files = provider
            .live_columns(&wanted.key_ids, reading)
            .await
            .map_err(refused)?;
        index.insert_read(files)?;
    }
    tracing::info!(
        table = %loaded.ident,
        from,
        to,
        files_gone = gone.len(),
        files_read = new.len(),
        files_with_new_deletes = live.deleted_since.len(),
        keys = index.keys(),
        millis = started.elapsed().as_millis() as u64,
        "caught an upsert table's key index up"
    );
    index.described = wanted.clone();
    Ok(Some(index))
}

/// The index of table `loaded` (and key and snapshot `described`) built from its live rows.
async fn build(
    provider: &IcebergTableProvider,
    loaded: &LoadedTable,
    described: Described,
) -> Result<KeyIndex, IngestError> {
    let started = std::time::Instant::now();
    let files = provider
        .live_keys(&described.key_ids)
        .await
        .map_err(refused)?;
    let mut index = KeyIndex::new(described)?;
    index.insert_read(files)?;
    tracing::info!(
        table = %loaded.ident,
        keys = index.keys(),
        millis = started.elapsed().as_millis() as u64,
        "built an upsert table's key index"
    );
    Ok(index)
}
