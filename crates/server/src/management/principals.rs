//! `/api/v1/principals` and `/api/v1/signing-keys`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use floe_catalog::governance::auth::not_found_principal;
use floe_catalog::governance::{Principal, PrincipalKind};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::require_server;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams};
use floe_catalog::governance::authz::{Caller, Privilege};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CreatePrincipalRequest {
    pub name: String,
    #[serde(default = "default_kind")]
    pub kind: PrincipalKind,
}

fn default_kind() -> PrincipalKind {
    PrincipalKind::Service
}

async fn by_name(state: &AppState, name: &str) -> ApiResult<Principal> {
    state
        .auth
        .store()
        .get_principal_by_name(name)
        .await?
        .ok_or_else(|| ApiError(not_found_principal(name)))
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<CreatePrincipalRequest>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    require_server(&caller, Privilege::ManageGrants)?;
    let (principal, credentials) = state
        .auth
        .create_principal(&request.name, request.kind)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "principal": principal,
            "credentials": {"client-id": credentials.client_id, "client-secret": credentials.client_secret},
        })),
    ))
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Value>> {
    require_server(&caller, Privilege::ManageGrants)?;
    let principals = state.auth.store().list_principals().await?;
    Ok(Json(json!({ "principals": principals })))
}

/// The principal the caller's token names (what the console shows as signed in).
pub async fn whoami(Extension(caller): Extension<Caller>) -> Json<Value> {
    Json(json!(caller.principal))
}

pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Value>> {
    if caller.principal.name != name {
        require_server(&caller, Privilege::ManageGrants)?;
    }
    Ok(Json(json!(by_name(&state, &name).await?)))
}

pub async fn rotate_credentials(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Value>> {
    if caller.principal.name != name {
        require_server(&caller, Privilege::ManageGrants)?;
    }
    let principal = by_name(&state, &name).await?;
    let credentials = state.auth.rotate_credentials(principal.id).await?;
    Ok(Json(
        json!({"client-id": credentials.client_id, "client-secret": credentials.client_secret}),
    ))
}

async fn set_disabled(
    state: &AppState,
    caller: &Caller,
    name: &str,
    disabled: bool,
) -> ApiResult<StatusCode> {
    require_server(caller, Privilege::ManageGrants)?;
    let principal = by_name(state, name).await?;
    state.auth.set_disabled(principal.id, disabled).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn disable(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    set_disabled(&state, &caller, &name, true).await
}

pub async fn enable(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    set_disabled(&state, &caller, &name, false).await
}

pub async fn rotate_signing_key(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Value>> {
    require_server(&caller, Privilege::ManageGrants)?;
    let kid = state.auth.rotate_signing_key().await?;
    Ok(Json(json!({ "kid": kid })))
}
