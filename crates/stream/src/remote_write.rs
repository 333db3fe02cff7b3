//! Prometheus remote write 1.0 into Iceberg: a snappy-compressed (block format) protobuf
//! `WriteRequest` decoded within the request's budget, each sample a row of the tenant's
//! `otel.metrics` — the metric's name from `__name__`, its other labels as attributes, its
//! `job` as the service — typed from the request's metadata where it has some (a counter is a
//! monotonic cumulative sum; everything else a gauge). Native histograms are not taken
//! (Prometheus sends them only when told to): such a request is refused.

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

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

/// A snappy-compressed `body` decoded, within `budget` bytes of decoded memory.
pub fn decode(body: &[u8], budget: usize) -> Result<WriteRequest, Refusal> {
    let length = snap::raw::decompress_len(body)
        .map_err(|e| Refusal::Malformed(format!("the body is not snappy-compressed: {e}")))?;
    if length > budget {
        return Err(Refusal::TooLarge(format!(
            "the body inflates to {length} bytes, more than the {budget} this request may \
             decode (--decode-memory-mb)"
        )));
    }
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

/// The request's samples as rows of `otel.metrics`; a series without a name is refused.
pub fn convert(request: &WriteRequest) -> Converted {
    let counters: std::collections::HashSet<&str> = request
        .metadata
        .iter()
        .filter(|m| m.r#type == COUNTER)
        .map(|m| m.metric_family_name.as_str())
        .collect();
    let help: std::collections::HashMap<&str, (&str, &str)> = request
        .metadata
        .iter()
        .map(|m| {
            (
                m.metric_family_name.as_str(),
                (m.help.as_str(), m.unit.as_str()),
            )
        })
        .collect();
    let mut rows = MetricRows::default();
    let mut rejected = Vec::new();
    for series in &request.timeseries {
        let name = series
            .labels
            .iter()
            .find(|l| l.name == "__name__")
            .map(|l| l.value.as_str());
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
        let counter = counters.contains(name);
        let (description, unit) = help.get(name).copied().unwrap_or(("", ""));
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
        let decoded = decode(&body, 1 << 20).unwrap();
        let converted = convert(&decoded);
        assert_eq!(converted.batch.num_rows(), 2);
        assert_eq!(converted.rejected.len(), 1);
        let kinds = converted.batch.column_by_name("metric_type").unwrap();
        let kinds = kinds
            .as_any()
            .downcast_ref::<datafusion::arrow::array::StringArray>()
            .unwrap();
        assert_eq!(kinds.value(0), "sum");
        assert!(matches!(
            decode(b"not snappy", 1 << 20),
            Err(Refusal::Malformed(_))
        ));
        assert!(matches!(decode(&body, 10), Err(Refusal::TooLarge(_))));
    }
}
