//! Errors as HTTP responses. Every status code Floe answers with is decided here.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use floe_catalog::{CatalogError, ErrorCode};
use serde_json::json;

/// An error answered with the Iceberg `ErrorModel` body.
#[derive(Debug)]
pub struct ApiError(pub CatalogError);

pub type ApiResult<T> = Result<T, ApiError>;

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        ApiError(e)
    }
}

impl ApiError {
    pub fn bad_request(message: impl std::fmt::Display) -> Self {
        ApiError(CatalogError::bad_request(message))
    }

    pub fn not_found(error_type: &'static str, message: impl std::fmt::Display) -> Self {
        ApiError(CatalogError::NotFound {
            error_type,
            message: message.to_string(),
        })
    }
}

/// The one mapping from transport-neutral codes to HTTP statuses.
pub fn status_for(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidArgument => StatusCode::BAD_REQUEST,
        ErrorCode::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorCode::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::AlreadyExists | ErrorCode::Conflict => StatusCode::CONFLICT,
        ErrorCode::Unsupported => StatusCode::NOT_ACCEPTABLE,
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::QuotaExceeded => StatusCode::INSUFFICIENT_STORAGE,
        // Not 408, which clients may resend on their own: a stopped statement is an answer.
        ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::CommitStateUnknown => StatusCode::BAD_GATEWAY,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Builds an `ErrorModel` response.
pub fn error_response(status: StatusCode, error_type: &str, message: &str) -> Response {
    let body = json!({
        "error": { "message": message, "type": error_type, "code": status.as_u16() }
    });
    (status, Json(body)).into_response()
}

/// What a client is told of `e`: its message, or for an internal failure only an error id
/// (the cause is logged once, with that id).
pub fn client_message(e: &CatalogError) -> String {
    match e {
        CatalogError::Internal { .. } => {
            let error_id = uuid::Uuid::now_v7();
            tracing::error!(%error_id, error = %error_chain(e), "request failed");
            format!("internal server error; error id {error_id}")
        }
        other => other.to_string(),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status_for(self.0.code());
        let message = client_message(&self.0);
        let mut response = error_response(status, self.0.error_type(), &message);
        // A limit's refusal says when its bucket refills; other 429s and overload 503s ask
        // for a second.
        let retry_after = match &self.0 {
            CatalogError::Limited(refused) => refused.retry_after_seconds(),
            _ => (status == StatusCode::TOO_MANY_REQUESTS).then_some(1),
        };
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        if matches!(self.0, CatalogError::Hidden(_)) {
            response.extensions_mut().insert(crate::audit::AuditDenied);
        }
        response
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        // Many errors already print their source; add only what is new.
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}
