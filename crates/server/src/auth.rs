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
        Ok(token) => token,
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

fn bearer_token(request: &Request) -> Result<String, CatalogError> {
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
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(CatalogError::Unauthenticated(format!(
            "unsupported authorization scheme {scheme:?}; use Bearer"
        )));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(CatalogError::Unauthenticated(
            "the bearer token is empty".into(),
        ));
    }
    Ok(token.to_string())
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
