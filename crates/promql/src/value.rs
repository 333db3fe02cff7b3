//! Values PromQL computes with: samples (a float or a native histogram), series of points,
//! and the result of a query with Prometheus's JSON form.

use std::sync::Arc;

use serde_json::Value as Json;

use crate::histogram::FloatHistogram;
use crate::labels::Labels;

/// The NaN Prometheus writes to mark a series stale (remote write sends it as the value).
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

pub fn stale_nan() -> f64 {
    f64::from_bits(STALE_NAN_BITS)
}

pub fn is_stale_nan(f: f64) -> bool {
    f.to_bits() == STALE_NAN_BITS
}

/// One value: a float or a native histogram.
#[derive(Clone, Debug, PartialEq)]
pub enum Sample {
    Float(f64),
    Histogram(Arc<FloatHistogram>),
}

impl Sample {
    pub fn float(&self) -> Option<f64> {
        match self {
            Sample::Float(f) => Some(*f),
            Sample::Histogram(_) => None,
        }
    }

    pub fn histogram(&self) -> Option<&Arc<FloatHistogram>> {
        match self {
            Sample::Histogram(h) => Some(h),
            Sample::Float(_) => None,
        }
    }

    /// A stale marker (a float, or a histogram whose sum is the marker).
    pub fn is_stale(&self) -> bool {
        match self {
            Sample::Float(f) => is_stale_nan(*f),
            Sample::Histogram(h) => is_stale_nan(h.sum),
        }
    }

    /// How many samples it counts as against a query's limit (Prometheus counts a histogram
    /// by its size).
    pub fn weight(&self) -> usize {
        match self {
            Sample::Float(_) => 1,
            Sample::Histogram(h) => h.weight(),
        }
    }
}

/// A sample at a time (milliseconds since the epoch).
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub t: i64,
    pub s: Sample,
}

/// A series: its labels and its points in time order.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub labels: Labels,
    pub points: Vec<Point>,
    /// The metric name is to be dropped when the evaluation ends (Prometheus 3's delayed
    /// removal: `label_replace` and the like may still read it).
    pub drop_name: bool,
}

/// What a query answers, as Prometheus's API names the kinds.
#[derive(Clone, Debug)]
pub enum QueryValue {
    Scalar {
        t: i64,
        v: f64,
    },
    String {
        t: i64,
        v: String,
    },
    /// An instant vector: one point per series, at the evaluation time.
    Vector(Vec<(Labels, Point)>),
    Matrix(Vec<Series>),
}

impl QueryValue {
    pub fn result_type(&self) -> &'static str {
        match self {
            QueryValue::Scalar { .. } => "scalar",
            QueryValue::String { .. } => "string",
            QueryValue::Vector(_) => "vector",
            QueryValue::Matrix(_) => "matrix",
        }
    }

    /// `data` of a `query`/`query_range` answer as JSON text, byte for byte as Prometheus
    /// writes it: its members in Prometheus's order (`resultType` before `result`; `metric`
    /// before `value`, `values`, `histogram`, `histograms`), label maps sorted by name.
    pub fn to_json_text(&self) -> String {
        let point =
            |t: i64, f: f64| format!("[{},{}]", timestamp_json(t), quoted(&format_float(f)));
        let histogram_point =
            |t: i64, h: &FloatHistogram| format!("[{},{}]", timestamp_json(t), h.to_json_text());
        let result = match self {
            QueryValue::Scalar { t, v } => point(*t, *v),
            QueryValue::String { t, v } => format!("[{},{}]", timestamp_json(*t), quoted(v)),
            QueryValue::Vector(samples) => {
                let items: Vec<String> = samples
                    .iter()
                    .map(|(labels, p)| {
                        let metric = labels_json(labels).to_string();
                        match &p.s {
                            Sample::Float(f) => {
                                format!("{{\"metric\":{metric},\"value\":{}}}", point(p.t, *f))
                            }
                            Sample::Histogram(h) => {
                                format!(
                                    "{{\"metric\":{metric},\"histogram\":{}}}",
                                    histogram_point(p.t, h)
                                )
                            }
                        }
                    })
                    .collect();
                format!("[{}]", items.join(","))
            }
            QueryValue::Matrix(series) => {
                let items: Vec<String> = series
                    .iter()
                    .map(|s| {
                        let mut text = format!("{{\"metric\":{}", labels_json(&s.labels));
                        let floats: Vec<String> = s
                            .points
                            .iter()
                            .filter_map(|p| p.s.float().map(|f| point(p.t, f)))
                            .collect();
                        let histograms: Vec<String> = s
                            .points
                            .iter()
                            .filter_map(|p| p.s.histogram().map(|h| histogram_point(p.t, h)))
                            .collect();
                        if !floats.is_empty() {
                            text.push_str(&format!(",\"values\":[{}]", floats.join(",")));
                        }
                        if !histograms.is_empty() {
                            text.push_str(&format!(",\"histograms\":[{}]", histograms.join(",")));
                        }
                        text.push('}');
                        text
                    })
                    .collect();
                format!("[{}]", items.join(","))
            }
        };
        format!(
            "{{\"resultType\":\"{}\",\"result\":{result}}}",
            self.result_type()
        )
    }
}

