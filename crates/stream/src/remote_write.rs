//! Prometheus remote write 1.0 into Iceberg: a snappy-compressed (block format) protobuf
//! `WriteRequest` decoded within the request's budget, each sample a row of the tenant's
//! `otel.metrics` — the metric's name from `__name__`, its other labels as attributes, its
//! `job` as the service.
//!
//! Each series is typed by its metric family's metadata: a counter, and the `_bucket`,
//! `_sum` and `_count` series of a histogram or summary, are monotonic cumulative sums;
//! everything else is a gauge. Prometheus sends metadata in requests of their own (every
//! minute, apart from the samples), so what a tenant's requests said of each family is kept
//! ([`MetadataMemory`]) for the requests after; a family no metadata has named yet is typed
//! by the names Prometheus gives counters (`_total`, and `_bucket` with an `le` label).
//! Native histograms are not taken (Prometheus sends them only when told to): such a request
//! is refused.

use std::collections::HashMap;
use std::sync::Mutex;

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

use crate::decode::ipc::DecodeLimits;
use crate::otlp::metrics::{MetricRows, Point, Values};
use crate::otlp::values::UNKNOWN_SERVICE;
use crate::otlp::{Converted, Refusal, Rejected, bounds};

#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub exemplars: Vec<Exemplar>,
    /// Native histograms: only their presence is read.
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub histograms: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Exemplar {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(double, tag = "2")]
    pub value: f64,
    #[prost(int64, tag = "3")]
    pub timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricMetadata {
    /// 0 unknown, 1 counter, 2 gauge, 3 histogram, 4 gauge histogram, 5 summary, 6 info,
    /// 7 state set.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
    #[prost(string, tag = "4")]
    pub help: String,
    #[prost(string, tag = "5")]
    pub unit: String,
}

const COUNTER: i32 = 1;
const HISTOGRAM: i32 = 3;
const SUMMARY: i32 = 5;

/// Families remembered for all tenants together; past this, new ones are typed by name.
const MOST_FAMILIES: usize = 200_000;

/// The metric metadata each tenant's remote-write requests carried, by family name, kept
/// for the requests that carry samples without it.
#[derive(Default)]
pub struct MetadataMemory {
    families: Mutex<Remembered>,
}

/// Each tenant's families, and how many there are in all.
#[derive(Default)]
struct Remembered {
    count: usize,
    tenants: HashMap<String, HashMap<String, Family>>,
}

/// What metadata said of one metric family.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Family {
    pub kind: i32,
    pub help: String,
    pub unit: String,
}

impl MetadataMemory {
    /// Keeps what `request` says of its families for `tenant`, and answers what is known of
    /// the families its series may belong to (this request's metadata first).
    pub fn families(&self, tenant: &str, request: &WriteRequest) -> HashMap<String, Family> {
        let mut known: HashMap<String, Family> = request
            .metadata
            .iter()
            .map(|m| {
                let family = Family {
                    kind: m.r#type,
                    help: m.help.clone(),
                    unit: m.unit.clone(),
                };
                (m.metric_family_name.clone(), family)
            })
            .collect();
        let mut guard = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let Remembered { count, tenants } = &mut *guard;
        let remembered = tenants.entry(tenant.to_string()).or_default();
        for (name, family) in &known {
            match remembered.get_mut(name) {
                Some(kept) => *kept = family.clone(),
                None if *count < MOST_FAMILIES => {
                    *count += 1;
                    remembered.insert(name.clone(), family.clone());
                }
                None => {}
            }
        }
        for series in &request.timeseries {
            let Some(name) = series_name(series) else {
                continue;
            };
            for candidate in family_names(name) {
                if !known.contains_key(candidate)
                    && let Some(family) = remembered.get(candidate)
                {
                    known.insert(candidate.to_string(), family.clone());
                }
            }
        }
        known
    }
}

fn series_name(series: &TimeSeries) -> Option<&str> {
    series
        .labels
        .iter()
        .find(|l| l.name == "__name__")
        .map(|l| l.value.as_str())
}

/// The family names a series named `name` may belong to: itself, and without the suffix
/// Prometheus adds for a counter or a histogram's or summary's parts.
fn family_names(name: &str) -> impl Iterator<Item = &str> {
    let stripped = ["_total", "_bucket", "_sum", "_count"]
        .into_iter()
        .filter_map(move |suffix| name.strip_suffix(suffix));
    std::iter::once(name).chain(stripped)
}

