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
use axum::routing::{MethodRouter, post};
use floe_catalog::model::PageRequest;

use crate::AppState;
use crate::error::ApiError;
use crate::idempotency;
use types::ListQuery;

/// The authenticated catalog routes: each path, its methods and their handlers. The one list
/// builds the router and `ROUTES`, which a test holds [`ENDPOINTS`] to, so `/v1/config`
/// advertises every route and no other.
macro_rules! catalog_routes {
    ($($path:literal => $($method:ident $handler:expr),+;)*) => {
        fn authenticated_routes() -> Router<AppState> {
            Router::new()$(.route($path, MethodRouter::new()$(.$method($handler))+))*
        }

        /// Every authenticated route as (method, path below `/catalog`).
        #[cfg(test)]
        const ROUTES: &[(&str, &str)] = &[$($((stringify!($method), $path)),+),*];
    };
}

catalog_routes! {
    "/v1/config" => get config::get_config;
    "/v1/{prefix}/namespaces" => get namespaces::list, post namespaces::create;
    "/v1/{prefix}/namespaces/{namespace}" =>
        get namespaces::load, head namespaces::exists, delete namespaces::drop;
    "/v1/{prefix}/namespaces/{namespace}/properties" => post namespaces::update_properties;
    "/v1/{prefix}/namespaces/{namespace}/tables" => get tables::list, post tables::create;
    "/v1/{prefix}/namespaces/{namespace}/tables/{table}" =>
        get tables::load, head tables::exists, post tables::commit, delete tables::drop;
    "/v1/{prefix}/namespaces/{namespace}/register" => post tables::register;
    "/v1/{prefix}/namespaces/{namespace}/tables/{table}/unregister" => post tables::unregister;
    "/v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials" => get tables::credentials;
    "/v1/{prefix}/namespaces/{namespace}/tables/{table}/sign" => post tables::sign;
    "/v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics" => post tables::report_metrics;
    "/v1/{prefix}/namespaces/{namespace}/tables/{table}/plan" => post planning::plan;
    "/v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan_id}" =>
        get planning::fetch, delete planning::cancel;
    "/v1/{prefix}/namespaces/{namespace}/tables/{table}/tasks" => post planning::tasks;
    "/v1/{prefix}/tables/rename" => post tables::rename;
    "/v1/{prefix}/transactions/commit" => post transactions::commit;
    "/v1/{prefix}/namespaces/{namespace}/views" => get views::list, post views::create;
    "/v1/{prefix}/namespaces/{namespace}/views/{view}" =>
        get views::load, head views::exists, post views::replace, delete views::drop;
    "/v1/{prefix}/views/rename" => post views::rename;
    "/v1/{prefix}/namespaces/{namespace}/register-view" => post views::register;
}

pub(crate) fn router(state: AppState) -> Router<AppState> {
    let authenticated = authenticated_routes()
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

/// The endpoints advertised in `/v1/config`, in the spec's notation (Iceberg 1.11's list of
/// what a server may serve, less the deprecated `/v1/oauth/tokens`).
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{ENDPOINTS, ROUTES};

    /// `/v1/config` names every served route once (`/v1/config` itself aside, which clients call
    /// before they can read the list), in the spec's spelling of path parameters.
    #[test]
    fn config_advertises_every_route() {
        let routed: BTreeSet<String> = ROUTES
            .iter()
            .filter(|(_, path)| *path != "/v1/config")
            .map(|(method, path)| {
                format!(
                    "{} {}",
                    method.to_ascii_uppercase(),
                    path.replace("{plan_id}", "{plan-id}")
                )
            })
            .collect();
        let advertised: BTreeSet<String> = ENDPOINTS.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            advertised.len(),
            ENDPOINTS.len(),
            "an endpoint is listed twice"
        );
        assert_eq!(routed, advertised);
    }
}
