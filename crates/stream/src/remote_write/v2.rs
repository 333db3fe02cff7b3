//! Remote write 2.0: `io.prometheus.write.v2.Request`. Every string — label names and values,
//! help, unit, exemplar labels — is an index into the request's `symbols`, and every series
//! carries its own metadata, so no memory of earlier requests is needed to type it.

use super::native::Histogram;
use super::{Exemplar as Seen, GAUGE_HISTOGRAM, Series, is_sum, label};
use crate::Refusal;
use crate::otlp::Rejected;
use crate::otlp::values::UNKNOWN_SERVICE;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    /// Every string the request uses, the first one empty.
    #[prost(string, repeated, tag = "4")]
    pub symbols: Vec<String>,
    #[prost(message, repeated, tag = "5")]
    pub timeseries: Vec<TimeSeries>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Pairs of indexes into `symbols`: name, value, name, value, ….
    #[prost(uint32, repeated, tag = "1")]
    pub labels_refs: Vec<u32>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub histograms: Vec<Histogram>,
    #[prost(message, repeated, tag = "4")]
    pub exemplars: Vec<Exemplar>,
    #[prost(message, optional, tag = "5")]
    pub metadata: Option<Metadata>,
    /// Earlier drafts' start of a counter, in milliseconds (0: none); later ones carry it on
    /// each sample.
    #[prost(int64, tag = "6")]
    pub created_timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
    /// When the counter started, in milliseconds (0: not known).
    #[prost(int64, tag = "3")]
    pub start_timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Exemplar {
    #[prost(uint32, repeated, tag = "1")]
    pub labels_refs: Vec<u32>,
    #[prost(double, tag = "2")]
    pub value: f64,
    #[prost(int64, tag = "3")]
    pub timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Metadata {
    /// 0 unspecified, 1 counter, 2 gauge, 3 histogram, 4 gauge histogram, 5 summary, 6 info,
    /// 7 state set.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(uint32, tag = "3")]
    pub help_ref: u32,
    #[prost(uint32, tag = "4")]
    pub unit_ref: u32,
}

/// `refs` as name/value pairs of `symbols`, or why they are not.
fn labels<'a>(symbols: &'a [String], refs: &[u32]) -> Result<Vec<(&'a str, &'a str)>, Refusal> {
    if !refs.len().is_multiple_of(2) {
        return Err(Refusal::malformed(format!(
            "labels_refs holds {} references, not name and value pairs",
            refs.len()
        )));
    }
    refs.chunks(2)
        .map(|pair| Ok((symbol(symbols, pair[0])?, symbol(symbols, pair[1])?)))
        .collect()
}

/// The symbol at `at`; the first is the empty string even when a request sends no symbols
/// at all (a request of no labels, help or units needs none).
fn symbol(symbols: &[String], at: u32) -> Result<&str, Refusal> {
    if at == 0 && symbols.is_empty() {
        return Ok("");
    }
    symbols.get(at as usize).map(String::as_str).ok_or_else(|| {
        Refusal::malformed(format!(
            "symbol reference {at} is past the request's {} symbols",
            symbols.len()
        ))
    })
}

/// How many symbol references the request's series and exemplars hold.
pub fn references(request: &Request) -> usize {
    request
        .timeseries
        .iter()
        .map(|s| {
            s.labels_refs.len()
                + s.exemplars
                    .iter()
                    .map(|e| e.labels_refs.len())
                    .sum::<usize>()
        })
        .sum()
}

/// The request's series in the form both versions share, each typed by its own metadata
/// (by its name where that says nothing); a series whose references do not resolve is
/// refused alone.
pub fn series(request: &Request) -> (Vec<Series<'_>>, Vec<Rejected>) {
    let symbols = &request.symbols;
    let mut taken = Vec::with_capacity(request.timeseries.len());
    let mut refused = Vec::new();
    for s in &request.timeseries {
        match resolve(symbols, s) {
            Ok(series) => taken.push(series),
            // The references alone say nothing and may be many: their count is kept.
            Err(reason) => refused.push(Rejected::of(
                UNKNOWN_SERVICE,
                reason.to_string(),
                &serde_json::json!({ "labels_refs": s.labels_refs.len() }),
            )),
        }
    }
    (taken, refused)
}

