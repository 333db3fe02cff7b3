//! `/api/v1/policies`: row and column policies, one per role and table
//! ([`floe_catalog::governance::policies`]). Setting or removing one needs `manage-grants` on
//! the table, as granting does; listing them needs `read-audit` on the server (they are part
//! of the access review).

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::governance::policies::{AppliedPolicy, ColumnMask, DataPolicy, Mask};
use floe_catalog::service::SecurableRef;
use iceberg::{NamespaceIdent, TableIdent};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::require_server;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, QueryParams};

/// A mask as a request names it: by column name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskRequest {
    pub column: String,
    pub mask: String,
    #[serde(default)]
    pub expression: Option<String>,
}

impl MaskRequest {
    fn mask(&self) -> ApiResult<Mask> {
        let expression = |given: bool| match (given, self.expression.is_some()) {
            (true, false) => Err(ApiError::bad_request(format!(
                "the expression mask of column {} needs an expression",
                self.column
            ))),
            (false, true) => Err(ApiError::bad_request(format!(
                "only an expression mask takes an expression (column {})",
                self.column
            ))),
            _ => Ok(()),
        };
        let mask = match self.mask.as_str() {
            "hide" => Mask::Hide,
            "null" => Mask::Null,
            "hash" => Mask::Hash,
            "expression" => Mask::Expression {
                expression: self.expression.clone().unwrap_or_default(),
            },
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown mask {other:?} (column {}); known: hide, null, hash, expression",
                    self.column
                )));
            }
        };
        expression(matches!(mask, Mask::Expression { .. }))?;
        Ok(mask)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PolicyRequest {
    pub role: String,
    pub table: SecurableRef,
    #[serde(default)]
    pub row_filter: Option<String>,
    #[serde(default)]
    pub masks: Vec<MaskRequest>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveRequest {
    pub role: String,
    pub table: SecurableRef,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default)]
    pub role: Option<String>,
}

/// Longest row filter or mask expression kept.
const MOST_EXPRESSION_BYTES: usize = 4096;
/// Most masks on one policy.
const MOST_MASKS: usize = 1000;

/// The table `on` names, once `caller` holds `manage-grants` on it: its id, scope and ident.
async fn governed_table(
    state: &AppState,
    caller: &Caller,
    on: &SecurableRef,
) -> ApiResult<(
    floe_catalog::governance::authz::Securable,
    String,
    TableIdent,
)> {
    let SecurableRef::Table {
        warehouse,
        namespace,
        name,
    } = on
    else {
        return Err(ApiError::bad_request(
            "a row or column policy is set on a table ({\"type\": \"table\", …})",
        ));
    };
    // Who may grant on the table may set its policies, with the same 404 for "missing" and
    // "hidden".
    let securable = super::grants::authorized_securable(state, caller, on).await?;
    let namespace = NamespaceIdent::from_vec(namespace.clone())
        .map_err(|_| ApiError::bad_request("namespace must have at least one level"))?;
    Ok((
        securable,
        warehouse.clone(),
        TableIdent::new(namespace, name.clone()),
    ))
}

/// Sets (or replaces) a role's policy on a table, once its filter and masks plan over the
/// table's current schema.
pub async fn set(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<PolicyRequest>,
) -> ApiResult<StatusCode> {
    crate::audit::note_details(json!({
        "role": request.role, "table": request.table, "row-filter": request.row_filter,
        "masks": request.masks.iter().map(|m| json!({"column": m.column, "mask": m.mask, "expression": m.expression})).collect::<Vec<_>>(),
    }));
    let (securable, warehouse, ident) = governed_table(&state, &caller, &request.table).await?;
    if request.row_filter.is_none() && request.masks.is_empty() {
        return Err(ApiError::bad_request(
            "a policy needs a row-filter or at least one mask",
        ));
    }
    if request.masks.len() > MOST_MASKS {
        return Err(ApiError::bad_request(format!(
            "a policy holds at most {MOST_MASKS} masks"
        )));
    }
    let named: Vec<(String, Mask)> = request
        .masks
        .iter()
        .map(|m| Ok((m.column.clone(), m.mask()?)))
        .collect::<ApiResult<_>>()?;
    let expressions = request
        .row_filter
        .iter()
        .chain(request.masks.iter().filter_map(|m| m.expression.as_ref()));
    for expression in expressions {
        if expression.len() > MOST_EXPRESSION_BYTES || expression.trim().is_empty() {
            return Err(ApiError::bad_request(format!(
                "a policy's expressions are 1 to {MOST_EXPRESSION_BYTES} bytes"
            )));
        }
    }
    let loaded = state
        .catalog
        .load_table(&Caller::system(), &warehouse, &ident)
        .await?;
    let schema = loaded.metadata.current_schema();
    let masks = floe_sql::policy::mask_ids(schema, &named).map_err(ApiError::bad_request)?;
    let policy = DataPolicy {
        role: request.role.clone(),
        table_id: securable.id.clone(),
        scope: securable.scope.0.clone(),
        row_filter: request.row_filter.clone(),
        masks: masks
            .into_iter()
            .map(|(field_id, (column, mask))| ColumnMask {
                field_id,
                column,
                mask,
            })
            .collect(),
        created_at_ms: floe_catalog::clock::now_ms(),
    };
    let applied =
        AppliedPolicy::combine(&[std::sync::Arc::new(policy.clone())]).expect("one policy applies");
    floe_sql::policy::validate(schema, applied).map_err(ApiError::bad_request)?;
    state.authz.store().set_policy(&policy).await?;
    state.authz.invalidate();
    Ok(StatusCode::NO_CONTENT)
}

/// Removes a role's policy on a table.
pub async fn remove(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<RemoveRequest>,
) -> ApiResult<StatusCode> {
    crate::audit::note_details(json!({"role": request.role, "table": request.table}));
    let (securable, _, _) = governed_table(&state, &caller, &request.table).await?;
    let removed = state
        .authz
        .store()
        .delete_policy(&request.role, &securable.id)
        .await?;
    state.authz.invalidate();
    if !removed {
        return Err(ApiError(floe_catalog::CatalogError::NotFound {
            error_type: "NotFoundException",
            message: format!("role {} has no policy on that table", request.role),
        }));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Every policy (of one role with `?role=`), each with its table named as a request names it.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    QueryParams(query): QueryParams<ListQuery>,
) -> ApiResult<Json<Value>> {
    require_server(&caller, Privilege::ReadAudit)?;
    let policies = state
        .authz
        .store()
        .list_policies(query.role.as_deref())
        .await?;
    let mut listed = Vec::with_capacity(policies.len());
    for policy in policies {
        listed.push(described(&state, policy).await?);
    }
    Ok(Json(json!({ "policies": listed })))
}

/// A policy as the API shows it: with its table's current name (none once it is gone).
pub(crate) async fn described(state: &AppState, policy: DataPolicy) -> ApiResult<Value> {
    let table = match uuid::Uuid::parse_str(&policy.table_id) {
        Ok(id) => match state.catalog.store().get_tabular_by_id(id).await? {
            Some(tabular) => state
                .catalog
                .store()
                .get_warehouse_by_id(tabular.warehouse_id)
                .await?
                .map(|w| {
                    json!({
                        "type": "table", "warehouse": w.name,
                        "namespace": tabular.namespace.inner(), "name": tabular.name,
                    })
                }),
            None => None,
        },
        Err(_) => None,
    };
    let mut value = serde_json::to_value(&policy)
        .map_err(|e| ApiError(floe_catalog::CatalogError::internal("a policy as JSON", e)))?;
    value["table"] = table.unwrap_or(Value::Null);
    Ok(value)
}
