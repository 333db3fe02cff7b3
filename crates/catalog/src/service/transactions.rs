//! The commit protocol, for one table or many at once.
//!
//! 1. Read each table's current metadata and check the client's requirements (409 if one no
//!    longer holds).
//! 2. Apply the updates and write each new metadata file.
//! 3. Compare-and-swap every current metadata location in one store transaction.
//!
//! When step 3 loses a race, the new files are deleted and the commit starts again from step
//! 1 on the new base: if the requirements still hold there, the client never sees the race.
//! A store failure during step 3 leaves the outcome unknown: the files stay and the client is
//! told so (5xx), never that the commit failed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use iceberg::TableRequirement;
use iceberg::spec::TableMetadata;
use uuid::Uuid;

use super::tables::{LoadedTable, TableCommitRequest, canonical_location, validate_ident};
use super::{CatalogService, WarehouseHandle};
use crate::commit::{
    Applied, apply_table_updates, check_table_requirements, create_table_from_updates,
};
use crate::governance::authz::{Caller, Privilege, Scope};
use crate::metadata::next_metadata_location;
use crate::model::{MetadataSwap, NewTabular, SwapFailure, TabularKind};
use crate::{CatalogError, Result};

/// One table's prepared change.
struct Prepared {
    loaded: LoadedTable,
    /// `None` when the updates changed nothing.
    swap: Option<(MetadataSwap, String)>,
    /// Old metadata files to delete once the commit is in (`delete-after-commit`).
    expired: Vec<String>,
    /// The table's id, when it existed before the commit.
    table_id: Option<Uuid>,
}

impl CatalogService {
    /// Commits changes to one or more tables atomically: all of them apply, or none.
    pub async fn commit_tables(
        &self,
        caller: &Caller,
        warehouse: &str,
        requests: Vec<TableCommitRequest>,
    ) -> Result<Vec<LoadedTable>> {
        if requests.is_empty() {
            return Err(CatalogError::bad_request(
                "a commit must change at least one table",
            ));
        }
        let mut seen = HashSet::new();
        for request in &requests {
            validate_ident(&request.ident, "table")?;
            if !seen.insert(request.ident.clone()) {
                return Err(CatalogError::bad_request(format!(
                    "table {} appears more than once in the transaction",
                    request.ident
                )));
            }
        }
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let mut attempt = 0;
        loop {
            let mut prepared = Vec::with_capacity(requests.len());
            for request in &requests {
                match self.prepare_commit(caller, &wh, request).await {
                    Ok(p) => prepared.push(p),
                    Err(e) => {
                        self.discard_prepared(&wh, &prepared).await;
                        return Err(e);
                    }
                }
            }
            let mut swaps: Vec<MetadataSwap> = prepared
                .iter()
                .filter_map(|p| p.swap.as_ref().map(|(s, _)| s.clone()))
                .collect();
            if swaps.is_empty() {
                return Ok(prepared.into_iter().map(|p| p.loaded).collect());
            }
            // Tables whose updates changed nothing must still be unchanged at the commit point.
            for p in prepared.iter().filter(|p| p.swap.is_none()) {
                if let (Some(id), Some(location)) = (p.table_id, &p.loaded.metadata_location) {
                    swaps.push(MetadataSwap::Assert {
                        id,
                        expected_location: location.clone(),
                    });
                }
            }
            if swaps.is_empty() {
                return Ok(prepared.into_iter().map(|p| p.loaded).collect());
            }
            match self.store.commit(&swaps).await {
                Ok(()) => {
                    for p in &prepared {
                        // Old metadata files are deleted only inside their table.
                        let Ok(files) = wh.storage.for_table(p.loaded.metadata.location()) else {
                            continue;
                        };
                        for file in &p.expired {
                            if let Err(e) = files.delete(file).await {
                                tracing::warn!(file, error = %e, "delete expired metadata file");
                            }
                        }
                    }
                    for p in prepared.iter().filter(|p| p.swap.is_some()) {
                        self.announce_commit(warehouse, &p.loaded);
                    }
                    return Ok(prepared.into_iter().map(|p| p.loaded).collect());
                }
                Err(SwapFailure::Store(e)) => {
                    tracing::error!(error = %e, "store failed during commit; outcome unknown");
                    return Err(CatalogError::CommitStateUnknown(
                        "the metadata store failed while committing; the commit may or may not have been applied"
                            .to_string(),
                    ));
                }
                Err(failure) => {
                    self.discard_prepared(&wh, &prepared).await;
                    let (index, lost_race) = match failure {
                        SwapFailure::Conflict(i) => (i, true),
                        SwapFailure::AlreadyExists(i) | SwapFailure::NamespaceMissing(i) => {
                            (i, false)
                        }
                        SwapFailure::LocationTaken { other, .. } => {
                            return Err(CatalogError::bad_request(format!(
                                "the table's location overlaps the location of {other}"
                            )));
                        }
                        SwapFailure::Store(_) => unreachable!("handled above"),
                    };
                    let ident = prepared
                        .iter()
                        .filter(|p| p.swap.is_some())
                        .nth(index)
                        .map(|p| p.loaded.ident.to_string())
                        .unwrap_or_default();
                    if !lost_race {
                        // Re-running the loop re-checks the requirements against what now exists
                        // and answers with the precise error (409 or 404).
                        tracing::debug!(table = %ident, "create lost to a concurrent create; re-checking");
                    }
                    attempt += 1;
                    if attempt > self.config.commit_retries {
                        return Err(CatalogError::CommitFailed(format!(
                            "commit to {ident} lost {attempt} races with concurrent commits; retry it"
                        )));
                    }
                    tracing::debug!(attempt, table = %ident, "retry commit on new base");
                    tokio::time::sleep(backoff(attempt)).await;
                }
            }
        }
    }

