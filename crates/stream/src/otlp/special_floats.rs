//! NaN and ±Infinity in OTLP/JSON.
//!
//! Protobuf's JSON mapping writes a double that is not finite as a string — `"NaN"`,
//! `"Infinity"`, `"-Infinity"` — and OpenTelemetry's SDKs and Collector do so for a gauge of
//! NaN, a histogram whose sum overflowed or an attribute of infinity. The generated serde of
//! `opentelemetry-proto` takes those strings only in a summary's quantiles: elsewhere a
//! point's value silently goes missing, and an attribute fails the whole request. So a JSON
//! body holding one of the three strings is read first as a JSON tree, where
//!
//! - a metric's numbers (a number point's `asDouble`; a histogram's or exponential
//!   histogram's `sum`, `min`, `max`; a histogram's `explicitBounds`; a summary's `sum`) are
//!   noted by position and given a placeholder, then set on the decoded request;
//! - an attribute's `doubleValue` becomes the `stringValue` Floe stores a double attribute as
//!   (`NaN`, `inf`, `-inf`: attributes are kept as text);
//!
//! and a body without them is decoded as before, at no cost.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point;
use serde_json::{Map, Value};

/// The three strings, and what each stands for.
fn special(value: &Value) -> Option<f64> {
    match value.as_str()? {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// Whether `body` may hold one of the strings (a cheap look before any parsing).
pub fn may_hold(body: &[u8]) -> bool {
    body.windows(5).any(|w| w == b"\"NaN\"") || body.windows(9).any(|w| w == b"Infinity\"")
}

/// Where in a metrics request a number stood, and which number of the point.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Slot {
    Value,
    Sum,
    Min,
    Max,
    Bound(usize),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Noted {
    /// Resource, scope, metric and point, by index.
    at: [usize; 4],
    slot: Slot,
    value: f64,
}

/// Every attribute's special `doubleValue` in `tree` turned into its text.
pub fn attributes_as_text(tree: &mut Value) {
    match tree {
        Value::Object(object) => {
            if let Some(value) = object.get("doubleValue").and_then(special) {
                object.remove("doubleValue");
                let text = if value.is_nan() {
                    "NaN".to_string()
                } else {
                    value.to_string()
                };
                object.insert("stringValue".into(), Value::String(text));
            }
            object.values_mut().for_each(attributes_as_text);
        }
        Value::Array(items) => items.iter_mut().for_each(attributes_as_text),
        _ => {}
    }
}

fn each<'a>(object: &'a mut Map<String, Value>, key: &str) -> impl Iterator<Item = &'a mut Value> {
    object
        .get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// Notes and replaces by 0 the special numbers of a metrics request's points.
pub fn note_metric_numbers(tree: &mut Value) -> Vec<Noted> {
    let mut noted = Vec::new();
    let Some(root) = tree.as_object_mut() else {
        return noted;
    };
    for (r, resource) in each(root, "resourceMetrics").enumerate() {
        let Some(resource) = resource.as_object_mut() else {
            continue;
        };
        for (s, scope) in each(resource, "scopeMetrics").enumerate() {
            let Some(scope) = scope.as_object_mut() else {
                continue;
            };
            for (m, metric) in each(scope, "metrics").enumerate() {
                let Some(metric) = metric.as_object_mut() else {
                    continue;
                };
                for kind in [
                    "gauge",
                    "sum",
                    "histogram",
                    "exponentialHistogram",
                    "summary",
                ] {
                    let Some(data) = metric.get_mut(kind).and_then(Value::as_object_mut) else {
                        continue;
                    };
                    for (p, point) in each(data, "dataPoints").enumerate() {
                        let Some(point) = point.as_object_mut() else {
                            continue;
                        };
                        note_point(point, [r, s, m, p], &mut noted);
                    }
                }
            }
        }
    }
    noted
}

fn note_point(point: &mut Map<String, Value>, at: [usize; 4], noted: &mut Vec<Noted>) {
    for (key, slot) in [
        ("asDouble", Slot::Value),
        ("sum", Slot::Sum),
        ("min", Slot::Min),
        ("max", Slot::Max),
    ] {
        if let Some(value) = point.get(key).and_then(special) {
            noted.push(Noted { at, slot, value });
            point.insert(key.into(), Value::from(0.0));
        }
    }
    for (i, bound) in each(point, "explicitBounds").enumerate() {
        if let Some(value) = special(bound) {
            noted.push(Noted {
                at,
                slot: Slot::Bound(i),
                value,
            });
            *bound = Value::from(0.0);
        }
    }
}

/// Sets what [`note_metric_numbers`] noted on the decoded request.
pub fn restore(request: &mut ExportMetricsServiceRequest, noted: &[Noted]) {
    for n in noted {
        let [r, s, m, p] = n.at;
        let Some(data) = request
            .resource_metrics
            .get_mut(r)
            .and_then(|x| x.scope_metrics.get_mut(s))
            .and_then(|x| x.metrics.get_mut(m))
            .and_then(|x| x.data.as_mut())
        else {
            continue;
        };
        match data {
            Data::Gauge(g) => number(g.data_points.get_mut(p), n),
            Data::Sum(sum) => number(sum.data_points.get_mut(p), n),
            Data::Histogram(h) => {
                if let Some(point) = h.data_points.get_mut(p) {
                    match n.slot {
                        Slot::Sum => point.sum = Some(n.value),
                        Slot::Min => point.min = Some(n.value),
                        Slot::Max => point.max = Some(n.value),
                        Slot::Bound(i) => {
                            if let Some(bound) = point.explicit_bounds.get_mut(i) {
                                *bound = n.value;
                            }
                        }
                        Slot::Value => {}
                    }
                }
            }
            Data::ExponentialHistogram(h) => {
                if let Some(point) = h.data_points.get_mut(p) {
                    match n.slot {
                        Slot::Sum => point.sum = Some(n.value),
                        Slot::Min => point.min = Some(n.value),
                        Slot::Max => point.max = Some(n.value),
                        Slot::Value | Slot::Bound(_) => {}
                    }
                }
            }
            Data::Summary(summary) => {
                if let Some(point) = summary.data_points.get_mut(p)
                    && n.slot == Slot::Sum
                {
                    point.sum = n.value;
                }
            }
        }
    }
}

fn number(
    point: Option<&mut opentelemetry_proto::tonic::metrics::v1::NumberDataPoint>,
    noted: &Noted,
) {
    if let Some(point) = point
        && noted.slot == Slot::Value
    {
        point.value = Some(number_data_point::Value::AsDouble(noted.value));
    }
}
