//! Functions of range vectors (`rate`, `increase`, `delta`, `irate`, `idelta`, `deriv`,
//! `predict_linear`, `resets`, `changes`, `*_over_time`, `double_exponential_smoothing`):
//! applied to one series' window at one step, with Prometheus's formulas (`functions.go`).

use promql_parser::parser::Expr;

use crate::annotations::Annotation;
use crate::eval::Evaluator;
use crate::histogram::{CounterResetHint, FloatHistogram};
use crate::labels::Labels;
use crate::quantile::quantile;
use crate::value::{Point, Sample};
use crate::{Error, Result};

/// What a range function sees besides the window's points.
pub(crate) struct Window<'a> {
    /// The step's time.
    pub ts: i64,
    /// The window: samples in (start, end].
    pub start: i64,
    pub end: i64,
    pub range: i64,
    pub labels: &'a Labels,
    /// The scalar arguments at this step (NaN in the range argument's place).
    pub args: &'a [f64],
}

/// Kahan-compensated addition: the sum and its running compensation.
pub(crate) fn kahan_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    let c = if t.is_infinite() {
        0.0
    } else if sum.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}

fn floats(points: &[Point]) -> Vec<(i64, f64)> {
    points
        .iter()
        .filter_map(|p| p.s.float().map(|f| (p.t, f)))
        .collect()
}

fn has_histograms(points: &[Point]) -> bool {
    points.iter().any(|p| p.s.histogram().is_some())
}

fn note_mixed_range(ev: &Evaluator, w: &Window, points: &[Point]) {
    if has_histograms(points) {
        ev.annotate(Annotation::HistogramIgnoredInMixedRange(w.labels.name()));
    }
}

