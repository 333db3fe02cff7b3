//! The warnings and infos a query answers with, worded as Prometheus's
//! `util/annotations` words them (clients and Prometheus's own tests tell a warning from an
//! info by the text's start: "PromQL warning" or "PromQL info"). Every annotation the
//! evaluator notes is one of these variants, so the wording lives here only.

use crate::eval::Level;
use crate::histogram::Incompatible;
use crate::value::format_float;

/// One annotation, with what it names.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Annotation<'a> {
    /// A quantile parameter outside [0, 1].
    InvalidQuantile(f64),
    /// A `limit_ratio` parameter outside [-1, 1] (given, and capped to).
    InvalidRatio(f64, f64),
    /// A classic bucket without a parsable `le` (its value, the metric name).
    BadBucketLabel(&'a str, &'a str),
    /// `histogram_quantile` over classic and native histograms of the same series.
    MixedClassicNativeHistograms(&'a str),
    /// Classic buckets whose counts had to be made monotonic (metric name).
    ForcedMonotonicity(&'a str),
    /// An aggregation of floats only met histograms (the aggregation).
    HistogramIgnoredInAggregation(&'a str),
    /// A function of floats only met a range with histograms too (metric name).
    HistogramIgnoredInMixedRange(&'a str),
    /// `rate` or `increase` of a series whose name is not a counter's.
    PossibleNonCounter(&'a str),
    /// A range or aggregation mixed floats and histograms (metric name; None for an
    /// aggregation).
    MixedFloatsHistograms(Option<&'a str>),
    /// A counter function over a histogram marked as a gauge.
    NotCounter(&'a str),
    /// A gauge function over a histogram not marked as a gauge.
    NotGauge(&'a str),
    /// Histograms that cannot be added or subtracted (metric name).
    IncompatibleHistograms(Incompatible, &'a str),
    /// A binary operator between histograms that cannot be added or subtracted.
    IncompatibleBucketLayout(&'a str),
    /// A binary operator not defined between these sample types (operator, left, right).
    IncompatibleTypes(&'a str, &'a str, &'a str),
}

impl Annotation<'_> {
    pub fn level(&self) -> Level {
        match self {
            Annotation::IncompatibleTypes(..)
            | Annotation::ForcedMonotonicity(_)
            | Annotation::HistogramIgnoredInAggregation(_)
            | Annotation::HistogramIgnoredInMixedRange(_)
            | Annotation::PossibleNonCounter(_) => Level::Info,
            _ => Level::Warning,
        }
    }
}

impl std::fmt::Display for Annotation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const W: &str = "PromQL warning";
        const I: &str = "PromQL info";
        match self {
            Annotation::InvalidQuantile(q) => write!(
                f,
                "{W}: quantile value should be between 0 and 1, got {}",
                format_float(*q)
            ),
            Annotation::InvalidRatio(given, capped) => write!(
                f,
                "{W}: ratio value should be between -1 and 1, got {}, capping to {}",
                format_float(*given),
                format_float(*capped)
            ),
            Annotation::BadBucketLabel(le, name) => write!(
                f,
                "{W}: bucket label \"le\" is missing or has a malformed value of {le:?} for metric name {name:?}"
            ),
            Annotation::MixedClassicNativeHistograms(name) => write!(
                f,
                "{W}: vector contains a mix of classic and native histograms for metric name {name:?}"
            ),
            Annotation::ForcedMonotonicity(name) => write!(
                f,
                "{I}: input to histogram_quantile needed to be fixed for monotonicity (see https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile) for metric name {name:?}"
            ),
            Annotation::HistogramIgnoredInAggregation(op) => {
                write!(f, "{I}: ignored histogram in {op} aggregation")
            }
            Annotation::HistogramIgnoredInMixedRange(name) => write!(
                f,
                "{I}: ignored histograms in a range containing both floats and histograms for metric name {name:?}"
            ),
            Annotation::PossibleNonCounter(name) => write!(
                f,
                "{I}: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: {name:?}"
            ),
            Annotation::MixedFloatsHistograms(Some(name)) => write!(
                f,
                "{W}: encountered a mix of histograms and floats for metric name {name:?}"
            ),
            Annotation::MixedFloatsHistograms(None) => write!(
                f,
                "{W}: encountered a mix of histograms and floats for aggregation"
            ),
            Annotation::NotCounter(name) => write!(
                f,
                "{W}: this native histogram metric is not a counter: {name:?}"
            ),
            Annotation::NotGauge(name) => {
                write!(
                    f,
                    "{W}: this native histogram metric is not a gauge: {name:?}"
                )
            }
            Annotation::IncompatibleHistograms(Incompatible::Schema, name) => write!(
                f,
                "{W}: vector contains a mix of histograms with exponential and custom buckets schemas for metric name {name:?}"
            ),
            Annotation::IncompatibleHistograms(Incompatible::Bounds, name) => write!(
                f,
                "{W}: vector contains histograms with incompatible custom buckets for metric name {name:?}"
            ),
            Annotation::IncompatibleBucketLayout(op) => write!(
                f,
                "{W}: incompatible bucket layout encountered for binary operator {op}"
            ),
            Annotation::IncompatibleTypes(op, l, r) => write!(
                f,
                "{I}: incompatible sample types encountered for binary operator {op:?}: {l} {op} {r}"
            ),
        }
    }
}
