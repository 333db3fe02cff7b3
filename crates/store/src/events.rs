//! The change-event outbox over SQL ([`floe_catalog::events`]): events written by the
//! transaction that makes their change ([`crate::WriteTx::emit`]), read in order by the
//! publisher, each sink's progress and lease.

use async_trait::async_trait;
use floe_catalog::Result;
use floe_catalog::events::{EventStore, NewEvent, StoredEvent};
use serde_json::{Value, json};
use sqlx::Row;
use uuid::Uuid;

use crate::error::query_error;
use crate::{Backend, SqlStore, StoreError, now_ms};

/// Keeps concurrent writers of events in line on PostgreSQL (until their transaction ends),
/// so that sequence numbers follow commit order: a reader never sees a later number commit
/// before an earlier one.
const EVENTS_LOCK: i64 = 0x666c_6f65_6576_6e74;

/// Inserts `events` into the outbox inside `tx`, numbered after the last.
pub(crate) async fn insert(
    backend: Backend,
    tx: &mut sqlx::AnyConnection,
    events: &[NewEvent],
) -> std::result::Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    if backend == Backend::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(EVENTS_LOCK)
            .execute(&mut *tx)
            .await?;
    }
    let last: i64 = sqlx::query("SELECT COALESCE(MAX(seq), 0) AS seq FROM change_events")
        .fetch_one(&mut *tx)
        .await?
        .get("seq");
    // The outbox may have been emptied by pruning: numbers continue from the sinks' progress.
    let delivered: i64 =
        sqlx::query("SELECT COALESCE(MAX(delivered_seq), 0) AS seq FROM change_event_sinks")
            .fetch_one(&mut *tx)
            .await?
            .get("seq");
    let now = now_ms();
    for (i, event) in events.iter().enumerate() {
        sqlx::query(
            "INSERT INTO change_events (seq, id, kind, subject, time_ms, data) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(last.max(delivered) + 1 + i as i64)
        .bind(Uuid::now_v7().to_string())
        .bind(&event.kind)
        .bind(&event.subject)
        .bind(now)
        .bind(event.data.to_string())
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// The event of `kind` about table or view `id`, as it stands in `tx` (read before a drop,
/// after a create or rename), with `data` added to what names it; None when it is not there.
pub(crate) async fn tabular_event(
    tx: &mut sqlx::AnyConnection,
    id: Uuid,
    kind: &str,
    data: Value,
) -> Result<Option<NewEvent>> {
    let row = sqlx::query(
        "SELECT w.name AS warehouse, n.name AS namespace, t.name, t.kind, t.metadata_location \
         FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
         JOIN warehouses w ON w.id = t.warehouse_id WHERE t.id = $1",
    )
    .bind(id.to_string())
    .fetch_optional(&mut *tx)
    .await
    .map_err(query_error)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let namespace: Vec<String> =
        floe_catalog::ident::namespace_from_key(&row.get::<String, _>("namespace")).inner();
    let (warehouse, name, object): (String, String, String) =
        (row.get("warehouse"), row.get("name"), row.get("kind"));
    let mut body = json!({
        "warehouse": warehouse, "namespace": namespace, "name": name, "id": id.to_string(),
        "metadata-location": row.get::<String, _>("metadata_location"),
    });
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), data) {
        body.extend(extra);
    }
    Ok(Some(NewEvent {
        kind: format!("{object}.{kind}"),
        subject: format!("{warehouse}/{}.{name}", namespace.join(".")),
        data: body,
    }))
}

fn stored(row: &sqlx::any::AnyRow) -> Result<StoredEvent> {
    let data: String = row.get("data");
    Ok(StoredEvent {
        seq: row.get("seq"),
        id: row.get("id"),
        kind: row.get("kind"),
        subject: row.get("subject"),
        time_ms: row.get("time_ms"),
        data: serde_json::from_str(&data).map_err(|e| StoreError::Corrupt {
            what: "change event",
            detail: e.to_string(),
        })?,
    })
}

#[async_trait]
impl EventStore for SqlStore {
    async fn events_after(&self, seq: i64, limit: usize) -> Result<Vec<StoredEvent>> {
        sqlx::query(
            "SELECT seq, id, kind, subject, time_ms, data FROM change_events WHERE seq > $1 \
             ORDER BY seq LIMIT $2",
        )
        .bind(seq)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?
        .iter()
        .map(stored)
        .collect()
    }

    async fn event_cursor(&self, sink: &str) -> Result<i64> {
        Ok(
            sqlx::query("SELECT delivered_seq FROM change_event_sinks WHERE sink = $1")
                .bind(sink)
                .fetch_optional(&self.pool)
                .await
                .map_err(query_error)?
                .map_or(0, |r| r.get("delivered_seq")),
        )
    }

    async fn set_event_cursor(&self, sink: &str, seq: i64) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query(
            "INSERT INTO change_event_sinks (sink, delivered_seq, holder, lease_expires_at_ms) \
             VALUES ($1, $2, NULL, 0) ON CONFLICT (sink) DO UPDATE SET delivered_seq = \
             CASE WHEN excluded.delivered_seq > change_event_sinks.delivered_seq \
             THEN excluded.delivered_seq ELSE change_event_sinks.delivered_seq END",
        )
        .bind(sink)
        .bind(seq)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        tx.commit().await.map_err(query_error)
    }

    async fn lease_event_sink(&self, sink: &str, holder: &str, lease_ms: i64) -> Result<bool> {
        let now = now_ms();
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query(
            "INSERT INTO change_event_sinks (sink, delivered_seq, holder, lease_expires_at_ms) \
             VALUES ($1, 0, NULL, 0) ON CONFLICT (sink) DO NOTHING",
        )
        .bind(sink)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        let taken = sqlx::query(
            "UPDATE change_event_sinks SET holder = $1, lease_expires_at_ms = $2 \
             WHERE sink = $3 AND (holder = $1 OR holder IS NULL OR lease_expires_at_ms < $4)",
        )
        .bind(holder)
        .bind(now + lease_ms)
        .bind(sink)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?
        .rows_affected()
            == 1;
        tx.commit().await.map_err(query_error)?;
        Ok(taken)
    }

    async fn prune_events(&self, sinks: &[String], older_than_ms: i64) -> Result<u64> {
        let mut upto = if sinks.is_empty() { 0 } else { i64::MAX };
        for sink in sinks {
            upto = upto.min(self.event_cursor(sink).await?);
        }
        let mut tx = self.write().await.map_err(query_error)?;
        let removed = sqlx::query("DELETE FROM change_events WHERE seq <= $1 OR time_ms < $2")
            .bind(upto)
            .bind(older_than_ms)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?
            .rows_affected();
        tx.commit().await.map_err(query_error)?;
        Ok(removed)
    }
}
