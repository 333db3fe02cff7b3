//! Request extraction with errors that name what was wrong.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use floe_catalog::CatalogError;
use iceberg::NamespaceIdent;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A request body of at most `limit` bytes (refused from its declared `Content-Length` before
/// a byte is read); the error names the limit, for each door to answer in its own form.
pub async fn body_within(
    body: axum::body::Body,
    headers: &axum::http::HeaderMap,
    limit: usize,
) -> Result<Bytes, String> {
    let too_large = || {
        format!(
            "the body is larger than the {limit} bytes taken per request (--ingest-max-body-mb)"
        )
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| too_large())
}

/// A JSON body. Malformed JSON, wrong types and unknown fields are 400s naming the problem;
/// a body over the size limit is a 413.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(bytes_rejection)?;
        parse_json(&bytes).map(JsonBody)
    }
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "request body is empty; a JSON object is required",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            ApiError::bad_request(format!("invalid request body: {inner}"))
        } else {
            ApiError::bad_request(format!("invalid request body at {path}: {inner}"))
        }
    })
}

fn bytes_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError(CatalogError::PayloadTooLarge(
            "request body exceeds the server's size limit".to_string(),
        ))
    } else {
        ApiError::bad_request(format!(
            "cannot read request body: {}",
            rejection.body_text()
        ))
    }
}

/// Path parameters; a malformed segment is a 400.
pub struct PathParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathParams(p.0))
            .map_err(|e: PathRejection| {
                ApiError::bad_request(format!("invalid path: {}", e.body_text()))
            })
    }
}

/// Query parameters; a malformed parameter is a 400.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryParams(q.0))
            .map_err(|e: QueryRejection| {
                ApiError::bad_request(format!("invalid query parameters: {}", e.body_text()))
            })
    }
}

/// Parses a namespace path parameter: levels separated by the unit separator (0x1F).
pub fn parse_namespace(raw: &str) -> Result<NamespaceIdent, ApiError> {
    if raw.is_empty() {
        return Err(ApiError::bad_request("namespace must not be empty"));
    }
    let levels: Vec<String> = raw.split('\u{1f}').map(str::to_string).collect();
    if levels.iter().any(String::is_empty) {
        return Err(ApiError::bad_request(format!(
            "namespace {:?} has an empty level",
            raw.replace('\u{1f}', ".")
        )));
    }
    NamespaceIdent::from_vec(levels).map_err(|e| ApiError::bad_request(e.message()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_parse() {
        assert_eq!(parse_namespace("a\u{1f}b").unwrap().len(), 2);
        assert!(parse_namespace("").is_err());
        assert!(parse_namespace("a\u{1f}").is_err());
    }

    #[test]
    fn json_errors_name_the_field() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Req {
            name: String,
        }
        let e = parse_json::<Req>(br#"{"name": 1}"#).unwrap_err();
        assert!(e.0.to_string().contains("name"), "{}", e.0);
        let e = parse_json::<Req>(br#"{"name": "x", "colour": 1}"#).unwrap_err();
        assert!(e.0.to_string().contains("colour"), "{}", e.0);
        let e = parse_json::<Req>(b"{").unwrap_err();
        assert!(e.0.to_string().contains("invalid request body"), "{}", e.0);
    }
}
