//! `/api/v1/tenants/{warehouse}/limits`: a tenant's (a warehouse's) limits and what it uses.
//!
//! - `GET`: the limits set and the tenant's usage on this node (accepted, refused by limit,
//!   queued statements, active series, storage) — for holders of `manage-warehouses` on the
//!   server and for any principal that can see the warehouse (a tenant sees its own limits).
//! - `PUT`: replaces the limits (a JSON object of [`Limits`]; unknown names and nonsense
//!   values are refused naming the field) — `manage-warehouses` on the server only, so a
//!   tenant cannot raise its own. In force on this node at once, on every other node within
//!   [`floe_catalog::tenants::REFRESH`].
//! - `DELETE`: removes them (no limits).

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::tenants::{Limit, Limits, Tenant, TenantStore};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams};

fn store(state: &AppState) -> ApiResult<&Arc<dyn TenantStore>> {
    state.catalog.tenants().store().ok_or_else(|| {
        ApiError(CatalogError::Unavailable(
            "tenant limits are not kept by this server's store".into(),
        ))
    })
}

/// What a tenant used on this node.
pub fn usage(tenant: &Tenant) -> Value {
    let counters = &tenant.counters;
    let refused: Map<String, Value> = Limit::ALL
        .iter()
        .map(|limit| (limit.name().to_string(), json!(counters.refused(*limit))))
        .filter(|(_, count)| count != &json!(0))
        .collect();
    json!({
        "accepted-records": counters.accepted_records.load(Ordering::Relaxed),
        "accepted-bytes": counters.accepted_bytes.load(Ordering::Relaxed),
        "refused": refused,
        "queued-queries": counters.queued.load(Ordering::Relaxed),
        "active-series": tenant.active_series(),
        "storage-bytes": tenant.storage_bytes(),
    })
}

fn answer(name: &str, tenant: &Tenant) -> Json<Value> {
    Json(json!({
        "warehouse": name,
        "limits": tenant.limits(),
        "usage": usage(tenant),
    }))
}

/// `GET /api/v1/tenants/{warehouse}/limits`.
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Value>> {
    state.catalog.get_warehouse(&caller, &name).await?;
    Ok(answer(&name, &state.catalog.tenants().get(&name)))
}

/// `PUT /api/v1/tenants/{warehouse}/limits`.
pub async fn put(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
    JsonBody(limits): JsonBody<Limits>,
) -> ApiResult<Json<Value>> {
    crate::auth::require_server(&caller, Privilege::ManageWarehouses)?;
    limits
        .validate()
        .map_err(|e| ApiError::bad_request(format!("limits: {e}")))?;
    let warehouse = state.catalog.get_warehouse(&caller, &name).await?;
    let value = serde_json::to_value(&limits)
        .map_err(|e| ApiError(CatalogError::internal("encode tenant limits", e)))?;
    store(&state)?
        .set_tenant_limits(warehouse.id, Some(&value))
        .await?;
    let tenants = state.catalog.tenants();
    // In force here at once; the next refresh brings the store's version.
    tenants.apply(&name, limits, -1);
    tenants.refresh().await?;
    let tenant = tenants.get(&name);
    if tenant.limits().storage_quota_bytes.is_some() {
        // A new quota judges what the tenant holds now, not at the next measurement.
        crate::tenants::measure_tenant(&state.catalog, &tenant).await;
    }
    Ok(answer(&name, &tenant))
}

/// `DELETE /api/v1/tenants/{warehouse}/limits`.
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    crate::auth::require_server(&caller, Privilege::ManageWarehouses)?;
    let warehouse = state.catalog.get_warehouse(&caller, &name).await?;
    store(&state)?.set_tenant_limits(warehouse.id, None).await?;
    state.catalog.tenants().apply(&name, Limits::default(), 0);
    Ok(StatusCode::NO_CONTENT)
}
