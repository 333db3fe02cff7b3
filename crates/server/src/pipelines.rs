//! Stream pipelines as a managed resource (`/api/v1/pipelines`): an adapter over the
//! supervisor every node runs ([`floe_stream::kafka::Pipelines`], which deals partitions over
//! the nodes and runs this node's share).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege, Scope};
use floe_catalog::pipelines::PipelineRecord;
use floe_stream::kafka::PipelineSpec;
pub use floe_stream::kafka::Pipelines;
use iceberg::{NamespaceIdent, TableIdent};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;

fn pipelines(state: &AppState) -> ApiResult<&Arc<Pipelines>> {
    state.pipelines.as_ref().ok_or_else(|| {
        ApiError(CatalogError::Unavailable(
            "pipelines are not enabled on this server".into(),
        ))
    })
}

/// The target namespace's scope, once the caller is known to hold `manage-pipelines` on it.
async fn authorize(
    state: &AppState,
    caller: &Caller,
    spec: &PipelineSpec,
) -> ApiResult<uuid::Uuid> {
    let wh = state
        .catalog
        .visible_warehouse(caller, &spec.warehouse)
        .await?;
    let namespace = NamespaceIdent::from_vec(spec.namespace.clone())
        .map_err(|e| ApiError(CatalogError::bad_request(format!("namespace: {e}"))))?;
    caller.require(
        Privilege::ManagePipelines,
        &Scope::namespace(wh.warehouse.id, &namespace),
        || CatalogError::no_such_namespace(namespace.join(".")),
    )?;
    Ok(wh.warehouse.id)
}

fn spec_of(record: &PipelineRecord) -> ApiResult<PipelineSpec> {
    serde_json::from_value(record.spec.clone()).map_err(|e| {
        ApiError(CatalogError::internal(
            "pipeline definition",
            std::io::Error::other(e.to_string()),
        ))
    })
}

/// A stored pipeline the caller may manage (404 otherwise: existence does not leak).
async fn managed(state: &AppState, caller: &Caller, name: &str) -> ApiResult<PipelineRecord> {
    let missing = || {
        ApiError(CatalogError::NotFound {
            error_type: "NotFoundException",
            message: format!("no pipeline {name}"),
        })
    };
    let record = pipelines(state)?
        .store()
        .get_pipeline(name)
        .await?
        .ok_or_else(missing)?;
    let spec = spec_of(&record)?;
    authorize(state, caller, &spec)
        .await
        .map_err(|_| missing())?;
    Ok(record)
}

/// `POST /api/v1/pipelines`: defines a pipeline (it starts within a lease period on some
/// node). Needs `manage-pipelines` on the target namespace.
pub(crate) async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(spec): JsonBody<PipelineSpec>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let supervisor = pipelines(&state)?;
    spec.validate()
        .map_err(|e| ApiError(CatalogError::bad_request(e.to_string())))?;
    let warehouse_id = authorize(&state, &caller, &spec).await?;
    let namespace = NamespaceIdent::from_vec(spec.namespace.clone())
        .map_err(|e| ApiError(CatalogError::bad_request(format!("namespace: {e}"))))?;
    state
        .catalog
        .load_namespace(&caller, &spec.warehouse, &namespace)
        .await?;
    supervisor
        .store()
        .create_pipeline(&spec.name, warehouse_id, &json!(spec))
        .await?;
    Ok((StatusCode::CREATED, Json(json!(spec.redacted()))))
}

/// `GET /api/v1/pipelines`: the pipelines the caller may manage.
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Value>> {
    let supervisor = pipelines(&state)?;
    // Holders of manage-pipelines on the server see every pipeline; others those whose
    // namespace (or an ancestor) they hold it on, chosen by the store's query.
    let records = if caller
        .grants
        .allows(Privilege::ManagePipelines, &Scope::server())
    {
        supervisor.store().list_pipelines().await?
    } else {
        supervisor
            .store()
            .list_managed_pipelines(caller.principal.id)
            .await?
    };
    let mut visible = Vec::new();
    for record in records {
        let Ok(spec) = spec_of(&record) else { continue };
        visible.push(shown(record, &spec));
    }
    Ok(Json(json!({"pipelines": visible})))
}

