//! `JobStore` over SQL: leased maintenance jobs and maintenance policies.
//!
//! Claims are serialized: on SQLite by the in-process write lock, on PostgreSQL by a
//! transaction-scoped advisory lock, so two nodes never pick against the same snapshot of
//! running jobs and the per-warehouse cap holds cluster-wide.

use std::collections::HashMap;

use async_trait::async_trait;
use floe_catalog::jobs::{JobFilter, JobOutcome, JobRecord, JobStatus, JobStore, NewJob};
use floe_catalog::{CatalogError, Result};
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::error::{is_unique_violation, query_error};
use crate::now_ms;
use crate::{Backend, SqlStore, StoreError};

/// Key of the PostgreSQL advisory lock that serializes claims across nodes.
const CLAIM_LOCK: i64 = 7_212_026;

/// Rows a listing returns when the filter names no limit, and at most.
const DEFAULT_LIST_LIMIT: usize = 100;
const MAX_LIST_LIMIT: usize = 1000;

const JOB_COLUMNS: &str = "id, warehouse_id, table_id, kind, status, priority, trigger, \
     attempts, max_attempts, params, not_before_ms, lease_owner, lease_until_ms, created_at_ms, \
     started_at_ms, finished_at_ms, result, error";

/// A queued job that is due, or a running one whose lease expired (its node is gone).
const CLAIMABLE: &str = "((status = 'queued' AND not_before_ms <= $1) \
     OR (status = 'running' AND lease_until_ms < $1))";

fn corrupt(what: &'static str, detail: impl ToString) -> CatalogError {
    StoreError::Corrupt {
        what,
        detail: detail.to_string(),
    }
    .into()
}

fn parse_uuid(what: &'static str, s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|e| corrupt(what, e))
}

fn parse_json(what: &'static str, s: &str) -> Result<serde_json::Value> {
    serde_json::from_str(s).map_err(|e| corrupt(what, e))
}

fn to_json(value: &serde_json::Value) -> String {
    // Serializing a `Value` cannot fail: its map keys are strings.
    value.to_string()
}

fn to_i32(what: &'static str, v: i64) -> Result<i32> {
    i32::try_from(v).map_err(|e| corrupt(what, e))
}

fn job_from_row(row: &AnyRow) -> Result<JobRecord> {
    let status: String = row.get("status");
    Ok(JobRecord {
        id: parse_uuid("job id", &row.get::<String, _>("id"))?,
        warehouse_id: parse_uuid("job warehouse id", &row.get::<String, _>("warehouse_id"))?,
        table_id: parse_uuid("job table id", &row.get::<String, _>("table_id"))?,
        kind: row.get("kind"),
        status: JobStatus::parse(&status).ok_or_else(|| corrupt("job status", &status))?,
        priority: to_i32("job priority", row.get("priority"))?,
        trigger: row.get("trigger"),
        attempts: to_i32("job attempts", row.get("attempts"))?,
        max_attempts: to_i32("job max attempts", row.get("max_attempts"))?,
        params: parse_json("job params", &row.get::<String, _>("params"))?,
        not_before_ms: row.get("not_before_ms"),
        lease_owner: row.get("lease_owner"),
        lease_until_ms: row.get("lease_until_ms"),
        created_at_ms: row.get("created_at_ms"),
        started_at_ms: row.get("started_at_ms"),
        finished_at_ms: row.get("finished_at_ms"),
        result: row
            .get::<Option<String>, _>("result")
            .map(|s| parse_json("job result", &s))
            .transpose()?,
        error: row.get("error"),
    })
}

/// `$from, $from+1, …` for `n` parameters.
fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How busy a warehouse with claimable work is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WarehouseLoad {
    id: String,
    /// Jobs running under unexpired leases.
    running: usize,
    /// When it last started a job; `None` if it never did.
    last_start_ms: Option<i64>,
}

/// The warehouse to claim from: none at `cap`; the fewest running first, then the one that
/// started a job least recently (never is least recent), then by id for a stable order.
fn pick_warehouse(loads: &[WarehouseLoad], cap: usize) -> Option<&WarehouseLoad> {
    loads.iter().filter(|w| w.running < cap).min_by(|a, b| {
        (a.running, a.last_start_ms, &a.id).cmp(&(b.running, b.last_start_ms, &b.id))
    })
}

/// What one pick inside a claim transaction came to.
enum Pick {
    Claimed(Box<JobRecord>),
    /// Nothing is claimable (or every warehouse with work is at its cap).
    Nothing,
    /// The picked job changed between read and update: on PostgreSQL its old owner may
    /// renew or finish it without the claim lock.
    Lost,
}

