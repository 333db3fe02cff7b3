//! Prometheus remote write into Iceberg, versions 1.0 (`prometheus.WriteRequest`) and 2.0
//! (`io.prometheus.write.v2.Request`), chosen by the request's `Content-Type` as both specs
//! say ([`Version::negotiate`]). A snappy-compressed (block format) body is decoded within the
//! request's budget, then each series becomes rows of the tenant's `otel` tables:
//!
//! - a float sample is a row of `otel.metrics` — the metric's name from `__name__`, its other
//!   labels as attributes, its `job` as the service — a monotonic cumulative `sum` when its
//!   family is a counter, or a histogram's or summary's `_bucket`, `_sum` or `_count`, and a
//!   `gauge` otherwise;
//! - a native histogram sample is a row too: an `exponential_histogram` for the base-2
//!   schemas (-4 to 8), a `histogram` with its bounds for custom buckets (schema -53)
//!   ([`native`]);
//! - an exemplar is a row of `otel.exemplars`, with the series it was seen on
//!   ([`crate::otlp::exemplars`]; its `trace_id` and `span_id` labels name its trace).
//!
//! A series is typed by its family's metadata: 2.0 carries it on every series; 1.0 sends it
//! in requests of its own, so what a tenant's requests said is remembered
//! ([`v1::MetadataMemory`]); a family nothing has described yet is typed by the names
//! Prometheus gives counters (`_total`, and `_bucket` with an `le` label). What a series
//! cannot be (no name, a histogram of an unknown schema) is refused alone, into
//! `otel.metrics__dead_letters`, and [`Written`] counts what was taken, for 2.0's
//! `X-Prometheus-Remote-Write-*-Written` headers.

pub(crate) mod native;
pub mod v1;
pub(crate) mod v2;

use datafusion::arrow::array::AsArray;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

use crate::Refusal;
use crate::decode::ipc::DecodeLimits;
use crate::otlp::exemplars::{ExemplarRows, Seen};
use crate::otlp::metrics::{MetricRows, Point, Values};
use crate::otlp::values::UNKNOWN_SERVICE;
use crate::otlp::{Converted, Rejected, bounds};
use crate::refusal::Kind;

/// The remote-write protocol a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// 1.0: `application/x-protobuf`, or with `proto=prometheus.WriteRequest`.
    V1,
    /// 2.0: `application/x-protobuf;proto=io.prometheus.write.v2.Request`.
    V2,
}

impl Version {
    /// The version a `Content-Type` names; none names 1.0, as Prometheus's own receiver
    /// assumes. Anything else is refused (415) with the reason.
    pub fn negotiate(content_type: Option<&str>) -> Result<Self, Refusal> {
        let Some(content_type) = content_type.map(str::trim).filter(|c| !c.is_empty()) else {
            return Ok(Version::V1);
        };
        let mut parts = content_type.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        if !media.eq_ignore_ascii_case("application/x-protobuf") {
            return Err(Refusal::unsupported(format!(
                "Content-Type {content_type:?} is not taken: send application/x-protobuf \
                 (remote write 1.0 or 2.0)"
            )));
        }
        let mut version = Version::V1;
        for parameter in parts.filter(|p| !p.is_empty()) {
            let Some((key, value)) = parameter.split_once('=') else {
                return Err(Refusal::malformed(format!(
                    "Content-Type {content_type:?}: parameter {parameter:?} is not key=value"
                )));
            };
            if key.trim().eq_ignore_ascii_case("proto") {
                version = match value.trim().trim_matches('"') {
                    "prometheus.WriteRequest" => Version::V1,
                    "io.prometheus.write.v2.Request" => Version::V2,
                    other => {
                        return Err(Refusal::unsupported(format!(
                            "proto={other} is not taken: send prometheus.WriteRequest (1.0) or \
                             io.prometheus.write.v2.Request (2.0)"
                        )));
                    }
                };
            }
        }
        Ok(version)
    }
}

/// One exemplar as either version carries it, its labels resolved.
#[derive(Debug)]
pub(crate) struct Exemplar<'a> {
    pub labels: Vec<(&'a str, &'a str)>,
    pub value: f64,
    /// Milliseconds since the epoch; 0 when the sender gave none.
    pub timestamp: i64,
}

/// What a request wrote, as remote write 2.0 counts it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub samples: usize,
    pub histograms: usize,
    pub exemplars: usize,
}

