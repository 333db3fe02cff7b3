//! OpenTelemetry (OTLP) into Iceberg: logs, spans and metrics decoded from OTLP's protobuf or
//! JSON ([`decode`], bounded by [`bounds`]), turned into rows of the tenant's `otel` tables
//! ([`layout`], [`logs`], [`spans`], [`metrics`]), and taken by the ingestion core's durable
//! log ([`ingest`]) — the front doors (OTLP/HTTP, OTLP/gRPC) are thin adapters over this.
//!
//! A record that cannot be a row (an id of the wrong length, a span without ids, a metric
//! without data) is refused on its own: the rest of the request is taken, the refused records
//! go to the signal table's dead letters (`otel.logs__dead_letters`, …) with their reason,
//! and the answer's `partial_success` counts them, as OTLP asks.

pub(crate) mod bounds;
pub(crate) mod exemplars;
pub(crate) mod layout;
pub(crate) mod logs;
pub(crate) mod metrics;
pub mod screen;
pub(crate) mod spans;
mod special_floats;
pub(crate) mod values;

use std::io::Read;

use datafusion::arrow::array::RecordBatch;
use iceberg::{NamespaceIdent, TableIdent};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

pub use opentelemetry_proto;

use crate::Refusal;
use crate::core::dead_letter::{Door, Letter};
use crate::core::{IngestError, Opened};
use floe_catalog::ErrorCode;

/// What an OTLP request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Logs,
    Traces,
    Metrics,
}

impl Signal {
    /// The table its rows go to, in [`layout::NAMESPACE`].
    pub fn table(self) -> &'static str {
        match self {
            Signal::Logs => layout::LOGS,
            Signal::Traces => layout::SPANS,
            Signal::Metrics => layout::METRICS,
        }
    }

    /// Its name in OTLP's paths (`/v1/logs`, `/v1/traces`, `/v1/metrics`).
    pub(crate) fn path(self) -> &'static str {
        match self {
            Signal::Logs => "logs",
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
        }
    }

    pub fn of_path(path: &str) -> Option<Self> {
        match path {
            "logs" => Some(Signal::Logs),
            "traces" => Some(Signal::Traces),
            "metrics" => Some(Signal::Metrics),
            _ => None,
        }
    }
}

/// How a request's body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// A decoded OTLP request.
#[derive(Debug, Clone)]
pub enum Request {
    Logs(ExportLogsServiceRequest),
    Traces(ExportTraceServiceRequest),
    Metrics(ExportMetricsServiceRequest),
}

/// A gzip `body` inflated, to at most `budget` bytes.
pub fn gunzip(body: &[u8], budget: usize) -> Result<Vec<u8>, Refusal> {
    let mut inflated = Vec::new();
    flate2::read::GzDecoder::new(body)
        .take(budget as u64 + 1)
        .read_to_end(&mut inflated)
        .map_err(|e| Refusal::malformed(format!("the gzip body does not inflate: {e}")))?;
    if inflated.len() > budget {
        return Err(Refusal::too_large(format!(
            "the gzip body inflates past the {budget} bytes this request may decode \
             (--decode-memory-mb)"
        )));
    }
    Ok(inflated)
}

