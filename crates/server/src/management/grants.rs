//! `/api/v1/roles` and `/api/v1/grants`: roles, their members and their privileges.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use floe_catalog::governance::auth::not_found_principal;
use floe_catalog::governance::authz::{Caller, GrantRecord, Privilege, SEP};
use floe_catalog::service::SecurableRef;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::require_server;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleRequest {
    pub name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberRequest {
    pub principal: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    pub role: String,
    pub privilege: String,
    pub on: SecurableRef,
    /// The id `on` must still name (as a role's grants list it): a revoke or grant refuses
    /// (409) when the name has come to mean another securable since it was read.
    #[serde(rename = "securable-id", default)]
    pub securable_id: Option<String>,
}

fn parse_privilege(name: &str) -> ApiResult<Privilege> {
    Privilege::parse(name).ok_or_else(|| {
        let known: Vec<&str> = Privilege::ALL.iter().map(|p| p.as_str()).collect();
        ApiError::bad_request(format!(
            "unknown privilege {name:?}; known: {}",
            known.join(", ")
        ))
    })
}

pub async fn create_role(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<RoleRequest>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    require_server(&caller, Privilege::ManageGrants)?;
    floe_catalog::ident::validate_name("role", &request.name)?;
    let id = state.authz.store().create_role(&request.name).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": id, "name": request.name})),
    ))
}

pub async fn list_roles(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Value>> {
    require_server(&caller, Privilege::ManageGrants)?;
    Ok(Json(
        json!({"roles": state.authz.store().list_roles().await?}),
    ))
}

pub async fn delete_role(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    require_server(&caller, Privilege::ManageGrants)?;
    if !state.authz.store().delete_role(&name).await? {
        return Err(ApiError::not_found(
            "NoSuchRoleException",
            format!("Role does not exist: {name}"),
        ));
    }
    state.authz.invalidate();
    Ok(StatusCode::NO_CONTENT)
}

async fn principal_id(state: &AppState, name: &str) -> ApiResult<uuid::Uuid> {
    Ok(state
        .auth
        .store()
        .get_principal_by_name(name)
        .await?
        .ok_or_else(|| ApiError(not_found_principal(name)))?
        .id)
}

pub async fn add_member(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(role): PathParams<String>,
    JsonBody(request): JsonBody<MemberRequest>,
) -> ApiResult<StatusCode> {
    require_server(&caller, Privilege::ManageGrants)?;
    crate::audit::note_details(json!({"role": role, "principal": request.principal}));
    let id = principal_id(&state, &request.principal).await?;
    state.authz.store().assign_role(&role, id).await?;
    state.authz.invalidate();
    Ok(StatusCode::NO_CONTENT)
}

pub async fn remove_member(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((role, principal)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    require_server(&caller, Privilege::ManageGrants)?;
    let id = principal_id(&state, &principal).await?;
    state.authz.store().unassign_role(&role, id).await?;
    state.authz.invalidate();
    Ok(StatusCode::NO_CONTENT)
}

pub async fn role_grants(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(role): PathParams<String>,
) -> ApiResult<Json<Value>> {
    require_server(&caller, Privilege::ManageGrants)?;
    let mut grants = Vec::new();
    for record in state.authz.store().role_grants(&role).await? {
        let mut grant = json!(record);
        match name_securable(&state, &record).await {
            Ok(Some(on)) => grant["on"] = on,
            Ok(None) => {}
            // One grant whose securable cannot be named (dropped meanwhile, a store hiccup)
            // does not hide the others.
            Err(e) => {
                tracing::warn!(error = %e.0, id = %record.securable_id, "name a granted securable")
            }
        }
        grants.push(grant);
    }
    Ok(Json(json!({ "grants": grants })))
}

/// A grant's securable as a request names it (`{"type": "table", "warehouse": …}`), so that
/// the answer can be revoked as it reads; None when it no longer exists. One lookup by id.
async fn name_securable(state: &AppState, record: &GrantRecord) -> ApiResult<Option<Value>> {
    if record.securable_kind == "server" {
        return Ok(Some(json!({"type": "server"})));
    }
    let store = state.catalog.store();
    let warehouse_name = |id: uuid::Uuid| async move {
        ApiResult::Ok(store.get_warehouse_by_id(id).await?.map(|w| w.name))
    };
    let mut parts = record.scope.split(SEP);
    let Some(warehouse_id) = parts.next().and_then(|id| uuid::Uuid::parse_str(id).ok()) else {
        return Ok(None);
    };
    match record.securable_kind.as_str() {
        "warehouse" => Ok(warehouse_name(warehouse_id)
            .await?
            .map(|w| json!({"type": "warehouse", "warehouse": w}))),
        "namespace" => {
            let levels: Vec<&str> = parts.collect();
            Ok(warehouse_name(warehouse_id)
                .await?
                .map(|w| json!({"type": "namespace", "warehouse": w, "namespace": levels})))
        }
        "table" | "view" => {
            let Ok(id) = uuid::Uuid::parse_str(&record.securable_id) else {
                return Ok(None);
            };
            let Some(tabular) = store.get_tabular_by_id(id).await? else {
                return Ok(None);
            };
            if tabular.kind.as_str() != record.securable_kind {
                return Ok(None);
            }
            Ok(warehouse_name(tabular.warehouse_id).await?.map(|w| {
                json!({
                    "type": record.securable_kind, "warehouse": w,
                    "namespace": tabular.namespace.inner(), "name": tabular.name,
                })
            }))
        }
        _ => Ok(None),
    }
}

/// Who may grant on a securable: holders of `manage-grants` on it (or above).
pub(super) async fn authorized_securable(
    state: &AppState,
    caller: &Caller,
    on: &SecurableRef,
) -> ApiResult<floe_catalog::governance::authz::Securable> {
    // One answer for "missing" and "hidden", so grants cannot probe for existence.
    let hidden = || floe_catalog::CatalogError::NotFound {
        error_type: "NotFoundException",
        message: "the securable does not exist".to_string(),
    };
    let securable = match state.catalog.resolve_securable(on).await {
        Ok(securable) => securable,
        Err(floe_catalog::CatalogError::NotFound { .. }) => return Err(ApiError(hidden())),
        Err(e) => return Err(ApiError(e)),
    };
    caller.require(Privilege::ManageGrants, &securable.scope, hidden)?;
    Ok(securable)
}

pub async fn grant(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<GrantRequest>,
) -> ApiResult<StatusCode> {
    change_grant(&state, &caller, &request, true).await
}

pub async fn revoke(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<GrantRequest>,
) -> ApiResult<StatusCode> {
    change_grant(&state, &caller, &request, false).await
}

async fn change_grant(
    state: &AppState,
    caller: &Caller,
    request: &GrantRequest,
    grant: bool,
) -> ApiResult<StatusCode> {
    crate::audit::note_details(json!({
        "role": request.role, "privilege": request.privilege, "on": request.on,
    }));
    let privilege = parse_privilege(&request.privilege)?;
    let securable = authorized_securable(state, caller, &request.on).await?;
    if let Some(expected) = &request.securable_id
        && *expected != securable.id
    {
        return Err(ApiError(floe_catalog::CatalogError::CommitFailed(format!(
            "the securable named is no longer {expected} (it was renamed or replaced); \
             read the grants again"
        ))));
    }
    let store = state.authz.store();
    if grant {
        store.grant(&request.role, privilege, &securable).await?;
    } else {
        store.revoke(&request.role, privilege, &securable).await?;
    }
    state.authz.invalidate();
    Ok(StatusCode::NO_CONTENT)
}