/// Whether a series is a monotonic cumulative sum, and its family's metadata if known.
fn typed<'a>(
    name: &str,
    series: &TimeSeries,
    known: &'a HashMap<String, Family>,
) -> (bool, Option<&'a Family>) {
    if let Some(family) = known.get(name) {
        return (family.kind == COUNTER, Some(family));
    }
    for (suffix, kinds) in [
        ("_total", &[COUNTER][..]),
        ("_bucket", &[HISTOGRAM][..]),
        ("_sum", &[HISTOGRAM, SUMMARY][..]),
        ("_count", &[HISTOGRAM, SUMMARY][..]),
    ] {
        if let Some(family) = name.strip_suffix(suffix).and_then(|f| known.get(f)) {
            return (kinds.contains(&family.kind), Some(family));
        }
    }
    let by_name = name.ends_with("_total")
        || (name.ends_with("_bucket") && series.labels.iter().any(|l| l.name == "le"));
    (by_name, None)
}

/// A snappy-compressed `body` decoded within `limits`: the body inflated at most to
/// `limits.max_bytes`, then decoded within the budget of its inflated size (as an OTLP body
/// after gzip is), so that what Prometheus sends by default — 500 to 2,000 samples a request,
/// compressed about tenfold — always fits.
pub fn decode(body: &[u8], limits: &DecodeLimits) -> Result<WriteRequest, Refusal> {
    let length = snap::raw::decompress_len(body)
        .map_err(|e| Refusal::Malformed(format!("the body is not snappy-compressed: {e}")))?;
    if length > limits.max_bytes {
        return Err(Refusal::TooLarge(format!(
            "the body inflates to {length} bytes, more than the {} a request may decode \
             (--decode-memory-mb)",
            limits.max_bytes
        )));
    }
    let budget = limits.budget(length);
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| Refusal::Malformed(format!("the body is not snappy-compressed: {e}")))?;
    let cost = bounds::protobuf_cost(&raw).ok_or_else(|| {
        Refusal::Malformed("the body is not a protobuf remote-write request".into())
    })?;
    if cost > budget {
        return Err(Refusal::TooLarge(format!(
            "the request would take {cost} bytes to decode, more than the {budget} it may \
             (--decode-memory-mb)"
        )));
    }
    let request: WriteRequest = prost::Message::decode(raw.as_slice()).map_err(|e| {
        Refusal::Malformed(format!("the body is not a remote-write WriteRequest: {e}"))
    })?;
    if request.timeseries.iter().any(|s| !s.histograms.is_empty()) {
        return Err(Refusal::Malformed(
            "native histograms are not taken: send classic histograms \
             (send_native_histograms: false)"
                .into(),
        ));
    }
    Ok(request)
}

fn key_value(label: &Label) -> KeyValue {
    KeyValue {
        key: label.name.clone(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(label.value.clone())),
        }),
        ..Default::default()
    }
}

