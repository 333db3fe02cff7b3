//! Native histograms (Prometheus's sparse exponential histograms, and those of custom
//! bounds), as the evaluator holds them: buckets by index, counts as floats.

use serde_json::{Value as Json, json};

use crate::value::format_float;

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

    /// The (lower, upper] bounds of positive bucket `index`.
    pub fn positive_bounds(&self, index: i32) -> (f64, f64) {
        if self.uses_custom_buckets() {
            let i = index as usize;
            let lower = if i == 0 {
                f64::NEG_INFINITY
            } else {
                self.custom_values
                    .get(i - 1)
                    .copied()
                    .unwrap_or(f64::INFINITY)
            };
            let upper = self.custom_values.get(i).copied().unwrap_or(f64::INFINITY);
            return (lower, upper);
        }
        (
            exponential_bound(index - 1, self.schema),
            exponential_bound(index, self.schema),
        )
    }

    /// Every bucket with its bounds, ascending: negative ones, the zero bucket, positive ones.
    pub fn buckets(&self) -> Vec<Bucket> {
        let mut out = Vec::new();
        for &(i, c) in self.negative.iter().rev() {
            let (lower, upper) = (
                exponential_bound(i - 1, self.schema),
                exponential_bound(i, self.schema),
            );
            out.push(Bucket {
                lower: -upper,
                upper: -lower,
                count: c,
                lower_inclusive: true,
                upper_inclusive: false,
            });
        }
        if !self.uses_custom_buckets() && (self.zero_count != 0.0 || self.zero_threshold != 0.0) {
            out.push(Bucket {
                lower: -self.zero_threshold,
                upper: self.zero_threshold,
                count: self.zero_count,
                lower_inclusive: true,
                upper_inclusive: true,
            });
        }
        for &(i, c) in &self.positive {
            let (lower, upper) = self.positive_bounds(i);
            out.push(Bucket {
                lower,
                upper,
                count: c,
                lower_inclusive: false,
                upper_inclusive: true,
            });
        }
        out
    }

    /// As Prometheus's API writes a histogram: count, sum, and the non-empty buckets as
    /// `[boundary rule, lower, upper, count]` (rule 0: open left, closed right; 1: closed
    /// left, open right; 3: closed both).
    pub fn to_json(&self) -> Json {
        let buckets: Vec<Json> = self
            .buckets()
            .into_iter()
            .filter(|b| b.count != 0.0)
            .map(|b| {
                let rule = match (b.lower_inclusive, b.upper_inclusive) {
                    (false, true) => 0,
                    (true, false) => 1,
                    (false, false) => 2,
                    (true, true) => 3,
                };
                json!([
                    rule,
                    format_float(b.lower),
                    format_float(b.upper),
                    format_float(b.count)
                ])
            })
            .collect();
        let mut o = serde_json::Map::new();
        o.insert("count".into(), Json::String(format_float(self.count)));
        o.insert("sum".into(), Json::String(format_float(self.sum)));
        if !buckets.is_empty() {
            o.insert("buckets".into(), Json::Array(buckets));
        }
        Json::Object(o)
    }
}

/// One bucket of a histogram with its bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    pub lower: f64,
    pub upper: f64,
    pub count: f64,
    pub lower_inclusive: bool,
    pub upper_inclusive: bool,
}

/// The upper bound of exponential bucket `index` at `schema`: 2^(index / 2^schema).
pub fn exponential_bound(index: i32, schema: i32) -> f64 {
    if schema >= 0 {
        let factor = (1i64 << schema) as f64;
        (index as f64 / factor).exp2()
    } else {
        // Negative schemas merge 2^-schema buckets of schema 0: bound 2^(index * 2^-schema).
        let factor = (1i64 << (-schema)) as f64;
        (index as f64 * factor).exp2()
    }
}

/// The bucket of a lower schema that bucket `index` of `from` falls into.
fn reduce_index(index: i32, from: i32, to: i32) -> i32 {
    let shift = from - to;
    if shift <= 0 {
        return index;
    }
    // Bucket i of schema s covers (2^((i-1)/2^s), 2^(i/2^s)]; at schema s-1 it is ceil(i/2).
    let div = 1i64 << shift;
    ((index as i64 + div - 1).div_euclid(div)) as i32
}

fn add_into(target: &mut Vec<(i32, f64)>, index: i32, count: f64) {
    match target.binary_search_by_key(&index, |b| b.0) {
        Ok(i) => target[i].1 += count,
        Err(i) => target.insert(i, (index, count)),
    }
}