impl SqlStore {
    /// Picks and leases the next job inside a claim transaction.
    async fn pick_and_lease(
        tx: &mut sqlx::AnyConnection,
        owner: &str,
        now_ms: i64,
        lease_ms: i64,
        warehouse_cap: usize,
    ) -> Result<Pick> {
        let warehouses: Vec<String> = sqlx::query(&format!(
            "SELECT DISTINCT warehouse_id FROM maintenance_jobs WHERE {CLAIMABLE}"
        ))
        .bind(now_ms)
        .fetch_all(&mut *tx)
        .await
        .map_err(query_error)?
        .iter()
        .map(|r| r.get("warehouse_id"))
        .collect();
        if warehouses.is_empty() {
            return Ok(Pick::Nothing);
        }
        let list = placeholders(2, warehouses.len());
        let sql = format!(
            "SELECT warehouse_id, COUNT(*) AS n FROM maintenance_jobs \
             WHERE status = 'running' AND lease_until_ms >= $1 AND warehouse_id IN ({list}) \
             GROUP BY warehouse_id"
        );
        let mut running = sqlx::query(&sql).bind(now_ms);
        for w in &warehouses {
            running = running.bind(w);
        }
        let running: HashMap<String, i64> = running
            .fetch_all(&mut *tx)
            .await
            .map_err(query_error)?
            .iter()
            .map(|r| (r.get("warehouse_id"), r.get("n")))
            .collect();
        let list = placeholders(1, warehouses.len());
        let sql = format!(
            "SELECT warehouse_id, MAX(started_at_ms) AS last_start FROM maintenance_jobs \
             WHERE warehouse_id IN ({list}) GROUP BY warehouse_id"
        );
        let mut starts = sqlx::query(&sql);
        for w in &warehouses {
            starts = starts.bind(w);
        }
        let starts: HashMap<String, Option<i64>> = starts
            .fetch_all(&mut *tx)
            .await
            .map_err(query_error)?
            .iter()
            .map(|r| (r.get("warehouse_id"), r.get("last_start")))
            .collect();
        let loads: Vec<WarehouseLoad> = warehouses
            .into_iter()
            .map(|id| WarehouseLoad {
                running: running.get(&id).copied().unwrap_or(0).max(0) as usize,
                last_start_ms: starts.get(&id).copied().flatten(),
                id,
            })
            .collect();
        let Some(warehouse) = pick_warehouse(&loads, warehouse_cap) else {
            return Ok(Pick::Nothing);
        };
        let Some(row) = sqlx::query(&format!(
            "SELECT id FROM maintenance_jobs WHERE {CLAIMABLE} AND warehouse_id = $2 \
             ORDER BY priority DESC, created_at_ms ASC, id ASC LIMIT 1"
        ))
        .bind(now_ms)
        .bind(&warehouse.id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(query_error)?
        else {
            return Ok(Pick::Lost);
        };
        let id: String = row.get("id");
        // The condition is checked again: the job may have changed since it was read.
        let row = sqlx::query(&format!(
            "UPDATE maintenance_jobs SET status = 'running', lease_owner = $2, \
             lease_until_ms = $3, attempts = attempts + 1, started_at_ms = $1 \
             WHERE id = $4 AND {CLAIMABLE} RETURNING {JOB_COLUMNS}"
        ))
        .bind(now_ms)
        .bind(owner)
        .bind(now_ms.saturating_add(lease_ms))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(query_error)?;
        match row {
            Some(row) => Ok(Pick::Claimed(Box::new(job_from_row(&row)?))),
            None => Ok(Pick::Lost),
        }
    }
}

#[async_trait]
impl JobStore for SqlStore {
    async fn enqueue_job(&self, job: &NewJob) -> Result<Option<Uuid>> {
        let id = Uuid::now_v7();
        let mut tx = self.write().await.map_err(query_error)?;
        let inserted = sqlx::query(
            "INSERT INTO maintenance_jobs (id, warehouse_id, table_id, kind, status, priority, \
             trigger, attempts, max_attempts, params, not_before_ms, created_at_ms) \
             VALUES ($1, $2, $3, $4, 'queued', $5, $6, 0, $7, $8, $9, $10)",
        )
        .bind(id.to_string())
        .bind(job.warehouse_id.to_string())
        .bind(job.table_id.to_string())
        .bind(&job.kind)
        .bind(i64::from(job.priority))
        .bind(&job.trigger)
        .bind(i64::from(job.max_attempts))
        .bind(to_json(&job.params))
        .bind(job.not_before_ms)
        .bind(now_ms())
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            // The live-job index: one of this kind is already queued or running.
            Err(e) if is_unique_violation(&e) => return Ok(None),
            Err(e) => return Err(query_error(e)),
        }
        tx.commit().await.map_err(query_error)?;
        Ok(Some(id))
    }

