//! `MigrationStore` over SQL: one row per source table of a migration, its state as JSON.

use async_trait::async_trait;
use floe_catalog::Result;
use floe_catalog::migrations::{MigrationStore, MigrationSummary, MigrationTable};
use sqlx::Row;

use crate::error::query_error;
use crate::{SqlStore, StoreError, now_ms};

#[async_trait]
impl MigrationStore for SqlStore {
    async fn put_migration_table(&self, record: &MigrationTable) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query(
            "INSERT INTO migration_tables (migration, source, wave, state, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (migration, source) DO UPDATE SET \
             wave = excluded.wave, state = excluded.state, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(&record.migration)
        .bind(&record.source)
        .bind(record.wave)
        .bind(record.state.to_string())
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        tx.commit().await.map_err(query_error)
    }

    async fn migration_tables(&self, migration: &str) -> Result<Vec<MigrationTable>> {
        sqlx::query(
            "SELECT migration, source, wave, state, updated_at_ms FROM migration_tables \
             WHERE migration = $1 ORDER BY wave, source",
        )
        .bind(migration)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?
        .iter()
        .map(|row| {
            let text: String = row.get("state");
            Ok(MigrationTable {
                migration: row.get("migration"),
                source: row.get("source"),
                wave: row.get("wave"),
                state: serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                    what: "migration state",
                    detail: e.to_string(),
                })?,
                updated_at_ms: row.get("updated_at_ms"),
            })
        })
        .collect()
    }

    async fn migrations(&self) -> Result<Vec<MigrationSummary>> {
        Ok(sqlx::query(
            "SELECT migration, COUNT(*) AS tables, MAX(updated_at_ms) AS updated_at_ms \
             FROM migration_tables GROUP BY migration ORDER BY migration",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?
        .iter()
        .map(|row| MigrationSummary {
            migration: row.get("migration"),
            tables: row.get("tables"),
            updated_at_ms: row.get("updated_at_ms"),
        })
        .collect())
    }

    async fn forget_migration(&self, migration: &str) -> Result<u64> {
        let mut tx = self.write().await.map_err(query_error)?;
        let done = sqlx::query("DELETE FROM migration_tables WHERE migration = $1")
            .bind(migration)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(done.rows_affected())
    }
}
