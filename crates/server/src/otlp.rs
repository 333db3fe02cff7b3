//! OTLP/HTTP and Prometheus remote write: front doors over the ingestion core's OpenTelemetry
//! and remote-write adapters ([`floe_stream::otlp`], [`floe_stream::remote_write`]).
//!
//! - `POST /otlp/{warehouse}/v1/{logs|traces|metrics}` — the tenant (a warehouse) in the path;
//!   `POST /otlp/v1/{logs|traces|metrics}` takes it from `X-Scope-OrgID` (as Loki and Mimir
//!   do), `default` when absent. Bodies are OTLP protobuf (`application/x-protobuf`) or
//!   OTLP/JSON (`application/json`), optionally gzip (`Content-Encoding: gzip`). The answer is
//!   the signal's `Export…ServiceResponse` in the request's encoding, with `partial_success`
//!   counting records refused one by one; an error is a `google.rpc.Status` in the request's
//!   encoding (400 malformed, 401, 403, 404 unknown tenant, 413, 415, and 503 with
//!   `Retry-After` when trying again helps).
//! - `POST /prometheus/{warehouse}/api/v1/write` — remote write 1.0 and 2.0, in
//!   [`crate::remote_write`].
//!
//! Every request is authenticated (a bearer token, or Basic credentials as Prometheus sends
//! them), the caller needs `write-data` on the tables it writes (and `create-table` /
//! `create-namespace` the first time), and rows are acknowledged only once durable in the
//! core's log.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
use floe_catalog::tenants::Refused;
use floe_stream::Refusal;
use floe_stream::core::dead_letter::Door;
use floe_stream::core::{IngestError, Ingestor, Target};
use floe_stream::otlp::opentelemetry_proto::tonic::collector;
use floe_stream::otlp::{self, Encoding, Signal, Taken};
use prost::Message;

use crate::AppState;

/// The header naming a request's tenant (its warehouse) when its path does not.
pub const TENANT_HEADER: &str = "x-scope-orgid";

/// The tenant a request without one writes to.
pub const DEFAULT_TENANT: &str = "default";

/// `google.rpc.Status`, the body of an OTLP error.
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// An OTLP error answer: HTTP status, gRPC code, message, and when to try again.
pub struct Failure {
    pub status: StatusCode,
    pub message: String,
    /// When the same request can succeed (a limit's bucket refills, a backlog drains).
    pub retry_after: Option<Duration>,
}

impl Failure {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A refusal by a tenant's limit or the overload guard.
    pub fn of_refused(refused: Refused) -> Self {
        Self {
            status: crate::error::status_for(refused.code()),
            message: refused.to_string(),
            retry_after: refused.retry_after,
        }
    }

