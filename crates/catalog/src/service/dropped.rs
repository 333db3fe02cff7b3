//! Dropping tables and views, softly or for good, and what a warehouse that keeps dropped
//! ones offers: listing them, undropping, purging before their time, and expiry.
//!
//! Every drop of a table or view goes through [`CatalogService::remove_tabular`], whichever
//! door it came in by (Iceberg REST, SQL `DROP TABLE`, a migration's unregister): it checks
//! deletion protection, then either removes the record (soft delete off) or moves it to the
//! dropped list with its purge job due when the warehouse's retention ends (soft delete on).
//!
//! Who may see and act on a dropped table or view: whoever holds the privilege that drops it
//! (`drop-table`, `drop-view`) on it, its namespace or its warehouse. Its grants stay with it
//! while it is dropped, so the holders of a grant on the table itself keep theirs.

use iceberg::{NamespaceIdent, TableIdent};
use serde_json::{Value, json};
use uuid::Uuid;

use super::protection::Tabular;
use super::{CatalogService, WarehouseHandle, now_ms};
use crate::governance::audit::{AuditEvent, AuditScope};
use crate::governance::authz::{Caller, Privilege, Scope};
use crate::jobs::NewJob;
use crate::model::{TabularKind, Warehouse};
use crate::soft_delete::{
    DroppedTabular, PURGE_JOB, RETENTION_PROPERTY, SoftDrop, UndropRefusal, parse_retention,
};
use crate::{CatalogError, Result};

/// Attempts of a purge job before it fails for good.
const PURGE_ATTEMPTS: i32 = 5;

/// The most dropped tables and views one page of the listing holds.
pub const MAX_DROPPED_PAGE: usize = 1000;

/// How a drop is to be done.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Removal {
    /// A drop: soft when the warehouse keeps dropped tables, the files deleted (now, or when
    /// the retention ends) if `purge`.
    Drop { purge: bool },
    /// A hard removal of the record while its metadata is still this file, files kept (a
    /// table handed over to another catalog).
    Unregister,
}

/// What became of a drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Removed {
    Gone,
    /// Kept until this time (ms since the epoch).
    KeptUntil(i64),
    /// The record changed or went meanwhile.
    Missed,
}

fn drop_privilege(kind: TabularKind) -> Privilege {
    match kind {
        TabularKind::Table => Privilege::DropTable,
        TabularKind::View => Privilege::DropView,
    }
}

fn no_such_dropped(id: Uuid) -> CatalogError {
    CatalogError::NotFound {
        error_type: "NoSuchTableException",
        message: format!("no dropped table or view has id {id}"),
    }
}

impl DroppedTabular {
    fn ident(&self) -> TableIdent {
        TableIdent::new(self.namespace.clone(), self.name.clone())
    }
}

impl CatalogService {
    /// The soft-delete retention of a warehouse, in seconds; `None` when dropped tables and
    /// views go at once.
    pub(crate) fn retention_of(wh: &Warehouse) -> Result<Option<u64>> {
        parse_retention(wh.properties.get(RETENTION_PROPERTY).map(String::as_str))
    }

    /// Sets a warehouse's soft-delete retention (0 turns soft delete off; tables dropped
    /// before keep the expiry they were given). Needs `manage-warehouses` on the warehouse.
    pub async fn set_soft_delete(
        &self,
        caller: &Caller,
        warehouse: &str,
        retention_seconds: u64,
    ) -> Result<Warehouse> {
        let wh = self.visible_warehouse(caller, warehouse).await?;
        caller.require(
            Privilege::ManageWarehouses,
            &Scope::warehouse(wh.warehouse.id),
            || CatalogError::no_such_warehouse(warehouse),
        )?;
        let value = retention_seconds.to_string();
        parse_retention(Some(&value))?;
        let mut updated = wh.warehouse.clone();
        if retention_seconds == 0 {
            updated.properties.remove(RETENTION_PROPERTY);
        } else {
            updated
                .properties
                .insert(RETENTION_PROPERTY.to_string(), value);
        }
        if !self
            .store
            .set_warehouse_properties(updated.id, &updated.properties)
            .await?
        {
            return Err(CatalogError::no_such_warehouse(warehouse));
        }
        self.forget_warehouse(warehouse);
        Ok(updated)
    }

