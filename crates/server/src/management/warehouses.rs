//! `/api/v1/warehouses`.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use floe_catalog::model::Warehouse;
use floe_storage::StorageProfile;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiResult;
use crate::extract::{JsonBody, PathParams};
use floe_catalog::governance::authz::Caller;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CreateWarehouseRequest {
    pub name: String,
    pub storage: StorageProfile,
    #[serde(default)]
    pub properties: HashMap<String, String>,
}

/// A warehouse as the API shows it: secrets are never returned.
pub fn warehouse_json(w: &Warehouse) -> Value {
    json!({
        "id": w.id,
        "name": w.name,
        "storage": w.storage.redacted(),
        "properties": w.properties,
        "created-at-ms": w.created_at_ms,
    })
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Value>> {
    let warehouses = state.catalog.list_warehouses(&caller).await?;
    Ok(Json(json!({
        "warehouses": warehouses.iter().map(warehouse_json).collect::<Vec<_>>()
    })))
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<CreateWarehouseRequest>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let warehouse = state
        .catalog
        .create_warehouse(&caller, &request.name, request.storage, request.properties)
        .await?;
    Ok((StatusCode::CREATED, Json(warehouse_json(&warehouse))))
}

pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(warehouse_json(
        &state.catalog.get_warehouse(&caller, &name).await?,
    )))
}

pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    state.catalog.delete_warehouse(&caller, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