    /// `Retry-After` in whole seconds, for an answer the client should send again.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        if !self.retryable() {
            return None;
        }
        Some(self.retry_after.map_or(1, |d| {
            (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
        }))
    }

    /// The gRPC status: its code, and for a retryable answer `RetryInfo` (in the status
    /// details and as `google.rpc.retryinfo-bin`, which OpenTelemetry's exporters read).
    pub fn grpc_status(&self) -> tonic::Status {
        let code = self.grpc_code();
        if !self.retryable() {
            return tonic::Status::new(code, self.message.clone());
        }
        let delay = self.retry_after.unwrap_or(Duration::from_secs(1));
        let info = RetryInfo {
            retry_delay: Some(prost_types_duration(delay)),
        };
        let info_bytes = info.encode_to_vec();
        let details = RpcStatusWithDetails {
            code: code as i32,
            message: self.message.clone(),
            details: vec![ProtoAny {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: info_bytes.clone(),
            }],
        };
        let mut metadata = tonic::metadata::MetadataMap::new();
        metadata.insert_bin(
            "google.rpc.retryinfo-bin",
            tonic::metadata::MetadataValue::from_bytes(&info_bytes),
        );
        tonic::Status::with_details_and_metadata(
            code,
            self.message.clone(),
            details.encode_to_vec().into(),
            metadata,
        )
    }

    /// The gRPC status code OTLP pairs with this HTTP status.
    pub fn grpc_code(&self) -> tonic::Code {
        match self.status {
            StatusCode::BAD_REQUEST | StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                tonic::Code::InvalidArgument
            }
            StatusCode::UNAUTHORIZED => tonic::Code::Unauthenticated,
            StatusCode::FORBIDDEN => tonic::Code::PermissionDenied,
            StatusCode::NOT_FOUND => tonic::Code::NotFound,
            StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::TOO_MANY_REQUESTS
            | StatusCode::INSUFFICIENT_STORAGE => tonic::Code::ResourceExhausted,
            StatusCode::CONFLICT => tonic::Code::Aborted,
            _ => tonic::Code::Unavailable,
        }
    }

    /// Whether the client should send the request again (OTLP retries 429, 502, 503, 504).
    fn retryable(&self) -> bool {
        matches!(
            self.status,
            StatusCode::TOO_MANY_REQUESTS
                | StatusCode::BAD_GATEWAY
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT
        )
    }

    /// A decoder's refusal, answered as the core's error of its kind (400 malformed, 413 too
    /// large).
    pub(crate) fn of_refusal(refusal: Refusal) -> Self {
        Self::of_ingest(refusal.into())
    }

    /// A core error, by its kind: a tenant's limit as the limit says, a retryable failure
    /// as 503, the rest as the catalog's status for its code.
    pub fn of_ingest(e: IngestError) -> Self {
        if let IngestError::Catalog(CatalogError::Limited(refused)) = e {
            return Failure::of_refused(refused);
        }
        if e.retryable() {
            let message = match &e {
                IngestError::Catalog(e) => crate::error::client_message(e),
                e => e.to_string(),
            };
            return Failure::new(StatusCode::SERVICE_UNAVAILABLE, message);
        }
        match e {
            IngestError::Catalog(e) => Failure::new(
                crate::error::status_for(e.code()),
                crate::error::client_message(&e),
            ),
            IngestError::UnknownTenant { .. } => Failure::new(StatusCode::NOT_FOUND, e.to_string()),
            IngestError::TooLarge(m) => Failure::new(StatusCode::PAYLOAD_TOO_LARGE, m),
            e => Failure::new(StatusCode::BAD_REQUEST, e.to_string()),
        }
    }

    fn response(&self, encoding: Encoding) -> Response {
        let body = RpcStatus {
            code: self.grpc_code() as i32,
            message: self.message.clone(),
        };
        let mut response = match encoding {
            Encoding::Protobuf => (
                self.status,
                [(header::CONTENT_TYPE, "application/x-protobuf")],
                body.encode_to_vec(),
            )
                .into_response(),
            Encoding::Json => (self.status, axum::Json(body)).into_response(),
        };
        if let Some(seconds) = self.retry_after_seconds() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

fn prost_types_duration(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.Status` with its details, as gRPC's `grpc-status-details-bin` carries it.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatusWithDetails {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

/// The encoding a `Content-Type` names.
fn encoding(headers: &HeaderMap) -> Option<Encoding> {
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())?
        .split(';')
        .next()?
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "application/x-protobuf" | "application/protobuf" => Some(Encoding::Protobuf),
        "application/json" => Some(Encoding::Json),
        _ => None,
    }
}

/// The body, at most `limit` bytes.
pub(crate) async fn read_body(
    body: axum::body::Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<Bytes, Failure> {
    crate::extract::body_within(body, headers, limit)
        .await
        .map_err(|m| Failure::new(StatusCode::PAYLOAD_TOO_LARGE, m))
}

/// `Content-Encoding`, lowercased (`identity` when absent).
fn content_encoding(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| "identity".to_string(), |v| v.trim().to_ascii_lowercase())
}

/// The ingestion core's path for this server, or 503 when ingestion is off.
pub(crate) fn ingestor(state: &AppState, door: Door) -> Result<Ingestor<'_>, Failure> {
    match &state.ingest {
        Some(log) => Ok(Ingestor::new(log, &state.catalog, door)),
        None => Err(Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ingestion is not enabled on this server",
        )),
    }
}

/// A signal's rows taken from `body` (gzip-compressed when `gzip`) as `caller` into
/// `tenant`'s tables, through the ingestion core: opened (tenant, table, admission) before
/// the body is inflated or decoded, its records counted against the tenant's records bucket,
/// records past a per-record limit refused one by one.
pub async fn take(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    signal: Signal,
    encoding: Encoding,
    body: &[u8],
    gzip: bool,
) -> Result<Taken, Failure> {
    let failed = |e: IngestError| Failure::of_ingest(e);
    let opened = ingestor(state, Door::Otlp)?
        .open(
            caller,
            tenant,
            Target::Otel(signal.table()),
            body.len() as u64,
        )
        .await
        .map_err(failed)?;
    let inflated;
    let body = if gzip {
        inflated =
            otlp::gunzip(body, state.decode.inflation(body.len())).map_err(Failure::of_refusal)?;
        &inflated[..]
    } else {
        body
    };
    let budget = state.decode.budget(body.len());
    let request = otlp::decode(signal, encoding, body, budget).map_err(Failure::of_refusal)?;
    let now = otlp::now_micros();
    let converted = otlp::convert(&request, now);
    drop(request);
    let exemplars = converted.exemplars.as_ref().map_or(0, |e| e.num_rows());
    let records = converted.batch.num_rows() + converted.rejected.len() + exemplars;
    opened.count(records as u64).map_err(failed)?;
    let converted = otlp::screen::screen(converted, opened.tenant(), now);
    let taken = otlp::ingest(&opened, converted).await.map_err(failed)?;
    opened.taken((taken.accepted + taken.exemplars) as u64);
    Ok(taken)
}

/// The signal's `Export…ServiceResponse` for what was taken, as protobuf bytes and as JSON.
pub fn answer(signal: Signal, taken: &Taken) -> (Vec<u8>, serde_json::Value) {
    let rejected = taken.rejected as i64;
    let message = taken.error_message.clone().unwrap_or_default();
    macro_rules! respond {
        ($response:ty, $partial:ty, $field:ident) => {{
            let partial = (rejected > 0).then(|| <$partial>::default());
            let mut response = <$response>::default();
            if let Some(mut partial) = partial {
                partial.$field = rejected;
                partial.error_message = message.clone();
                response.partial_success = Some(partial);
            }
            let json = match &response.partial_success {
                None => serde_json::json!({}),
                Some(_) => serde_json::to_value(&response).unwrap_or_default(),
            };
            (response.encode_to_vec(), json)
        }};
    }
    match signal {
        Signal::Logs => respond!(
            collector::logs::v1::ExportLogsServiceResponse,
            collector::logs::v1::ExportLogsPartialSuccess,
            rejected_log_records
        ),
        Signal::Traces => respond!(
            collector::trace::v1::ExportTraceServiceResponse,
            collector::trace::v1::ExportTracePartialSuccess,
            rejected_spans
        ),
        Signal::Metrics => respond!(
            collector::metrics::v1::ExportMetricsServiceResponse,
            collector::metrics::v1::ExportMetricsPartialSuccess,
            rejected_data_points
        ),
    }
}

/// Authentication of the OTLP and remote-write doors: the check every door makes
/// ([`crate::auth::authenticated`]), a refusal answered as OTLP answers errors — a
/// `google.rpc.Status` in the request's encoding, which exporters read and log — with the
/// challenge on a 401.
pub async fn require_principal(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let encoding = encoding(request.headers()).unwrap_or(Encoding::Json);
    match crate::auth::authenticated(&state, request).await {
        Ok(request) => crate::auth::run_as(request, next).await,
        Err(e) => {
            let status = crate::error::status_for(e.code());
            let failure = Failure::new(status, crate::error::client_message(&e));
            let mut response = failure.response(encoding);
            if status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"floe\""),
                );
            }
            response
        }
    }
}

/// `POST /otlp/{warehouse}/v1/{signal}`.
pub async fn export_to(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    UrlPath((tenant, signal)): UrlPath<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    export(state, caller, tenant, signal, headers, body).await
}

/// `POST /otlp/v1/{signal}`, the tenant in `X-Scope-OrgID`.
pub async fn export_by_header(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    UrlPath(signal): UrlPath<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let tenant = headers
        .get(TENANT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| DEFAULT_TENANT.to_string(), |t| t.trim().to_string());
    export(state, caller, tenant, signal, headers, body).await
}

async fn export(
    state: AppState,
    caller: Caller,
    tenant: String,
    signal: String,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let Some(encoding) = encoding(&headers) else {
        return Failure::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send OTLP as application/x-protobuf or application/json",
        )
        .response(Encoding::Json);
    };
    let Some(signal) = Signal::of_path(&signal) else {
        return Failure::new(
            StatusCode::NOT_FOUND,
            format!("no OTLP signal {signal:?}: send logs, traces or metrics"),
        )
        .response(encoding);
    };
    let limit = state
        .ingest
        .as_ref()
        .map_or(64 << 20, |i| i.config.max_body_bytes);
    let answered = async {
        let gzip = match content_encoding(&headers).as_str() {
            "identity" => false,
            "gzip" => true,
            other => {
                return Err(Failure::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    format!("Content-Encoding {other:?} is not taken: send gzip or none"),
                ));
            }
        };
        let body = read_body(body, &headers, limit).await?;
        take(&state, &caller, &tenant, signal, encoding, &body, gzip).await
    }
    .await;
    match answered {
        Ok(taken) => {
            let (bytes, json) = answer(signal, &taken);
            match encoding {
                Encoding::Protobuf => (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/x-protobuf")],
                    bytes,
                )
                    .into_response(),
                Encoding::Json => (StatusCode::OK, axum::Json(json)).into_response(),
            }
        }
        Err(failure) => failure.response(encoding),
    }
}
