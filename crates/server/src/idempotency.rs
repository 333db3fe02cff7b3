//! `Idempotency-Key` handling: a retried mutation with the same key gets the first final
//! answer (2xx or 4xx) again instead of running twice. 5xx answers are never stored.

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use floe_catalog::model::IdempotentResponse;

use crate::AppState;
use crate::error::{ApiError, error_response};

pub const HEADER: &str = "idempotency-key";
/// How long keys are kept, as advertised in `/v1/config`.
pub const LIFETIME_ISO: &str = "PT30M";
pub const LIFETIME_MS: i64 = 30 * 60 * 1000;
/// Largest response body replayed.
const MAX_STORED_BODY: usize = 16 * 1024 * 1024;

pub async fn layer(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(key) = request.headers().get(HEADER).cloned() else {
        return next.run(request).await;
    };
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    let key = match key
        .to_str()
        .ok()
        .and_then(|k| uuid::Uuid::parse_str(k).ok())
    {
        Some(k) => k.hyphenated().to_string(),
        None => {
            return ApiError::bad_request("Idempotency-Key must be a UUID (36 characters)")
                .into_response();
        }
    };
    let fingerprint = format!("{} {}", request.method(), request.uri().path());
    let store = state.catalog.store().clone();
    match store.get_idempotent(&key).await {
        Ok(Some(stored)) if stored.fingerprint == fingerprint => return replay(&stored),
        Ok(Some(_)) => {
            return error_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                "BadRequestException",
                "Idempotency-Key was already used for a different request",
            );
        }
        Ok(None) => {}
        Err(e) => return ApiError(e).into_response(),
    }
    let response = next.run(request).await;
    let status = response.status();
    if status.is_server_error() || status.is_informational() || status.is_redirection() {
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = match to_bytes(body, MAX_STORED_BODY).await {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::warn!(error = %e, "buffer response for idempotency record");
            return Response::from_parts(parts, Body::empty());
        }
    };
    let record = IdempotentResponse {
        key,
        fingerprint,
        status: status.as_u16(),
        body: String::from_utf8_lossy(&bytes).into_owned(),
        created_at_ms: chrono::Utc::now().timestamp_millis(),
    };
    if let Err(e) = store.put_idempotent(&record).await {
        tracing::warn!(error = %e, "store idempotency record");
    }
    Response::from_parts(parts, Body::from(bytes))
}

fn replay(stored: &IdempotentResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut response = (status, stored.body.clone()).into_response();
    if !stored.body.is_empty() {
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
    }
    response
}
