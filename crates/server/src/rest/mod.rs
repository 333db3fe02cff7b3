//! The Iceberg REST catalog, served under `/catalog`.

mod config;
mod namespaces;
mod oauth;
pub mod planning;
mod tables;
mod transactions;
mod types;
mod views;

use axum::Router;
use axum::routing::{get, post};
use floe_catalog::model::PageRequest;

use crate::AppState;
use crate::error::ApiError;
use crate::idempotency;
use types::ListQuery;

pub(crate) fn router(state: AppState) -> Router<AppState> {
    let ns = "/v1/{prefix}/namespaces/{namespace}";
    let authenticated = Router::new()
        .route("/v1/config", get(config::get_config))
        .route(
            "/v1/{prefix}/namespaces",
            get(namespaces::list).post(namespaces::create),
        )
        .route(
            ns,
            get(namespaces::load)
                .head(namespaces::exists)
                .delete(namespaces::drop),
        )
        .route(
            &format!("{ns}/properties"),
            post(namespaces::update_properties),
        )
        .route(
            &format!("{ns}/tables"),
            get(tables::list).post(tables::create),
        )
        .route(
            &format!("{ns}/tables/{{table}}"),
            get(tables::load)
                .head(tables::exists)
                .post(tables::commit)
                .delete(tables::drop),
        )
        .route(&format!("{ns}/register"), post(tables::register))
        .route(
            &format!("{ns}/tables/{{table}}/unregister"),
            post(tables::unregister),
        )
        .route(
            &format!("{ns}/tables/{{table}}/credentials"),
            get(tables::credentials),
        )
        .route(&format!("{ns}/tables/{{table}}/sign"), post(tables::sign))
        .route(
            &format!("{ns}/tables/{{table}}/metrics"),
            post(tables::report_metrics),
        )
        .route(&format!("{ns}/tables/{{table}}/plan"), post(planning::plan))
        .route(
            &format!("{ns}/tables/{{table}}/plan/{{plan_id}}"),
            get(planning::fetch).delete(planning::cancel),
        )
        .route(
            &format!("{ns}/tables/{{table}}/tasks"),
            post(planning::tasks),
        )
        .route("/v1/{prefix}/tables/rename", post(tables::rename))
        .route(
            "/v1/{prefix}/transactions/commit",
            post(transactions::commit),
        )
        .route(&format!("{ns}/views"), get(views::list).post(views::create))
        .route(
            &format!("{ns}/views/{{view}}"),
            get(views::load)
                .head(views::exists)
                .post(views::replace)
                .delete(views::drop),
        )
        .route("/v1/{prefix}/views/rename", post(views::rename))
        .route(&format!("{ns}/register-view"), post(views::register))
        // Authentication wraps idempotency, so a replay is only ever the caller's own.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            idempotency::layer,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state,
            crate::auth::require_principal,
        ));
    Router::new()
        .route("/v1/oauth/tokens", post(oauth::token))
        .merge(authenticated)
}

/// The endpoints advertised in `/v1/config`.
pub(crate) const ENDPOINTS: &[&str] = &[
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/unregister",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/sign",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/tasks",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/transactions/commit",
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    "POST /v1/{prefix}/namespaces/{namespace}/views",
    "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/views/rename",
    "POST /v1/{prefix}/namespaces/{namespace}/register-view",
];

/// A `ListTablesResponse` (also used for views).
pub(crate) fn list_identifiers(
    ns: &iceberg::NamespaceIdent,
    page: floe_catalog::model::Page<String>,
) -> serde_json::Value {
    let identifiers: Vec<types::Identifier> = page
        .items
        .into_iter()
        .map(|name| types::Identifier {
            namespace: ns.iter().cloned().collect(),
            name,
        })
        .collect();
    serde_json::json!({ "identifiers": identifiers, "next-page-token": page.next_token })
}

/// Reads `page-token` / `page-size`; a page size that is not a positive integer is a 400.
pub(crate) fn page_request(query: &ListQuery) -> Result<PageRequest, ApiError> {
    let size = match query.page_size.as_deref() {
        None | Some("") => None,
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "page-size must be a positive integer, got {raw:?}"
                )));
            }
        },
    };
    Ok(PageRequest {
        token: query.page_token.clone().filter(|t| !t.is_empty()),
        size,
    })
}