fn resolve<'a>(symbols: &'a [String], s: &'a TimeSeries) -> Result<Series<'a>, Refusal> {
    let labels = labels(symbols, &s.labels_refs)?;
    let metadata = s.metadata.clone().unwrap_or_default();
    let name = label(&labels, "__name__").unwrap_or_default();
    let monotonic = is_sum(name, metadata.r#type, &labels);
    let exemplars = s
        .exemplars
        .iter()
        .map(|e| {
            Ok(Seen {
                labels: self::labels(symbols, &e.labels_refs)?,
                value: e.value,
                timestamp: e.timestamp,
            })
        })
        .collect::<Result<_, Refusal>>()?;
    Ok(Series {
        samples: s
            .samples
            .iter()
            .map(|p| {
                let start = if p.start_timestamp != 0 {
                    p.start_timestamp
                } else {
                    s.created_timestamp
                };
                (p.value, p.timestamp, start)
            })
            .collect(),
        histograms: s.histograms.iter().collect(),
        exemplars,
        monotonic,
        gauge_histogram: metadata.r#type == GAUGE_HISTOGRAM,
        help: symbol(symbols, metadata.help_ref)?,
        unit: symbol(symbols, metadata.unit_ref)?,
        labels,
    })
}

#[cfg(test)]
mod tests {
    use super::super::native::BucketSpan;
    use super::super::v1::MetadataMemory;
    use super::super::{Version, Written, receive};
    use super::*;
    use crate::Refusal;
    use crate::decode::ipc::DecodeLimits;
    use crate::otlp::Converted;
    use crate::refusal::Kind;
    use datafusion::arrow::array::AsArray;
    use prost::Message;

    fn send(request: &Request) -> Result<Converted, Refusal> {
        let body = snap::raw::Encoder::new()
            .compress_vec(&request.encode_to_vec())
            .unwrap();
        let memory = MetadataMemory::default();
        receive(
            &body,
            Version::V2,
            &DecodeLimits::default(),
            &memory,
            "t",
            7,
        )
    }

    fn symbols(all: &[&str]) -> Vec<String> {
        all.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn symbols_resolve_and_every_series_is_typed_by_its_own_metadata() {
        let request = Request {
            symbols: symbols(&[
                "",
                "__name__",
                "http_requests_total",
                "job",
                "api",
                "requests served",
                "trace_id",
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "latency_seconds",
                "seconds",
            ]),
            timeseries: vec![
                TimeSeries {
                    labels_refs: vec![1, 2, 3, 4],
                    samples: vec![
                        Sample {
                            value: 1.0,
                            timestamp: 1_700_000_000_000,
                            start_timestamp: 1_699_999_000_000,
                        },
                        Sample {
                            value: 2.0,
                            timestamp: 1_700_000_015_000,
                            start_timestamp: 0,
                        },
                    ],
                    metadata: Some(Metadata {
                        r#type: 1,
                        help_ref: 5,
                        unit_ref: 0,
                    }),
                    ..Default::default()
                },
                // An exemplar in an entry of its own, as Prometheus sends them.
                TimeSeries {
                    labels_refs: vec![1, 2, 3, 4],
                    exemplars: vec![Exemplar {
                        labels_refs: vec![6, 7],
                        value: 0.25,
                        timestamp: 0,
                    }],
                    ..Default::default()
                },
                TimeSeries {
                    labels_refs: vec![1, 8, 3, 4],
                    histograms: vec![Histogram {
                        count_int: Some(3),
                        sum: 1.5,
                        schema: 1,
                        positive_spans: vec![BucketSpan {
                            offset: 0,
                            length: 2,
                        }],
                        positive_deltas: vec![1, 1],
                        zero_count_int: Some(0),
                        timestamp: 1_700_000_000_000,
                        ..Default::default()
                    }],
                    metadata: Some(Metadata {
                        r#type: 3,
                        help_ref: 0,
                        unit_ref: 9,
                    }),
                    ..Default::default()
                },
                TimeSeries {
                    labels_refs: vec![1, 99],
                    samples: vec![Sample::default()],
                    ..Default::default()
                },
            ],
        };
        let received = send(&request).unwrap();
        let batch = &received.batch;
        assert_eq!(batch.num_rows(), 3);
        let text = |column: &str, row: usize| {
            batch
                .column_by_name(column)
                .unwrap()
                .as_string::<i32>()
                .value(row)
                .to_string()
        };
        assert_eq!(
            (
                text("metric_type", 0),
                text("description", 0),
                text("service_name", 0)
            ),
            ("sum".into(), "requests served".into(), "api".into())
        );
        assert_eq!(
            (text("metric_type", 2), text("unit", 2)),
            ("exponential_histogram".into(), "seconds".into())
        );
        assert!(!batch.column_by_name("start_time").unwrap().is_null(0));
        assert!(batch.column_by_name("start_time").unwrap().is_null(1));
        assert_eq!(received.rejected.len(), 1);
        assert!(received.rejected[0].error.contains("symbol reference 99"));
        let exemplars = received.exemplars.as_ref().unwrap();
        assert_eq!(exemplars.num_rows(), 1);
        let trace = exemplars.column_by_name("trace_id").unwrap();
        assert_eq!(
            trace.as_string::<i32>().value(0),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(
            Written::of(&received),
            Written {
                samples: 2,
                histograms: 1,
                exemplars: 1
            }
        );
    }

    #[test]
    fn a_long_symbol_named_many_times_is_past_the_budget() {
        let long = "x".repeat(100_000);
        let mut labels_refs = vec![1, 2];
        for _ in 0..2_000 {
            labels_refs.extend([3, 3]);
        }
        let request = Request {
            symbols: symbols(&["", "__name__", "up", &long]),
            timeseries: vec![TimeSeries {
                labels_refs,
                samples: vec![Sample::default()],
                ..Default::default()
            }],
        };
        assert!(matches!(send(&request), Err(r) if r.kind() == Kind::TooLarge));
    }

    #[test]
    fn prometheus_default_batches_fit_the_default_budget() {
        // 2,000 series (Prometheus 3's max_samples_per_send), each with one sample, its
        // metadata and ten labels, nine of them shared: symbols deduplicate the labels, so
        // the body is as small as such a batch gets, and its budget the tightest.
        let mut names = vec![
            String::new(),
            "__name__".into(),
            "node_cpu_seconds_total".into(),
        ];
        names.extend((0..9).flat_map(|l| [format!("label_{l}"), format!("shared-value-{l}")]));
        names.push("cpu".into());
        names.push("Seconds the CPUs spent in each mode.".into());
        let shared = names.len();
        names.extend((0..2_000).map(|i| format!("{i}")));
        let timeseries = (0..2_000u32)
            .map(|i| {
                let mut labels_refs = vec![1, 2];
                labels_refs.extend(3..21);
                labels_refs.extend([21, shared as u32 + i]);
                TimeSeries {
                    labels_refs,
                    samples: vec![Sample {
                        value: 1.0,
                        timestamp: 1_700_000_000_000,
                        start_timestamp: 0,
                    }],
                    metadata: Some(Metadata {
                        r#type: 1,
                        help_ref: 22,
                        unit_ref: 0,
                    }),
                    ..Default::default()
                }
            })
            .collect();
        let request = Request {
            symbols: names,
            timeseries,
        };
        let received = send(&request).unwrap();
        assert_eq!(received.batch.num_rows(), 2_000);
        assert!(received.rejected.is_empty());
    }

    #[test]
    fn staleness_markers_are_kept_without_a_value() {
        let stale = f64::from_bits(0x7ff0_0000_0000_0002);
        let request = Request {
            symbols: symbols(&["", "__name__", "up", "latency_seconds"]),
            timeseries: vec![
                TimeSeries {
                    labels_refs: vec![1, 2],
                    samples: vec![Sample {
                        value: stale,
                        timestamp: 1_700_000_000_000,
                        start_timestamp: 0,
                    }],
                    ..Default::default()
                },
                TimeSeries {
                    labels_refs: vec![1, 3],
                    histograms: vec![Histogram {
                        sum: stale,
                        schema: 3,
                        timestamp: 1_700_000_000_000,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        };
        let batch = send(&request).unwrap().batch;
        assert_eq!(batch.num_rows(), 2);
        for column in ["value", "count", "sum"] {
            let column = batch.column_by_name(column).unwrap();
            assert_eq!(column.null_count(), 2);
        }
        let flags = batch.column_by_name("flags").unwrap();
        let flags = flags.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert_eq!(flags.values().to_vec(), vec![1, 1]);
    }
}