/// The request's samples as rows of `otel.metrics`, typed by `known` (from
/// [`MetadataMemory::families`]); a series without a name is refused.
pub fn convert(request: &WriteRequest, known: &HashMap<String, Family>) -> Converted {
    let mut rows = MetricRows::default();
    let mut rejected = Vec::new();
    for series in &request.timeseries {
        let name = series_name(series);
        let service = series
            .labels
            .iter()
            .find(|l| l.name == "job")
            .map_or(UNKNOWN_SERVICE, |l| l.value.as_str());
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            let labels: Vec<(String, String)> = series
                .labels
                .iter()
                .map(|l| (l.name.clone(), l.value.clone()))
                .collect();
            rejected.push(Rejected::of(
                service,
                "a series needs a __name__ label".into(),
                &labels,
            ));
            continue;
        };
        let attributes: Vec<KeyValue> = series
            .labels
            .iter()
            .filter(|l| l.name != "__name__")
            .map(key_value)
            .collect();
        let (counter, family) = typed(name, series, known);
        let (description, unit) = family.map_or(("", ""), |f| (f.help.as_str(), f.unit.as_str()));
        let point = Point {
            service,
            name,
            kind: if counter { "sum" } else { "gauge" },
            description,
            unit,
            resource: &[],
            scope: None,
        };
        for sample in &series.samples {
            rows.push(
                &point,
                Values {
                    time: sample.timestamp.saturating_mul(1000),
                    attributes: &attributes,
                    value: Some(sample.value),
                    is_monotonic: counter.then_some(true),
                    temporality: counter.then_some("CUMULATIVE"),
                    ..Values::default()
                },
            );
        }
    }
    Converted {
        batch: rows.finish(),
        rejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn samples_become_metric_rows_typed_by_the_metadata() {
        let request = WriteRequest {
            timeseries: vec![
                TimeSeries {
                    labels: vec![
                        Label {
                            name: "__name__".into(),
                            value: "http_requests_total".into(),
                        },
                        Label {
                            name: "job".into(),
                            value: "api".into(),
                        },
                        Label {
                            name: "code".into(),
                            value: "200".into(),
                        },
                    ],
                    samples: vec![
                        Sample {
                            value: 1.0,
                            timestamp: 1_700_000_000_000,
                        },
                        Sample {
                            value: 3.0,
                            timestamp: 1_700_000_015_000,
                        },
                    ],
                    ..Default::default()
                },
                TimeSeries {
                    labels: vec![Label {
                        name: "job".into(),
                        value: "api".into(),
                    }],
                    samples: vec![Sample {
                        value: 1.0,
                        timestamp: 1,
                    }],
                    ..Default::default()
                },
            ],
            metadata: vec![MetricMetadata {
                r#type: COUNTER,
                metric_family_name: "http_requests_total".into(),
                help: "requests".into(),
                unit: String::new(),
            }],
        };
        let body = snap::raw::Encoder::new()
            .compress_vec(&request.encode_to_vec())
            .unwrap();
        let limits = DecodeLimits::default();
        let decoded = decode(&body, &limits).unwrap();
        let memory = MetadataMemory::default();
        let converted = convert(&decoded, &memory.families("t", &decoded));
        assert_eq!(converted.batch.num_rows(), 2);
        assert_eq!(converted.rejected.len(), 1);
        let kinds = converted.batch.column_by_name("metric_type").unwrap();
        let kinds = kinds
            .as_any()
            .downcast_ref::<datafusion::arrow::array::StringArray>()
            .unwrap();
        assert_eq!(kinds.value(0), "sum");
        assert!(matches!(
            decode(b"not snappy", &limits),
            Err(Refusal::Malformed(_))
        ));
        let tiny = DecodeLimits {
            max_bytes: 10,
            body_multiple: 1,
        };
        assert!(matches!(decode(&body, &tiny), Err(Refusal::TooLarge(_))));
    }

    fn series(name: &str, labels: &[(&str, &str)]) -> TimeSeries {
        let mut all = vec![Label {
            name: "__name__".into(),
            value: name.into(),
        }];
        all.extend(labels.iter().map(|(n, v)| Label {
            name: (*n).into(),
            value: (*v).into(),
        }));
        TimeSeries {
            labels: all,
            samples: vec![Sample {
                value: 1.0,
                timestamp: 1_700_000_000_000,
            }],
            ..Default::default()
        }
    }

    fn kinds(converted: &Converted) -> Vec<String> {
        let kinds = converted.batch.column_by_name("metric_type").unwrap();
        let kinds = kinds
            .as_any()
            .downcast_ref::<datafusion::arrow::array::StringArray>()
            .unwrap();
        kinds
            .iter()
            .map(|k| k.unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn metadata_sent_apart_types_the_samples_after_it() {
        let memory = MetadataMemory::default();
        let metadata = WriteRequest {
            timeseries: vec![],
            metadata: vec![
                MetricMetadata {
                    r#type: COUNTER,
                    metric_family_name: "up_changes".into(),
                    help: "changes".into(),
                    unit: String::new(),
                },
                MetricMetadata {
                    r#type: HISTOGRAM,
                    metric_family_name: "latency_seconds".into(),
                    help: "latency".into(),
                    unit: "seconds".into(),
                },
                MetricMetadata {
                    r#type: 2,
                    metric_family_name: "queue_count".into(),
                    help: "a gauge whose name ends like a histogram's count".into(),
                    unit: String::new(),
                },
            ],
        };
        memory.families("a", &metadata);
        let samples = WriteRequest {
            timeseries: vec![
                series("up_changes", &[]),
                series("latency_seconds_bucket", &[("le", "0.5")]),
                series("latency_seconds_sum", &[]),
                series("latency_seconds_count", &[]),
                series("queue_count", &[]),
                series("temperature", &[]),
                // No metadata yet: typed by the names Prometheus gives counters.
                series("http_requests_total", &[]),
                series("other_seconds_bucket", &[("le", "+Inf")]),
            ],
            metadata: vec![],
        };
        let converted = convert(&samples, &memory.families("a", &samples));
        assert_eq!(
            kinds(&converted),
            ["sum", "sum", "sum", "sum", "gauge", "gauge", "sum", "sum"]
        );
        // Another tenant's metadata is its own: only the names say anything there.
        let converted = convert(&samples, &memory.families("b", &samples));
        assert_eq!(
            kinds(&converted),
            [
                "gauge", "sum", "gauge", "gauge", "gauge", "gauge", "sum", "sum"
            ]
        );
    }

    #[test]
    fn prometheus_default_batches_fit_the_default_budget() {
        // 2,000 samples (the most Prometheus sends in one request by default) of series with
        // ten labels each: node-exporter's widest.
        let timeseries = (0..2000)
            .map(|i| {
                let labels: Vec<(String, String)> = (0..10)
                    .map(|l| (format!("label_{l}"), format!("value-{i}-{l}")))
                    .collect();
                let labels: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                series("node_cpu_seconds_total", &labels)
            })
            .collect();
        let request = WriteRequest {
            timeseries,
            metadata: vec![],
        };
        let body = snap::raw::Encoder::new()
            .compress_vec(&request.encode_to_vec())
            .unwrap();
        let decoded = decode(&body, &DecodeLimits::default()).unwrap();
        assert_eq!(decoded.timeseries.len(), 2000);
    }
}
