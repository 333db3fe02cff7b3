//! `PipelineStore` over SQL: pipeline definitions and their leases.

use async_trait::async_trait;
use floe_catalog::pipelines::{PipelineRecord, PipelineStore};
use floe_catalog::{CatalogError, Result};
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::error::{is_unique_violation, query_error};
use crate::{SqlStore, StoreError};

const COLUMNS: &str = "name, warehouse_id, spec, created_at_ms, owner, lease_until_ms";

fn record(row: &AnyRow) -> Result<PipelineRecord> {
    let corrupt = |what: &'static str, detail: String| -> CatalogError {
        StoreError::Corrupt { what, detail }.into()
    };
    Ok(PipelineRecord {
        name: row.get("name"),
        warehouse_id: Uuid::parse_str(&row.get::<String, _>("warehouse_id"))
            .map_err(|e| corrupt("pipeline warehouse id", e.to_string()))?,
        spec: serde_json::from_str(&row.get::<String, _>("spec"))
            .map_err(|e| corrupt("pipeline definition", e.to_string()))?,
        created_at_ms: row.get("created_at_ms"),
        owner: row.get("owner"),
        lease_until_ms: row.get("lease_until_ms"),
    })
}

#[async_trait]
impl PipelineStore for SqlStore {
    async fn create_pipeline(
        &self,
        name: &str,
        warehouse_id: Uuid,
        spec: &serde_json::Value,
    ) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        let inserted = sqlx::query(
            "INSERT INTO pipelines (name, warehouse_id, spec, created_at_ms) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(name)
        .bind(warehouse_id.to_string())
        .bind(spec.to_string())
        .bind(chrono::Utc::now().timestamp_millis())
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => {
                return Err(CatalogError::AlreadyExists {
                    error_type: "AlreadyExistsException",
                    message: format!("pipeline {name} already exists"),
                });
            }
            Err(e) => return Err(query_error(e)),
        }
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn get_pipeline(&self, name: &str) -> Result<Option<PipelineRecord>> {
        sqlx::query(&format!("SELECT {COLUMNS} FROM pipelines WHERE name = $1"))
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?
            .as_ref()
            .map(record)
            .transpose()
    }

    async fn list_pipelines(&self) -> Result<Vec<PipelineRecord>> {
        sqlx::query(&format!("SELECT {COLUMNS} FROM pipelines ORDER BY name"))
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?
            .iter()
            .map(record)
            .collect()
    }

    async fn delete_pipeline(&self, name: &str) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        let deleted = sqlx::query("DELETE FROM pipelines WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?
            .rows_affected()
            == 1;
        tx.commit().await.map_err(query_error)?;
        Ok(deleted)
    }

    async fn lease_pipeline(
        &self,
        name: &str,
        owner: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        let leased = sqlx::query(
            "UPDATE pipelines SET owner = $1, lease_until_ms = $2 WHERE name = $3 \
             AND (owner IS NULL OR owner = $1 OR lease_until_ms < $4)",
        )
        .bind(owner)
        .bind(until_ms)
        .bind(name)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?
        .rows_affected()
            == 1;
        tx.commit().await.map_err(query_error)?;
        Ok(leased)
    }

    async fn release_pipeline(&self, name: &str, owner: &str) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query(
            "UPDATE pipelines SET owner = NULL, lease_until_ms = NULL \
             WHERE name = $1 AND owner = $2",
        )
        .bind(name)
        .bind(owner)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }
}