/// A text as a JSON string.
pub fn quoted(text: &str) -> String {
    Json::String(text.to_string()).to_string()
}

pub fn labels_json(labels: &Labels) -> Json {
    Json::Object(
        labels
            .iter()
            .map(|(n, v)| (n.to_string(), Json::String(v.to_string())))
            .collect(),
    )
}

/// A sample value as Prometheus writes it: Go's `strconv.FormatFloat(f, 'f', -1, 64)` — the
/// shortest decimal that reads back to the same float, never an exponent — and `NaN`, `+Inf`,
/// `-Inf`. Rust's `Display` for `f64` is that same shortest form without exponent.
pub fn format_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_string()
    } else if f == f64::INFINITY {
        "+Inf".to_string()
    } else if f == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{f}")
    }
}

/// A timestamp as Prometheus writes it in results: seconds, with the milliseconds as a
/// fraction when there are any (`1435781451.781`, `1435781451`).
pub fn timestamp_json(t: i64) -> Json {
    let secs = t.div_euclid(1000);
    let ms = t.rem_euclid(1000);
    let text = if ms == 0 {
        format!("{secs}")
    } else {
        let frac = format!("{ms:03}");
        let frac = frac.trim_end_matches('0');
        if t < 0 && secs < 0 {
            // -1.5 s is secs -2 and 500 ms: print the value, not the parts.
            format!("{}", t as f64 / 1000.0)
        } else {
            format!("{secs}.{frac}")
        }
    };
    // A JSON number written as text so that no float rounding creeps in.
    serde_json::from_str(&text).unwrap_or(Json::Null)
}

/// A timestamp of an answer (seconds, with the milliseconds as a fraction) in milliseconds.
fn json_time(v: &Json) -> Option<i64> {
    v.as_f64().map(|s| (s * 1000.0).round() as i64)
}

fn json_float(v: &Json) -> Option<f64> {
    match v.as_str()? {
        "NaN" => Some(f64::NAN),
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        s => s.parse().ok(),
    }
}

fn json_labels(v: &Json) -> Option<Labels> {
    let pairs = v
        .as_object()?
        .iter()
        .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect::<Option<Vec<_>>>()?;
    Some(Labels::new(pairs))
}

impl QueryValue {
    /// An answer's `data` read back (what another server, or Floe over HTTP, answered), float
    /// samples only: None for a histogram or anything else it cannot read.
    pub fn from_json(data: &Json) -> Option<QueryValue> {
        let result = &data["result"];
        Some(match data["resultType"].as_str()? {
            "scalar" => QueryValue::Scalar {
                t: json_time(&result[0])?,
                v: json_float(&result[1])?,
            },
            "string" => QueryValue::String {
                t: json_time(&result[0])?,
                v: result[1].as_str()?.to_string(),
            },
            "vector" => QueryValue::Vector(
                result
                    .as_array()?
                    .iter()
                    .map(|s| {
                        let value = s.get("value")?;
                        Some((
                            json_labels(&s["metric"])?,
                            Point {
                                t: json_time(&value[0])?,
                                s: Sample::Float(json_float(&value[1])?),
                            },
                        ))
                    })
                    .collect::<Option<Vec<_>>>()?,
            ),
            "matrix" => QueryValue::Matrix(
                result
                    .as_array()?
                    .iter()
                    .map(|s| {
                        if s.get("histograms").is_some() {
                            return None;
                        }
                        let points = s["values"]
                            .as_array()?
                            .iter()
                            .map(|p| {
                                Some(Point {
                                    t: json_time(&p[0])?,
                                    s: Sample::Float(json_float(&p[1])?),
                                })
                            })
                            .collect::<Option<Vec<_>>>()?;
                        Some(Series {
                            labels: json_labels(&s["metric"])?,
                            points,
                            drop_name: false,
                        })
                    })
                    .collect::<Option<Vec<_>>>()?,
            ),
            _ => return None,
        })
    }
}
