//! `POST /prometheus/{warehouse}/api/v1/write`: Prometheus remote write 1.0 and 2.0, a front
//! door over the ingestion core's remote-write adapter ([`floe_stream::remote_write`]).
//!
//! The version is the one the `Content-Type` names (none: 1.0; an unknown `proto`: 415, as
//! the 2.0 spec asks, so that a 2.0 sender falls back to 1.0); the body is snappy's block
//! format (a missing `Content-Encoding` is taken as snappy, as Prometheus's own receiver
//! does). The answer is 204 once the samples are durable — with 2.0's
//! `X-Prometheus-Remote-Write-{Samples,Histograms,Exemplars}-Written` counts — 400 with a text
//! body for a request Prometheus should drop, 5xx with `Retry-After` for one it should send
//! again.

use axum::Extension;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use floe_catalog::governance::authz::Caller;
use floe_stream::core::admit::admit;
use floe_stream::otlp::{self, Signal, layout};
use floe_stream::remote_write::{self, Version, Written};

use crate::AppState;
use crate::otlp::{Failure, content_encoding, may_write, read_body, tenant_of};

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
        Err(reason) => return refuse(Failure::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, reason)),
    };
    if !matches!(content_encoding(&headers).as_str(), "snappy" | "identity") {
        return refuse(Failure::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "remote write bodies are snappy-compressed (Content-Encoding: snappy)",
        ));
    }
    match take(&state, &caller, &tenant, version, &headers, body).await {
        Ok(written) => {
            let mut response = StatusCode::NO_CONTENT.into_response();
            if version == Version::V2 {
                let answer = response.headers_mut();
                for (name, count) in [
                    (SAMPLES_WRITTEN, written.samples),
                    (HISTOGRAMS_WRITTEN, written.histograms),
                    (EXEMPLARS_WRITTEN, written.exemplars),
                ] {
                    answer.insert(name, HeaderValue::from(count));
                }
            }
            response
        }
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

/// The request taken durably: its exemplars, then its samples and the series refused.
async fn take(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    version: Version,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Written, Failure> {
    let Some(log) = state.ingest.clone() else {
        return Err(Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ingestion is not enabled on this server",
        ));
    };
    let body = read_body(body, headers, log.config.max_body_bytes).await?;
    tenant_of(state, caller, tenant).await?;
    may_write(state, caller, tenant, Signal::Metrics).await?;
    let admitted = admit(&log, state.catalog.tenants().get(tenant), body.len() as u64)
        .map_err(Failure::of_refused)?;
    let now = otlp::now_micros();
    let received = remote_write::receive(
        &body,
        version,
        &state.decode,
        &state.remote_write_metadata,
        tenant,
        now,
    )
    .map_err(Failure::of_refusal)?;
    drop(body);
    let converted = received.converted;
    let records =
        converted.batch.num_rows() + converted.rejected.len() + received.exemplars.num_rows();
    admitted
        .records(records as u64)
        .map_err(Failure::of_refused)?;
    let converted = otlp::screen::screen(converted, admitted.tenant(), now);
    let written = Written::of(&converted.batch, &received.exemplars);
    // Exemplars first: should the samples then fail, the sender's retry doubles exemplars,
    // never samples.
    if received.exemplars.num_rows() > 0 {
        otlp::append(
            &log,
            &state.catalog,
            caller,
            tenant,
            layout::EXEMPLARS,
            &received.exemplars,
        )
        .await
        .map_err(|e| Failure::of_ingest(e, tenant))?;
    }
    let taken = otlp::ingest(
        &log,
        &state.catalog,
        caller,
        tenant,
        Signal::Metrics,
        converted,
        now,
    )
    .await
    .map_err(|e| Failure::of_ingest(e, tenant))?;
    admitted.taken((taken.accepted + written.exemplars) as u64);
    Ok(written)
}