impl Written {
    /// What `converted` (after screening) holds: a histogram row is a histogram sample, any
    /// other row of `otel.metrics` a float sample; and its exemplars.
    pub fn of(converted: &Converted) -> Self {
        let metrics = &converted.batch;
        let histograms = metrics
            .column_by_name("metric_type")
            .and_then(|c| c.as_string_opt::<i32>())
            .map_or(0, |kinds| {
                kinds
                    .iter()
                    .filter(|k| k.is_some_and(|k| k.ends_with("histogram")))
                    .count()
            });
        Written {
            samples: metrics.num_rows() - histograms,
            histograms,
            exemplars: converted.exemplars.as_ref().map_or(0, |e| e.num_rows()),
        }
    }
}

/// A snappy-compressed `body` of `version` decoded and made rows (of `otel.metrics` and
/// `otel.exemplars`, and the series refused), within `limits`: the body
/// inflated at most to `limits.max_bytes`, then decoded — and its rows built — within the
/// budget of its inflated size (as an OTLP body after gzip is), so that what Prometheus sends
/// by default (500 to 2,000 samples a request, compressed about tenfold) always fits.
/// `memory` keeps and gives 1.0's metadata for `tenant`; `now` (microseconds) stands for an
/// exemplar's missing time.
pub fn receive(
    body: &[u8],
    version: Version,
    limits: &DecodeLimits,
    memory: &v1::MetadataMemory,
    tenant: &str,
    now: i64,
) -> Result<Converted, Refusal> {
    let raw = inflate(body, limits)?;
    let mut budget = limits.budget(raw.len());
    let cost = bounds::protobuf_cost(&raw)
        .ok_or_else(|| Refusal::malformed("the body is not a protobuf remote-write request"))?;
    // Packed numbers (label references, bucket deltas) take a byte each on the wire and up to
    // eight once decoded, which the walk above counts as bytes.
    charge(
        &mut budget,
        cost.saturating_add(raw.len().saturating_mul(8)),
    )?;
    match version {
        Version::V1 => {
            let request: v1::WriteRequest = prost::Message::decode(raw.as_slice())
                .map_err(|e| malformed("a remote-write 1.0 WriteRequest", e))?;
            drop(raw);
            let known = memory.families(tenant, &request);
            let series = v1::series(&request, &known);
            convert(&series, &mut budget, now)
        }
        Version::V2 => {
            let request: v2::Request = prost::Message::decode(raw.as_slice())
                .map_err(|e| malformed("a remote-write 2.0 Request", e))?;
            drop(raw);
            // Each reference resolves to a string slice of 16 bytes, in pairs of 32, before
            // the series are charged what their rows will hold.
            charge(&mut budget, v2::references(&request).saturating_mul(24))?;
            let (series, refused) = v2::series(&request);
            let mut converted = convert(&series, &mut budget, now)?;
            converted.rejected.extend(refused);
            Ok(converted)
        }
    }
}

fn malformed(what: &str, e: prost::DecodeError) -> Refusal {
    Refusal::malformed(format!("the body is not {what}: {e}"))
}

/// The snappy block in `body`, refused past `limits.max_bytes`.
fn inflate(body: &[u8], limits: &DecodeLimits) -> Result<Vec<u8>, Refusal> {
    let not_snappy =
        |e: snap::Error| Refusal::malformed(format!("the body is not snappy-compressed: {e}"));
    let length = snap::raw::decompress_len(body).map_err(not_snappy)?;
    if length > limits.max_bytes {
        return Err(Refusal::too_large(format!(
            "the body inflates to {length} bytes, more than the {} a request may decode \
             (--decode-memory-mb)",
            limits.max_bytes
        )));
    }
    snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(not_snappy)
}

/// `cost` bytes taken from what is left of the request's decoding `budget`.
fn charge(budget: &mut usize, cost: usize) -> Result<(), Refusal> {
    match budget.checked_sub(cost) {
        Some(left) => {
            *budget = left;
            Ok(())
        }
        None => Err(Refusal::too_large(format!(
            "the request would take more than the {} bytes left of its decoding budget \
             (--decode-memory-mb): {cost} more",
            *budget
        ))),
    }
}

/// The float samples of a series: `(value, milliseconds, start milliseconds or 0)`.
pub(crate) type FloatSample = (f64, i64, i64);

