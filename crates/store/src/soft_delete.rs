//! `SoftDeleteStore` over SQL: dropped tables and views (`dropped_tabulars`) and deletion
//! protection (`deletion_protection`).
//!
//! A soft drop moves the row from `tabulars` to `dropped_tabulars` and queues its purge job in
//! one transaction, so a dropped table never lacks the job that ends its retention. Grants and
//! maintenance policies stay keyed by the id until the purge removes them with the row.

use async_trait::async_trait;
use floe_catalog::ident::{namespace_from_key, namespace_key};
use floe_catalog::model::{NewTabular, TabularKind};
use floe_catalog::soft_delete::{
    DroppedTabular, PURGE_JOB, ProtectedKind, Protection, SoftDeleteStore, SoftDrop, UndropRefusal,
};
use floe_catalog::{CatalogError, Result};
use iceberg::NamespaceIdent;
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::catalog::{InsertFailure, forget_securable, insert_tabular, parse_uuid};
use crate::error::query_error;
use crate::{Backend, SqlStore, StoreError, now_ms};

const DROPPED_COLUMNS: &str = "id, warehouse_id, namespace_id, namespace_name, name, kind, \
     metadata_location, location, created_at_ms, dropped_at_ms, dropped_by, expires_at_ms, \
     purge_requested";

fn corrupt(what: &'static str, detail: impl ToString) -> CatalogError {
    StoreError::Corrupt {
        what,
        detail: detail.to_string(),
    }
    .into()
}

fn dropped_from_row(row: &AnyRow) -> Result<DroppedTabular> {
    let kind: String = row.get("kind");
    Ok(DroppedTabular {
        id: parse_uuid("tabular id", &row.get::<String, _>("id"))?,
        warehouse_id: parse_uuid("warehouse id", &row.get::<String, _>("warehouse_id"))?,
        namespace_id: parse_uuid("namespace id", &row.get::<String, _>("namespace_id"))?,
        namespace: namespace_from_key(&row.get::<String, _>("namespace_name")),
        name: row.get("name"),
        kind: TabularKind::parse(&kind).ok_or_else(|| corrupt("tabular kind", &kind))?,
        metadata_location: row.get("metadata_location"),
        location: row.get("location"),
        created_at_ms: row.get("created_at_ms"),
        dropped_at_ms: row.get("dropped_at_ms"),
        dropped_by: row.get("dropped_by"),
        expires_at_ms: row.get("expires_at_ms"),
        purge_requested: row.get::<i64, _>("purge_requested") != 0,
    })
}

fn protection_from_row(row: &AnyRow) -> Result<Protection> {
    let kind: String = row.get("securable_kind");
    Ok(Protection {
        securable_id: parse_uuid("securable id", &row.get::<String, _>("securable_id"))?,
        warehouse_id: parse_uuid("warehouse id", &row.get::<String, _>("warehouse_id"))?,
        kind: ProtectedKind::parse(&kind).ok_or_else(|| corrupt("protected kind", &kind))?,
        set_by: row.get("set_by"),
        set_at_ms: row.get("set_at_ms"),
    })
}

/// Key of the PostgreSQL advisory lock under which deletion protection is set and drops check
/// it (SQLite write transactions are serialized already): a drop that checked no flag and a
/// flag set meanwhile cannot both commit.
const PROTECTION_LOCK: i64 = 0x666c_6f65_7072_6f74;

/// Refuses, inside a drop's transaction, when deletion protection is set on any of `guard`
/// (the object dropped and its containers); nothing to check when `guard` is empty.
pub(crate) async fn refuse_if_protected(
    backend: Backend,
    tx: &mut sqlx::AnyConnection,
    guard: &[Uuid],
) -> Result<()> {
    if guard.is_empty() {
        return Ok(());
    }
    lock_protection(backend, tx).await?;
    let list: Vec<String> = (1..=guard.len()).map(|i| format!("${i}")).collect();
    let sql = format!(
        "SELECT securable_kind, securable_id FROM deletion_protection WHERE securable_id IN ({}) \
         LIMIT 1",
        list.join(", ")
    );
    let mut query = sqlx::query(&sql);
    for id in guard {
        query = query.bind(id.to_string());
    }
    match query.fetch_optional(&mut *tx).await.map_err(query_error)? {
        None => Ok(()),
        Some(row) => Err(CatalogError::protected(format!(
            "{} is set on {} {}",
            floe_catalog::service::PROTECTION_FLAG,
            row.get::<String, _>("securable_kind"),
            row.get::<String, _>("securable_id"),
        ))),
    }
}

async fn lock_protection(backend: Backend, tx: &mut sqlx::AnyConnection) -> Result<()> {
    if backend == Backend::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(PROTECTION_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
    }
    Ok(())
}

