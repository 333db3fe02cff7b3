//! Namespace endpoints.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use floe_catalog::governance::authz::Caller;
use serde_json::{Value, json};

use super::page_request;
use super::types::{CreateNamespaceRequest, ListQuery, UpdateNamespacePropertiesRequest};
use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams, QueryParams, parse_namespace};

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(prefix): PathParams<String>,
    QueryParams(query): QueryParams<ListQuery>,
) -> ApiResult<Json<Value>> {
    let page = page_request(&query)?;
    let parent = match query.parent.as_deref() {
        None | Some("") => None,
        Some(raw) => Some(parse_namespace(raw)?),
    };
    let listed = state
        .catalog
        .list_namespaces(&caller, &prefix, parent.as_ref(), &page)
        .await?;
    let namespaces: Vec<Vec<String>> = listed.items.iter().map(|ns| ns.clone().inner()).collect();
    Ok(Json(
        json!({ "namespaces": namespaces, "next-page-token": listed.next_token }),
    ))
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(prefix): PathParams<String>,
    JsonBody(request): JsonBody<CreateNamespaceRequest>,
) -> ApiResult<Json<Value>> {
    let ns = iceberg::NamespaceIdent::from_vec(request.namespace)
        .map_err(|_| ApiError::bad_request("namespace must have at least one level"))?;
    let record = state
        .catalog
        .create_namespace(&caller, &prefix, &ns, request.properties)
        .await?;
    Ok(Json(json!({
        "namespace": record.ident.inner(),
        "properties": record.properties,
    })))
}

pub async fn load(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace)): PathParams<(String, String)>,
) -> ApiResult<Json<Value>> {
    let ns = parse_namespace(&namespace)?;
    let record = state.catalog.load_namespace(&caller, &prefix, &ns).await?;
    Ok(Json(json!({
        "namespace": record.ident.inner(),
        "properties": record.properties,
    })))
}

pub async fn exists(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace)): PathParams<(String, String)>,
) -> ApiResult<Response> {
    let ns = parse_namespace(&namespace)?;
    state.catalog.load_namespace(&caller, &prefix, &ns).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn drop(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    let ns = parse_namespace(&namespace)?;
    state.catalog.drop_namespace(&caller, &prefix, &ns).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn update_properties(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace)): PathParams<(String, String)>,
    JsonBody(request): JsonBody<UpdateNamespacePropertiesRequest>,
) -> ApiResult<Json<Value>> {
    let ns = parse_namespace(&namespace)?;
    let changes = state
        .catalog
        .update_namespace_properties(&caller, &prefix, &ns, request.updates, request.removals)
        .await?;
    Ok(Json(json!({
        "updated": changes.updated,
        "removed": changes.removed,
        "missing": changes.missing,
    })))
}
