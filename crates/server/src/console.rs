//! The web console at `/console`: plain HTML, CSS and JavaScript modules embedded in the
//! binary (`crates/server/console/`), no build step.
//!
//! The console holds no privilege of its own. It signs in like any client (client
//! credentials at `/catalog/v1/oauth/tokens`, or an OpenID Connect issuer's authorization
//! code flow with PKCE) and then reads everything through the same authorized APIs, with the
//! signed-in principal's token: a principal sees in the console exactly what it may see
//! through the REST catalog and the management API.
//!
//! Only the fixed files below are served (a name is looked up, never joined to a path), each
//! with a Content-Security-Policy that lets scripts and styles come from this origin only and
//! the network reach this origin and the OpenID Connect token endpoint only. The files are
//! public; serving them is not audited (the API calls they make are).

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde_json::json;

use crate::AppState;

/// How the console offers OpenID Connect sign-in, when it does.
#[derive(Debug, Clone)]
pub struct ConsoleOidc {
    /// The issuer, shown on the sign-in button.
    pub issuer: String,
    /// The client id the console is registered under at the issuer (a public client).
    pub client_id: String,
    /// The scopes asked for.
    pub scope: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
}

/// What the console needs to know from the server's configuration.
#[derive(Debug, Clone, Default)]
pub struct ConsoleConfig {
    pub oidc: Option<ConsoleOidc>,
}

/// The embedded files: name, content type, content.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../console/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../console/style.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/api.js"),
    ),
    (
        "ui.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/ui.js"),
    ),
    (
        "catalog.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/catalog.js"),
    ),
    (
        "sql.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/sql.js"),
    ),
    (
        "operations.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/operations.js"),
    ),
    (
        "access.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/access.js"),
    ),
];

/// `/console`, `/console/` and `/console/{file}`, with the console's security headers.
pub(crate) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(|| serve("index.html")))
        .route("/console/config.json", get(config))
        .route(
            "/console/{*file}",
            get(|Path(file): Path<String>| async move { serve(&file).await }),
        )
        // The policy depends only on the configuration: built once, not per answer.
        .layer(axum::middleware::from_fn_with_state(
            policy(&state.console),
            headers,
        ))
}

async fn serve(file: &str) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => {
            let mut response = (*body).into_response();
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        None => (StatusCode::NOT_FOUND, "no such console file").into_response(),
    }
}

/// What the console's sign-in page offers.
async fn config(State(state): State<AppState>) -> Response {
    let oidc = state.console.oidc.as_ref().map(|o| {
        json!({
            "issuer": o.issuer,
            "client-id": o.client_id,
            "scope": o.scope,
            "authorization-endpoint": o.authorization_endpoint,
            "token-endpoint": o.token_endpoint,
        })
    });
    let mut response = axum::Json(json!({ "oidc": oidc })).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Adds the console's security headers to every answer under `/console`.
async fn headers(
    State(policy): State<HeaderValue>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// The Content-Security-Policy: scripts, styles and connections from this origin only (and
/// the OpenID Connect token endpoint's, when sign-in there is offered).
fn policy(console: &ConsoleConfig) -> HeaderValue {
    const BASE: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
        img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
    let connect = match console
        .oidc
        .as_ref()
        .and_then(|o| origin(&o.token_endpoint))
    {
        Some(token_origin) => format!("connect-src 'self' {token_origin}"),
        None => "connect-src 'self'".to_string(),
    };
    // `origin` admits only header-safe characters; should that ever fail, the policy goes out
    // without the token endpoint rather than not at all.
    HeaderValue::from_str(&format!("{BASE}; {connect}")).unwrap_or_else(|_| {
        HeaderValue::from_static(concat!(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; ",
            "base-uri 'none'; form-action 'self'; frame-ancestors 'none'; connect-src 'self'"
        ))
    })
}

/// Whether the browser may be sent to (or post its code to) this issuer endpoint: https, or
/// http on a loopback address only (a code or verifier must not cross a network in clear).
pub fn browser_endpoint_ok(url: &str) -> bool {
    let Ok(parsed) = url::Url::parse(url) else {
        return false;
    };
    match parsed.scheme() {
        "https" => parsed.host().is_some(),
        "http" => match parsed.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        },
        _ => false,
    }
}

/// `scheme://host[:port]` of an http(s) URL, or None for anything else (which the policy then
/// leaves out rather than widening it).
fn origin(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return None;
    }
    let origin = parsed.origin().ascii_serialization();
    // An origin is only ever letters, digits and `:/.-[]`; anything else stays out of the header.
    origin
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ":/.-[]".contains(c))
        .then_some(origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_named_once_and_nothing_else_is_served() {
        let mut names: Vec<_> = ASSETS.iter().map(|(n, _, _)| *n).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ASSETS.len());
        assert!(names.iter().all(|n| !n.contains('/') && !n.contains("..")));
    }

    #[test]
    fn origins_are_exact_or_left_out() {
        assert_eq!(
            origin("https://id.example.com:8443/oauth/token").as_deref(),
            Some("https://id.example.com:8443")
        );
        assert_eq!(origin("javascript:alert(1)"), None);
        assert_eq!(origin("not a url"), None);
        assert_eq!(
            origin("http://127.0.0.1:9/t?x=';script-src *").as_deref(),
            Some("http://127.0.0.1:9")
        );
    }

    #[test]
    fn issuer_endpoints_are_https_or_loopback() {
        assert!(browser_endpoint_ok("https://id.example.com/authorize"));
        assert!(browser_endpoint_ok("http://127.0.0.1:8080/token"));
        assert!(browser_endpoint_ok("http://localhost/token"));
        assert!(browser_endpoint_ok("http://[::1]:9/token"));
        assert!(!browser_endpoint_ok("http://id.example.com/token"));
        assert!(!browser_endpoint_ok("javascript:alert(1)"));
        assert!(!browser_endpoint_ok("data:text/html,x"));
    }

    #[test]
    fn the_policy_names_the_token_endpoint_origin_only() {
        let mut console = ConsoleConfig::default();
        assert!(
            policy(&console)
                .to_str()
                .unwrap()
                .ends_with("connect-src 'self'")
        );
        console.oidc = Some(ConsoleOidc {
            issuer: "https://id.example.com".into(),
            client_id: "c".into(),
            scope: "openid".into(),
            authorization_endpoint: "https://id.example.com/a".into(),
            token_endpoint: "https://tokens.example.com:8443/t?x=1".into(),
        });
        let policy = policy(&console);
        let text = policy.to_str().unwrap();
        assert!(
            text.ends_with("connect-src 'self' https://tokens.example.com:8443"),
            "{text}"
        );
        assert!(!text.contains("unsafe"));
    }
}
