//! `GET /v1/config`.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use floe_catalog::governance::authz::Caller;
use serde_json::{Value, json};

use super::ENDPOINTS;
use super::types::ConfigQuery;
use crate::AppState;
use crate::error::ApiResult;
use crate::extract::QueryParams;
use crate::idempotency::LIFETIME_ISO;

/// The warehouse a client gets when it names none.
pub const DEFAULT_WAREHOUSE: &str = "default";

pub async fn get_config(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    QueryParams(query): QueryParams<ConfigQuery>,
) -> ApiResult<Json<Value>> {
    let name = query
        .warehouse
        .filter(|w| !w.is_empty())
        .unwrap_or_else(|| DEFAULT_WAREHOUSE.to_string());
    let warehouse = state.catalog.get_warehouse(&caller, &name).await?;
    Ok(Json(json!({
        "defaults": {},
        "overrides": { "prefix": warehouse.name },
        "endpoints": ENDPOINTS,
        "idempotency-key-lifetime": LIFETIME_ISO,
    })))
}