#[async_trait]
impl SoftDeleteStore for SqlStore {
    async fn soft_drop_tabular(&self, drop: &SoftDrop) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        refuse_if_protected(self.backend, &mut tx, &drop.guard).await?;
        let id = drop.id.to_string();
        let moved = sqlx::query(&format!(
            "INSERT INTO dropped_tabulars ({DROPPED_COLUMNS}) \
             SELECT t.id, t.warehouse_id, t.namespace_id, n.name, t.name, t.kind, \
             t.metadata_location, t.location, t.created_at_ms, $2, $3, $4, $5 \
             FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
             WHERE t.id = $1 AND ($6 = '' OR t.metadata_location = $6)"
        ))
        .bind(&id)
        .bind(drop.dropped_at_ms)
        .bind(&drop.dropped_by)
        .bind(drop.expires_at_ms)
        .bind(i64::from(drop.purge_requested))
        .bind(drop.expected_location.clone().unwrap_or_default())
        .execute(&mut *tx)
        .await
        .map_err(query_error)?
        .rows_affected();
        if moved != 1 {
            return Ok(false);
        }
        let event = crate::events::tabular_event(
            &mut tx,
            drop.id,
            "dropped",
            serde_json::json!({"soft": true, "purge-requested": drop.purge_requested}),
        )
        .await?;
        tx.emit(event);
        sqlx::query("DELETE FROM tabulars WHERE id = $1")
            .bind(&id)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        let job = &drop.purge_job;
        // At most one live job of a kind per table: a purge job left queued by an earlier drop
        // (undone since) gives way to this one.
        sqlx::query(
            "DELETE FROM maintenance_jobs WHERE table_id = $1 AND kind = $2 AND status = 'queued'",
        )
        .bind(&id)
        .bind(PURGE_JOB)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        sqlx::query(
            "INSERT INTO maintenance_jobs (id, warehouse_id, table_id, kind, status, priority, \
             trigger, attempts, max_attempts, params, not_before_ms, created_at_ms) \
             VALUES ($1, $2, $3, $4, 'queued', $5, $6, 0, $7, $8, $9, $10) ON CONFLICT DO NOTHING",
        )
        .bind(Uuid::now_v7().to_string())
        .bind(job.warehouse_id.to_string())
        .bind(job.table_id.to_string())
        .bind(&job.kind)
        .bind(i64::from(job.priority))
        .bind(&job.trigger)
        .bind(i64::from(job.max_attempts))
        .bind(job.params.to_string())
        .bind(job.not_before_ms)
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(true)
    }

    async fn list_dropped(
        &self,
        warehouse: Uuid,
        namespace: Option<&NamespaceIdent>,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<Vec<DroppedTabular>> {
        // The namespace and those below it: its key, or its key and the separator first.
        let within = if namespace.is_some() {
            " AND (namespace_name = $4 OR substr(namespace_name, 1, length($5)) = $5)"
        } else {
            ""
        };
        let sql = format!(
            "SELECT {DROPPED_COLUMNS} FROM dropped_tabulars WHERE warehouse_id = $1 AND id > $2\
             {within} ORDER BY id LIMIT $3"
        );
        let mut query = sqlx::query(&sql)
            .bind(warehouse.to_string())
            .bind(after.map(|a| a.to_string()).unwrap_or_default())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        if let Some(ns) = namespace {
            let key = namespace_key(ns);
            query = query.bind(key.clone()).bind(format!("{key}\u{1f}"));
        }
        let rows = query.fetch_all(&self.pool).await.map_err(query_error)?;
        rows.iter().map(dropped_from_row).collect()
    }

    async fn get_dropped(&self, id: Uuid) -> Result<Option<DroppedTabular>> {
        sqlx::query(&format!(
            "SELECT {DROPPED_COLUMNS} FROM dropped_tabulars WHERE id = $1"
        ))
        .bind(id.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error)?
        .as_ref()
        .map(dropped_from_row)
        .transpose()
    }

    async fn undrop_tabular(&self, id: Uuid) -> Result<std::result::Result<(), UndropRefusal>> {
        let mut tx = self.write().await.map_err(query_error)?;
        let Some(row) = sqlx::query(&format!(
            "SELECT {DROPPED_COLUMNS} FROM dropped_tabulars WHERE id = $1"
        ))
        .bind(id.to_string())
        .fetch_optional(&mut *tx)
        .await
        .map_err(query_error)?
        else {
            return Ok(Err(UndropRefusal::NotDropped));
        };
        let dropped = dropped_from_row(&row)?;
        let namespace = sqlx::query("SELECT 1 FROM namespaces WHERE id = $1")
            .bind(dropped.namespace_id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error)?;
        if namespace.is_none() {
            return Ok(Err(UndropRefusal::NamespaceGone));
        }
        sqlx::query("DELETE FROM dropped_tabulars WHERE id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        let restored = NewTabular {
            id,
            warehouse_id: dropped.warehouse_id,
            namespace: dropped.namespace.clone(),
            name: dropped.name.clone(),
            kind: dropped.kind,
            metadata_location: dropped.metadata_location.clone(),
            location: dropped.location.clone(),
        };
        // A refusal drops the transaction, which rolls the removal above back.
        match insert_tabular(self.backend, &mut tx, &restored).await {
            Ok(()) => {}
            Err(InsertFailure::Exists) => return Ok(Err(UndropRefusal::NameTaken)),
            Err(InsertFailure::NamespaceMissing) => return Ok(Err(UndropRefusal::NamespaceGone)),
            Err(InsertFailure::LocationTaken(other)) => {
                return Ok(Err(UndropRefusal::LocationTaken(other)));
            }
            Err(InsertFailure::Query(e)) => return Err(query_error(e)),
        }
        let event =
            crate::events::tabular_event(&mut tx, id, "undropped", serde_json::json!({})).await?;
        tx.emit(event);
        // It keeps the age it had.
        sqlx::query("UPDATE tabulars SET created_at_ms = $1 WHERE id = $2")
            .bind(dropped.created_at_ms)
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        sqlx::query(
            "DELETE FROM maintenance_jobs WHERE table_id = $1 AND kind = $2 AND status = 'queued'",
        )
        .bind(id.to_string())
        .bind(PURGE_JOB)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(Ok(()))
    }

    async fn purge_dropped(&self, id: Uuid, guard: &[Uuid]) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        refuse_if_protected(self.backend, &mut tx, guard).await?;
        let deleted = sqlx::query("DELETE FROM dropped_tabulars WHERE id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(query_error)?
            .rows_affected();
        if deleted == 1 {
            forget_securable(&mut tx, &id.to_string()).await?;
            tx.emit(Some(floe_catalog::events::NewEvent {
                kind: "table.purged".into(),
                subject: id.to_string(),
                data: serde_json::json!({"id": id.to_string()}),
            }));
        }
        tx.commit().await.map_err(query_error)?;
        Ok(deleted == 1)
    }

    async fn set_protection(
        &self,
        securable_id: Uuid,
        protection: Option<&Protection>,
    ) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        lock_protection(self.backend, &mut tx).await?;
        if let Some(p) = protection {
            // Under the lock drops take: an object dropped since it was resolved gets no flag
            // (one on a dropped table could never be cleared, and would block its purge).
            let exists = match p.kind {
                ProtectedKind::Warehouse => "SELECT 1 FROM warehouses WHERE id = $1",
                ProtectedKind::Namespace => "SELECT 1 FROM namespaces WHERE id = $1",
                ProtectedKind::Table | ProtectedKind::View => {
                    "SELECT 1 FROM tabulars WHERE id = $1"
                }
            };
            let found = sqlx::query(exists)
                .bind(securable_id.to_string())
                .fetch_optional(&mut *tx)
                .await
                .map_err(query_error)?;
            if found.is_none() {
                return Ok(false);
            }
        }
        let changed = match protection {
            Some(p) => sqlx::query(
                "INSERT INTO deletion_protection (securable_id, warehouse_id, securable_kind, \
                 set_by, set_at_ms) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )
            .bind(securable_id.to_string())
            .bind(p.warehouse_id.to_string())
            .bind(p.kind.as_str())
            .bind(&p.set_by)
            .bind(p.set_at_ms),
            None => sqlx::query("DELETE FROM deletion_protection WHERE securable_id = $1")
                .bind(securable_id.to_string()),
        }
        .execute(&mut *tx)
        .await
        .map_err(query_error)?
        .rows_affected();
        tx.commit().await.map_err(query_error)?;
        Ok(changed == 1)
    }

    async fn protections(&self, ids: &[Uuid]) -> Result<Vec<Protection>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = (1..=ids.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT * FROM deletion_protection WHERE securable_id IN ({})",
            list.join(", ")
        );
        let mut query = sqlx::query(&sql);
        for id in ids {
            query = query.bind(id.to_string());
        }
        query
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?
            .iter()
            .map(protection_from_row)
            .collect()
    }

    async fn warehouse_protections(&self, warehouse: Uuid) -> Result<Vec<Protection>> {
        sqlx::query("SELECT * FROM deletion_protection WHERE warehouse_id = $1 ORDER BY set_at_ms")
            .bind(warehouse.to_string())
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?
            .iter()
            .map(protection_from_row)
            .collect()
    }
}
