//! `Idempotency-Key` handling: a retried mutation with the same key gets the first final
//! answer (2xx or 4xx) again instead of running twice. 5xx answers are never stored.

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use floe_catalog::model::IdempotentResponse;
use sha2::Digest;
use std::sync::Arc;

use crate::AppState;
use crate::error::{ApiError, error_response};

pub const HEADER: &str = "idempotency-key";
/// How long keys are kept, as advertised in `/v1/config`.
pub const LIFETIME_ISO: &str = "PT30M";
pub const LIFETIME_MS: i64 = 30 * 60 * 1000;

pub async fn layer(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(key) = request.headers().get(HEADER).cloned() else {
        return next.run(request).await;
    };
    // Reads are not replayed: scan planning answers (`…/plan`, `…/tasks`) are checked against
    // the caller's grants each time, and may be large.
    let path = request.uri().path();
    if matches!(*request.method(), Method::GET | Method::HEAD)
        || path.ends_with("/plan")
        || path.ends_with("/tasks")
    {
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
    // The same caller repeating the same request: method, path, principal and body.
    let principal = request
        .extensions()
        .get::<floe_catalog::governance::authz::Caller>()
        .map(|c| c.principal.id.to_string())
        .unwrap_or_default();
    let delegated = request
        .headers()
        .contains_key("x-iceberg-access-delegation")
        || request.uri().path().ends_with("/sign");
    let (parts, body) = request.into_parts();
    let body = match to_bytes(body, crate::MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(_) => {
            return ApiError(floe_catalog::CatalogError::PayloadTooLarge(
                "request body exceeds the server's size limit".to_string(),
            ))
            .into_response();
        }
    };
    let fingerprint = format!(
        "{} {} {principal} {}",
        parts.method,
        parts.uri.path(),
        hex::encode(sha2::Sha256::digest(&body))
    );
    let request = Request::from_parts(parts, Body::from(body));
    let store = state.catalog.store().clone();
    // A retry that arrives while the first attempt still runs (its client timed out; the
    // request finishes detached) waits for that attempt's answer instead of running again.
    let _turn = KEY_TURNS.take(&key).await;
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
    // 5xx are never final; answers carrying credentials or signatures are never stored.
    if status.is_server_error() || status.is_informational() || status.is_redirection() || delegated
    {
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = match to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::warn!(error = %e, "buffer response for idempotency record");
            return ApiError(floe_catalog::CatalogError::internal("buffer response", e))
                .into_response();
        }
    };
    let record = IdempotentResponse {
        key,
        fingerprint,
        status: status.as_u16(),
        body: String::from_utf8_lossy(&bytes).into_owned(),
        created_at_ms: floe_catalog::clock::now_ms(),
    };
    if let Err(e) = store.put_idempotent(&record).await {
        tracing::warn!(error = %e, "store idempotency record");
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// One turn at a time per idempotency key on this node.
static KEY_TURNS: std::sync::LazyLock<KeyTurns> = std::sync::LazyLock::new(KeyTurns::default);

#[derive(Default)]
struct KeyTurns {
    keys: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A key's turn; the key is forgotten when no one holds or waits for it.
struct KeyTurn {
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl KeyTurns {
    async fn take(&'static self, key: &str) -> KeyTurn {
        let lock = self
            .keys
            .lock()
            .expect("idempotency keys lock")
            .entry(key.to_string())
            .or_default()
            .clone();
        KeyTurn {
            key: key.to_string(),
            guard: Some(lock.lock_owned().await),
        }
    }
}

impl Drop for KeyTurn {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut keys = KEY_TURNS.keys.lock().expect("idempotency keys lock");
        if keys
            .get(&self.key)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            keys.remove(&self.key);
        }
    }
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
