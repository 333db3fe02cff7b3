//! `/api/v1/audit` and `/api/v1/access-review`.

use axum::extract::State;
use axum::{Extension, Json};
use floe_catalog::governance::audit::{AuditOrder, AuditQuery};
use floe_catalog::governance::authz::{Caller, Privilege};
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::require_server;
use crate::error::ApiResult;
use crate::extract::QueryParams;

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    QueryParams(query): QueryParams<AuditQuery>,
) -> ApiResult<Json<Value>> {
    require_server(&caller, Privilege::ReadAudit)?;
    let records = state.audit_store.query_audit(&query).await?;
    // The next page starts past the last record of this one, in the order asked for.
    let last = records.last().map(|r| r.seq);
    Ok(Json(match query.order {
        AuditOrder::Asc => json!({ "records": records, "next-after-seq": last }),
        AuditOrder::Desc => json!({ "records": records, "next-before-seq": last }),
    }))
}

/// Every principal with its roles and the privileges those roles hold, for access reviews.
pub async fn access_review(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Value>> {
    require_server(&caller, Privilege::ReadAudit)?;
    let grants = state.authz.store();
    let mut principals = Vec::new();
    for principal in state.auth.store().list_principals().await? {
        let roles = grants.roles_of(principal.id).await?;
        let mut privileges = Vec::new();
        let mut policies = Vec::new();
        for role in &roles {
            privileges.extend(grants.role_grants(role).await?);
            for policy in grants.list_policies(Some(role)).await? {
                policies.push(super::policies::described(&state, policy).await?);
            }
        }
        principals.push(json!({
            "principal": principal.name,
            "kind": principal.kind,
            "root": principal.is_root,
            "disabled": principal.disabled,
            "roles": roles,
            "privileges": if principal.is_root { json!("all") } else { json!(privileges) },
            "policies": policies,
        }));
    }
    Ok(Json(json!({
        "generated-at-ms": floe_catalog::clock::now_ms(),
        "principals": principals,
    })))
}
