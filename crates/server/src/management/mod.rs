//! The management API under `/api/v1`, described by `/api/v1/openapi.json`.

mod audit;
mod dropped;
mod grants;
mod migrations;
mod policies;
mod principals;
pub mod sql;
pub(crate) mod tenants;
mod warehouses;

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get};

use crate::AppState;

/// The authenticated management routes: each path, its methods and their handlers. The one
/// list builds the router and `ROUTES`, which a test holds `openapi.json` to, so the document
/// describes every route and no other.
macro_rules! management_routes {
    ($($path:literal => $($method:ident $handler:expr),+;)*) => {
        fn authenticated_routes() -> Router<AppState> {
            Router::new()$(.route($path, MethodRouter::new()$(.$method($handler))+))*
        }

        /// Every authenticated route as (method, path below `/api/v1`).
        #[cfg(test)]
        const ROUTES: &[(&str, &str)] = &[$($((stringify!($method), $path)),+),*];
    };
}

management_routes! {
    "/warehouses" => get warehouses::list, post warehouses::create;
    "/warehouses/{name}" => get warehouses::get, delete warehouses::delete;
    "/warehouses/{name}/validate" => post warehouses::validate;
    "/storage/validate" => post warehouses::validate_storage;
    "/warehouses/{name}/soft-delete" => get dropped::get_setting, put dropped::put_setting;
    "/warehouses/{name}/dropped" => get dropped::list;
    "/warehouses/{name}/dropped/{id}/undrop" => post dropped::undrop;
    "/warehouses/{name}/dropped/{id}/purge" => post dropped::purge;
    "/protection" => get dropped::get_protection, put dropped::put_protection;
    "/principals" => get principals::list, post principals::create;
    "/tenants/{name}/limits" => get tenants::get, put tenants::put, delete tenants::delete;
    "/principals/{name}" => get principals::get;
    "/whoami" => get principals::whoami;
    "/principals/{name}/rotate-credentials" => post principals::rotate_credentials;
    "/principals/{name}/disable" => post principals::disable;
    "/principals/{name}/enable" => post principals::enable;
    "/signing-keys/rotate" => post principals::rotate_signing_key;
    "/roles" => get grants::list_roles, post grants::create_role;
    "/roles/{name}" => delete grants::delete_role;
    "/roles/{name}/members" => post grants::add_member;
    "/roles/{name}/members/{principal}" => delete grants::remove_member;
    "/roles/{name}/grants" => get grants::role_grants;
    "/grants" => post grants::grant;
    "/grants/revoke" => post grants::revoke;
    "/policies" => get policies::list, put policies::set;
    "/policies/remove" => post policies::remove;
    "/audit" => get audit::list;
    "/access-review" => get audit::access_review;
    "/sql" => post sql::run;
    "/workers" => get crate::cluster::list;
    "/ingest/status" => get crate::ingest::status;
    "/ingest/replay" => post crate::ingest::replay;
    "/maintenance/expire-snapshots" => post crate::maintenance::expire_snapshots;
    "/maintenance/remove-orphan-files" => post crate::maintenance::remove_orphan_files;
    "/maintenance/policies" => get crate::maintenance::get_policy, put crate::maintenance::set_policy;
    "/jobs" => get crate::maintenance::list_jobs, post crate::maintenance::run_job;
    "/jobs/{id}" => get crate::maintenance::get_job;
    "/tables/check" => post crate::maintenance::check_table;
    "/tables/repair" => post crate::maintenance::repair_table;
    "/tables/convert" => post migrations::convert;
    "/migrations" => get migrations::list;
    "/migrations/read-metadata" => post migrations::read_metadata;
    "/migrations/digest" => post migrations::digest;
    "/migrations/{name}" => get migrations::get, delete migrations::forget;
    "/migrations/{name}/tables" => put migrations::put_table;
    "/pipelines" => get crate::pipelines::list, post crate::pipelines::create;
    "/pipelines/{name}" => get crate::pipelines::get, delete crate::pipelines::delete;
    "/pipelines/{name}/status" => get crate::pipelines::status;
    "/pipelines/{name}/dead-letters/redrive" => post crate::pipelines::redrive;
}

/// The management routes; all but the OpenAPI document require an authenticated principal.
pub(crate) fn router(state: AppState) -> Router<AppState> {
    let authenticated = authenticated_routes().route_layer(axum::middleware::from_fn_with_state(
        state,
        crate::auth::require_principal,
    ));
    Router::new()
        .route("/openapi.json", get(openapi))
        .merge(authenticated)
}

async fn openapi() -> impl IntoResponse {
    (
        [("content-type", "application/json")],
        include_str!("openapi.json"),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::ROUTES;

    /// A path with its parameters unnamed: `/roles/{name}` and `/roles/{role}` are one route.
    fn shape(path: &str) -> String {
        let mut out = String::new();
        let mut in_param = false;
        for c in path.chars() {
            match c {
                '{' => {
                    in_param = true;
                    out.push_str("{}");
                }
                '}' => in_param = false,
                _ if in_param => {}
                _ => out.push(c),
            }
        }
        out
    }

    #[test]
    fn openapi_describes_every_management_route_and_no_other() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("openapi.json")).expect("openapi.json parses");
        let methods = ["get", "post", "put", "delete", "patch", "head"];
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .expect("paths")
            .iter()
            .filter(|(path, _)| path.starts_with("/api/v1/") && *path != "/api/v1/openapi.json")
            .flat_map(|(path, operations)| {
                operations
                    .as_object()
                    .expect("operations")
                    .keys()
                    .filter(|m| methods.contains(&m.as_str()))
                    .map(|m| (m.clone(), shape(path)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let routed: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|(method, path)| (method.to_string(), shape(&format!("/api/v1{path}"))))
            .collect();
        let undocumented: Vec<_> = routed.difference(&documented).collect();
        let unrouted: Vec<_> = documented.difference(&routed).collect();
        assert!(
            undocumented.is_empty(),
            "routes openapi.json does not describe: {undocumented:?}"
        );
        assert!(
            unrouted.is_empty(),
            "openapi.json describes routes that do not exist: {unrouted:?}"
        );
    }

    #[test]
    fn every_operation_says_who_may_call_it_and_what_it_answers() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("openapi.json")).expect("openapi.json parses");
        for (path, operations) in doc["paths"].as_object().expect("paths") {
            for (method, operation) in operations.as_object().expect("operations") {
                if !["get", "post", "put", "delete"].contains(&method.as_str()) {
                    continue;
                }
                let what = format!("{method} {path}");
                assert!(
                    operation["operationId"].is_string(),
                    "{what}: no operationId"
                );
                assert!(operation["summary"].is_string(), "{what}: no summary");
                let responses = operation["responses"].as_object().expect("responses");
                assert!(
                    responses.keys().any(|code| code.starts_with('2')),
                    "{what}: no success response"
                );
            }
        }
    }
}
