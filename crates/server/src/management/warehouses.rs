//! `/api/v1/warehouses` and storage validation (`/api/v1/warehouses/{name}/validate`,
//! `/api/v1/storage/validate`).

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
    /// Create the S3 bucket (kept if these keys own it) and apply lifecycle rules first.
    #[serde(default)]
    pub create_bucket: bool,
}

/// Storage to validate without creating a warehouse on it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ValidateStorageRequest {
    pub storage: StorageProfile,
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
    let (warehouse, report) = state
        .catalog
        .create_warehouse_validated(
            &caller,
            &request.name,
            request.storage,
            request.properties,
            request.create_bucket,
        )
        .await?;
    let mut body = warehouse_json(&warehouse);
    body["validation"] = json!(report);
    Ok((StatusCode::CREATED, Json(body)))
}

/// Runs storage validation on an existing warehouse; the report says whether it passed.
pub async fn validate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Value>> {
    let report = state.catalog.validate_warehouse(&caller, &name).await?;
    Ok(Json(json!(report)))
}

/// Runs storage validation on a storage profile, creating nothing.
pub async fn validate_storage(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<ValidateStorageRequest>,
) -> ApiResult<Json<Value>> {
    let report = state
        .catalog
        .validate_storage(&caller, &request.storage)
        .await?;
    Ok(Json(json!(report)))
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