    async fn discard_prepared(&self, wh: &WarehouseHandle, prepared: &[Prepared]) {
        for p in prepared {
            if let Some((_, file)) = &p.swap {
                self.discard_file(wh, file).await;
            }
        }
    }

    async fn prepare_commit(
        &self,
        caller: &Caller,
        wh: &WarehouseHandle,
        request: &TableCommitRequest,
    ) -> Result<Prepared> {
        let ident = &request.ident;
        let creating = request
            .requirements
            .iter()
            .any(|r| matches!(r, TableRequirement::NotExist));
        let record = self.find_tabular(wh, ident).await?;
        let record = match record {
            Some(r) if r.kind == TabularKind::Table => r,
            Some(_) if creating => {
                return Err(Self::exists_error(TabularKind::View, ident));
            }
            _ if creating => {
                caller.require(
                    Privilege::CreateTable,
                    &Scope::namespace(wh.warehouse.id, &ident.namespace),
                    || CatalogError::no_such_namespace(ident.namespace.join(".")),
                )?;
                return self.prepare_create(wh, request).await;
            }
            _ => return Err(CatalogError::no_such_table(ident)),
        };
        caller.require(Privilege::WriteData, &record.scope(), || {
            CatalogError::no_such_table(ident)
        })?;
        self.refuse_schema_changes(caller, &record, &request.updates)?;
        let base = self
            .metadata
            .read_table(&wh.storage, &record.metadata_location)
            .await?;
        // An append that lost only to maintenance's replace snapshots is rebased, not refused.
        let rebased;
        let request = match check_table_requirements(Some(&base), &request.requirements) {
            Ok(()) => request,
            Err(e @ CatalogError::CommitFailed(_)) => {
                match super::rebase::rebase_append(wh, &base, request).await? {
                    Some(r) => {
                        check_table_requirements(Some(&base), &r.requirements)?;
                        rebased = r;
                        &rebased
                    }
                    None => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let new =
            match apply_table_updates(&base, &record.metadata_location, request.updates.clone())? {
                Applied::Unchanged => {
                    return Ok(Prepared {
                        loaded: LoadedTable {
                            ident: ident.clone(),
                            metadata_location: Some(record.metadata_location),
                            metadata: base,
                        },
                        swap: None,
                        expired: Vec::new(),
                        table_id: Some(record.id),
                    });
                }
                Applied::Changed(new) => new,
            };
        let expired = new.expired_metadata_files;
        let new = new.metadata;
        crate::paths::check_table_paths(&new, Some(&base))?;
        let moved_to = if canonical_location(new.location())? != record.location {
            Some(
                self.claim_location(wh, new.location(), Some(record.id))
                    .await?,
            )
        } else {
            None
        };
        let new_location = next_metadata_location(
            new.location(),
            Some(&record.metadata_location),
            new.properties(),
        );
        let new = Arc::new(new);
        self.metadata
            .write_table(&wh.storage, &new_location, new.clone())
            .await?;
        Ok(Prepared {
            loaded: LoadedTable {
                ident: ident.clone(),
                metadata_location: Some(new_location.clone()),
                metadata: new,
            },
            swap: Some((
                MetadataSwap::Update {
                    id: record.id,
                    expected_location: record.metadata_location,
                    new_location: new_location.clone(),
                    moved_to,
                },
                new_location,
            )),
            expired,
            table_id: Some(record.id),
        })
    }

    /// A commit that creates its table (`assert-create`), e.g. after a staged create.
    async fn prepare_create(
        &self,
        wh: &WarehouseHandle,
        request: &TableCommitRequest,
    ) -> Result<Prepared> {
        let ident = &request.ident;
        self.require_namespace(wh, &ident.namespace).await?;
        check_table_requirements(None, &request.requirements)?;
        let metadata: TableMetadata = create_table_from_updates(request.updates.clone())?;
        crate::paths::check_table_paths(&metadata, None)?;
        let location = self.claim_location(wh, metadata.location(), None).await?;
        let new_location = next_metadata_location(&location, None, metadata.properties());
        let metadata = Arc::new(metadata);
        self.metadata
            .write_table(&wh.storage, &new_location, metadata.clone())
            .await?;
        Ok(Prepared {
            loaded: LoadedTable {
                ident: ident.clone(),
                metadata_location: Some(new_location.clone()),
                metadata,
            },
            swap: Some((
                MetadataSwap::Create(NewTabular {
                    id: Uuid::now_v7(),
                    warehouse_id: wh.warehouse.id,
                    namespace: ident.namespace.clone(),
                    name: ident.name.clone(),
                    kind: TabularKind::Table,
                    metadata_location: new_location.clone(),
                    location,
                }),
                new_location,
            )),
            expired: Vec::new(),
            table_id: None,
        })
    }
}

/// Exponential backoff with jitter: 5 ms doubling to at most 160 ms.
fn backoff(attempt: usize) -> Duration {
    let base = 5u64 << attempt.min(5);
    let jitter = (Uuid::new_v4().as_u128() % (base as u128 + 1)) as u64;
    Duration::from_millis(base / 2 + jitter / 2)
}