    /// Drops a table or view the caller may drop (checked by the caller): refused under
    /// deletion protection, else removed or kept per the warehouse's soft-delete retention.
    pub(crate) async fn remove_tabular(
        &self,
        caller: &Caller,
        wh: &WarehouseHandle,
        record: &crate::model::TabularRecord,
        removal: Removal,
    ) -> Result<Removed> {
        let ident = TableIdent::new(record.namespace.clone(), record.name.clone());
        let verb = match removal {
            Removal::Drop { purge: true } => "drop and purge",
            Removal::Drop { purge: false } => "drop",
            Removal::Unregister => "unregister",
        };
        let action = format!("{verb} {} {ident}", record.kind.as_str());
        let tabular = Tabular {
            id: record.id,
            kind: record.kind,
            name: &record.name,
        };
        let namespace = Some(&record.namespace);
        let guard = self
            .require_unprotected(wh, namespace, Some(tabular), &action)
            .await?;
        let outcome = self.store_removal(caller, wh, record, removal, guard).await;
        self.refused_meanwhile(outcome, wh, namespace, Some(tabular), &action)
            .await
    }

    /// The store's part of [`Self::remove_tabular`], the protection check made again inside
    /// its transaction (`guard`).
    async fn store_removal(
        &self,
        caller: &Caller,
        wh: &WarehouseHandle,
        record: &crate::model::TabularRecord,
        removal: Removal,
        guard: Vec<Uuid>,
    ) -> Result<Removed> {
        let ident = TableIdent::new(record.namespace.clone(), record.name.clone());
        let purge = match removal {
            Removal::Unregister => {
                let removed = self
                    .store
                    .drop_tabular_at(record.id, &record.metadata_location, &guard)
                    .await?;
                return Ok(if removed {
                    Removed::Gone
                } else {
                    Removed::Missed
                });
            }
            Removal::Drop { purge } => purge,
        };
        let Some(retention) = Self::retention_of(&wh.warehouse)? else {
            if !self.store.drop_tabular(record.id, &guard).await? {
                return Ok(Removed::Missed);
            }
            if purge && record.kind == TabularKind::Table {
                self.purge_files(wh, &ident, &record.location).await;
            }
            return Ok(Removed::Gone);
        };
        let dropped_at_ms = now_ms();
        let expires_at_ms = dropped_at_ms.saturating_add(retention as i64 * 1000);
        let drop = SoftDrop {
            id: record.id,
            expected_location: None,
            dropped_by: caller.principal.name.clone(),
            dropped_at_ms,
            expires_at_ms,
            purge_requested: purge,
            purge_job: NewJob {
                warehouse_id: wh.warehouse.id,
                table_id: record.id,
                kind: PURGE_JOB.to_string(),
                priority: 0,
                trigger: "drop".to_string(),
                max_attempts: PURGE_ATTEMPTS,
                params: json!({ "warehouse": wh.warehouse.name, "id": record.id }),
                not_before_ms: expires_at_ms,
            },
            guard,
        };
        if let Some(scope) = AuditScope::current() {
            scope.add_detail(
                "soft-delete",
                json!({ "id": record.id, "expires-at-ms": expires_at_ms, "purge-requested": purge }),
            );
        }
        Ok(if self.store.soft_drop_tabular(&drop).await? {
            Removed::KeptUntil(expires_at_ms)
        } else {
            Removed::Missed
        })
    }

    /// The dropped tables and views of a warehouse (or of a namespace and those below it)
    /// that the caller may undrop or purge, by id, a page at a time: at most `limit`
    /// ([`MAX_DROPPED_PAGE`] at most) of those after `after`, and the id to pass as `after`
    /// for the next page when there may be more. Those the caller may not act on are left
    /// out, so a page may hold fewer than `limit`.
    pub async fn list_dropped(
        &self,
        caller: &Caller,
        warehouse: &str,
        namespace: Option<&NamespaceIdent>,
        after: Option<Uuid>,
        limit: Option<usize>,
    ) -> Result<(Vec<DroppedTabular>, Option<Uuid>)> {
        let wh = self.visible_warehouse(caller, warehouse).await?;
        if let Some(ns) = namespace {
            crate::ident::validate_namespace(ns)?;
        }
        let limit = limit.unwrap_or(MAX_DROPPED_PAGE);
        if limit == 0 || limit > MAX_DROPPED_PAGE {
            return Err(CatalogError::bad_request(format!(
                "limit must be from 1 to {MAX_DROPPED_PAGE}, not {limit}"
            )));
        }
        let mut page = self
            .store
            .list_dropped(wh.warehouse.id, namespace, after, limit + 1)
            .await?;
        let next = if page.len() > limit {
            page.truncate(limit);
            page.last().map(|d| d.id)
        } else {
            None
        };
        let mut homes = std::collections::HashMap::new();
        let mut allowed = Vec::with_capacity(page.len());
        for dropped in page {
            let scope = self.dropped_scope(&wh, &dropped, &mut homes).await?;
            if caller.grants.allows(drop_privilege(dropped.kind), &scope) {
                allowed.push(dropped);
            }
        }
        Ok((allowed, next))
    }