    async fn claim_job(
        &self,
        owner: &str,
        now_ms: i64,
        lease_ms: i64,
        warehouse_cap: usize,
    ) -> Result<Option<JobRecord>> {
        let mut tx = self.write().await.map_err(query_error)?;
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(CLAIM_LOCK)
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        // A job whose lease ran out in every one of its attempts (its node died running it,
        // each time) fails for good rather than taking node after node down.
        sqlx::query(
            "UPDATE maintenance_jobs SET status = 'failed', finished_at_ms = $1, \
             lease_owner = NULL, lease_until_ms = NULL, \
             error = 'the node running it stopped in every attempt' \
             WHERE status = 'running' AND lease_until_ms < $1 AND attempts >= max_attempts",
        )
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        // A pick lost to its old owner's renewal or finish is retried on a fresh read; a
        // node that keeps losing leaves the work to the next claim.
        for _ in 0..3 {
            match Self::pick_and_lease(&mut tx, owner, now_ms, lease_ms, warehouse_cap).await? {
                Pick::Claimed(job) => {
                    tx.commit().await.map_err(query_error)?;
                    return Ok(Some(*job));
                }
                Pick::Nothing => break,
                Pick::Lost => {}
            }
        }
        tx.commit().await.map_err(query_error)?;
        Ok(None)
    }

