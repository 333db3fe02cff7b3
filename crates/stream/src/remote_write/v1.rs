//! Remote write 1.0: `prometheus.WriteRequest`, series with labels of their own, and the
//! metric metadata Prometheus sends in requests apart (every minute), remembered per tenant
//! ([`MetadataMemory`]) for the samples that come without it.

use std::collections::HashMap;
use std::sync::Mutex;

use super::native::Histogram;
use super::{Exemplar as Seen, GAUGE_HISTOGRAM, Series, is_sum};

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub exemplars: Vec<Exemplar>,
    /// Native histograms, as 2.0 carries them (the same fields).
    #[prost(message, repeated, tag = "4")]
    pub histograms: Vec<Histogram>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Exemplar {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(double, tag = "2")]
    pub value: f64,
    #[prost(int64, tag = "3")]
    pub timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct MetricMetadata {
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

/// Families remembered for all tenants together; past this, new ones are typed by name.
const MOST_FAMILIES: usize = 200_000;

/// Families remembered for one tenant (a Prometheus with node-exporter describes about 1,000;
/// large clusters a few thousand), so that one tenant cannot take every place from the rest.
const MOST_FAMILIES_PER_TENANT: usize = 20_000;

/// The most of a family's help text and unit remembered (the rest is cut at a character's
/// boundary), and the longest family name remembered.
const MOST_HELP_BYTES: usize = 1024;

/// `text` cut to at most `most` bytes, at a character's boundary.
fn cut(text: &str, most: usize) -> String {
    let mut end = text.len().min(most);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

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
pub(crate) struct Family {
    pub kind: i32,
    pub help: String,
    pub unit: String,
}

impl MetadataMemory {
    /// Keeps what `request` says of its families for `tenant`, and answers what is known of
    /// the families its series may belong to (this request's metadata first).
    pub(crate) fn families(&self, tenant: &str, request: &WriteRequest) -> HashMap<String, Family> {
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
            let kept = Family {
                kind: family.kind,
                help: cut(&family.help, MOST_HELP_BYTES),
                unit: cut(&family.unit, MOST_HELP_BYTES),
            };
            // A name no metric has (over 1 KiB) is not remembered at all.
            let room = *count < MOST_FAMILIES
                && remembered.len() < MOST_FAMILIES_PER_TENANT
                && name.len() <= MOST_HELP_BYTES;
            match remembered.get_mut(name) {
                Some(old) => *old = kept,
                None if room => {
                    *count += 1;
                    remembered.insert(name.clone(), kept);
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

/// The family a series named `name` belongs to, if metadata named it: itself, or the family
/// whose counter, histogram or summary part it is.
fn family<'a>(name: &str, known: &'a HashMap<String, Family>) -> Option<&'a Family> {
    family_names(name).find_map(|f| known.get(f))
}

/// The request's series in the form both versions share, typed by `known` (from
/// [`MetadataMemory::families`]).
pub(crate) fn series<'a>(
    request: &'a WriteRequest,
    known: &'a HashMap<String, Family>,
) -> Vec<Series<'a>> {
    request
        .timeseries
        .iter()
        .map(|s| {
            let labels: Vec<(&str, &str)> = s
                .labels
                .iter()
                .map(|l| (l.name.as_str(), l.value.as_str()))
                .collect();
            let name = series_name(s).unwrap_or_default();
            let family = family(name, known);
            let monotonic = is_sum(name, family.map_or(0, |f| f.kind), &labels);
            Series {
                samples: s
                    .samples
                    .iter()
                    .map(|p| (p.value, p.timestamp, 0))
                    .collect(),
                histograms: s.histograms.iter().collect(),
                exemplars: s
                    .exemplars
                    .iter()
                    .map(|e| Seen {
                        labels: e
                            .labels
                            .iter()
                            .map(|l| (l.name.as_str(), l.value.as_str()))
                            .collect(),
                        value: e.value,
                        timestamp: e.timestamp,
                    })
                    .collect(),
                monotonic,
                gauge_histogram: family.is_some_and(|f| f.kind == GAUGE_HISTOGRAM),
                help: family.map_or("", |f| f.help.as_str()),
                unit: family.map_or("", |f| f.unit.as_str()),
                labels,
            }
        })
        .collect()
}

/// A remote write 1.0 body of float samples, as Prometheus sends one: a `WriteRequest`,
/// snappy-compressed (block format). For what stands in for a sender — benchmarks that load
/// Floe and a Prometheus with the same samples.
pub fn encode_samples<'a>(
    series: impl IntoIterator<Item = (&'a [(String, String)], &'a [(i64, f64)])>,
) -> Vec<u8> {
    use prost::Message;
    let request = WriteRequest {
        timeseries: series
            .into_iter()
            .map(|(labels, samples)| TimeSeries {
                labels: labels
                    .iter()
                    .map(|(name, value)| Label {
                        name: name.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                samples: samples
                    .iter()
                    .map(|&(timestamp, value)| Sample { value, timestamp })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        metadata: Vec::new(),
    };
    snap::raw::Encoder::new()
        .compress_vec(&request.encode_to_vec())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::{COUNTER, HISTOGRAM, Version, receive};
    use super::*;
    use crate::decode::ipc::DecodeLimits;
    use crate::otlp::Converted;
    use crate::refusal::Kind;
    use prost::Message;

    fn body(request: &WriteRequest) -> Vec<u8> {
        snap::raw::Encoder::new()
            .compress_vec(&request.encode_to_vec())
            .unwrap()
    }

    fn take(memory: &MetadataMemory, tenant: &str, request: &WriteRequest) -> Converted {
        let limits = DecodeLimits::default();
        receive(&body(request), Version::V1, &limits, memory, tenant, 0).unwrap()
    }

    #[test]
    fn a_catch_up_batch_of_one_series_fits_the_budget() {
        // After an outage Prometheus sends its backlog in batches of 2,000 samples, which may
        // all belong to one series: a body of a few KB that decodes to 2,000 rows.
        let labels: Vec<(String, String)> = [
            ("__name__", "node_cpu_seconds_total"),
            ("cpu", "0"),
            ("mode", "idle"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .chain((0..7).map(|i| (format!("label_{i}"), format!("a-value-of-some-length-{i}"))))
        .collect();
        let samples: Vec<(i64, f64)> = (0..2_000)
            .map(|i| (1_700_000_000_000 + i * 15_000, i as f64))
            .collect();
        let body = encode_samples([(labels.as_slice(), samples.as_slice())]);
        let limits = DecodeLimits::default();
        let received = receive(
            &body,
            Version::V1,
            &limits,
            &MetadataMemory::default(),
            "t",
            0,
        )
        .unwrap();
        assert_eq!(received.batch.num_rows(), 2_000);
    }

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
        let limits = DecodeLimits::default();
        let memory = MetadataMemory::default();
        let converted = take(&memory, "t", &request);
        assert_eq!(converted.batch.num_rows(), 2);
        assert_eq!(converted.rejected.len(), 1);
        let kinds = converted.batch.column_by_name("metric_type").unwrap();
        let kinds = kinds
            .as_any()
            .downcast_ref::<datafusion::arrow::array::StringArray>()
            .unwrap();
        assert_eq!(kinds.value(0), "sum");
        assert!(matches!(
            receive(b"not snappy", Version::V1, &limits, &memory, "t", 0),
            Err(r) if r.kind() == Kind::Malformed
        ));
        let tiny = DecodeLimits {
            max_bytes: 10,
            body_multiple: 1,
        };
        assert!(matches!(
            receive(&body(&request), Version::V1, &tiny, &memory, "t", 0),
            Err(r) if r.kind() == Kind::TooLarge
        ));
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

    fn kinds(received: &Converted) -> Vec<String> {
        let kinds = received.batch.column_by_name("metric_type").unwrap();
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
        assert_eq!(
            kinds(&take(&memory, "a", &samples)),
            ["sum", "sum", "sum", "sum", "gauge", "gauge", "sum", "sum"]
        );
        // Another tenant's metadata is its own: only the names say anything there.
        assert_eq!(
            kinds(&take(&memory, "b", &samples)),
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
        let received = take(&MetadataMemory::default(), "t", &request);
        assert_eq!(received.batch.num_rows(), 2000);
    }

    #[test]
    fn one_tenant_cannot_take_every_place_in_the_memory() {
        let memory = MetadataMemory::default();
        let many = WriteRequest {
            timeseries: vec![],
            metadata: (0..MOST_FAMILIES_PER_TENANT + 10)
                .map(|i| MetricMetadata {
                    r#type: COUNTER,
                    metric_family_name: format!("family_{i}"),
                    help: "é".repeat(MOST_HELP_BYTES),
                    unit: String::new(),
                })
                .collect(),
        };
        memory.families("greedy", &many);
        let guard = memory.families.lock().unwrap();
        let greedy = &guard.tenants["greedy"];
        assert_eq!(greedy.len(), MOST_FAMILIES_PER_TENANT);
        assert!(greedy.values().all(|f| f.help.len() <= MOST_HELP_BYTES));
        drop(guard);
        // Another tenant's families are still remembered.
        let metadata = WriteRequest {
            timeseries: vec![],
            metadata: vec![MetricMetadata {
                r#type: COUNTER,
                metric_family_name: "up_changes".into(),
                help: "changes".into(),
                unit: String::new(),
            }],
        };
        memory.families("modest", &metadata);
        let samples = WriteRequest {
            timeseries: vec![series("up_changes", &[])],
            metadata: vec![],
        };
        assert_eq!(kinds(&take(&memory, "modest", &samples)), ["sum"]);
    }
}
