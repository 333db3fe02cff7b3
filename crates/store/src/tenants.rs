//! `TenantStore` over SQL: each warehouse's limits as JSON.

use async_trait::async_trait;
use floe_catalog::Result;
use floe_catalog::tenants::{TenantLimitsRecord, TenantStore};
use sqlx::Row;
use uuid::Uuid;

use crate::error::query_error;
use crate::{SqlStore, StoreError, now_ms};

#[async_trait]
impl TenantStore for SqlStore {
    async fn set_tenant_limits(
        &self,
        warehouse_id: Uuid,
        limits: Option<&serde_json::Value>,
    ) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        match limits {
            Some(limits) => sqlx::query(
                "INSERT INTO tenant_limits (warehouse_id, limits, updated_at_ms) \
                 VALUES ($1, $2, $3) ON CONFLICT (warehouse_id) DO UPDATE SET \
                 limits = excluded.limits, \
                 updated_at_ms = CASE WHEN excluded.updated_at_ms > tenant_limits.updated_at_ms \
                 THEN excluded.updated_at_ms ELSE tenant_limits.updated_at_ms + 1 END",
            )
            .bind(warehouse_id.to_string())
            .bind(limits.to_string())
            .bind(now_ms()),
            None => sqlx::query("DELETE FROM tenant_limits WHERE warehouse_id = $1")
                .bind(warehouse_id.to_string()),
        }
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        tx.commit().await.map_err(query_error)
    }

    async fn list_tenant_limits(&self) -> Result<Vec<TenantLimitsRecord>> {
        sqlx::query(
            "SELECT w.name, t.limits, t.updated_at_ms FROM tenant_limits t \
             JOIN warehouses w ON w.id = t.warehouse_id ORDER BY w.name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?
        .iter()
        .map(|row| {
            let text: String = row.get("limits");
            Ok(TenantLimitsRecord {
                warehouse: row.get("name"),
                limits: serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                    what: "tenant limits",
                    detail: e.to_string(),
                })?,
                updated_at_ms: row.get("updated_at_ms"),
            })
        })
        .collect()
    }
}
