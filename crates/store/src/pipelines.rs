//! `PipelineStore` over SQL: pipeline definitions, their members and partition leases.

use async_trait::async_trait;
use floe_catalog::governance::authz::{Privilege, SEP, Scope};
use floe_catalog::pipelines::{PartitionLease, PipelineRecord, PipelineStore};
use floe_catalog::{CatalogError, Result};
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::error::{is_unique_violation, query_error};
use crate::{SqlStore, StoreError};

const COLUMNS: &str = "name, warehouse_id, spec, created_at_ms";

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
    })
}

/// The scope of the namespace a pipeline writes to (as [`Scope::namespace`] spells it), from
/// its definition's `namespace` levels.
fn scope_of(warehouse_id: Uuid, spec: &serde_json::Value) -> String {
    let mut scope = Scope::warehouse(warehouse_id).0;
    for level in spec["namespace"].as_array().into_iter().flatten() {
        scope.push(SEP);
        scope.push_str(level.as_str().unwrap_or_default());
    }
    scope
}

impl SqlStore {
    /// Gives pipelines stored before the `scope` column existed their scope.
    async fn fill_pipeline_scopes(&self) -> Result<()> {
        let unscoped = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM pipelines WHERE scope IS NULL"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?;
        if unscoped.is_empty() {
            return Ok(());
        }
        let mut tx = self.write().await.map_err(query_error)?;
        for row in &unscoped {
            let pipeline = record(row)?;
            sqlx::query("UPDATE pipelines SET scope = $1 WHERE name = $2")
                .bind(scope_of(pipeline.warehouse_id, &pipeline.spec))
                .bind(&pipeline.name)
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        tx.commit().await.map_err(query_error)
    }
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
            "INSERT INTO pipelines (name, warehouse_id, spec, created_at_ms, scope) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(name)
        .bind(warehouse_id.to_string())
        .bind(spec.to_string())
        .bind(floe_catalog::clock::now_ms())
        .bind(scope_of(warehouse_id, spec))
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

    async fn list_managed_pipelines(&self, principal: Uuid) -> Result<Vec<PipelineRecord>> {
        self.fill_pipeline_scopes().await?;
        // A grant covers its own scope and every scope below it ('' is the server's).
        sqlx::query(&format!(
            "SELECT {COLUMNS} FROM pipelines p WHERE EXISTS (SELECT 1 FROM grants g \
             JOIN principal_roles pr ON pr.role_id = g.role_id \
             WHERE pr.principal_id = $1 AND g.privilege = $2 AND (g.scope = '' \
             OR p.scope = g.scope OR substr(p.scope, 1, length(g.scope) + 1) = g.scope || $3)) \
             ORDER BY name"
        ))
        .bind(principal.to_string())
        .bind(Privilege::ManagePipelines.as_str())
        .bind(SEP.to_string())
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
        for table in ["pipeline_members", "pipeline_partitions"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE pipeline = $1"))
                .bind(name)
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        tx.commit().await.map_err(query_error)?;
        Ok(deleted)
    }

    async fn join_pipeline(
        &self,
        name: &str,
        node: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Vec<String>> {
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query("DELETE FROM pipeline_members WHERE pipeline = $1 AND lease_until_ms < $2")
            .bind(name)
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        let renewed = sqlx::query(
            "UPDATE pipeline_members SET lease_until_ms = $1 WHERE pipeline = $2 AND node = $3",
        )
        .bind(until_ms)
        .bind(name)
        .bind(node)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?
        .rows_affected();
        if renewed == 0 {
            sqlx::query(
                "INSERT INTO pipeline_members (pipeline, node, lease_until_ms) VALUES ($1, $2, $3)",
            )
            .bind(name)
            .bind(node)
            .bind(until_ms)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        }
        let members =
            sqlx::query("SELECT node FROM pipeline_members WHERE pipeline = $1 ORDER BY node")
                .bind(name)
                .fetch_all(&mut *tx)
                .await
                .map_err(query_error)?
                .iter()
                .map(|row| row.get("node"))
                .collect();
        tx.commit().await.map_err(query_error)?;
        Ok(members)
    }

    async fn lease_partitions(
        &self,
        name: &str,
        node: &str,
        now_ms: i64,
        until_ms: i64,
        wanted: &[(String, i32)],
    ) -> Result<Vec<(String, i32)>> {
        let mut tx = self.write().await.map_err(query_error)?;
        let mut granted = Vec::new();
        for (topic, partition) in wanted {
            let taken = sqlx::query(
                "UPDATE pipeline_partitions SET owner = $1, lease_until_ms = $2 \
                 WHERE pipeline = $3 AND topic = $4 AND source_partition = $5 \
                 AND (owner IS NULL OR owner = $1 OR lease_until_ms < $6)",
            )
            .bind(node)
            .bind(until_ms)
            .bind(name)
            .bind(topic)
            .bind(i64::from(*partition))
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?
            .rows_affected()
                == 1;
            let taken = taken || {
                // A partition seen for the first time; a concurrent first sight loses to the
                // primary key and the partition goes to the other node.
                let inserted = sqlx::query(
                    "INSERT INTO pipeline_partitions \
                     (pipeline, topic, source_partition, owner, lease_until_ms) \
                     SELECT $1, $2, $3, $4, $5 WHERE NOT EXISTS (SELECT 1 FROM pipeline_partitions \
                     WHERE pipeline = $1 AND topic = $2 AND source_partition = $3)",
                )
                .bind(name)
                .bind(topic)
                .bind(i64::from(*partition))
                .bind(node)
                .bind(until_ms)
                .execute(&mut *tx)
                .await;
                match inserted {
                    Ok(done) => done.rows_affected() == 1,
                    Err(e) if is_unique_violation(&e) => false,
                    Err(e) => return Err(query_error(e)),
                }
            };
            if taken {
                granted.push((topic.clone(), *partition));
            }
        }
        tx.commit().await.map_err(query_error)?;
        Ok(granted)
    }

    async fn release_partitions(
        &self,
        name: &str,
        node: &str,
        keep: &[(String, i32)],
    ) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        let held: Vec<(String, i32)> = sqlx::query(
            "SELECT topic, source_partition FROM pipeline_partitions \
             WHERE pipeline = $1 AND owner = $2",
        )
        .bind(name)
        .bind(node)
        .fetch_all(&mut *tx)
        .await
        .map_err(query_error)?
        .iter()
        .map(|row| {
            (
                row.get("topic"),
                row.get::<i64, _>("source_partition") as i32,
            )
        })
        .collect();
        for (topic, partition) in held.iter().filter(|p| !keep.contains(p)) {
            sqlx::query(
                "UPDATE pipeline_partitions SET owner = NULL, lease_until_ms = NULL \
                 WHERE pipeline = $1 AND topic = $2 AND source_partition = $3 AND owner = $4",
            )
            .bind(name)
            .bind(topic)
            .bind(i64::from(*partition))
            .bind(node)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        }
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn leave_pipeline(&self, name: &str, node: &str) -> Result<()> {
        self.release_partitions(name, node, &[]).await?;
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query("DELETE FROM pipeline_members WHERE pipeline = $1 AND node = $2")
            .bind(name)
            .bind(node)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }

    async fn partition_leases(&self, name: &str) -> Result<Vec<PartitionLease>> {
        Ok(sqlx::query(
            "SELECT topic, source_partition, owner, lease_until_ms FROM pipeline_partitions \
             WHERE pipeline = $1 ORDER BY topic, source_partition",
        )
        .bind(name)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?
        .iter()
        .map(|row| PartitionLease {
            topic: row.get("topic"),
            partition: row.get::<i64, _>("source_partition") as i32,
            owner: row.get("owner"),
            lease_until_ms: row.get("lease_until_ms"),
        })
        .collect())
    }
}
