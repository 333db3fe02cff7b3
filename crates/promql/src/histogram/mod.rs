//! Native histograms (Prometheus's sparse exponential histograms, and those of custom
//! bounds), as the evaluator holds them: buckets by index, counts as floats.
//!
//! The arithmetic (`arith`), the estimates read from buckets (`estimate`) and `rate` over a
//! window (`rate`) follow Prometheus's `model/histogram` and `promql/quantile.go` closely,
//! because their answers are compared with Prometheus's to six significant digits and
//! several of them hinge on details: which buckets an iteration visits, where the zero
//! bucket ends, and bounds computed exactly (`bounds`).

mod arith;
mod bounds;
mod estimate;
mod rate;

use crate::value::{format_float, quoted};

pub use arith::Incompatible;
pub use bounds::exponential_bound;
pub(crate) use rate::rate;

/// What a histogram says about counter resets, as Prometheus's hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CounterResetHint {
    #[default]
    Unknown,
    CounterReset,
    NotCounterReset,
    Gauge,
}

/// A native histogram. `schema` -4..=8 is exponential: bucket `i` of `positive` holds
/// (2^((i-1)/2^schema), 2^(i/2^schema)], of `negative` the same below zero; schema -53 has
/// custom bounds: bucket `i` holds (custom_values[i-1], custom_values[i]] (the first from
/// -Inf, the one past the last to +Inf).
///
/// Buckets of count zero may be present (as in Prometheus's spans); `compacted` drops them.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FloatHistogram {
    pub counter_reset_hint: CounterResetHint,
    pub schema: i32,
    pub zero_threshold: f64,
    pub zero_count: f64,
    pub count: f64,
    pub sum: f64,
    /// (bucket index, count), indexes ascending, no duplicates.
    pub positive: Vec<(i32, f64)>,
    pub negative: Vec<(i32, f64)>,
    pub custom_values: Vec<f64>,
}

/// The schema of histograms with custom bucket bounds.
pub const CUSTOM_BUCKETS_SCHEMA: i32 = -53;

/// One bucket of a histogram with its bounds.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Bucket {
    pub lower: f64,
    pub upper: f64,
    pub count: f64,
    pub lower_inclusive: bool,
    pub upper_inclusive: bool,
}

impl FloatHistogram {
    pub fn uses_custom_buckets(&self) -> bool {
        self.schema == CUSTOM_BUCKETS_SCHEMA
    }

    /// Its weight against a query's sample limit, as Prometheus counts an `HPoint`: its size
    /// in bytes over 16.
    pub fn weight(&self) -> usize {
        let bytes =
            112 + 8 * (self.positive.len() + self.negative.len()) + 8 * self.custom_values.len();
        bytes.div_ceil(16).max(1)
    }

    /// The upper bound of bucket `index` (of its absolute values, for negative buckets).
    fn bound(&self, index: i32) -> f64 {
        if !self.uses_custom_buckets() {
            return exponential_bound(index, self.schema);
        }
        if index < 0 {
            return f64::NEG_INFINITY;
        }
        self.custom_values
            .get(index as usize)
            .copied()
            .unwrap_or(f64::INFINITY)
    }

    /// Positive bucket `index` with its bounds. An exponential bucket includes its bound
    /// farther from zero; a custom one its upper bound (and the first one -Inf).
    fn positive_bucket(&self, index: i32, count: f64) -> Bucket {
        let (lower, upper) = (self.bound(index - 1), self.bound(index));
        Bucket {
            lower,
            upper,
            count,
            lower_inclusive: if self.uses_custom_buckets() {
                index == 0
            } else {
                lower < 0.0
            },
            upper_inclusive: self.uses_custom_buckets() || upper > 0.0,
        }
    }

    fn negative_bucket(&self, index: i32, count: f64) -> Bucket {
        let (lower, upper) = (-self.bound(index), -self.bound(index - 1));
        Bucket {
            lower,
            upper,
            count,
            lower_inclusive: lower < 0.0,
            upper_inclusive: upper > 0.0,
        }
    }

    /// The zero bucket, [-threshold, threshold].
    pub fn zero_bucket(&self) -> Bucket {
        Bucket {
            lower: -self.zero_threshold,
            upper: self.zero_threshold,
            count: self.zero_count,
            lower_inclusive: true,
            upper_inclusive: true,
        }
    }

    /// Every bucket, ascending: negative ones, the zero bucket when it holds observations,
    /// positive ones. A bucket reaching into the zero bucket is cut at its edge (as
    /// Prometheus's `AllBucketIterator` does), so bounds never overlap.
    pub fn all_buckets(&self) -> Vec<Bucket> {
        let t = self.zero_threshold;
        let mut out = Vec::with_capacity(self.negative.len() + self.positive.len() + 1);
        for &(i, c) in self.negative.iter().rev() {
            let mut b = self.negative_bucket(i, c);
            if b.upper < 0.0 && b.upper > -t {
                b.upper = -t;
            }
            out.push(b);
        }
        if self.zero_count > 0.0 {
            out.push(self.zero_bucket());
        }
        for &(i, c) in &self.positive {
            let mut b = self.positive_bucket(i, c);
            if b.lower > 0.0 && b.lower < t {
                b.lower = t;
            }
            out.push(b);
        }
        out
    }

    /// As Prometheus's API writes a histogram: count, sum, and the non-empty buckets as
    /// `[boundary rule, lower, upper, count]` (rule 0: open left, closed right; 1: closed
    /// left, open right; 2: open both; 3: closed both).
    pub fn to_json_text(&self) -> String {
        let buckets: Vec<String> = self
            .all_buckets()
            .into_iter()
            .filter(|b| b.count != 0.0)
            .map(|b| {
                let rule = match (b.lower_inclusive, b.upper_inclusive) {
                    (false, true) => 0,
                    (true, false) => 1,
                    (false, false) => 2,
                    (true, true) => 3,
                };
                format!(
                    "[{rule},{},{},{}]",
                    quoted(&format_float(b.lower)),
                    quoted(&format_float(b.upper)),
                    quoted(&format_float(b.count))
                )
            })
            .collect();
        // Prometheus's order: count, sum, then the buckets when there are any.
        let mut text = format!(
            "{{\"count\":{},\"sum\":{}",
            quoted(&format_float(self.count)),
            quoted(&format_float(self.sum))
        );
        if !buckets.is_empty() {
            text.push_str(&format!(",\"buckets\":[{}]", buckets.join(",")));
        }
        text.push('}');
        text
    }
}

impl std::fmt::Display for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = if self.lower_inclusive { "[" } else { "(" };
        let close = if self.upper_inclusive { "]" } else { ")" };
        write!(
            f,
            "{open}{},{}{close}:{}",
            format_float(self.lower),
            format_float(self.upper),
            format_float(self.count)
        )
    }
}

impl std::fmt::Display for FloatHistogram {
    /// As Prometheus prints a histogram (`count_values` uses it as a label value): the
    /// non-empty buckets with their own bounds, the zero bucket when it counts anything.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{count:{}, sum:{}",
            format_float(self.count),
            format_float(self.sum)
        )?;
        for &(i, c) in self.negative.iter().rev().filter(|b| b.1 != 0.0) {
            write!(f, ", {}", self.negative_bucket(i, c))?;
        }
        if self.zero_count != 0.0 {
            write!(f, ", {}", self.zero_bucket())?;
        }
        for &(i, c) in self.positive.iter().filter(|b| b.1 != 0.0) {
            write!(f, ", {}", self.positive_bucket(i, c))?;
        }
        f.write_str("}")
    }
}
