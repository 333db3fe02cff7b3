//! OTLP/gRPC: `LogsService`, `TraceService` and `MetricsService` on their own listener
//! (`--otlp-grpc-listen`, 127.0.0.1:4317 by default), over the same adapter as OTLP/HTTP
//! ([`crate::otlp::take`]).
//!
//! The tenant (a warehouse) is the `x-scope-orgid` metadata, `default` when absent; the caller
//! a bearer token in `authorization`. A request's bytes are taken as they arrive and decoded by
//! the adapter within the request's budget (the bound every OTLP decoder has), not by tonic's
//! codec (gzip-compressed messages are inflated within the same size limit): an answer is the signal's `Export…ServiceResponse` (with `partial_success` counting
//! records refused one by one), a failure a gRPC status (`INVALID_ARGUMENT`,
//! `UNAUTHENTICATED`, `PERMISSION_DENIED`, `NOT_FOUND` for an unknown tenant,
//! `RESOURCE_EXHAUSTED` for a tenant's limit, `UNAVAILABLE` when the server sheds load); a
//! refusal that waiting helps carries `RetryInfo` with the delay its bucket computed.

use std::marker::PhantomData;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut};
use floe_stream::otlp::{Encoding, Signal};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{BoxFuture, StdError, http};

use crate::AppState;
use crate::otlp::{DEFAULT_TENANT, TENANT_HEADER};

/// A signal's gRPC service name.
pub(crate) trait SignalService: Send + Sync + 'static {
    const NAME: &'static str;
    const SIGNAL: Signal;
}

pub(crate) struct Logs;
pub(crate) struct Traces;
pub(crate) struct Metrics;

impl SignalService for Logs {
    const NAME: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
    const SIGNAL: Signal = Signal::Logs;
}
impl SignalService for Traces {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
    const SIGNAL: Signal = Signal::Traces;
}
impl SignalService for Metrics {
    const NAME: &'static str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
    const SIGNAL: Signal = Signal::Metrics;
}

/// One signal's `Export` method.
pub(crate) struct OtlpService<S> {
    state: AppState,
    signal: PhantomData<S>,
}

impl<S> Clone for OtlpService<S> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            signal: PhantomData,
        }
    }
}

impl<S: SignalService> tonic::server::NamedService for OtlpService<S> {
    const NAME: &'static str = S::NAME;
}

/// Bytes in, bytes out: the adapter decodes and encodes.
#[derive(Debug, Default, Clone, Copy)]
struct RawCodec;

#[derive(Debug, Default, Clone, Copy)]
struct Raw;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut bytes = vec![0; src.remaining()];
        src.copy_to_slice(&mut bytes);
        Ok(Some(bytes))
    }
}

struct Export<S> {
    state: AppState,
    signal: PhantomData<S>,
}

impl<S: SignalService> tonic::server::UnaryService<Vec<u8>> for Export<S> {
    type Response = Vec<u8>;
    type Future = BoxFuture<tonic::Response<Vec<u8>>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<Vec<u8>>) -> Self::Future {
        let state = self.state.clone();
        Box::pin(async move {
            let caller = crate::auth::grpc_caller(&state, request.metadata()).await?;
            let tenant = request
                .metadata()
                .get(TENANT_HEADER)
                .and_then(|v| v.to_str().ok())
                .map_or_else(|| DEFAULT_TENANT.to_string(), |t| t.trim().to_string());
            let body = request.into_inner();
            match crate::otlp::take(
                &state,
                &caller,
                &tenant,
                S::SIGNAL,
                Encoding::Protobuf,
                &body,
                false,
            )
            .await
            {
                Ok(taken) => Ok(tonic::Response::new(
                    crate::otlp::answer(S::SIGNAL, &taken).0,
                )),
                Err(failure) => Err(failure.grpc_status()),
            }
        })
    }
}

impl<S: SignalService, B> tower::Service<http::Request<B>> for OtlpService<S>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let state = self.state.clone();
        Box::pin(async move {
            if request.uri().path() != format!("/{}/Export", S::NAME) {
                return Ok(tonic::Status::unimplemented("no such method").into_http());
            }
            let limit = state
                .ingest
                .as_ref()
                .map_or(64 << 20, |i| i.config.max_body_bytes);
            // Collectors compress with gzip by default; tonic inflates within `limit`.
            let mut grpc = tonic::server::Grpc::new(RawCodec)
                .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
                .apply_max_message_size_config(Some(limit), Some(1 << 20));
            let method = Export::<S> {
                state,
                signal: PhantomData,
            };
            let mut response = grpc.unary(method, request).await;
            // tonic refuses a message over the limit with OUT_OF_RANGE, which OTLP exporters
            // send again and again; the answer OTLP gives an over-large request, and this
            // door's documentation promises, is RESOURCE_EXHAUSTED (no RetryInfo: not retried).
            // The adapter itself never answers OUT_OF_RANGE.
            let status = http::HeaderName::from_static("grpc-status");
            if response
                .headers()
                .get(&status)
                .is_some_and(|s| s.as_bytes() == b"11")
            {
                response
                    .headers_mut()
                    .insert(status, http::HeaderValue::from_static("8"));
            }
            Ok(response)
        })
    }
}

fn service<S: SignalService>(state: &AppState) -> OtlpService<S> {
    OtlpService {
        state: state.clone(),
        signal: PhantomData,
    }
}

/// Serves OTLP/gRPC on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
    tls: Option<crate::tls::TlsFiles>,
) -> Result<(), tonic::transport::Error> {
    crate::listen::grpc_server(tls)?
        .max_concurrent_streams(Some(64))
        .add_service(service::<Logs>(&state))
        .add_service(service::<Traces>(&state))
        .add_service(service::<Metrics>(&state))
        .serve_with_incoming_shutdown(
            crate::listen::incoming(listener, "OTLP/gRPC", shutdown.clone()),
            shutdown.cancelled_owned(),
        )
        .await
}