/// `body` decoded as `signal`'s request, within `budget` bytes of decoded memory.
pub fn decode(
    signal: Signal,
    encoding: Encoding,
    body: &[u8],
    budget: usize,
) -> Result<Request, Refusal> {
    let cost = match encoding {
        Encoding::Protobuf => bounds::protobuf_cost(body).ok_or_else(|| {
            Refusal::malformed(format!(
                "the body is not a protobuf {} request",
                signal.path()
            ))
        })?,
        Encoding::Json => bounds::json_cost(body),
    };
    if cost > budget {
        return Err(Refusal::too_large(format!(
            "the request would take {cost} bytes to decode, more than the {budget} it may \
             (--decode-memory-mb)"
        )));
    }
    fn proto<M: prost::Message + Default>(body: &[u8], signal: Signal) -> Result<M, Refusal> {
        M::decode(body).map_err(|e| {
            Refusal::malformed(format!(
                "the body is not a protobuf {} request: {e}",
                signal.path()
            ))
        })
    }
    fn json<M: serde::de::DeserializeOwned>(body: &[u8], signal: Signal) -> Result<M, Refusal> {
        let malformed = |e: serde_json::Error| {
            Refusal::malformed(format!(
                "the body is not an OTLP/JSON {} request: {e}",
                signal.path()
            ))
        };
        if !special_floats::may_hold(body) {
            return serde_json::from_slice(body).map_err(malformed);
        }
        let mut tree: serde_json::Value = serde_json::from_slice(body).map_err(malformed)?;
        special_floats::attributes_as_text(&mut tree);
        serde_json::from_value(tree).map_err(malformed)
    }
    fn json_metrics(body: &[u8]) -> Result<ExportMetricsServiceRequest, Refusal> {
        if !special_floats::may_hold(body) {
            return json(body, Signal::Metrics);
        }
        let malformed = |e: serde_json::Error| {
            Refusal::malformed(format!("the body is not an OTLP/JSON metrics request: {e}"))
        };
        let mut tree: serde_json::Value = serde_json::from_slice(body).map_err(malformed)?;
        special_floats::attributes_as_text(&mut tree);
        let noted = special_floats::note_metric_numbers(&mut tree);
        let mut request = serde_json::from_value(tree).map_err(malformed)?;
        special_floats::restore(&mut request, &noted);
        Ok(request)
    }
    Ok(match (signal, encoding) {
        (Signal::Logs, Encoding::Protobuf) => Request::Logs(proto(body, signal)?),
        (Signal::Logs, Encoding::Json) => Request::Logs(json(body, signal)?),
        (Signal::Traces, Encoding::Protobuf) => Request::Traces(proto(body, signal)?),
        (Signal::Traces, Encoding::Json) => Request::Traces(json(body, signal)?),
        (Signal::Metrics, Encoding::Protobuf) => Request::Metrics(proto(body, signal)?),
        (Signal::Metrics, Encoding::Json) => Request::Metrics(json_metrics(body)?),
    })
}

/// A record that cannot be a row: the service that sent it, why, and the record as JSON.
#[derive(Debug, Clone)]
pub struct Rejected {
    pub service: String,
    pub error: String,
    pub record: Option<String>,
}

impl Rejected {
    pub(crate) fn of(service: &str, error: String, record: &impl serde::Serialize) -> Self {
        Self {
            service: service.to_string(),
            error,
            record: serde_json::to_string(record).ok(),
        }
    }
}

/// A request's rows and the records refused.
#[derive(Debug)]
pub struct Converted {
    pub batch: RecordBatch,
    pub rejected: Vec<Rejected>,
    /// Rows of `otel.exemplars` the records carried (metrics only).
    pub exemplars: Option<RecordBatch>,
}

/// Microseconds since the epoch, now (the one clock: [`floe_catalog::clock`]).
pub fn now_micros() -> i64 {
    floe_catalog::clock::now_micros()
}

/// `request`'s rows; records without a time of their own take `now` (microseconds).
pub fn convert(request: &Request, now: i64) -> Converted {
    match request {
        Request::Logs(r) => logs::convert(r, now),
        Request::Traces(r) => spans::convert(r, now),
        Request::Metrics(r) => metrics::convert(r, now),
    }
}

/// The refused records as letters of the door `door` (the signal's table's dead letters).
pub(crate) fn dead_letters(door: Door, rejected: &[Rejected]) -> Vec<Letter> {
    rejected
        .iter()
        .map(|r| {
            let mut letter = Letter::new(door, &r.error, r.record.clone().map(String::into_bytes));
            letter.source = Some(r.service.clone());
            letter
        })
        .collect()
}

/// What a request's rows became.
#[derive(Debug, Clone, Default)]
pub struct Taken {
    /// Records taken durably (they reach their table exactly once).
    pub accepted: usize,
    /// Records refused (in the signal's table's dead letters, `otel.<table>__dead_letters`).
    pub rejected: usize,
    /// The first refusal's reason, for the answer.
    pub error_message: Option<String>,
    /// Exemplars taken into `otel.exemplars`.
    pub exemplars: usize,
}

/// The table `name` of the `otel` namespace.
pub(crate) fn table_ident(name: &str) -> TableIdent {
    TableIdent::new(
        NamespaceIdent::new(layout::NAMESPACE.to_string()),
        name.to_string(),
    )
}