impl FloatHistogram {
    /// Every count and the sum times `factor`.
    pub fn scaled(&self, factor: f64) -> FloatHistogram {
        let mut h = self.clone();
        h.count *= factor;
        h.sum *= factor;
        h.zero_count *= factor;
        for b in h.positive.iter_mut().chain(h.negative.iter_mut()) {
            b.1 *= factor;
        }
        h
    }

    /// Every count and the sum divided by `d` (a zero gives infinities, as Prometheus does).
    pub fn divided(&self, d: f64) -> FloatHistogram {
        let mut h = self.clone();
        h.count /= d;
        h.sum /= d;
        h.zero_count /= d;
        for b in h.positive.iter_mut().chain(h.negative.iter_mut()) {
            b.1 /= d;
        }
        h
    }

    /// The same histogram at a lower (coarser) schema.
    pub fn to_schema(&self, schema: i32) -> FloatHistogram {
        if self.uses_custom_buckets() || schema >= self.schema {
            return self.clone();
        }
        let mut h = self.clone();
        h.schema = schema;
        h.positive.clear();
        h.negative.clear();
        for &(i, c) in &self.positive {
            add_into(&mut h.positive, reduce_index(i, self.schema, schema), c);
        }
        for &(i, c) in &self.negative {
            add_into(&mut h.negative, reduce_index(i, self.schema, schema), c);
        }
        h
    }

    /// The same histogram with a zero bucket at least `threshold` wide: buckets entirely
    /// inside it move into it.
    fn widen_zero(&self, threshold: f64) -> FloatHistogram {
        let mut h = self.clone();
        if threshold <= h.zero_threshold || h.uses_custom_buckets() {
            return h;
        }
        let mut threshold = threshold;
        loop {
            let mut moved = false;
            let schema = h.schema;
            let keep = |(i, c): &(i32, f64), zero: &mut f64, moved: &mut bool| {
                if exponential_bound(*i, schema) <= threshold {
                    *zero += c;
                    *moved = true;
                    false
                } else {
                    true
                }
            };
            let mut zero = h.zero_count;
            h.positive.retain(|b| keep(b, &mut zero, &mut moved));
            h.negative.retain(|b| keep(b, &mut zero, &mut moved));
            h.zero_count = zero;
            h.zero_threshold = threshold;
            // A bucket straddling the threshold widens the zero bucket to its upper bound.
            let straddling = h
                .positive
                .iter()
                .chain(h.negative.iter())
                .map(|(i, _)| {
                    (
                        exponential_bound(i - 1, schema),
                        exponential_bound(*i, schema),
                    )
                })
                .find(|(lower, upper)| *lower < threshold && *upper > threshold);
            match straddling {
                Some((_, upper)) => threshold = upper,
                None if !moved => break,
                None => break,
            }
        }
        h
    }

    fn combine(&self, other: &FloatHistogram, sign: f64) -> Option<FloatHistogram> {
        if self.uses_custom_buckets() != other.uses_custom_buckets() {
            return None;
        }
        if self.uses_custom_buckets() && self.custom_values != other.custom_values {
            return None;
        }
        let schema = self.schema.min(other.schema);
        let threshold = self.zero_threshold.max(other.zero_threshold);
        let a = self.to_schema(schema).widen_zero(threshold);
        let b = other.to_schema(schema).widen_zero(a.zero_threshold);
        let mut a = a.widen_zero(b.zero_threshold);
        a.count += sign * b.count;
        a.sum += sign * b.sum;
        a.zero_count += sign * b.zero_count;
        for &(i, c) in &b.positive {
            add_into(&mut a.positive, i, sign * c);
        }
        for &(i, c) in &b.negative {
            add_into(&mut a.negative, i, sign * c);
        }
        Some(a)
    }

    /// The sum of two histograms; None when their buckets cannot be brought together.
    pub fn add(&self, other: &FloatHistogram) -> Option<FloatHistogram> {
        let mut h = self.combine(other, 1.0)?;
        if self.counter_reset_hint != other.counter_reset_hint {
            h.counter_reset_hint = CounterResetHint::Unknown;
        }
        Some(h)
    }

    pub fn sub(&self, other: &FloatHistogram) -> Option<FloatHistogram> {
        self.combine(other, -1.0)
    }

    /// Without buckets of zero count.
    pub fn compacted(&self) -> FloatHistogram {
        let mut h = self.clone();
        h.positive.retain(|b| b.1 != 0.0);
        h.negative.retain(|b| b.1 != 0.0);
        h
    }

