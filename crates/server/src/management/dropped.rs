//! Soft delete and deletion protection over HTTP: a warehouse's retention of dropped tables
//! and views, the dropped ones (list, undrop, purge now), and the protection flag. Each
//! handler decodes and answers; the rules (who may, what is refused) are the catalog's.

use axum::extract::State;
use axum::{Extension, Json};
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{Governing, PROTECTION_FLAG, SecurableRef};
use floe_catalog::soft_delete::{DroppedTabular, Protection, RETENTION_PROPERTY, parse_retention};
use iceberg::NamespaceIdent;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams, QueryParams};

fn dropped_json(d: &DroppedTabular) -> Value {
    json!({
        "id": d.id,
        "kind": d.kind.as_str(),
        "namespace": d.namespace.clone().inner(),
        "name": d.name,
        "metadata-location": d.metadata_location,
        "dropped-at-ms": d.dropped_at_ms,
        "dropped-by": d.dropped_by,
        "expires-at-ms": d.expires_at_ms,
        "purge-requested": d.purge_requested,
    })
}

fn parse_id(id: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(id).map_err(|_| {
        ApiError::bad_request(format!(
            "{id:?} is not the id of a dropped table or view (a UUID)"
        ))
    })
}

/// A namespace given as levels joined by `.`.
fn namespace_param(text: &str) -> ApiResult<NamespaceIdent> {
    NamespaceIdent::from_vec(text.split('.').map(String::from).collect())
        .map_err(|e| ApiError::bad_request(format!("namespace: {e}")))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SoftDeleteSetting {
    /// Seconds a dropped table or view is kept; 0 turns soft delete off.
    pub retention_seconds: u64,
}

fn setting_json(warehouse: &floe_catalog::model::Warehouse) -> ApiResult<Value> {
    let retention = parse_retention(
        warehouse
            .properties
            .get(RETENTION_PROPERTY)
            .map(String::as_str),
    )?;
    Ok(json!({
        "warehouse": warehouse.name,
        "enabled": retention.is_some(),
        "retention-seconds": retention.unwrap_or(0),
    }))
}

/// `GET /api/v1/warehouses/{name}/soft-delete`: whether the warehouse keeps dropped tables
/// and views, and for how long.
pub async fn get_setting(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Value>> {
    let warehouse = state.catalog.get_warehouse(&caller, &name).await?;
    Ok(Json(setting_json(&warehouse)?))
}

/// `PUT /api/v1/warehouses/{name}/soft-delete`: sets the retention (needs
/// `manage-warehouses` on the warehouse).
pub async fn put_setting(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
    JsonBody(request): JsonBody<SoftDeleteSetting>,
) -> ApiResult<Json<Value>> {
    let warehouse = state
        .catalog
        .set_soft_delete(&caller, &name, request.retention_seconds)
        .await?;
    Ok(Json(setting_json(&warehouse)?))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this namespace (levels joined by `.`) and those below it.
    pub namespace: Option<String>,
    /// The page after this id (the previous page's `next-after`).
    pub after: Option<String>,
    /// The most a page holds (1 to 1000, the default).
    pub limit: Option<usize>,
}

/// `GET /api/v1/warehouses/{name}/dropped[?namespace=…]`: the dropped tables and views the
/// caller may undrop or purge.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams(name): PathParams<String>,
    QueryParams(query): QueryParams<ListQuery>,
) -> ApiResult<Json<Value>> {
    let namespace = query
        .namespace
        .as_deref()
        .map(namespace_param)
        .transpose()?;
    let after = query.after.as_deref().map(parse_id).transpose()?;
    let (dropped, next) = state
        .catalog
        .list_dropped(&caller, &name, namespace.as_ref(), after, query.limit)
        .await?;
    Ok(Json(json!({
        "dropped": dropped.iter().map(dropped_json).collect::<Vec<_>>(),
        "next-after": next,
    })))
}

/// `POST /api/v1/warehouses/{name}/dropped/{id}/undrop`: puts it back under its name.
pub async fn undrop(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((name, id)): PathParams<(String, String)>,
) -> ApiResult<Json<Value>> {
    let id = parse_id(&id)?;
    crate::audit::note_details(json!({ "id": id }));
    let restored = state.catalog.undrop(&caller, &name, id).await?;
    Ok(Json(json!({ "undropped": dropped_json(&restored) })))
}

/// `POST /api/v1/warehouses/{name}/dropped/{id}/purge`: ends its retention now.
pub async fn purge(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((name, id)): PathParams<(String, String)>,
) -> ApiResult<Json<Value>> {
    let id = parse_id(&id)?;
    crate::audit::note_details(json!({ "id": id }));
    Ok(Json(state.catalog.purge_dropped(&caller, &name, id).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtectionRequest {
    pub on: SecurableRef,
    pub protected: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtectionQuery {
    pub warehouse: String,
    /// Levels joined by `.`.
    pub namespace: Option<String>,
    pub table: Option<String>,
    pub view: Option<String>,
}

impl ProtectionQuery {
    fn target(self) -> ApiResult<SecurableRef> {
        let levels = |ns: &str| ns.split('.').map(String::from).collect::<Vec<_>>();
        Ok(match (self.namespace, self.table, self.view) {
            (None, None, None) => SecurableRef::Warehouse {
                warehouse: self.warehouse,
            },
            (Some(ns), None, None) => SecurableRef::Namespace {
                warehouse: self.warehouse,
                namespace: levels(&ns),
            },
            (Some(ns), Some(name), None) => SecurableRef::Table {
                warehouse: self.warehouse,
                namespace: levels(&ns),
                name,
            },
            (Some(ns), None, Some(name)) => SecurableRef::View {
                warehouse: self.warehouse,
                namespace: levels(&ns),
                name,
            },
            _ => {
                return Err(ApiError::bad_request(
                    "name a warehouse, a namespace in it, or a table or view (not both) in a \
                     namespace",
                ));
            }
        })
    }
}

fn protection_json(p: &Protection) -> Value {
    json!({
        "kind": p.kind.as_str(),
        "id": p.securable_id,
        "set-by": p.set_by,
        "set-at-ms": p.set_at_ms,
    })
}

fn state_json(own: Option<&Protection>, governing: Option<&Governing>) -> Value {
    json!({
        "flag": PROTECTION_FLAG,
        "protected": own.is_some(),
        "set": own.map(protection_json),
        "drops-refused": governing.is_some(),
        "governed-by": governing.map(|g| json!({
            "set-on": g.set_on,
            "set-by": g.protection.set_by,
            "set-at-ms": g.protection.set_at_ms,
        })),
    })
}

/// `GET /api/v1/protection?warehouse=…[&namespace=…[&table=…|&view=…]]`: the flag on the
/// object, and whether it or a container refuses its drop.
pub async fn get_protection(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    QueryParams(query): QueryParams<ProtectionQuery>,
) -> ApiResult<Json<Value>> {
    let target = query.target()?;
    let (own, governing) = state.catalog.protection_of(&caller, &target).await?;
    Ok(Json(state_json(own.as_ref(), governing.as_ref())))
}

/// `PUT /api/v1/protection`: sets or clears the flag (needs `manage-warehouses` on the
/// object).
pub async fn put_protection(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<ProtectionRequest>,
) -> ApiResult<Json<Value>> {
    crate::audit::note_details(json!({ "on": request.on, "protected": request.protected }));
    let changed = state
        .catalog
        .set_protection(&caller, &request.on, request.protected)
        .await?;
    let (own, governing) = state.catalog.protection_of(&caller, &request.on).await?;
    let mut answer = state_json(own.as_ref(), governing.as_ref());
    answer["changed"] = json!(changed);
    Ok(Json(answer))
}
