//! Authentication of every request but the token endpoint, health, metrics and the OpenAPI
//! document: a bearer token in, the principal it stands for into the request's extensions.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege, Scope};

use crate::AppState;
use crate::error::ApiError;

pub async fn require_principal(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = match bearer_token(&request) {
        Ok(Credential::Bearer(token)) => token,
        // Basic authentication with a client id and secret (what Confluent's schema
        // registry clients send): a token is issued for them as the token endpoint would.
        Ok(Credential::Basic(id, secret)) => {
            match state.auth.token_for_client(&id, &secret).await {
                Ok(issued) => issued.access_token,
                Err(e) => return challenge(ApiError(e)),
            }
        }
        Err(e) => return challenge(ApiError(e)),
    };
    match state.auth.authenticate(&token).await {
        Ok(principal) => {
            if let Some(scope) = floe_catalog::governance::audit::AuditScope::current() {
                scope.set_principal(&principal.name);
            }
            let grants = match state.authz.grants(&principal).await {
                Ok(grants) => grants,
                Err(e) => return ApiError(e).into_response(),
            };
            request.extensions_mut().insert(Caller {
                principal: principal.clone(),
                grants,
            });
            let subject = crate::audit::AuditSubject(principal.name.clone());
            request.extensions_mut().insert(principal);
            let mut response = next.run(request).await;
            response.extensions_mut().insert(subject);
            response
        }
        Err(e @ CatalogError::Unauthenticated(_)) => challenge(ApiError(e)),
        Err(e) => ApiError(e).into_response(),
    }
}

enum Credential {
    Bearer(String),
    Basic(String, String),
}

/// The bearer token a request presents, if it presents one.
pub fn presented_bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

fn bearer_token(request: &Request) -> Result<Credential, CatalogError> {
    let Some(value) = request.headers().get(header::AUTHORIZATION) else {
        return Err(CatalogError::Unauthenticated(
            "authentication required: send an OAuth2 bearer token (Authorization: Bearer …) obtained from /catalog/v1/oauth/tokens".into(),
        ));
    };
    let value = value.to_str().map_err(|_| {
        CatalogError::Unauthenticated("the Authorization header is not valid text".into())
    })?;
    let (scheme, token) = value.split_once(' ').ok_or_else(|| {
        CatalogError::Unauthenticated("the Authorization header must be 'Bearer <token>'".into())
    })?;
    if scheme.eq_ignore_ascii_case("basic") {
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(token.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| {
                CatalogError::Unauthenticated("basic credentials are not valid base64 text".into())
            })?;
        let (id, secret) = decoded.split_once(':').ok_or_else(|| {
            CatalogError::Unauthenticated("basic credentials must be 'client-id:secret'".into())
        })?;
        return Ok(Credential::Basic(id.to_string(), secret.to_string()));
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(CatalogError::Unauthenticated(format!(
            "unsupported authorization scheme {scheme:?}; use Bearer (or Basic with a client id and secret)"
        )));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(CatalogError::Unauthenticated(
            "the bearer token is empty".into(),
        ));
    }
    Ok(Credential::Bearer(token.to_string()))
}

fn challenge(error: ApiError) -> Response {
    let mut response = error.into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"floe\""),
    );
    response
}

/// Requires a server-level privilege (principals, roles, signing keys, audit).
pub fn require_server(caller: &Caller, privilege: Privilege) -> Result<(), ApiError> {
    caller
        .require(privilege, &Scope::server(), || {
            CatalogError::PermissionDenied(format!(
                "principal {} lacks the {} privilege on the server",
                caller.principal.name,
                privilege.as_str()
            ))
        })
        .map_err(ApiError)
}