/// One series as either version carries it, its labels resolved and its kind decided.
#[derive(Debug, Default)]
pub(crate) struct Series<'a> {
    /// Name and value, sorted as sent; `__name__` among them.
    pub labels: Vec<(&'a str, &'a str)>,
    pub samples: Vec<FloatSample>,
    pub histograms: Vec<&'a native::Histogram>,
    pub exemplars: Vec<Exemplar<'a>>,
    /// Whether its float samples are a monotonic cumulative sum.
    pub monotonic: bool,
    /// Whether its histograms are gauge histograms (no counter resets, no temporality).
    pub gauge_histogram: bool,
    pub help: &'a str,
    pub unit: &'a str,
}

/// The value of label `wanted` among `labels`, if it is there.
fn label<'a>(labels: &[(&'a str, &'a str)], wanted: &str) -> Option<&'a str> {
    labels.iter().find(|(n, _)| *n == wanted).map(|(_, v)| *v)
}

impl Series<'_> {
    fn name(&self) -> Option<&str> {
        label(&self.labels, "__name__").filter(|v| !v.is_empty())
    }

    fn service(&self) -> &str {
        label(&self.labels, "job").unwrap_or(UNKNOWN_SERVICE)
    }

    /// What its rows will hold beyond their fixed columns, about: its labels, help and unit
    /// on every row (2.0's symbols may name one long string many times), and each
    /// exemplar's own labels.
    fn cost(&self) -> usize {
        let labels = text_cost(&self.labels) + self.help.len() + self.unit.len();
        let rows = self.samples.len() + self.histograms.len() + self.exemplars.len();
        let exemplars: usize = self.exemplars.iter().map(|e| text_cost(&e.labels)).sum();
        (labels + bounds::MESSAGE_BYTES)
            .saturating_mul(rows.max(1))
            .saturating_add(exemplars)
    }
}

/// What labels cost once they are attributes: their text twice (the attribute, then the
/// map column) and the structures holding it.
fn text_cost(labels: &[(&str, &str)]) -> usize {
    labels
        .iter()
        .map(|(n, v)| (n.len() + v.len()) * 2 + 96)
        .sum()
}

/// Prometheus's staleness marker: a NaN of these bits, as a float sample's value or a native
/// histogram's sum, says the series ended.
const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// OTLP's `FLAG_NO_RECORDED_VALUE`, which a staleness marker becomes (its value NULL), as
/// OTLP's own markers are kept.
const NO_RECORDED_VALUE: i64 = 1;

fn is_stale(value: f64) -> bool {
    value.to_bits() == STALE_NAN
}

const COUNTER: i32 = 1;
const HISTOGRAM: i32 = 3;
const GAUGE_HISTOGRAM: i32 = 4;
const SUMMARY: i32 = 5;

/// Whether the float samples of a series named `name` in a family of metadata `kind` are a
/// monotonic cumulative sum: a counter's, and a histogram's or summary's parts.
fn monotonic(name: &str, kind: i32) -> bool {
    match kind {
        COUNTER => true,
        HISTOGRAM => ["_bucket", "_sum", "_count"]
            .iter()
            .any(|s| name.ends_with(s)),
        SUMMARY => name.ends_with("_sum") || name.ends_with("_count"),
        _ => false,
    }
}

/// Whether a series no metadata describes is a counter, by the names Prometheus gives them.
fn counter_by_name(name: &str, labels: &[(&str, &str)]) -> bool {
    name.ends_with("_total")
        || (name.ends_with("_bucket") && labels.iter().any(|(n, _)| *n == "le"))
}

/// Whether the float samples of series `name` with `labels` are a monotonic cumulative sum:
/// as its family's metadata `kind` says ([`monotonic`]), or by its name when no metadata
/// gives a kind (0, unspecified).
fn is_sum(name: &str, kind: i32, labels: &[(&str, &str)]) -> bool {
    if kind == 0 {
        counter_by_name(name, labels)
    } else {
        monotonic(name, kind)
    }
}