/// `converted` (the rows of a `signal` request) taken durably through `opened` (the
/// request opened on the signal's table): its exemplars into `otel.exemplars` first (should
/// the rest fail, a sender's retry doubles exemplars, never records), the rows into the
/// signal's table, the refused records into its dead letters (`otel.<table>__dead_letters`).
/// Once this returns, the request may be answered.
pub async fn ingest(opened: &Opened<'_>, converted: Converted) -> Result<Taken, IngestError> {
    let mut taken = Taken {
        rejected: converted.rejected.len(),
        error_message: converted.rejected.first().map(|r| r.error.clone()),
        ..Taken::default()
    };
    if let Some(exemplars) = &converted.exemplars {
        match opened.take_otel(layout::EXEMPLARS, exemplars).await {
            Ok(_) => taken.exemplars = exemplars.num_rows(),
            // A caller who may write the signal's table but not otel.exemplars (a grant on
            // otel.metrics alone) still has its points taken: exemplars are an addition.
            Err(IngestError::Catalog(e))
                if matches!(e.code(), ErrorCode::PermissionDenied | ErrorCode::NotFound) =>
            {
                tracing::debug!(error = %e, "exemplars not taken");
            }
            Err(e) => return Err(e),
        }
    }
    // The refused records before the rows: should the letters fail, nothing of the request is
    // taken yet and the sender's retry doubles nothing but letters.
    if !converted.rejected.is_empty() {
        let letters = dead_letters(opened.door(), &converted.rejected);
        match opened.take_dead_letters(&letters).await {
            Ok(_) => {}
            // A caller who may write the signal's table but not its dead letters, or a table
            // of that name that is not Floe's: the refusals are still answered (counted in
            // `partial_success`), only not kept.
            Err(IngestError::Catalog(e))
                if matches!(e.code(), ErrorCode::PermissionDenied | ErrorCode::NotFound) =>
            {
                tracing::debug!(error = %e, "dead letters not kept");
            }
            Err(IngestError::Invalid(e)) => {
                tracing::warn!(error = %e, "dead letters not kept");
            }
            Err(e) => return Err(e),
        }
    }
    let rows = converted.batch.num_rows();
    if rows > 0 {
        opened.take(&[converted.batch]).await?;
        taken.accepted = rows;
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refusal::Kind;
    use prost::Message;

    const LOGS_JSON: &str = r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"checkout"}}]},
      "scopeLogs":[{"scope":{"name":"app","version":"1.0"},"logRecords":[
        {"timeUnixNano":"1700000000000000000","severityNumber":9,"severityText":"INFO","body":{"stringValue":"paid"},
         "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","attributes":[{"key":"amount","value":{"intValue":"42"}}]},
        {"timeUnixNano":"1700000000000000001","body":{"stringValue":"bad id"},"traceId":"abcd"}]}]}]}"#;

    const SPANS_JSON: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"checkout"}}]},
      "scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"pay","kind":2,
        "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000500000000",
        "events":[{"timeUnixNano":"1700000000100000000","name":"charged","attributes":[{"key":"ok","value":{"boolValue":true}}]}],
        "status":{"code":1}}]}]}]}"#;

    const METRICS_JSON: &str = r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"checkout"}}]},
      "scopeMetrics":[{"metrics":[
        {"name":"requests","sum":{"aggregationTemporality":2,"isMonotonic":true,"dataPoints":[{"timeUnixNano":"1700000000000000000","asInt":"5"}]}},
        {"name":"latency","histogram":{"aggregationTemporality":1,"dataPoints":[{"timeUnixNano":"1700000000000000000","count":"3","sum":1.5,"bucketCounts":["1","2"],"explicitBounds":[0.5]}]}},
        {"name":"sizes","exponentialHistogram":{"dataPoints":[{"timeUnixNano":"1700000000000000000","count":"2","scale":1,"positive":{"offset":1,"bucketCounts":["2"]}}]}},
        {"name":"quantiles","summary":{"dataPoints":[{"timeUnixNano":"1700000000000000000","count":"2","sum":3,"quantileValues":[{"quantile":0.5,"value":1.5}]}]}},
        {"name":"temperature","gauge":{"dataPoints":[{"timeUnixNano":"1700000000000000000","asDouble":21.5}]}},
        {"name":"empty"}]}]}]}"#;

    /// What OpenTelemetry's SDKs write for numbers that are not finite (protobuf's JSON
    /// mapping), and points with and without values.
    const SPECIAL_JSON: &str = r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"edge"}},{"key":"limit","value":{"doubleValue":"Infinity"}}]},
      "scopeMetrics":[{"metrics":[
        {"name":"ratio","gauge":{"dataPoints":[{"timeUnixNano":"1700000000000000000","asDouble":"NaN"},{"timeUnixNano":"1700000000000000001","asDouble":"-Infinity"},
          {"timeUnixNano":"1700000000000000002"},{"timeUnixNano":"1700000000000000003","flags":1}]}},
        {"name":"latency","histogram":{"aggregationTemporality":2,"dataPoints":[{"timeUnixNano":"1700000000000000000","count":"3","sum":"NaN","max":"Infinity","bucketCounts":["1","2"],"explicitBounds":["Infinity"]}]}},
        {"name":"q","summary":{"dataPoints":[{"timeUnixNano":"1700000000000000000","count":"1","sum":"-Infinity","quantileValues":[{"quantile":0.5,"value":"NaN"}]}]}}
      ]}]}]}"#;

    #[test]
    fn numbers_that_are_not_finite_are_taken_and_a_point_without_a_value_is_refused_alone() {
        let metrics = decode(
            Signal::Metrics,
            Encoding::Json,
            SPECIAL_JSON.as_bytes(),
            1 << 20,
        )
        .unwrap();
        let converted = convert(&metrics, 0);
        // Four gauge points: NaN, -Infinity, one without a value (refused), one flagged as
        // having none (kept, NULL).
        assert_eq!(converted.rejected.len(), 1, "{:?}", converted.rejected);
        assert!(converted.rejected[0].error.contains("has no value"));
        let batch = &converted.batch;
        assert_eq!(batch.num_rows(), 5);
        let values: Vec<String> = (0..3).map(|row| text_at(batch, "value", row)).collect();
        assert_eq!(values, ["NaN", "-inf", ""]);
        assert_eq!(text_at(batch, "sum", 3), "NaN");
        assert_eq!(text_at(batch, "max", 3), "inf");
        assert_eq!(text_at(batch, "explicit_bounds", 3), "[inf]");
        assert_eq!(text_at(batch, "sum", 4), "-inf");
        assert!(text_at(batch, "resource_attributes", 0).contains("limit: inf"));
    }

    #[test]
    fn exemplars_of_data_points_become_rows_of_their_own() {
        let json = r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"api"}}]},
          "scopeMetrics":[{"metrics":[{"name":"latency","histogram":{"aggregationTemporality":2,"dataPoints":[
            {"timeUnixNano":"1700000000000000000","count":"2","sum":0.5,"bucketCounts":["1","1"],"explicitBounds":[0.1],
             "attributes":[{"key":"route","value":{"stringValue":"/pay"}}],
             "exemplars":[{"timeUnixNano":"1700000000000000000","asDouble":0.4,
               "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
               "filteredAttributes":[{"key":"user","value":{"stringValue":"u1"}}]}]}]}}]}]}]}"#;
        let request = decode(Signal::Metrics, Encoding::Json, json.as_bytes(), 1 << 20).unwrap();
        let converted = convert(&request, 0);
        assert_eq!(converted.batch.num_rows(), 1);
        let exemplars = converted.exemplars.expect("an exemplar");
        assert_eq!(exemplars.num_rows(), 1);
        assert_eq!(text_at(&exemplars, "metric_name", 0), "latency");
        assert_eq!(text_at(&exemplars, "service_name", 0), "api");
        assert_eq!(
            text_at(&exemplars, "trace_id", 0),
            "5b8efff798038103d269b633813fc60c"
        );
        assert_eq!(text_at(&exemplars, "span_id", 0), "eee19b7ec3c1b174");
        // Logs and spans carry none.
        let logs = decode(Signal::Logs, Encoding::Json, LOGS_JSON.as_bytes(), 1 << 20).unwrap();
        assert!(convert(&logs, 0).exemplars.is_none());
    }

    fn text_at(batch: &RecordBatch, column: &str, row: usize) -> String {
        let array = batch.column_by_name(column).unwrap();
        datafusion::arrow::util::display::array_value_to_string(array, row).unwrap()
    }

    #[test]
    fn every_signal_becomes_rows_of_its_table_and_misfits_are_refused_alone() {
        let logs = decode(Signal::Logs, Encoding::Json, LOGS_JSON.as_bytes(), 1 << 20).unwrap();
        let converted = convert(&logs, 0);
        assert_eq!(converted.batch.num_rows(), 1);
        assert_eq!(converted.rejected.len(), 1);
        assert!(converted.rejected[0].error.contains("trace_id has 2 bytes"));
        assert_eq!(text_at(&converted.batch, "service_name", 0), "checkout");
        assert_eq!(
            text_at(&converted.batch, "trace_id", 0),
            "5b8efff798038103d269b633813fc60c"
        );
        assert_eq!(text_at(&converted.batch, "attributes", 0), "{amount: 42}");
        assert_eq!(text_at(&converted.batch, "time", 0), "2023-11-14T22:13:20Z");

        let spans = decode(
            Signal::Traces,
            Encoding::Json,
            SPANS_JSON.as_bytes(),
            1 << 20,
        )
        .unwrap();
        let converted = convert(&spans, 0);
        assert_eq!(converted.batch.num_rows(), 1);
        assert_eq!(text_at(&converted.batch, "kind", 0), "SERVER");
        assert_eq!(text_at(&converted.batch, "status_code", 0), "OK");
        assert_eq!(text_at(&converted.batch, "duration_ns", 0), "500000000");

        let metrics = decode(
            Signal::Metrics,
            Encoding::Json,
            METRICS_JSON.as_bytes(),
            1 << 20,
        )
        .unwrap();
        let converted = convert(&metrics, 0);
        assert_eq!(converted.batch.num_rows(), 5);
        assert_eq!(converted.rejected.len(), 1, "a metric without data");
        let kinds: Vec<String> = (0..5)
            .map(|row| text_at(&converted.batch, "metric_type", row))
            .collect();
        assert_eq!(
            kinds,
            [
                "sum",
                "histogram",
                "exponential_histogram",
                "summary",
                "gauge"
            ]
        );
        assert_eq!(text_at(&converted.batch, "value", 0), "5.0");
        assert_eq!(text_at(&converted.batch, "bucket_counts", 1), "[1, 2]");

        // The same request as protobuf decodes alike.
        let Request::Logs(request) = logs else {
            unreachable!()
        };
        let bytes = request.encode_to_vec();
        let again = decode(Signal::Logs, Encoding::Protobuf, &bytes, 1 << 20).unwrap();
        assert_eq!(convert(&again, 0).batch.num_rows(), 1);
    }

    #[test]
    fn bad_bodies_are_refused_by_kind() {
        assert!(matches!(
            decode(
                Signal::Logs,
                Encoding::Protobuf,
                &[0xff, 0xff, 0xff],
                1 << 20
            ),
            Err(r) if r.kind() == Kind::Malformed
        ));
        assert!(matches!(
            decode(
                Signal::Logs,
                Encoding::Json,
                b"{\"resourceLogs\": 7}",
                1 << 20
            ),
            Err(r) if r.kind() == Kind::Malformed
        ));
        assert!(matches!(
            decode(Signal::Logs, Encoding::Json, LOGS_JSON.as_bytes(), 1000),
            Err(r) if r.kind() == Kind::TooLarge
        ));
        let mut bomb = Vec::new();
        {
            use std::io::Write;
            let mut gz = flate2::write::GzEncoder::new(&mut bomb, flate2::Compression::best());
            gz.write_all(&vec![b' '; 10 << 20]).unwrap();
            gz.finish().unwrap();
        }
        assert!(matches!(gunzip(&bomb, 1 << 20), Err(r) if r.kind() == Kind::TooLarge));
    }

    /// What an OpenTelemetry Collector sends at its defaults: a batch of thousands of log
    /// records repeating their attributes, gzipped (it compressed 70-fold in a real
    /// Collector's request, past the 64 times a body may decode to, and was refused with a
    /// 413 the Collector does not retry). It inflates and decodes within the default limits.
    #[test]
    fn a_collectors_default_batch_fits_the_default_limits() {
        use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
        use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
        let text = |s: String| AnyValue {
            value: Some(any_value::Value::StringValue(s)),
        };
        let attributes: Vec<KeyValue> = (0..10)
            .map(|k| KeyValue {
                key: format!("http.attribute.{k}"),
                value: Some(text(format!("value-{k}-{}", "x".repeat(20)))),
                ..Default::default()
            })
            .collect();
        let records = (0..8_192)
            .map(|i| LogRecord {
                time_unix_nano: 1,
                body: Some(text(format!(
                    "event {i} {}",
                    "request handled in time ".repeat(8)
                ))),
                attributes: attributes.clone(),
                ..Default::default()
            })
            .collect();
        let request = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: records,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let raw = request.encode_to_vec();
        let mut body = Vec::new();
        {
            use std::io::Write;
            let mut gz = flate2::write::GzEncoder::new(&mut body, flate2::Compression::default());
            gz.write_all(&raw).unwrap();
            gz.finish().unwrap();
        }
        assert!(
            raw.len() > 64 * body.len(),
            "{} from {}",
            raw.len(),
            body.len()
        );
        let limits = crate::decode::ipc::DecodeLimits::default();
        let inflated = gunzip(&body, limits.inflation(body.len())).unwrap();
        let decoded = decode(
            Signal::Logs,
            Encoding::Protobuf,
            &inflated,
            limits.budget(inflated.len()),
        );
        assert!(matches!(decoded, Ok(Request::Logs(_))));
        // A bomb is still refused: past the floor, and past the decode memory's cap.
        let limits = crate::decode::ipc::DecodeLimits {
            max_bytes: 1 << 20,
            ..Default::default()
        };
        assert!(matches!(
            gunzip(&body, limits.inflation(body.len())),
            Err(r) if r.kind() == Kind::TooLarge
        ));
    }
}