/// `GET /api/v1/pipelines/{name}`.
pub(crate) async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let record = managed(&state, &caller, &name).await?;
    let spec = spec_of(&record)?;
    Ok(Json(json!(shown(record, &spec))))
}

/// A stored pipeline as the API shows it: its secrets masked.
fn shown(mut record: PipelineRecord, spec: &PipelineSpec) -> PipelineRecord {
    record.spec = json!(spec.redacted());
    record
}

/// `DELETE /api/v1/pipelines/{name}`: the pipeline stops within a lease period; its table
/// and what it committed stay.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    managed(&state, &caller, &name).await?;
    pipelines(&state)?.store().delete_pipeline(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v1/pipelines/{name}/status`: who runs it, the offsets the table has committed
/// per partition, and (on the node running it) its counters and last error.
pub(crate) async fn status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let record = managed(&state, &caller, &name).await?;
    let spec = spec_of(&record)?;
    let namespace = NamespaceIdent::from_vec(spec.namespace.clone())
        .map_err(|e| ApiError(CatalogError::bad_request(format!("namespace: {e}"))))?;
    let ident = TableIdent::new(namespace, spec.table.clone());
    let committed = match state
        .catalog
        .load_table(&Caller::system(), &spec.warehouse, &ident)
        .await
    {
        Ok(loaded) => spec.committed_offsets(&loaded.metadata),
        Err(_) => HashMap::new(),
    };
    // Lag needs the broker; a broker that does not answer is reported, not fatal.
    let lag = {
        let spec = spec.clone();
        tokio::task::spawn_blocking(move || floe_stream::kafka::lag(&spec, &committed)).await
    };
    let leases = pipelines(&state)?.store().partition_leases(&name).await?;
    let (partitions, broker_error) = match lag {
        Ok(Ok(lags)) => (
            Value::Array(
                lags.iter()
                    .map(|lag| {
                        let mut entry = json!(lag);
                        let lease = leases
                            .iter()
                            .find(|l| l.topic == lag.topic && l.partition == lag.partition);
                        entry["owner"] = json!(lease.and_then(|l| l.owner.clone()));
                        entry["lease-until-ms"] = json!(lease.and_then(|l| l.lease_until_ms));
                        entry
                    })
                    .collect(),
            ),
            Value::Null,
        ),
        Ok(Err(e)) => (json!(leases), json!(e.to_string())),
        Err(e) => (json!(leases), json!(e.to_string())),
    };
    let mut answer = pipelines(&state)?.local_status(&name);
    answer["name"] = json!(name);
    answer["node"] = json!(pipelines(&state)?.node());
    answer["partitions"] = partitions;
    answer["broker-error"] = broker_error;
    Ok(Json(answer))
}

/// What `POST /api/v1/pipelines/{name}/dead-letters/redrive` may say.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct RedriveRequest {
    /// Only count what would be sent (default true).
    pub dry_run: Option<bool>,
}

/// `POST /api/v1/pipelines/{name}/dead-letters/redrive`: the pipeline's dead letters sent back
/// to the partitions of its topics they came from, then removed from its dead-letter table
/// (floe-stream's redrive). Needs `manage-pipelines` on its namespace, `write-data` on its
/// table and `read-data` and `write-data` on its dead-letter table; a dry run by default.
pub(crate) async fn redrive(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<RedriveRequest>,
) -> ApiResult<Json<Value>> {
    let record = managed(&state, &caller, &name).await?;
    let spec = spec_of(&record)?;
    let ident = spec
        .ident()
        .map_err(|e| ApiError(CatalogError::bad_request(e.to_string())))?;
    state
        .catalog
        .authorize_table(&caller, &spec.warehouse, &ident, Privilege::WriteData)
        .await?;
    // A redrive reads the letters (it sends them to the broker) and deletes them.
    let letters = floe_stream::core::dead_letter::ident_of(&ident);
    for privilege in [Privilege::ReadData, Privilege::WriteData] {
        state
            .catalog
            .authorize_table(&caller, &spec.warehouse, &letters, privilege)
            .await?;
    }
    let dry_run = request.dry_run.unwrap_or(true);
    let done = floe_stream::kafka::redrive(&spec, &state.catalog, &state.sql, dry_run)
        .await
        .map_err(|e| ApiError(CatalogError::bad_request(e.to_string())))?;
    Ok(Json(json!({"dry-run": dry_run, "redriven": done})))
}
