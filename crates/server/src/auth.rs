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
    request: Request,
    next: Next,
) -> Response {
    match authenticated(&state, request).await {
        Ok(request) => run_as(request, next).await,
        Err(e @ CatalogError::Unauthenticated(_)) => challenge(ApiError(e)),
        Err(e) => ApiError(e).into_response(),
    }
}

/// `request` with the caller its credentials stand for in its extensions: the one check
/// every front door's authentication layer makes, answering in its own protocol's form.
pub(crate) async fn authenticated(
    state: &AppState,
    mut request: Request,
) -> Result<Request, CatalogError> {
    let token = presented_token(state, request.headers()).await?;
    let principal = state.auth.authenticate(&token).await?;
    if let Some(scope) = floe_catalog::governance::audit::AuditScope::current() {
        scope.set_principal(&principal.name);
    }
    let grants = state.authz.grants(&principal).await?;
    request.extensions_mut().insert(Caller {
        principal: principal.clone(),
        grants,
    });
    request.extensions_mut().insert(principal);
    Ok(request)
}

/// Runs an [`authenticated`] request, its answer marked with the principal for the audit.
pub(crate) async fn run_as(request: Request, next: Next) -> Response {
    let subject = request
        .extensions()
        .get::<Caller>()
        .map(|c| crate::audit::AuditSubject(c.principal.name.clone()));
    let mut response = next.run(request).await;
    if let Some(subject) = subject {
        response.extensions_mut().insert(subject);
    }
    response
}

pub(crate) enum Credential {
    Bearer(String),
    Basic(String, String),
}

/// The access token a request's credentials stand for: its bearer token, or for Basic
/// authentication with a client id and secret (what Confluent's schema registry clients and
/// Prometheus send) a token issued as the token endpoint would.
pub async fn presented_token(
    state: &AppState,
    headers: &axum::http::HeaderMap,
) -> Result<String, CatalogError> {
    match credential(headers)? {
        Credential::Bearer(token) => Ok(token),
        Credential::Basic(id, secret) => Ok(state
            .auth
            .token_for_client(&id, &secret)
            .await?
            .access_token),
    }
}

/// The client id and secret of HTTP Basic credentials, `base64("<id>:<secret>")` (with or
/// without padding: some clients, Go's Flight client among them, leave it off).
pub fn decode_basic(encoded: &str) -> Option<(String, String)> {
    use base64::Engine;
    let encoded = encoded.trim();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(encoded))
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (id, secret) = text.split_once(':')?;
    Some((id.to_string(), secret.to_string()))
}

/// The credentials of a request's Authorization header.
pub(crate) fn credential(headers: &axum::http::HeaderMap) -> Result<Credential, CatalogError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
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
        let (id, secret) = decode_basic(token).ok_or_else(|| {
            CatalogError::Unauthenticated(
                "basic credentials must be base64 text of 'client-id:secret'".into(),
            )
        })?;
        return Ok(Credential::Basic(id, secret));
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

/// The caller a gRPC request's `authorization: Bearer <token>` metadata names (Flight SQL,
/// OTLP/gRPC).
pub(crate) async fn grpc_caller(
    state: &AppState,
    metadata: &tonic::metadata::MetadataMap,
) -> Result<Caller, tonic::Status> {
    let header = metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            tonic::Status::unauthenticated(
                "authentication required: handshake first or send a bearer token",
            )
        })?;
    let token = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .ok_or_else(|| {
            tonic::Status::unauthenticated("the authorization header must be 'Bearer <token>'")
        })?;
    let principal = state
        .auth
        .authenticate(token)
        .await
        .map_err(|e| tonic::Status::unauthenticated(e.to_string()))?;
    let grants = state
        .authz
        .grants(&principal)
        .await
        .map_err(|e| tonic::Status::internal(e.to_string()))?;
    Ok(Caller { principal, grants })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so a failure names a reproducible input.
    struct Bytes(u64);

    impl Bytes {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Authorization headers built from the pieces real ones are made of (schemes, base64,
    /// separators, padding) and arbitrary bytes, 200,000 of them: each is answered or refused,
    /// never a panic.
    #[test]
    fn authorization_headers_never_panic() {
        let pieces: [&[u8]; 16] = [
            b"Bearer ",
            b"bearer ",
            b"Basic ",
            b"BASIC  ",
            b" ",
            b":",
            b"=",
            b"==",
            b"ZmxvZTpzZWNyZXQ=",
            b"ZmxvZ",
            b"eyJhbGciOiJIUzI1NiJ9.",
            b".",
            "é✓".as_bytes(),
            b"\xff\xfe",
            b"\t",
            b"\x00",
        ];
        let mut random = Bytes(0x9e37_79b9_7f4a_7c15);
        for _ in 0..200_000 {
            let mut value = Vec::new();
            for _ in 0..random.next() % 8 {
                let pick = random.next();
                if pick.is_multiple_of(4) {
                    value.push((pick >> 8) as u8);
                } else {
                    value.extend_from_slice(pieces[(pick >> 8) as usize % pieces.len()]);
                }
            }
            let _ = decode_basic(&String::from_utf8_lossy(&value));
            if let Ok(header) = HeaderValue::from_bytes(&value) {
                let request = Request::builder()
                    .header(header::AUTHORIZATION, header)
                    .body(axum::body::Body::empty())
                    .expect("a request");
                let _ = credential(request.headers());
            }
        }
    }

    #[test]
    fn basic_credentials_decode_with_or_without_padding() {
        // base64("floe:secret") is "ZmxvZTpzZWNyZXQ=".
        let expected = Some(("floe".to_string(), "secret".to_string()));
        assert_eq!(decode_basic("ZmxvZTpzZWNyZXQ="), expected);
        assert_eq!(decode_basic(" ZmxvZTpzZWNyZXQ "), expected);
        assert_eq!(decode_basic("Zmxvb3NlY3JldA=="), None, "no colon");
        assert_eq!(decode_basic("%%%"), None);
    }
}