/// A function of a range vector, for one series' window at one step.
pub(crate) fn over_range(
    ev: &Evaluator,
    name: &str,
    points: &[Point],
    w: &Window,
) -> Result<Option<Sample>> {
    let fl = floats(points);
    let f = |v: f64| Ok(Some(Sample::Float(v)));
    match name {
        "rate" => extrapolated_rate(ev, points, w, true, true),
        "increase" => extrapolated_rate(ev, points, w, true, false),
        "delta" => extrapolated_rate(ev, points, w, false, false),
        "irate" => instant_value(ev, points, w, true),
        "idelta" => instant_value(ev, points, w, false),
        "count_over_time" => f(points.len() as f64),
        "present_over_time" | "absent_over_time" => f(1.0),
        "last_over_time" => Ok(points.last().map(|p| p.s.clone())),
        "sum_over_time" | "avg_over_time" => {
            if !fl.is_empty() && has_histograms(points) {
                ev.annotate(Annotation::MixedFloatsHistograms(Some(w.labels.name())));
                return Ok(None);
            }
            if fl.is_empty() {
                return histogram_over_time(ev, w, name, points);
            }
            if name == "sum_over_time" {
                let (mut sum, mut c) = (0.0, 0.0);
                for &(_, v) in &fl {
                    (sum, c) = kahan_inc(v, sum, c);
                }
                f(if sum.is_infinite() { sum } else { sum + c })
            } else {
                f(average(fl.iter().map(|p| p.1)))
            }
        }
        "max_over_time" | "min_over_time" | "stddev_over_time" | "stdvar_over_time"
        | "mad_over_time" | "quantile_over_time" => {
            if fl.is_empty() {
                return Ok(None);
            }
            note_mixed_range(ev, w, points);
            match name {
                "max_over_time" => {
                    f(fl.iter().fold(
                        fl[0].1,
                        |m, &(_, v)| if v > m || m.is_nan() { v } else { m },
                    ))
                }
                "min_over_time" => {
                    f(fl.iter().fold(
                        fl[0].1,
                        |m, &(_, v)| if v < m || m.is_nan() { v } else { m },
                    ))
                }
                "stddev_over_time" => f(variance(&fl).sqrt()),
                "stdvar_over_time" => f(variance(&fl)),
                "mad_over_time" => {
                    let values: Vec<f64> = fl.iter().map(|p| p.1).collect();
                    let median = quantile(0.5, values.clone());
                    f(quantile(
                        0.5,
                        values.iter().map(|v| (v - median).abs()).collect(),
                    ))
                }
                _ => {
                    let q = w.args[0];
                    if q.is_nan() || !(0.0..=1.0).contains(&q) {
                        ev.annotate(Annotation::InvalidQuantile(q));
                    }
                    f(quantile(q, fl.iter().map(|p| p.1).collect()))
                }
            }
        }
        "deriv" | "predict_linear" | "double_exponential_smoothing" => {
            if fl.len() < 2 {
                if fl.len() == 1 {
                    note_mixed_range(ev, w, points);
                }
                return Ok(None);
            }
            note_mixed_range(ev, w, points);
            match name {
                "deriv" => f(linear_regression(&fl, fl[0].0).0),
                "predict_linear" => {
                    let (slope, intercept) = linear_regression(&fl, w.ts);
                    f(slope * w.args[1] + intercept)
                }
                _ => {
                    let (sf, tf) = (w.args[1], w.args[2]);
                    if sf <= 0.0 || sf >= 1.0 {
                        return Err(Error::Execution(format!(
                            "invalid smoothing factor. Expected: 0 < sf < 1, got: {sf:.6}"
                        )));
                    }
                    if tf <= 0.0 || tf >= 1.0 {
                        return Err(Error::Execution(format!(
                            "invalid trend factor. Expected: 0 < tf < 1, got: {tf:.6}"
                        )));
                    }
                    f(double_exponential_smoothing(&fl, sf, tf))
                }
            }
        }
        "resets" | "changes" => {
            let mut count = 0;
            for pair in points.windows(2) {
                let (prev, cur) = (&pair[0].s, &pair[1].s);
                let counted = match (prev, cur) {
                    (Sample::Float(a), Sample::Float(b)) => {
                        if name == "resets" {
                            b < a
                        } else {
                            a != b && !(a.is_nan() && b.is_nan())
                        }
                    }
                    (Sample::Histogram(a), Sample::Histogram(b)) => {
                        if name == "resets" {
                            b.detect_reset(a)
                        } else {
                            a != b
                        }
                    }
                    _ => true,
                };
                if counted {
                    count += 1;
                }
            }
            f(count as f64)
        }
        other => Err(Error::BadData(format!(
            "function {other:?} is not supported over a range"
        ))),
    }
}

/// The mean of values as Prometheus computes it: a compensated sum, falling back to an
/// incremental mean once the sum overflows.
pub(crate) fn average(values: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut mean, mut count, mut c) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut incremental = false;
    for v in values {
        count += 1.0;
        if !incremental {
            let (ns, nc) = kahan_inc(v, sum, c);
            if count == 1.0 || !ns.is_infinite() {
                sum = ns;
                c = nc;
                continue;
            }
            incremental = true;
            mean = sum / (count - 1.0);
            c /= count - 1.0;
        }
        if mean.is_infinite() {
            if v.is_infinite() && (mean > 0.0) == (v > 0.0) {
                continue;
            }
            if !v.is_infinite() && !v.is_nan() {
                continue;
            }
        }
        let corrected = mean + c;
        (mean, c) = kahan_inc(v / count - corrected / count, mean, c);
    }
    if incremental {
        mean + c
    } else {
        (sum + c) / count
    }
}

fn variance(fl: &[(i64, f64)]) -> f64 {
    let (mut count, mut mean, mut c_mean, mut aux, mut c_aux) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(_, v) in fl {
        count += 1.0;
        let delta = v - (mean + c_mean);
        (mean, c_mean) = kahan_inc(delta / count, mean, c_mean);
        (aux, c_aux) = kahan_inc(delta * (v - (mean + c_mean)), aux, c_aux);
    }
    (aux + c_aux) / count
}