fn key_value(name: &str, value: &str) -> KeyValue {
    KeyValue {
        key: name.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

/// The rows of `series`, built within what is left of the request's `budget`.
fn convert(series: &[Series], budget: &mut usize, now: i64) -> Result<Converted, Refusal> {
    let mut rows = MetricRows::default();
    let mut exemplars = ExemplarRows::default();
    let mut rejected = Vec::new();
    for series in series {
        charge(budget, series.cost())?;
        let service = series.service();
        let Some(name) = series.name() else {
            rejected.push(Rejected::of(
                service,
                "a series needs a __name__ label".into(),
                &series.labels,
            ));
            continue;
        };
        let attributes: Vec<KeyValue> = series
            .labels
            .iter()
            .filter(|(n, _)| *n != "__name__")
            .map(|(n, v)| key_value(n, v))
            .collect();
        let point = |kind| Point {
            service,
            name,
            kind,
            description: series.help,
            unit: series.unit,
            resource: &[],
            scope: None,
        };
        let floats = point(if series.monotonic { "sum" } else { "gauge" });
        for &(value, time, start) in &series.samples {
            let stale = is_stale(value);
            rows.push(
                &floats,
                Values {
                    time: time.saturating_mul(1000),
                    start_time: (start != 0).then(|| start.saturating_mul(1000)),
                    attributes: &attributes,
                    value: (!stale).then_some(value),
                    is_monotonic: series.monotonic.then_some(true),
                    temporality: series.monotonic.then_some("CUMULATIVE"),
                    flags: if stale { NO_RECORDED_VALUE } else { 0 },
                    ..Values::default()
                },
            );
        }
        for histogram in &series.histograms {
            if is_stale(histogram.sum) {
                let kind = native::kind(histogram);
                rows.push(
                    &point(kind),
                    Values {
                        time: histogram.timestamp.saturating_mul(1000),
                        attributes: &attributes,
                        flags: NO_RECORDED_VALUE,
                        ..Values::default()
                    },
                );
                continue;
            }
            // Past the request's budget, the request is refused; else the histogram alone.
            match native::values(histogram, &attributes, series.gauge_histogram, budget) {
                Ok((kind, values)) => rows.push(&point(kind), values),
                Err(refusal) if refusal.kind() == Kind::TooLarge => return Err(refusal),
                Err(reason) => rejected.push(Rejected::of(
                    service,
                    format!("histogram {name}: {reason}"),
                    &series.labels,
                )),
            }
        }
        for exemplar in &series.exemplars {
            let id = |wanted: &str| label(&exemplar.labels, wanted).filter(|v| !v.is_empty());
            let others: Vec<KeyValue> = exemplar
                .labels
                .iter()
                .filter(|(n, _)| *n != "trace_id" && *n != "span_id")
                .map(|(n, v)| key_value(n, v))
                .collect();
            let seen = Seen {
                time: if exemplar.timestamp == 0 {
                    now
                } else {
                    exemplar.timestamp.saturating_mul(1000)
                },
                value: Some(exemplar.value),
                trace_id: id("trace_id"),
                span_id: id("span_id"),
                attributes: &others,
            };
            exemplars.push(service, name, &attributes, seen);
        }
    }
    Ok(Converted {
        batch: rows.finish(),
        rejected,
        exemplars: exemplars.finish(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_content_type_chooses_the_version() {
        assert_eq!(Version::negotiate(None), Ok(Version::V1));
        assert_eq!(
            Version::negotiate(Some("application/x-protobuf")),
            Ok(Version::V1)
        );
        assert_eq!(
            Version::negotiate(Some("application/x-protobuf;proto=prometheus.WriteRequest")),
            Ok(Version::V1)
        );
        assert_eq!(
            Version::negotiate(Some(
                "application/x-protobuf; proto=io.prometheus.write.v2.Request"
            )),
            Ok(Version::V2)
        );
        for refused in [
            "application/json",
            "application/x-protobuf;proto=io.prometheus.write.v3.Request",
            "application/x-protobuf;proto",
        ] {
            assert!(Version::negotiate(Some(refused)).is_err(), "{refused}");
        }
    }

    #[test]
    fn kinds_follow_the_families_metadata() {
        assert!(monotonic("requests_total", COUNTER));
        assert!(monotonic("latency_seconds_bucket", HISTOGRAM));
        assert!(!monotonic("latency_seconds", HISTOGRAM));
        assert!(monotonic("rpc_seconds_count", SUMMARY));
        assert!(!monotonic("rpc_seconds", SUMMARY));
        assert!(!monotonic("queue_count", 2));
        assert!(counter_by_name("x_bucket", &[("le", "1")]));
        assert!(!counter_by_name("x_bucket", &[]));
    }
}
