//! View endpoints.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CreateView, LoadedView};
use iceberg::TableIdent;
use serde_json::{Value, json};

use super::types::{
    CommitViewRequest, CreateViewRequest, ListQuery, RegisterViewRequest, RenameRequest,
};
use super::{list_identifiers, page_request};
use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams, QueryParams, parse_namespace};

type ViewPath = PathParams<(String, String, String)>;

fn ident(namespace: &str, view: &str) -> ApiResult<TableIdent> {
    Ok(TableIdent::new(
        parse_namespace(namespace)?,
        view.to_string(),
    ))
}

fn view_result(loaded: &LoadedView) -> ApiResult<Json<Value>> {
    Ok(Json(json!({
        "metadata-location": loaded.metadata_location,
        "metadata": floe_catalog::metadata::to_sorted_json(&*loaded.metadata)?,
        "config": {},
    })))
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace)): PathParams<(String, String)>,
    QueryParams(query): QueryParams<ListQuery>,
) -> ApiResult<Json<Value>> {
    let ns = parse_namespace(&namespace)?;
    let page = state
        .catalog
        .list_views(&caller, &prefix, &ns, &page_request(&query)?)
        .await?;
    Ok(Json(list_identifiers(&ns, page)))
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace)): PathParams<(String, String)>,
    JsonBody(request): JsonBody<CreateViewRequest>,
) -> ApiResult<Json<Value>> {
    let ns = parse_namespace(&namespace)?;
    let loaded = state
        .catalog
        .create_view(
            &caller,
            &prefix,
            &ns,
            CreateView {
                name: request.name,
                location: request.location,
                schema: request.schema,
                view_version: request.view_version,
                properties: request.properties,
            },
        )
        .await?;
    view_result(&loaded)
}

pub async fn load(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, view)): ViewPath,
) -> ApiResult<Json<Value>> {
    let loaded = state
        .catalog
        .load_view(&caller, &prefix, &ident(&namespace, &view)?)
        .await?;
    view_result(&loaded)
}

pub async fn exists(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, view)): ViewPath,
) -> ApiResult<Response> {
    let ident = ident(&namespace, &view)?;
    if state.catalog.view_exists(&caller, &prefix, &ident).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError(floe_catalog::CatalogError::no_such_view(&ident)))
    }
}

pub async fn replace(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, view)): ViewPath,
    JsonBody(request): JsonBody<CommitViewRequest>,
) -> ApiResult<Json<Value>> {
    let ident = ident(&namespace, &view)?;
    if let Some(body_ident) = &request.identifier
        && body_ident.to_ident()? != ident
    {
        return Err(ApiError::bad_request(
            "identifier in the body does not match the path",
        ));
    }
    let loaded = state
        .catalog
        .replace_view(
            &caller,
            &prefix,
            &ident,
            request.requirements,
            request.updates,
        )
        .await?;
    view_result(&loaded)
}

pub async fn drop(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, view)): ViewPath,
) -> ApiResult<StatusCode> {
    state
        .catalog
        .drop_view(&caller, &prefix, &ident(&namespace, &view)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn rename(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(prefix): PathParams<String>,
    JsonBody(request): JsonBody<RenameRequest>,
) -> ApiResult<StatusCode> {
    crate::audit::note_details(serde_json::json!(request));
    state
        .catalog
        .rename_view(
            &caller,
            &prefix,
            &request.source.to_ident()?,
            &request.destination.to_ident()?,
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn register(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace)): PathParams<(String, String)>,
    JsonBody(request): JsonBody<RegisterViewRequest>,
) -> ApiResult<Json<Value>> {
    let ident = TableIdent::new(parse_namespace(&namespace)?, request.name);
    let loaded = state
        .catalog
        .register_view(&caller, &prefix, &ident, &request.metadata_location)
        .await?;
    view_result(&loaded)
}