    async fn renew_job_lease(&self, id: Uuid, owner: &str, until_ms: i64) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        let renewed = sqlx::query(
            "UPDATE maintenance_jobs SET lease_until_ms = $1 \
             WHERE id = $2 AND lease_owner = $3 AND status = 'running'",
        )
        .bind(until_ms)
        .bind(id.to_string())
        .bind(owner)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?
        .rows_affected()
            == 1;
        tx.commit().await.map_err(query_error)?;
        Ok(renewed)
    }

    async fn release_job(&self, id: Uuid, owner: &str, now_ms: i64) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        let released = sqlx::query(
            "UPDATE maintenance_jobs SET status = 'queued', lease_owner = NULL, \
             lease_until_ms = NULL, not_before_ms = $1, \
             attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END \
             WHERE id = $2 AND lease_owner = $3 AND status = 'running'",
        )
        .bind(now_ms)
        .bind(id.to_string())
        .bind(owner)
        .execute(&mut *tx)
        .await
        .map_err(query_error)?
        .rows_affected()
            == 1;
        tx.commit().await.map_err(query_error)?;
        Ok(released)
    }

    async fn expedite_job(&self, id: Uuid, now_ms: i64, priority: i32) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        let changed = sqlx::query(
            "UPDATE maintenance_jobs SET \
             not_before_ms = CASE WHEN not_before_ms > $1 THEN $1 ELSE not_before_ms END, \
             priority = CASE WHEN priority < $2 THEN $2 ELSE priority END \
             WHERE id = $3 AND status = 'queued'",
        )
        .bind(now_ms)
        .bind(priority)
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(query_error)?
        .rows_affected()
            == 1;
        tx.commit().await.map_err(query_error)?;
        Ok(changed)
    }

    async fn finish_job(
        &self,
        id: Uuid,
        owner: &str,
        now_ms: i64,
        outcome: &JobOutcome,
    ) -> Result<bool> {
        let mut tx = self.write().await.map_err(query_error)?;
        let query = match outcome {
            JobOutcome::Succeeded(result) => sqlx::query(
                "UPDATE maintenance_jobs SET status = 'succeeded', result = $1, error = NULL, \
                 finished_at_ms = $2, lease_owner = NULL, lease_until_ms = NULL \
                 WHERE id = $3 AND lease_owner = $4 AND status = 'running'",
            )
            .bind(to_json(result))
            .bind(now_ms)
            .bind(id.to_string())
            .bind(owner),
            // Queued again while attempts remain, failed for good otherwise.
            JobOutcome::Failed { error, retry_at_ms } => sqlx::query(
                "UPDATE maintenance_jobs SET error = $1, \
                 status = CASE WHEN attempts < max_attempts THEN 'queued' ELSE 'failed' END, \
                 not_before_ms = CASE WHEN attempts < max_attempts THEN $5 ELSE not_before_ms END, \
                 finished_at_ms = CASE WHEN attempts < max_attempts THEN NULL ELSE $2 END, \
                 lease_owner = NULL, lease_until_ms = NULL \
                 WHERE id = $3 AND lease_owner = $4 AND status = 'running'",
            )
            .bind(error.clone())
            .bind(now_ms)
            .bind(id.to_string())
            .bind(owner)
            .bind(*retry_at_ms),
        };
        let applied = query
            .execute(&mut *tx)
            .await
            .map_err(query_error)?
            .rows_affected()
            == 1;
        tx.commit().await.map_err(query_error)?;
        Ok(applied)
    }

    async fn get_job(&self, id: Uuid) -> Result<Option<JobRecord>> {
        sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM maintenance_jobs WHERE id = $1"
        ))
        .bind(id.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error)?
        .as_ref()
        .map(job_from_row)
        .transpose()
    }

    async fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        let mut sql = format!("SELECT {JOB_COLUMNS} FROM maintenance_jobs WHERE 1 = 1");
        let mut binds: Vec<String> = Vec::new();
        let mut add = |column: &str, value: String| {
            binds.push(value);
            sql.push_str(&format!(" AND {column} = ${}", binds.len()));
        };
        if let Some(w) = filter.warehouse_id {
            add("warehouse_id", w.to_string());
        }
        if let Some(t) = filter.table_id {
            add("table_id", t.to_string());
        }
        if let Some(k) = &filter.kind {
            add("kind", k.clone());
        }
        if let Some(s) = filter.status {
            add("status", s.as_str().to_string());
        }
        let limit = match filter.limit {
            0 => DEFAULT_LIST_LIMIT,
            n => n.min(MAX_LIST_LIMIT),
        };
        sql.push_str(&format!(
            " ORDER BY created_at_ms DESC, id DESC LIMIT ${}",
            binds.len() + 1
        ));
        let mut query = sqlx::query(&sql);
        for b in binds {
            query = query.bind(b);
        }
        query
            .bind(limit as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?
            .iter()
            .map(job_from_row)
            .collect()
    }

    async fn set_policy(
        &self,
        scope_id: Uuid,
        warehouse_id: Uuid,
        policy: Option<&serde_json::Value>,
    ) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        match policy {
            Some(policy) => sqlx::query(
                "INSERT INTO maintenance_policies (scope_id, warehouse_id, policy, updated_at_ms) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (scope_id) DO UPDATE SET \
                 warehouse_id = excluded.warehouse_id, policy = excluded.policy, \
                 updated_at_ms = excluded.updated_at_ms",
            )
            .bind(scope_id.to_string())
            .bind(warehouse_id.to_string())
            .bind(to_json(policy))
            .bind(now_ms()),
            None => sqlx::query("DELETE FROM maintenance_policies WHERE scope_id = $1")
                .bind(scope_id.to_string()),
        }
        .execute(&mut *tx)
        .await
        .map_err(query_error)?;
        tx.commit().await.map_err(query_error)
    }

    async fn get_policies(&self, scope_ids: &[Uuid]) -> Result<Vec<(Uuid, serde_json::Value)>> {
        if scope_ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT scope_id, policy FROM maintenance_policies WHERE scope_id IN ({})",
            placeholders(1, scope_ids.len())
        );
        let mut query = sqlx::query(&sql);
        for id in scope_ids {
            query = query.bind(id.to_string());
        }
        query
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?
            .iter()
            .map(|r| {
                Ok((
                    parse_uuid("policy scope id", &r.get::<String, _>("scope_id"))?,
                    parse_json("maintenance policy", &r.get::<String, _>("policy"))?,
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(id: &str, running: usize, last_start_ms: Option<i64>) -> WarehouseLoad {
        WarehouseLoad {
            id: id.into(),
            running,
            last_start_ms,
        }
    }

    #[test]
    fn warehouses_are_picked_fairly() {
        let pick = |loads: &[WarehouseLoad], cap| pick_warehouse(loads, cap).map(|w| w.id.clone());
        // Fewest running first, whatever the start times.
        let loads = [load("a", 1, Some(1)), load("b", 0, Some(9))];
        assert_eq!(pick(&loads, 5).as_deref(), Some("b"));
        // At the cap: skipped.
        let loads = [load("a", 2, None), load("b", 3, Some(1))];
        assert_eq!(pick(&loads, 3).as_deref(), Some("a"));
        assert_eq!(pick(&loads, 2), None);
        // Ties: never started, then least recently started.
        let loads = [
            load("a", 1, Some(5)),
            load("b", 1, Some(3)),
            load("c", 1, None),
        ];
        assert_eq!(pick(&loads, 2).as_deref(), Some("c"));
        assert_eq!(pick(&loads[..2], 2).as_deref(), Some("b"));
        assert_eq!(pick(&[], 2), None);
    }
}