    /// Whether this histogram, coming after `prev`, shows a counter reset.
    pub fn detect_reset(&self, prev: &FloatHistogram) -> bool {
        match self.counter_reset_hint {
            CounterResetHint::CounterReset => return true,
            CounterResetHint::NotCounterReset => return false,
            _ => {}
        }
        if self.count < prev.count {
            return true;
        }
        if self.uses_custom_buckets() != prev.uses_custom_buckets() {
            return true;
        }
        if self.uses_custom_buckets() && self.custom_values != prev.custom_values {
            return true;
        }
        if self.schema > prev.schema || self.zero_threshold < prev.zero_threshold {
            return true;
        }
        let p = prev.to_schema(self.schema).widen_zero(self.zero_threshold);
        if p.zero_threshold != self.zero_threshold || self.zero_count < p.zero_count {
            return true;
        }
        let decreased = |cur: &[(i32, f64)], old: &[(i32, f64)]| {
            old.iter().any(|&(i, c)| {
                let now = cur
                    .binary_search_by_key(&i, |b| b.0)
                    .map(|j| cur[j].1)
                    .unwrap_or(0.0);
                now < c
            })
        };
        decreased(&self.positive, &p.positive) || decreased(&self.negative, &p.negative)
    }

    /// The variance of the observations, each taken at its bucket's geometric middle (zero
    /// for the zero bucket).
    pub fn variance(&self) -> f64 {
        let mean = self.sum / self.count;
        let (mut v, mut c) = (0.0, 0.0);
        for b in self.buckets() {
            if b.count == 0.0 {
                continue;
            }
            let val = if b.lower <= 0.0 && 0.0 <= b.upper {
                0.0
            } else {
                let m = (b.upper * b.lower).sqrt();
                if b.upper < 0.0 { -m } else { m }
            };
            let d = val - mean;
            (v, c) = crate::functions::kahan_inc(b.count * d * d, v, c);
        }
        (v + c) / self.count
    }

    /// The estimated φ-quantile of the observations (interpolating exponentially within an
    /// exponential bucket, linearly within a custom one).
    pub fn quantile(&self, q: f64) -> f64 {
        if q.is_nan() {
            return f64::NAN;
        }
        if q < 0.0 {
            return f64::NEG_INFINITY;
        }
        if q > 1.0 {
            return f64::INFINITY;
        }
        if self.count == 0.0 {
            return f64::NAN;
        }
        let rank = q * self.count;
        let buckets = self.buckets();
        let mut count = 0.0;
        let mut chosen = None;
        for b in &buckets {
            if b.count == 0.0 {
                continue;
            }
            count += b.count;
            chosen = Some(b.clone());
            if count >= rank {
                break;
            }
        }
        let Some(b) = chosen else { return f64::NAN };
        if b.lower < 0.0 && b.upper > 0.0 && !self.uses_custom_buckets() {
            // The zero bucket: linear, on the side where the other observations are.
            let fraction = 1.0 - (count - rank) / b.count;
            let neg = self.negative.iter().any(|x| x.1 > 0.0);
            let pos = self.positive.iter().any(|x| x.1 > 0.0);
            return match (neg, pos) {
                (false, true) | (false, false) => b.upper * fraction,
                (true, false) => b.lower + (-b.lower) * fraction,
                (true, true) => b.lower + (b.upper - b.lower) * fraction,
            };
        }
        let rank_in = b.count - (count - rank);
        let fraction = rank_in / b.count;
        if self.uses_custom_buckets() || b.lower <= 0.0 && b.upper >= 0.0 {
            if b.lower == f64::NEG_INFINITY {
                return b.upper;
            }
            if b.upper == f64::INFINITY {
                return b.lower;
            }
            return b.lower + (b.upper - b.lower) * fraction;
        }
        // Exponential interpolation within the bucket.
        if b.lower > 0.0 {
            (b.lower.log2() + (b.upper.log2() - b.lower.log2()) * fraction).exp2()
        } else {
            let (l, u) = (-b.upper, -b.lower);
            -((u.log2() - (u.log2() - l.log2()) * (1.0 - fraction)).exp2())
        }
    }

