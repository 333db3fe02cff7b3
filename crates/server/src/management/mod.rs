//! The management API under `/api/v1`, described by `/api/v1/openapi.json`.

mod audit;
mod grants;
mod migrations;
mod principals;
pub mod sql;
pub mod tenants;
mod warehouses;

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::{get, post, put};

use crate::AppState;

/// The management routes; all but the OpenAPI document require an authenticated principal.
pub fn router(state: AppState) -> Router<AppState> {
    let authenticated = Router::new()
        .route(
            "/warehouses",
            get(warehouses::list).post(warehouses::create),
        )
        .route(
            "/warehouses/{name}",
            get(warehouses::get).delete(warehouses::delete),
        )
        .route(
            "/principals",
            get(principals::list).post(principals::create),
        )
        .route(
            "/tenants/{name}/limits",
            get(tenants::get).put(tenants::put).delete(tenants::delete),
        )
        .route("/principals/{name}", get(principals::get))
        .route(
            "/principals/{name}/rotate-credentials",
            post(principals::rotate_credentials),
        )
        .route("/principals/{name}/disable", post(principals::disable))
        .route("/principals/{name}/enable", post(principals::enable))
        .route("/signing-keys/rotate", post(principals::rotate_signing_key))
        .route("/roles", get(grants::list_roles).post(grants::create_role))
        .route("/roles/{name}", axum::routing::delete(grants::delete_role))
        .route("/roles/{name}/members", post(grants::add_member))
        .route(
            "/roles/{name}/members/{principal}",
            axum::routing::delete(grants::remove_member),
        )
        .route("/roles/{name}/grants", get(grants::role_grants))
        .route("/grants", post(grants::grant))
        .route("/grants/revoke", post(grants::revoke))
        .route("/audit", get(audit::list))
        .route("/access-review", get(audit::access_review))
        .route("/sql", post(sql::run))
        .route("/workers", get(crate::cluster::list))
        .route("/ingest/status", get(crate::ingest::status))
        .route("/ingest/replay", post(crate::ingest::replay))
        .route(
            "/maintenance/expire-snapshots",
            post(crate::maintenance::expire_snapshots),
        )
        .route(
            "/maintenance/remove-orphan-files",
            post(crate::maintenance::remove_orphan_files),
        )
        .route(
            "/maintenance/policies",
            get(crate::maintenance::get_policy).put(crate::maintenance::set_policy),
        )
        .route(
            "/jobs",
            get(crate::maintenance::list_jobs).post(crate::maintenance::run_job),
        )
        .route("/jobs/{id}", get(crate::maintenance::get_job))
        .route("/tables/check", post(crate::maintenance::check_table))
        .route("/tables/repair", post(crate::maintenance::repair_table))
        .route("/tables/convert", post(migrations::convert))
        .route("/migrations", get(migrations::list))
        .route("/migrations/read-metadata", post(migrations::read_metadata))
        .route("/migrations/digest", post(migrations::digest))
        .route(
            "/migrations/{name}",
            get(migrations::get).delete(migrations::forget),
        )
        .route("/migrations/{name}/tables", put(migrations::put_table))
        .route(
            "/pipelines",
            get(crate::pipelines::list).post(crate::pipelines::create),
        )
        .route(
            "/pipelines/{name}",
            get(crate::pipelines::get).delete(crate::pipelines::delete),
        )
        .route("/pipelines/{name}/status", get(crate::pipelines::status))
        .route_layer(axum::middleware::from_fn_with_state(
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
