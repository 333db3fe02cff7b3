//! `POST /v1/oauth/tokens`: OAuth2 client credentials and token exchange, answering errors
//! in OAuth2's own form (`{"error", "error_description"}`).

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use floe_catalog::CatalogError;
use serde_json::json;

use crate::AppState;

const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    (
        status,
        Json(json!({ "error": error, "error_description": description })),
    )
        .into_response()
}

/// Client id and secret from HTTP Basic authentication, when present.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    match crate::auth::credential(headers) {
        Ok(crate::auth::Credential::Basic(id, secret)) => Some((id, secret)),
        _ => None,
    }
}

pub async fn token(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let form: HashMap<String, String> = match serde_urlencoded::from_bytes(&body) {
        Ok(form) => form,
        Err(e) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                &format!("the body must be application/x-www-form-urlencoded: {e}"),
            );
        }
    };
    let Some(grant_type) = form.get("grant_type") else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "grant_type is required",
        );
    };
    let mut subject = None;
    let issued = match grant_type.as_str() {
        "client_credentials" => {
            let (id, secret) = match (form.get("client_id"), form.get("client_secret")) {
                (Some(id), Some(secret)) => (id.clone(), secret.clone()),
                _ => match basic_credentials(&headers) {
                    Some(pair) => pair,
                    None => {
                        return oauth_error(
                            StatusCode::BAD_REQUEST,
                            "invalid_request",
                            "client_id and client_secret are required",
                        );
                    }
                },
            };
            subject = Some(format!("client:{id}"));
            state.auth.token_for_client(&id, &secret).await
        }
        TOKEN_EXCHANGE => match form.get("subject_token") {
            Some(subject) => state.auth.exchange(subject).await,
            None => {
                return oauth_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    "subject_token is required",
                );
            }
        },
        other => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                &format!(
                    "grant_type {other:?} is not supported; use client_credentials or token exchange"
                ),
            );
        }
    };
    let mut response = match issued {
        Ok(token) => Json(json!({
            "access_token": token.access_token,
            "token_type": "bearer",
            "expires_in": token.expires_in,
            "issued_token_type": ACCESS_TOKEN_TYPE,
        }))
        .into_response(),
        Err(CatalogError::Unauthenticated(message)) => {
            oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", &message)
        }
        Err(e) => crate::error::ApiError(e).into_response(),
    };
    if let Some(subject) = subject {
        response
            .extensions_mut()
            .insert(crate::audit::AuditSubject(subject));
    }
    response
}
