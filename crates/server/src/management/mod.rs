//! The management API under `/api/v1`, described by `/api/v1/openapi.json`.

mod warehouses;

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(openapi))
        .route(
            "/warehouses",
            get(warehouses::list).post(warehouses::create),
        )
        .route(
            "/warehouses/{name}",
            get(warehouses::get).delete(warehouses::delete),
        )
}

async fn openapi() -> impl IntoResponse {
    (
        [("content-type", "application/json")],
        include_str!("openapi.json"),
    )
}
