//! Row and column policies over SQL (`data_policies`): one row per role and table, its masks
//! as JSON. The `GrantStore` methods that read and change them call these.

use floe_catalog::governance::policies::{ColumnMask, DataPolicy};
use floe_catalog::{CatalogError, Result};
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::error::{is_foreign_key_violation, query_error};
use crate::{SqlStore, StoreError};

const COLUMNS: &str = "r.name AS role, p.table_id, p.scope, p.row_filter, p.masks, p.created_at_ms";

fn policy_of(row: &AnyRow) -> Result<DataPolicy> {
    let masks: String = row.get("masks");
    let masks: Vec<ColumnMask> = serde_json::from_str(&masks).map_err(|e| StoreError::Corrupt {
        what: "data policy masks",
        detail: e.to_string(),
    })?;
    Ok(DataPolicy {
        role: row.get("role"),
        table_id: row.get("table_id"),
        scope: row.get("scope"),
        row_filter: row.get("row_filter"),
        masks,
        created_at_ms: row.get("created_at_ms"),
    })
}

pub(crate) async fn principal_policies(
    store: &SqlStore,
    principal: Uuid,
) -> Result<Vec<DataPolicy>> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM data_policies p JOIN roles r ON r.id = p.role_id \
         JOIN principal_roles pr ON pr.role_id = p.role_id WHERE pr.principal_id = $1"
    ))
    .bind(principal.to_string())
    .fetch_all(&store.pool)
    .await
    .map_err(query_error)?
    .iter()
    .map(policy_of)
    .collect()
}

pub(crate) async fn set_policy(store: &SqlStore, policy: &DataPolicy) -> Result<()> {
    let masks = serde_json::to_string(&policy.masks)
        .map_err(|e| CatalogError::bad_request(format!("policy masks: {e}")))?;
    let mut tx = store.write().await.map_err(query_error)?;
    let role = sqlx::query("SELECT id FROM roles WHERE name = $1")
        .bind(&policy.role)
        .fetch_optional(&mut *tx)
        .await
        .map_err(query_error)?
        .map(|r| r.get::<String, _>("id"))
        .ok_or_else(|| no_such_role(&policy.role))?;
    sqlx::query(
        "INSERT INTO data_policies (role_id, table_id, scope, row_filter, masks, created_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (role_id, table_id) DO UPDATE SET \
         scope = excluded.scope, row_filter = excluded.row_filter, masks = excluded.masks, \
         created_at_ms = excluded.created_at_ms",
    )
    .bind(role)
    .bind(&policy.table_id)
    .bind(&policy.scope)
    .bind(&policy.row_filter)
    .bind(masks)
    .bind(policy.created_at_ms)
    .execute(&mut *tx)
    .await
    .map_err(|e| {
        if is_foreign_key_violation(&e) {
            no_such_role(&policy.role)
        } else {
            query_error(e)
        }
    })?;
    tx.emit(Some(policy_event("set", &policy.role, &policy.table_id)));
    tx.commit().await.map_err(query_error)
}

/// The change event of a policy set or removed.
fn policy_event(kind: &str, role: &str, table_id: &str) -> floe_catalog::events::NewEvent {
    floe_catalog::events::NewEvent {
        kind: format!("policy.{kind}"),
        subject: format!("role/{role}"),
        data: serde_json::json!({"role": role, "table-id": table_id}),
    }
}

pub(crate) async fn delete_policy(store: &SqlStore, role: &str, table_id: &str) -> Result<bool> {
    let mut tx = store.write().await.map_err(query_error)?;
    let deleted = sqlx::query(
        "DELETE FROM data_policies WHERE table_id = $1 \
         AND role_id = (SELECT id FROM roles WHERE name = $2)",
    )
    .bind(table_id)
    .bind(role)
    .execute(&mut *tx)
    .await
    .map_err(query_error)?
    .rows_affected()
        == 1;
    if deleted {
        tx.emit(Some(policy_event("removed", role, table_id)));
    }
    tx.commit().await.map_err(query_error)?;
    Ok(deleted)
}

pub(crate) async fn list_policies(store: &SqlStore, role: Option<&str>) -> Result<Vec<DataPolicy>> {
    let rows = match role {
        Some(role) => {
            sqlx::query(&format!(
                "SELECT {COLUMNS} FROM data_policies p JOIN roles r ON r.id = p.role_id \
                 WHERE r.name = $1 ORDER BY r.name, p.scope"
            ))
            .bind(role)
            .fetch_all(&store.pool)
            .await
        }
        None => {
            sqlx::query(&format!(
                "SELECT {COLUMNS} FROM data_policies p JOIN roles r ON r.id = p.role_id \
                 ORDER BY r.name, p.scope"
            ))
            .fetch_all(&store.pool)
            .await
        }
    }
    .map_err(query_error)?;
    rows.iter().map(policy_of).collect()
}

fn no_such_role(name: &str) -> CatalogError {
    CatalogError::NotFound {
        error_type: "NoSuchRoleException",
        message: format!("Role does not exist: {name}"),
    }
}
