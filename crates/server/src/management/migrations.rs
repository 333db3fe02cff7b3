//! `/api/v1/migrations…`: the record `floe migrate` keeps of each migration, and
//! `/api/v1/tables/convert`, which turns Hive-layout Parquet files into an Iceberg table in
//! place.
//!
//! - `GET /migrations`: every migration with records; `GET /migrations/{name}`: its tables.
//! - `PUT /migrations/{name}/tables`: records one source table's step (each a line in the
//!   audit trail); `DELETE /migrations/{name}`: forgets the migration's records.
//!   All need `manage-warehouses` on the server: a migration moves whole catalogs.
//! - `POST /migrations/digest`: a migrated table read on both sides, see
//!   [`floe_maintenance::exec::digest`] (`manage-warehouses`, and `read-data` on the table).
//! - `POST /tables/convert`: see [`floe_maintenance::exec::convert`]; needs `create-table` in
//!   the namespace (or `write-data` on the table for `"mode": "sync"`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::migrations::{MAX_NAME_BYTES, MAX_STATE_BYTES, MigrationStore, MigrationTable};
use floe_maintenance::exec::convert::{ConvertRequest, convert_table};
use floe_maintenance::exec::digest::{DigestRequest, digest_table};
use iceberg::TableIdent;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams};

fn store(state: &AppState) -> ApiResult<&Arc<dyn MigrationStore>> {
    state.migrations.as_ref().ok_or_else(|| {
        ApiError(CatalogError::Unavailable(
            "migration records are not kept by this server's store".into(),
        ))
    })
}

fn check_name(what: &str, name: &str) -> ApiResult<()> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request(format!(
            "{what} must be 1 to {MAX_NAME_BYTES} bytes without control characters"
        )));
    }
    Ok(())
}

/// `GET /api/v1/migrations`.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Value>> {
    crate::auth::require_server(&caller, Privilege::ManageWarehouses)?;
    let migrations = store(&state)?.migrations().await?;
    Ok(Json(json!({ "migrations": migrations })))
}

/// `GET /api/v1/migrations/{name}`.
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Value>> {
    crate::auth::require_server(&caller, Privilege::ManageWarehouses)?;
    check_name("a migration's name", &name)?;
    let tables = store(&state)?.migration_tables(&name).await?;
    Ok(Json(json!({ "migration": name, "tables": tables })))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TableStep {
    source: String,
    wave: i64,
    state: Value,
}

/// `PUT /api/v1/migrations/{name}/tables`.
pub async fn put_table(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
    JsonBody(step): JsonBody<TableStep>,
) -> ApiResult<StatusCode> {
    crate::auth::require_server(&caller, Privilege::ManageWarehouses)?;
    check_name("a migration's name", &name)?;
    check_name("a source table's name", &step.source)?;
    if !step.state.is_object() || step.state.to_string().len() > MAX_STATE_BYTES {
        return Err(ApiError::bad_request(format!(
            "state must be a JSON object of at most {MAX_STATE_BYTES} bytes"
        )));
    }
    store(&state)?
        .put_migration_table(&MigrationTable {
            migration: name,
            source: step.source,
            wave: step.wave,
            state: step.state,
            updated_at_ms: 0,
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/v1/migrations/{name}`.
pub async fn forget(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Value>> {
    crate::auth::require_server(&caller, Privilege::ManageWarehouses)?;
    check_name("a migration's name", &name)?;
    let forgotten = store(&state)?.forget_migration(&name).await?;
    Ok(Json(json!({ "forgotten-tables": forgotten })))
}

/// `POST /api/v1/tables/convert`.
pub async fn convert(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<ConvertRequest>,
) -> ApiResult<Json<Value>> {
    check_name("source", &request.source)?;
    crate::audit::note_details(json!({
        "warehouse": request.warehouse,
        "namespace": request.namespace,
        "table": request.table,
        "source": request.source,
        "partitions": request.partitions.len(),
    }));
    let report = convert_table(&crate::maintenance::maintainer(&state), &caller, &request)
        .await
        .map_err(crate::maintenance::maintenance_error)?;
    Ok(Json(json!(report)))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ReadMetadata {
    warehouse: String,
    metadata_location: String,
    /// The table the file is to belong to (`namespace` and `table` together).
    #[serde(default)]
    namespace: Option<Vec<String>>,
    #[serde(default)]
    table: Option<String>,
}

/// `POST /api/v1/migrations/read-metadata`: a table metadata file inside a warehouse, as
/// registering it would read it (`manage-warehouses` on the server).
pub async fn read_metadata(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<ReadMetadata>,
) -> ApiResult<Json<Value>> {
    let table = match (&request.namespace, &request.table) {
        (Some(ns), Some(name)) => Some(
            TableIdent::from_strs(ns.iter().map(String::as_str).chain([name.as_str()]))
                .map_err(|e| ApiError::bad_request(format!("table name: {e}")))?,
        ),
        (None, None) => None,
        _ => {
            return Err(ApiError::bad_request(
                "name the table with both namespace and table, or neither",
            ));
        }
    };
    let metadata = state
        .catalog
        .read_table_metadata(
            &caller,
            &request.warehouse,
            &request.metadata_location,
            table.as_ref(),
        )
        .await?;
    Ok(Json(json!({
        "metadata-location": request.metadata_location,
        "metadata": metadata.as_ref(),
    })))
}

/// `POST /api/v1/migrations/digest`: every row of a migrated table read through Floe and from
/// its source, each side's row count and per-column checksums.
pub async fn digest(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<DigestRequest>,
) -> ApiResult<Json<Value>> {
    crate::auth::require_server(&caller, Privilege::ManageWarehouses)?;
    let report = digest_table(&crate::maintenance::maintainer(&state), &caller, &request)
        .await
        .map_err(crate::maintenance::maintenance_error)?;
    Ok(Json(json!(report)))
}