    /// The estimated fraction of observations between `lower` and `upper`.
    pub fn fraction(&self, lower: f64, upper: f64) -> f64 {
        if self.count == 0.0 || lower.is_nan() || upper.is_nan() {
            return f64::NAN;
        }
        if lower >= upper {
            return 0.0;
        }
        let mut rank = 0.0;
        for b in self.buckets() {
            if b.count == 0.0 {
                continue;
            }
            let (lo, hi) = (b.lower, b.upper);
            let part = |x: f64| -> f64 {
                if x <= lo {
                    0.0
                } else if x >= hi {
                    1.0
                } else if lo <= 0.0 && hi >= 0.0 || self.uses_custom_buckets() {
                    if lo.is_infinite() || hi.is_infinite() {
                        0.0
                    } else {
                        (x - lo) / (hi - lo)
                    }
                } else if lo > 0.0 {
                    (x.log2() - lo.log2()) / (hi.log2() - lo.log2())
                } else {
                    1.0 - ((-x).log2() - (-hi).log2()) / ((-lo).log2() - (-hi).log2())
                }
            };
            rank += b.count * (part(upper) - part(lower));
        }
        rank / self.count
    }
}

impl std::fmt::Display for FloatHistogram {
    /// As Prometheus prints a histogram (`count_values` uses it as a label value).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{count:{}, sum:{}",
            format_float(self.count),
            format_float(self.sum)
        )?;
        for b in self.buckets() {
            if b.count == 0.0 {
                continue;
            }
            let open = if b.lower_inclusive { "[" } else { "(" };
            let close = if b.upper_inclusive { "]" } else { ")" };
            write!(
                f,
                ", {open}{},{}{close}:{}",
                format_float(b.lower),
                format_float(b.upper),
                format_float(b.count)
            )?;
        }
        f.write_str("}")
    }
}

/// `rate`, `increase` and `delta` of native histograms: the last minus the first, counter
/// resets added back. None (with a warning noted) where they do not fit together.
pub(crate) fn rate(
    ev: &crate::eval::Evaluator,
    points: &[crate::value::Point],
    counter: bool,
    name: &str,
) -> Option<FloatHistogram> {
    use crate::eval::Level;
    let hs: Vec<&FloatHistogram> = points
        .iter()
        .filter_map(|p| p.s.histogram().map(|h| &**h))
        .collect();
    let mut prev = hs[0].clone();
    let last = hs[hs.len() - 1];
    if counter
        && (prev.counter_reset_hint == CounterResetHint::Gauge
            || last.counter_reset_hint == CounterResetHint::Gauge)
    {
        ev.note(
            Level::Warning,
            format!("PromQL warning: this native histogram metric is not a counter: {name:?}"),
        );
    }
    if counter && hs.len() > 1 && hs[1].detect_reset(&prev) {
        prev = FloatHistogram {
            schema: hs[1].schema,
            custom_values: hs[1].custom_values.clone(),
            ..Default::default()
        };
    }
    let mut min_schema = prev.schema.min(last.schema);
    for h in &hs[1..hs.len() - 1] {
        if counter && h.counter_reset_hint == CounterResetHint::Gauge {
            ev.note(
                Level::Warning,
                format!("PromQL warning: this native histogram metric is not a counter: {name:?}"),
            );
        }
        min_schema = min_schema.min(h.schema);
        if h.uses_custom_buckets() != prev.uses_custom_buckets() {
            ev.note(Level::Warning, format!("PromQL warning: vector contains a mix of histograms with exponential and custom buckets schemas for metric name {name:?}"));
            return None;
        }
    }
    if last.uses_custom_buckets() != prev.uses_custom_buckets() {
        ev.note(Level::Warning, format!("PromQL warning: vector contains a mix of histograms with exponential and custom buckets schemas for metric name {name:?}"));
        return None;
    }
    let Some(mut h) = last.to_schema(min_schema).sub(&prev) else {
        ev.note(Level::Warning, format!("PromQL warning: vector contains histograms with incompatible custom buckets for metric name {name:?}"));
        return None;
    };
    if counter {
        let mut before = &hs[0].clone();
        let first = hs[0].clone();
        let _ = &first;
        for cur in &hs[1..] {
            if cur.detect_reset(before) {
                h = h.add(before)?;
            }
            before = cur;
        }
    } else if hs[0].counter_reset_hint != CounterResetHint::Gauge
        || last.counter_reset_hint != CounterResetHint::Gauge
    {
        ev.note(
            Level::Warning,
            format!("PromQL warning: this native histogram metric is not a gauge: {name:?}"),
        );
    }
    h.counter_reset_hint = CounterResetHint::Gauge;
    Some(h.compacted())
}