    /// Whether a dropped table's or view's namespace is still the one it was dropped from
    /// (`homes` remembers the answers by namespace). A namespace dropped since and created
    /// again under the same name is another one: its grants and protection are not the
    /// dropped table's.
    async fn dropped_home(
        &self,
        wh: &WarehouseHandle,
        dropped: &DroppedTabular,
        homes: &mut std::collections::HashMap<NamespaceIdent, Option<Uuid>>,
    ) -> Result<bool> {
        let live = match homes.get(&dropped.namespace) {
            Some(live) => *live,
            None => {
                let live = self
                    .store
                    .get_namespace(wh.warehouse.id, &dropped.namespace)
                    .await?
                    .map(|n| n.id);
                homes.insert(dropped.namespace.clone(), live);
                live
            }
        };
        Ok(live == Some(dropped.namespace_id))
    }

    /// The authorization scope of a dropped table or view: the one it had when live while its
    /// namespace stands, else its warehouse's (only grants on the warehouse reach it).
    async fn dropped_scope(
        &self,
        wh: &WarehouseHandle,
        dropped: &DroppedTabular,
        homes: &mut std::collections::HashMap<NamespaceIdent, Option<Uuid>>,
    ) -> Result<Scope> {
        Ok(if self.dropped_home(wh, dropped, homes).await? {
            dropped.scope()
        } else {
            Scope::warehouse(wh.warehouse.id)
        })
    }

    /// A dropped table or view of the warehouse that the caller may act on; missing when the
    /// caller cannot even see it.
    async fn dropped_record(
        &self,
        caller: &Caller,
        warehouse: &str,
        id: Uuid,
    ) -> Result<(std::sync::Arc<WarehouseHandle>, DroppedTabular)> {
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let dropped = self
            .store
            .get_dropped(id)
            .await?
            .filter(|d| d.warehouse_id == wh.warehouse.id)
            .ok_or_else(|| no_such_dropped(id))?;
        let scope = self
            .dropped_scope(&wh, &dropped, &mut Default::default())
            .await?;
        caller.require(drop_privilege(dropped.kind), &scope, || no_such_dropped(id))?;
        Ok((wh, dropped))
    }

    /// Puts a dropped table or view back under its name, with its id, grants and history.
    /// Refused (409) when a live table or view holds the name now, or its namespace is gone.
    pub async fn undrop(
        &self,
        caller: &Caller,
        warehouse: &str,
        id: Uuid,
    ) -> Result<DroppedTabular> {
        let (wh, dropped) = self.dropped_record(caller, warehouse, id).await?;
        let ident = dropped.ident();
        let what = dropped.kind.as_str();
        // An undrop puts a name back into the namespace: it needs what a create there needs.
        let create = match dropped.kind {
            TabularKind::Table => Privilege::CreateTable,
            TabularKind::View => Privilege::CreateView,
        };
        caller.require(
            create,
            &Scope::namespace(wh.warehouse.id, &dropped.namespace),
            || no_such_dropped(id),
        )?;
        match self.store.undrop_tabular(id).await? {
            Ok(()) => Ok(dropped),
            Err(UndropRefusal::NotDropped) => Err(no_such_dropped(id)),
            Err(UndropRefusal::NameTaken) => Err(CatalogError::already_exists(format!(
                "cannot undrop {what} {ident}: a table or view of that name exists now; drop or \
                 rename it first"
            ))),
            Err(UndropRefusal::NamespaceGone) => Err(CatalogError::Conflict {
                error_type: "NoSuchNamespaceException",
                message: format!(
                    "cannot undrop {what} {ident}: namespace {} it was dropped from no longer \
                     exists",
                    dropped.namespace.join(".")
                ),
            }),
            Err(UndropRefusal::LocationTaken(other)) => Err(CatalogError::Conflict {
                error_type: "ConflictException",
                message: format!(
                    "cannot undrop {what} {ident}: its location {} overlaps the location of {other}",
                    dropped.location
                ),
            }),
        }
    }

