//! `POST /prometheus/{warehouse}/api/v1/write`: Prometheus remote write 1.0 and 2.0, a front
//! door over the ingestion core's remote-write adapter ([`floe_stream::remote_write`]).
//!
//! The version is the one the `Content-Type` names (none: 1.0; an unknown `proto`: 415, as
//! the 2.0 spec asks, so that a 2.0 sender falls back to 1.0); the body is snappy's block
//! format (a missing `Content-Encoding` is taken as snappy, as Prometheus's own receiver
//! does; any other is 415). The answer is 204 once the samples are durable — with 2.0's
//! `X-Prometheus-Remote-Write-{Samples,Histograms,Exemplars}-Written` counts, and 400 with
//! them when a part of a 2.0 request was refused — 400 with a text body for a request
//! Prometheus should drop, 5xx with `Retry-After` for one it should send again. Between
//! decoding and answering, the request takes the ingestion core's one path
//! ([`floe_stream::core::Ingestor`]).

use axum::Extension;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use floe_catalog::governance::authz::Caller;
use floe_stream::core::Target;
use floe_stream::core::dead_letter::Door;
use floe_stream::otlp::{self, Signal};
use floe_stream::remote_write::{self, Version, Written};

use crate::AppState;
use crate::otlp::{Failure, ingestor, read_body};

/// 2.0's answer headers: what the request wrote.
const SAMPLES_WRITTEN: &str = "x-prometheus-remote-write-samples-written";
const HISTOGRAMS_WRITTEN: &str = "x-prometheus-remote-write-histograms-written";
const EXEMPLARS_WRITTEN: &str = "x-prometheus-remote-write-exemplars-written";

/// `POST /prometheus/{warehouse}/api/v1/write`.
pub async fn remote_write(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    UrlPath(tenant): UrlPath<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let version = match Version::negotiate(content_type) {
        Ok(version) => version,
        Err(reason) => {
            return refuse(Failure::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                reason.to_string(),
            ));
        }
    };
    // Snappy, or no Content-Encoding at all (taken as snappy, as Prometheus's own receiver
    // does); anything else names what it is and is refused.
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or_default().trim().to_ascii_lowercase());
    if encoding.as_deref().is_some_and(|e| e != "snappy") {
        return refuse(Failure::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "remote write bodies are snappy-compressed (Content-Encoding: snappy)",
        ));
    }
    match take(&state, &caller, &tenant, version, &headers, body).await {
        // 2.0 answers what was written; a request of which a part was refused is a 400 (as
        // the spec asks of a partial write: the sender counts the rest as failed and does not
        // send it again — the refused records are in otel.metrics__dead_letters).
        Ok(Outcome { written, refused }) if version == Version::V2 => {
            let mut response = match refused {
                None => StatusCode::NO_CONTENT.into_response(),
                Some(reason) => (
                    StatusCode::BAD_REQUEST,
                    format!(
                        "some series were refused (kept in otel.metrics__dead_letters): {reason}"
                    ),
                )
                    .into_response(),
            };
            let answer = response.headers_mut();
            for (name, count) in [
                (SAMPLES_WRITTEN, written.samples),
                (HISTOGRAMS_WRITTEN, written.histograms),
                (EXEMPLARS_WRITTEN, written.exemplars),
            ] {
                answer.insert(name, HeaderValue::from(count));
            }
            response
        }
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(failure) => refuse(failure),
    }
}

/// A refusal as Prometheus reads one: the status, the reason as text, and `Retry-After`
/// when sending again helps.
fn refuse(failure: Failure) -> Response {
    let mut response = (failure.status, failure.message.clone()).into_response();
    if let Some(seconds) = failure.retry_after_seconds() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// What a request wrote, and the first reason a series or exemplar of it was refused.
struct Outcome {
    written: Written,
    refused: Option<String>,
}

/// The request taken durably through the ingestion core: its exemplars, its samples, and the
/// series refused (into `otel.metrics__dead_letters`).
async fn take(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    version: Version,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Outcome, Failure> {
    let ingestor = ingestor(state, Door::RemoteWrite)?;
    let body = read_body(body, headers, ingestor.max_body_bytes()).await?;
    let opened = ingestor
        .open(
            caller,
            tenant,
            Target::Otel(Signal::Metrics.table()),
            body.len() as u64,
        )
        .await
        .map_err(Failure::of_ingest)?;
    let now = otlp::now_micros();
    let converted = remote_write::receive(
        &body,
        version,
        &state.decode,
        &state.remote_write_metadata,
        tenant,
        now,
    )
    .map_err(Failure::of_refusal)?;
    drop(body);
    let exemplars = converted.exemplars.as_ref().map_or(0, |e| e.num_rows());
    let records = converted.batch.num_rows() + converted.rejected.len() + exemplars;
    opened.count(records as u64).map_err(Failure::of_ingest)?;
    let converted = otlp::screen::screen(converted, opened.tenant(), now);
    let mut written = Written::of(&converted);
    let refused = converted.rejected.first().map(|r| r.error.clone());
    let taken = otlp::ingest(&opened, converted)
        .await
        .map_err(Failure::of_ingest)?;
    written.exemplars = taken.exemplars;
    opened.taken((taken.accepted + taken.exemplars) as u64);
    Ok(Outcome { written, refused })
}