fn linear_regression(samples: &[(i64, f64)], intercept_time: i64) -> (f64, f64) {
    let (mut n, mut sum_x, mut cx, mut sum_y, mut cy, mut sum_xy, mut cxy, mut sum_x2, mut cx2) =
        (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    let init_y = samples[0].1;
    let mut const_y = true;
    for (i, &(t, v)) in samples.iter().enumerate() {
        if const_y && i > 0 && v != init_y {
            const_y = false;
        }
        n += 1.0;
        let x = (t - intercept_time) as f64 / 1e3;
        (sum_x, cx) = kahan_inc(x, sum_x, cx);
        (sum_y, cy) = kahan_inc(v, sum_y, cy);
        (sum_xy, cxy) = kahan_inc(x * v, sum_xy, cxy);
        (sum_x2, cx2) = kahan_inc(x * x, sum_x2, cx2);
    }
    if const_y {
        if init_y.is_infinite() {
            return (f64::NAN, f64::NAN);
        }
        return (0.0, init_y);
    }
    let (sum_x, sum_y, sum_xy, sum_x2) = (sum_x + cx, sum_y + cy, sum_xy + cxy, sum_x2 + cx2);
    let cov_xy = sum_xy - sum_x * sum_y / n;
    let var_x = sum_x2 - sum_x * sum_x / n;
    let slope = cov_xy / var_x;
    (slope, sum_y / n - slope * sum_x / n)
}

fn double_exponential_smoothing(fl: &[(i64, f64)], sf: f64, tf: f64) -> f64 {
    let trend = |i: usize, s0: f64, s1: f64, b: f64| {
        if i == 0 {
            b
        } else {
            tf * (s1 - s0) + (1.0 - tf) * b
        }
    };
    let (mut s0, mut s1) = (0.0, fl[0].1);
    let mut b = fl[1].1 - fl[0].1;
    for (i, &(_, v)) in fl.iter().enumerate().skip(1) {
        let x = sf * v;
        b = trend(i - 1, s0, s1, b);
        let y = (1.0 - sf) * (s1 + b);
        s0 = s1;
        s1 = x + y;
    }
    s1
}

/// `rate`, `increase` and `delta`: the change over the window, extrapolated to its edges
/// unless the first or last sample is further than 1.1 average intervals from them (then by
/// half an interval), and never below zero for a counter.
fn extrapolated_rate(
    ev: &Evaluator,
    points: &[Point],
    w: &Window,
    counter: bool,
    rate: bool,
) -> Result<Option<Sample>> {
    let fl = floats(points);
    let hist_count = points.len() - fl.len();
    if hist_count > 0 && !fl.is_empty() {
        ev.annotate(Annotation::MixedFloatsHistograms(Some(w.labels.name())));
        return Ok(None);
    }
    let (first_t, last_t, n_minus_one, mut result_f, mut result_h);
    if hist_count > 1 {
        let hs: Vec<&FloatHistogram> = points
            .iter()
            .filter_map(|p| p.s.histogram().map(|h| &**h))
            .collect();
        let h = crate::histogram::rate(ev, &hs, counter, w.labels.name());
        let Some(h) = h else {
            return Ok(None);
        };
        first_t = points[0].t;
        last_t = points[points.len() - 1].t;
        n_minus_one = points.len() - 1;
        result_f = 0.0;
        result_h = Some(h);
    } else if fl.len() > 1 {
        n_minus_one = fl.len() - 1;
        first_t = fl[0].0;
        last_t = fl[n_minus_one].0;
        result_f = fl[n_minus_one].1 - fl[0].1;
        if counter {
            let mut prev = fl[0].1;
            for &(_, v) in &fl[1..] {
                if v < prev {
                    result_f += prev;
                }
                prev = v;
            }
        }
        result_h = None;
    } else {
        return Ok(None);
    }
    let mut to_start = (first_t - w.start) as f64 / 1000.0;
    let mut to_end = (w.end - last_t) as f64 / 1000.0;
    let sampled = (last_t - first_t) as f64 / 1000.0;
    let average = sampled / n_minus_one as f64;
    let threshold = average * 1.1;
    let mut interval = sampled;
    if to_start >= threshold {
        to_start = average / 2.0;
    }
    if counter && result_f > 0.0 && !fl.is_empty() && fl[0].1 >= 0.0 {
        let to_zero = sampled * (fl[0].1 / result_f);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    interval += to_start;
    if to_end >= threshold {
        to_end = average / 2.0;
    }
    interval += to_end;
    let mut factor = interval / sampled;
    if rate {
        factor /= w.range as f64 / 1000.0;
    }
    Ok(Some(match result_h.take() {
        Some(h) => Sample::Histogram(std::sync::Arc::new(h.scaled(factor))),
        None => {
            result_f *= factor;
            Sample::Float(result_f)
        }
    }))
}

/// `irate` and `idelta`: from the window's last two samples. Of histograms, `irate` of a
/// gauge and `idelta` of a counter are answered with a warning.
fn instant_value(
    ev: &Evaluator,
    points: &[Point],
    w: &Window,
    rate: bool,
) -> Result<Option<Sample>> {
    if points.len() < 2 {
        return Ok(None);
    }
    let (a, b) = (&points[points.len() - 2], &points[points.len() - 1]);
    let interval = b.t - a.t;
    if interval == 0 {
        return Ok(None);
    }
    let name = w.labels.name();
    match (&a.s, &b.s) {
        (Sample::Float(x), Sample::Float(y)) => {
            let mut v = if rate && y < x { *y } else { y - x };
            if rate {
                v /= interval as f64 / 1000.0;
            }
            Ok(Some(Sample::Float(v)))
        }
        (Sample::Histogram(x), Sample::Histogram(y)) => {
            let gauge = |h: &FloatHistogram| h.counter_reset_hint == CounterResetHint::Gauge;
            if rate && (gauge(x) || gauge(y)) {
                ev.annotate(Annotation::NotCounter(name));
            }
            if !rate && (!gauge(x) || !gauge(y)) {
                ev.annotate(Annotation::NotGauge(name));
            }
            let mut h = if rate && y.detect_reset(x) {
                (**y).clone()
            } else {
                match y.sub(x) {
                    Ok(h) => h,
                    Err(kind) => {
                        ev.annotate(Annotation::IncompatibleHistograms(kind, name));
                        return Ok(None);
                    }
                }
            };
            h.counter_reset_hint = CounterResetHint::Gauge;
            if rate {
                h = h.divided(interval as f64 / 1000.0);
            }
            Ok(Some(Sample::Histogram(std::sync::Arc::new(h.compacted()))))
        }
        _ => {
            ev.annotate(Annotation::MixedFloatsHistograms(Some(name)));
            Ok(None)
        }
    }
}

/// `sum_over_time` and `avg_over_time` of histograms (the mean kept incrementally, as
/// Prometheus does, so that it does not overflow where the sum would).
fn histogram_over_time(
    ev: &Evaluator,
    w: &Window,
    name: &str,
    points: &[Point],
) -> Result<Option<Sample>> {
    let hs: Vec<&FloatHistogram> = points
        .iter()
        .filter_map(|p| p.s.histogram().map(|h| &**h))
        .collect();
    if hs.is_empty() {
        return Ok(None);
    }
    let mut acc = hs[0].clone();
    for (i, h) in hs.iter().enumerate().skip(1) {
        let next = if name == "avg_over_time" {
            acc.add_to_mean(h, i + 1)
        } else {
            acc.add(h)
        };
        match next {
            Ok(h) => acc = h,
            Err(kind) => {
                ev.annotate(Annotation::IncompatibleHistograms(kind, w.labels.name()));
                return Ok(None);
            }
        }
    }
    Ok(Some(Sample::Histogram(std::sync::Arc::new(
        acc.compacted(),
    ))))
}

/// `rate` and `increase` of a series whose name does not end as a counter's does: an info.
pub(crate) fn note_non_counter(ev: &Evaluator, labels: &Labels, produced: bool, _arg: &Expr) {
    let name = labels.name();
    if produced
        && !name.is_empty()
        && !["_total", "_sum", "_count", "_bucket"]
            .iter()
            .any(|s| name.ends_with(s))
    {
        ev.annotate(Annotation::PossibleNonCounter(name));
    }
}