    /// Ends a dropped table's or view's retention now, doing what its expiry would: the record
    /// goes for good, and its files too when the drop asked for a purge. Refused under
    /// deletion protection.
    pub async fn purge_dropped(&self, caller: &Caller, warehouse: &str, id: Uuid) -> Result<Value> {
        let (wh, dropped) = self.dropped_record(caller, warehouse, id).await?;
        self.finish_dropped(&wh, &dropped).await
    }

    /// Ends the retention of a dropped table or view whose time has come: the work of its
    /// `purge-dropped` job, done as the system and audited as such. Nothing to do when it was
    /// undropped or purged meanwhile.
    pub async fn expire_dropped(&self, warehouse: &str, id: Uuid) -> Result<Value> {
        let wh = self.warehouse(warehouse).await?;
        let Some(dropped) = self
            .store
            .get_dropped(id)
            .await?
            .filter(|d| d.warehouse_id == wh.warehouse.id)
        else {
            return Ok(json!({ "skipped": "no longer dropped (undropped or purged already)" }));
        };
        if dropped.expires_at_ms > now_ms() {
            return Ok(json!({ "skipped": "its retention has not ended" }));
        }
        let scope = AuditScope::new(AuditEvent {
            at_ms: now_ms(),
            request_id: Uuid::now_v7().to_string(),
            principal: "system".into(),
            action: format!("JOB {PURGE_JOB}"),
            resource: format!(
                "{warehouse}/{}/{}",
                dropped.namespace.join("."),
                dropped.name
            ),
            decision: "allow".into(),
            status: 200,
            client: String::new(),
            details: json!({
                "id": id,
                "kind": dropped.kind.as_str(),
                "dropped-by": dropped.dropped_by,
                "purge-requested": dropped.purge_requested,
            })
            .to_string(),
        });
        scope.run(self.finish_dropped(&wh, &dropped)).await
    }

    /// Removes a dropped record for good (protection permitting), then its files if its drop
    /// asked for that.
    async fn finish_dropped(
        &self,
        wh: &WarehouseHandle,
        dropped: &DroppedTabular,
    ) -> Result<Value> {
        let ident = dropped.ident();
        let action = format!("purge dropped {} {ident}", dropped.kind.as_str());
        let tabular = Tabular {
            id: dropped.id,
            kind: dropped.kind,
            name: &dropped.name,
        };
        // Orphaned by its namespace's drop, only the warehouse's protection covers it.
        let home = self
            .dropped_home(wh, dropped, &mut Default::default())
            .await?;
        let namespace = home.then_some(&dropped.namespace);
        let guard = self
            .require_unprotected(wh, namespace, Some(tabular), &action)
            .await?;
        let purged = self.store.purge_dropped(dropped.id, &guard).await;
        if !self
            .refused_meanwhile(purged, wh, namespace, Some(tabular), &action)
            .await?
        {
            return Err(no_such_dropped(dropped.id));
        }
        let files = dropped.purge_requested && dropped.kind == TabularKind::Table;
        if files {
            self.purge_files(wh, &ident, &dropped.location).await;
        }
        Ok(json!({
            "id": dropped.id,
            "kind": dropped.kind.as_str(),
            "namespace": dropped.namespace.clone().inner(),
            "name": dropped.name,
            "files-deleted": files,
        }))
    }

    /// Deletes a dropped table's files: everything below its location, which belongs to it
    /// alone (locations never overlap, dropped ones included), and its key index checkpoint.
    /// Runs after the record is gone, so failures are logged, not returned.
    pub(crate) async fn purge_files(
        &self,
        wh: &WarehouseHandle,
        ident: &TableIdent,
        location: &str,
    ) {
        match wh.storage.delete_prefix(location).await {
            Ok(files) => tracing::info!(table = %ident, files, "purged dropped table"),
            Err(e) => tracing::warn!(table = %ident, error = %e, "purge files of dropped table"),
        }
        // An upsert table's key index checkpoint, kept in Floe's own directory.
        let checkpoint = wh.storage.key_index_checkpoint(location);
        if let Err(e) = wh.storage.delete(&checkpoint).await {
            tracing::warn!(table = %ident, error = %e, "purge the key index checkpoint of a dropped table");
        }
    }
}
