//! `ClusterStore` over SQL.

use async_trait::async_trait;
use floe_catalog::Result;
use floe_catalog::cluster::{CacheCounts, ClusterStore, WorkerRecord};
use rand::RngCore;
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::error::query_error;
use crate::{SqlStore, StoreError};

fn worker(row: &AnyRow) -> Result<WorkerRecord> {
    let id: String = row.get("id");
    Ok(WorkerRecord {
        id: Uuid::parse_str(&id).map_err(|e| StoreError::Corrupt {
            what: "worker id",
            detail: e.to_string(),
        })?,
        url: row.get("url"),
        version: row.get("version"),
        started_at_ms: row.get("started_at_ms"),
        heartbeat_ms: row.get("heartbeat_ms"),
        load_average: row.get("load_average"),
        cache: CacheCounts {
            memory_hits: row.get("cache_memory_hits"),
            disk_hits: row.get("cache_disk_hits"),
            misses: row.get("cache_misses"),
        },
    })
}

#[async_trait]
impl ClusterStore for SqlStore {
    async fn cluster_secret(&self) -> Result<String> {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let mut tx = self.write().await.map_err(query_error)?;
        // The first node's secret stays: a later node's insert does nothing.
        sqlx::query(
            "INSERT INTO cluster_settings (name, value) VALUES ('secret', $1) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(hex::encode(bytes))
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        let secret: String =
            sqlx::query("SELECT value FROM cluster_settings WHERE name = 'secret'")
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error)?
                .get("value");
        tx.commit().await.map_err(query_error)?;
        Ok(secret)
    }

    async fn heartbeat_worker(&self, w: &WorkerRecord) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query(
            "INSERT INTO cluster_workers \
             (id, url, version, started_at_ms, heartbeat_ms, load_average, \
              cache_memory_hits, cache_disk_hits, cache_misses) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (id) DO UPDATE SET url = $2, version = $3, heartbeat_ms = $5, \
             load_average = $6, cache_memory_hits = $7, cache_disk_hits = $8, cache_misses = $9",
        )
        .bind(w.id.to_string())
        .bind(&w.url)
        .bind(&w.version)
        .bind(w.started_at_ms)
        .bind(w.heartbeat_ms)
        .bind(w.load_average)
        .bind(w.cache.memory_hits)
        .bind(w.cache.disk_hits)
        .bind(w.cache.misses)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn list_workers(&self) -> Result<Vec<WorkerRecord>> {
        sqlx::query(
            "SELECT id, url, version, started_at_ms, heartbeat_ms, load_average, \
             cache_memory_hits, cache_disk_hits, cache_misses \
             FROM cluster_workers ORDER BY url, id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?
        .iter()
        .map(worker)
        .collect()
    }

    async fn remove_worker(&self, id: Uuid) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query("DELETE FROM cluster_workers WHERE id = $1")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn prune_workers(&self, before_ms: i64) -> Result<u64> {
        let mut tx = self.write().await.map_err(query_error)?;
        let done = sqlx::query("DELETE FROM cluster_workers WHERE heartbeat_ms < $1")
            .bind(before_ms)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(done.rows_affected())
    }
}
