//! PromQL's functions: those of instant vectors, applied at each step, and those of range
//! vectors, applied to each series' window at each step (`functions.go` in Prometheus is the
//! reference for every formula here).

use chrono::{Datelike, TimeZone, Timelike, Utc};
use promql_parser::parser::Expr;

use crate::eval::{El, Evaluator, Level, unparen};
use crate::labels::{Labels, METRIC_NAME};
use crate::quantile::{bucket_quantile, quantile};
use crate::value::{Point, Sample, Series};
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
        ev.note(
            Level::Info,
            format!(
                "PromQL info: ignored histograms in a range containing both floats and histograms for metric name {:?}",
                w.labels.name()
            ),
        );
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
        "irate" => instant_value(points, true),
        "idelta" => instant_value(points, false),
        "count_over_time" => f(points.len() as f64),
        "present_over_time" | "absent_over_time" => f(1.0),
        "last_over_time" => Ok(points.last().map(|p| p.s.clone())),
        "sum_over_time" | "avg_over_time" => {
            if !fl.is_empty() && has_histograms(points) {
                ev.note(
                    Level::Warning,
                    format!("PromQL warning: encountered a mix of histograms and floats for metric name {:?}", w.labels.name()),
                );
                return Ok(None);
            }
            if fl.is_empty() {
                return histogram_over_time(name, points);
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
                        ev.note(
                            Level::Warning,
                            format!(
                                "PromQL warning: quantile value should be between 0 and 1, got {q}"
                            ),
                        );
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
        ev.note(
            Level::Warning,
            format!(
                "PromQL warning: encountered a mix of histograms and floats for metric name {:?}",
                w.labels.name()
            ),
        );
        return Ok(None);
    }
    let (first_t, last_t, n_minus_one, mut result_f, mut result_h);
    if hist_count > 1 {
        let Some(h) = crate::histogram::rate(ev, points, counter, w.labels.name()) else {
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

/// `irate` and `idelta`: from the window's last two samples.
fn instant_value(points: &[Point], rate: bool) -> Result<Option<Sample>> {
    if points.len() < 2 {
        return Ok(None);
    }
    let (a, b) = (&points[points.len() - 2], &points[points.len() - 1]);
    let interval = b.t - a.t;
    if interval == 0 {
        return Ok(None);
    }
    match (&a.s, &b.s) {
        (Sample::Float(x), Sample::Float(y)) => {
            let mut v = if rate && y < x { *y } else { y - x };
            if rate {
                v /= interval as f64 / 1000.0;
            }
            Ok(Some(Sample::Float(v)))
        }
        (Sample::Histogram(x), Sample::Histogram(y)) => {
            let mut h = if rate && y.detect_reset(x) {
                (**y).clone()
            } else {
                y.sub(x).unwrap_or_else(|| (**y).clone())
            };
            h.counter_reset_hint = crate::histogram::CounterResetHint::Gauge;
            if rate {
                h = h.scaled(1000.0 / interval as f64);
            }
            Ok(Some(Sample::Histogram(std::sync::Arc::new(h.compacted()))))
        }
        _ => Ok(None),
    }
}

fn histogram_over_time(name: &str, points: &[Point]) -> Result<Option<Sample>> {
    let hs: Vec<&crate::histogram::FloatHistogram> = points
        .iter()
        .filter_map(|p| p.s.histogram().map(|h| &**h))
        .collect();
    if hs.is_empty() {
        return Ok(None);
    }
    let mut sum = hs[0].clone();
    for h in &hs[1..] {
        match sum.add(h) {
            Some(s) => sum = s,
            None => return Ok(None),
        }
    }
    if name == "avg_over_time" {
        sum = sum.scaled(1.0 / hs.len() as f64);
    }
    Ok(Some(Sample::Histogram(std::sync::Arc::new(
        sum.compacted(),
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
        ev.note(
            Level::Info,
            format!("PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: {name:?}"),
        );
    }
}

/// The labels `absent()` answers with: those its selector fixes with `=` (a label fixed twice
/// is left out), never the name.
pub(crate) fn absent_labels(arg: &Expr) -> Labels {
    let vs = match unparen(arg) {
        Expr::VectorSelector(vs) => vs,
        Expr::MatrixSelector(ms) => &ms.vs,
        _ => return Labels::empty(),
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut repeated: Vec<String> = Vec::new();
    for m in &vs.matchers.matchers {
        if m.name == METRIC_NAME {
            continue;
        }
        let seen = pairs.iter().any(|(n, _)| *n == m.name) || repeated.contains(&m.name);
        if matches!(m.op, promql_parser::label::MatchOp::Equal) && !seen {
            pairs.push((m.name.clone(), m.value.clone()));
        } else {
            repeated.push(m.name.clone());
        }
    }
    pairs.retain(|(n, _)| !repeated.contains(n));
    Labels::new(pairs)
}

fn string_arg(e: &Expr) -> Result<String> {
    match unparen(e) {
        Expr::StringLiteral(s) => Ok(s.val.clone()),
        _ => Err(Error::BadData("expected a string literal".into())),
    }
}

pub(crate) fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `label_replace(v, dst, replacement, src, regex)`.
pub(crate) fn label_replace(ev: &Evaluator, args: &[&Expr]) -> Result<Vec<Series>> {
    let (dst, repl, src, re) = (
        string_arg(args[1])?,
        string_arg(args[2])?,
        string_arg(args[3])?,
        string_arg(args[4])?,
    );
    let regex = regex::Regex::new(&format!("^(?s:{re})$")).map_err(|_| {
        Error::Execution(format!(
            "invalid regular expression in label_replace(): {re}"
        ))
    })?;
    if !valid_label_name(&dst) {
        return Err(Error::Execution(format!(
            "invalid destination label name in label_replace(): {dst}"
        )));
    }
    let mut m = ev.matrix(args[0])?;
    for s in &mut m {
        let value = s.labels.get(&src).to_string();
        if let Some(caps) = regex.captures(&value) {
            let mut out = String::new();
            caps.expand(&go_template(&repl), &mut out);
            s.labels = s.labels.with(&dst, &out);
            if dst == METRIC_NAME {
                s.drop_name = false;
            }
        }
    }
    check_unique(&m)?;
    Ok(m)
}

/// Go's `$1x` names group `1x`, as Rust's does; `${1}` is the same in both. Go ignores a
/// reference to a group that does not exist, as Rust does.
fn go_template(repl: &str) -> String {
    repl.to_string()
}

/// `label_join(v, dst, separator, src...)`.
pub(crate) fn label_join(ev: &Evaluator, args: &[&Expr]) -> Result<Vec<Series>> {
    let dst = string_arg(args[1])?;
    let sep = string_arg(args[2])?;
    let mut srcs = Vec::new();
    for a in &args[3..] {
        let src = string_arg(a)?;
        if !valid_label_name(&src) {
            return Err(Error::Execution(format!(
                "invalid source label name in label_join(): {src}"
            )));
        }
        srcs.push(src);
    }
    if !valid_label_name(&dst) {
        return Err(Error::Execution(format!(
            "invalid destination label name in label_join(): {dst}"
        )));
    }
    let mut m = ev.matrix(args[0])?;
    for s in &mut m {
        let joined: Vec<&str> = srcs.iter().map(|n| s.labels.get(n)).collect();
        let value = joined.join(&sep);
        s.labels = s.labels.with(&dst, &value);
        if dst == METRIC_NAME {
            s.drop_name = false;
        }
    }
    check_unique(&m)?;
    Ok(m)
}

fn check_unique(m: &[Series]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for s in m {
        if !seen.insert(&s.labels) {
            return Err(crate::eval::same_labelset());
        }
    }
    Ok(())
}

fn simple(v: &[El], f: impl Fn(f64) -> f64) -> Vec<El> {
    v.iter()
        .filter_map(|el| {
            el.s.float().map(|x| El {
                labels: el.labels.clone(),
                s: Sample::Float(f(x)),
                t: el.t,
                drop_name: true,
            })
        })
        .collect()
}

fn scalar_of(v: &[El]) -> f64 {
    v.first().and_then(|e| e.s.float()).unwrap_or(f64::NAN)
}

fn date(v: &[Vec<El>], ts: i64, f: impl Fn(chrono::DateTime<Utc>) -> f64) -> Vec<El> {
    let at = |secs: f64| Utc.timestamp_opt(secs as i64, 0).single();
    if v.is_empty() {
        return at(ts.div_euclid(1000) as f64)
            .map(|t| vec![El::float(Labels::empty(), f(t), false)])
            .unwrap_or_default();
    }
    v[0].iter()
        .filter_map(|el| {
            let x = el.s.float()?;
            let value = at(x).map(&f).unwrap_or(f64::NAN);
            Some(El {
                labels: el.labels.clone(),
                s: Sample::Float(value),
                t: el.t,
                drop_name: true,
            })
        })
        .collect()
}

/// A function of instant vectors and scalars, at one step.
pub(crate) fn instant(
    ev: &Evaluator,
    name: &str,
    v: &[Vec<El>],
    args: &[&Expr],
    ts: i64,
) -> Result<Vec<El>> {
    use std::f64::consts::PI;
    Ok(match name {
        "abs" => simple(&v[0], f64::abs),
        "ceil" => simple(&v[0], f64::ceil),
        "floor" => simple(&v[0], f64::floor),
        "exp" => simple(&v[0], f64::exp),
        "sqrt" => simple(&v[0], f64::sqrt),
        "ln" => simple(&v[0], f64::ln),
        "log2" => simple(&v[0], f64::log2),
        "log10" => simple(&v[0], f64::log10),
        "sin" => simple(&v[0], f64::sin),
        "cos" => simple(&v[0], f64::cos),
        "tan" => simple(&v[0], f64::tan),
        "asin" => simple(&v[0], f64::asin),
        "acos" => simple(&v[0], f64::acos),
        "atan" => simple(&v[0], f64::atan),
        "sinh" => simple(&v[0], f64::sinh),
        "cosh" => simple(&v[0], f64::cosh),
        "tanh" => simple(&v[0], f64::tanh),
        "asinh" => simple(&v[0], f64::asinh),
        "acosh" => simple(&v[0], f64::acosh),
        "atanh" => simple(&v[0], f64::atanh),
        "rad" => simple(&v[0], |x| x * PI / 180.0),
        "deg" => simple(&v[0], |x| x * 180.0 / PI),
        "sgn" => simple(&v[0], |x| {
            if x < 0.0 {
                -1.0
            } else if x > 0.0 {
                1.0
            } else {
                x
            }
        }),
        "round" => {
            let to = if v.len() > 1 { scalar_of(&v[1]) } else { 1.0 };
            let inverse = 1.0 / to;
            simple(&v[0], |x| (x * inverse + 0.5).floor() / inverse)
        }
        "clamp" | "clamp_min" | "clamp_max" => {
            let (lo, hi) = match name {
                "clamp" => (scalar_of(&v[1]), scalar_of(&v[2])),
                "clamp_min" => (scalar_of(&v[1]), f64::INFINITY),
                _ => (f64::NEG_INFINITY, scalar_of(&v[1])),
            };
            if hi < lo {
                return Ok(Vec::new());
            }
            simple(&v[0], |x| go_max(lo, go_min(hi, x)))
        }
        "pi" => vec![El::float(Labels::empty(), PI, false)],
        "time" => vec![El::float(Labels::empty(), ts as f64 / 1000.0, false)],
        "vector" => vec![El::float(Labels::empty(), scalar_of(&v[0]), false)],
        "scalar" => {
            let fl: Vec<f64> = v[0].iter().filter_map(|e| e.s.float()).collect();
            let value = if fl.len() == 1 { fl[0] } else { f64::NAN };
            vec![El::float(Labels::empty(), value, false)]
        }
        "timestamp" => v[0]
            .iter()
            .map(|el| El {
                labels: el.labels.clone(),
                s: Sample::Float(el.t as f64 / 1000.0),
                t: el.t,
                drop_name: true,
            })
            .collect(),
        "days_in_month" => date(v, ts, |t| {
            let (y, m) = (t.year(), t.month());
            let next = if m == 12 {
                Utc.with_ymd_and_hms(y + 1, 1, 1, 0, 0, 0)
            } else {
                Utc.with_ymd_and_hms(y, m + 1, 1, 0, 0, 0)
            };
            let this = Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0);
            match (next.single(), this.single()) {
                (Some(n), Some(t)) => (n - t).num_days() as f64,
                _ => f64::NAN,
            }
        }),
        "day_of_month" => date(v, ts, |t| t.day() as f64),
        "day_of_week" => date(v, ts, |t| t.weekday().num_days_from_sunday() as f64),
        "day_of_year" => date(v, ts, |t| t.ordinal() as f64),
        "hour" => date(v, ts, |t| t.hour() as f64),
        "minute" => date(v, ts, |t| t.minute() as f64),
        "month" => date(v, ts, |t| t.month() as f64),
        "year" => date(v, ts, |t| t.year() as f64),
        "sort" | "sort_desc" => {
            let mut out: Vec<El> = v[0]
                .iter()
                .filter(|e| e.s.float().is_some())
                .cloned()
                .collect();
            let desc = name == "sort_desc";
            // NaNs last either way, as Prometheus sorts them.
            out.sort_by(|a, b| {
                let (x, y) = (
                    a.s.float().unwrap_or(f64::NAN),
                    b.s.float().unwrap_or(f64::NAN),
                );
                match (x.is_nan(), y.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ => {
                        if desc {
                            y.total_cmp(&x)
                        } else {
                            x.total_cmp(&y)
                        }
                    }
                }
            });
            out
        }
        "sort_by_label" | "sort_by_label_desc" => {
            let names: Vec<String> = args[1..]
                .iter()
                .map(|a| string_arg(a))
                .collect::<Result<_>>()?;
            let mut out = v[0].clone();
            let desc = name == "sort_by_label_desc";
            out.sort_by(|a, b| {
                for n in &names {
                    let (x, y) = (a.labels.get(n), b.labels.get(n));
                    if x != y {
                        let o = natural_cmp(x, y);
                        return if desc { o.reverse() } else { o };
                    }
                }
                let o = a.labels.cmp(&b.labels);
                if desc { o.reverse() } else { o }
            });
            out
        }
        "histogram_quantile" => histogram_quantile(ev, scalar_of(&v[0]), &v[1]),
        "histogram_count" | "histogram_sum" | "histogram_avg" | "histogram_stddev"
        | "histogram_stdvar" => v[0]
            .iter()
            .filter_map(|el| {
                let h = el.s.histogram()?;
                let value = match name {
                    "histogram_count" => h.count,
                    "histogram_sum" => h.sum,
                    "histogram_avg" => h.sum / h.count,
                    "histogram_stddev" => h.variance().sqrt(),
                    _ => h.variance(),
                };
                Some(El {
                    labels: el.labels.clone(),
                    s: Sample::Float(value),
                    t: el.t,
                    drop_name: true,
                })
            })
            .collect(),
        "histogram_fraction" => {
            let (lo, hi) = (scalar_of(&v[0]), scalar_of(&v[1]));
            v[2].iter()
                .filter_map(|el| {
                    let h = el.s.histogram()?;
                    Some(El {
                        labels: el.labels.clone(),
                        s: Sample::Float(h.fraction(lo, hi)),
                        t: el.t,
                        drop_name: true,
                    })
                })
                .collect()
        }
        other => {
            return Err(Error::BadData(format!(
                "function {other:?} is not supported"
            )));
        }
    })
}

/// Go's `math.Min`/`math.Max`: NaN wins (Rust's `min`/`max` ignore it).
fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Go's natural sort order (`natsort.Compare`): digit runs compare by number.
fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, _) => return std::cmp::Ordering::Less,
            (_, None) => return std::cmp::Ordering::Greater,
            (Some(c), Some(d)) if c.is_ascii_digit() && d.is_ascii_digit() => {
                let i = x.iter().take_while(|c| c.is_ascii_digit()).count();
                let j = y.iter().take_while(|c| c.is_ascii_digit()).count();
                let (nx, ny) = (trim_zeros(&x[..i]), trim_zeros(&y[..j]));
                let o = nx.len().cmp(&ny.len()).then(nx.cmp(ny));
                if o != std::cmp::Ordering::Equal {
                    return o;
                }
                x = &x[i..];
                y = &y[j..];
            }
            (Some(c), Some(d)) => {
                if c != d {
                    return c.cmp(d);
                }
                x = &x[1..];
                y = &y[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|c| **c == b'0').count();
    &d[z.min(d.len().saturating_sub(1))..]
}

/// `histogram_quantile(q, v)`: classic buckets (series told apart by all but `le`) and native
/// histograms.
fn histogram_quantile(ev: &Evaluator, q: f64, v: &[El]) -> Vec<El> {
    if q.is_nan() || !(0.0..=1.0).contains(&q) {
        ev.note(
            Level::Warning,
            format!(
                "PromQL warning: quantile value should be between 0 and 1, got {}",
                go_g(q)
            ),
        );
    }
    let mut groups: Vec<(Labels, Vec<(f64, f64)>)> = Vec::new();
    let mut index: std::collections::HashMap<Labels, usize> = std::collections::HashMap::new();
    let mut natives: Vec<&El> = Vec::new();
    for el in v {
        let Some(f) = el.s.float() else {
            natives.push(el);
            continue;
        };
        let le = el.labels.get("le");
        let Some(upper) = parse_go_float(le) else {
            ev.note(
                Level::Warning,
                format!(
                    "PromQL warning: bucket label \"le\" is missing or has a malformed value of {:?} for metric name {:?}",
                    le,
                    el.labels.name()
                ),
            );
            continue;
        };
        let key = el.labels.without(&["le".to_string()]);
        let i = *index.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push((upper, f));
    }
    let mut out = Vec::new();
    for el in natives {
        let h = el.s.histogram().expect("only histograms are left");
        if let Some(&i) = index.get(&el.labels)
            && !groups[i].1.is_empty()
        {
            ev.note(
                Level::Warning,
                format!(
                    "PromQL warning: vector contains a mix of classic and native histograms for metric name {:?}",
                    el.labels.name()
                ),
            );
            groups[i].1.clear();
            continue;
        }
        out.push(El {
            labels: el.labels.clone(),
            s: Sample::Float(h.quantile(q)),
            t: el.t,
            drop_name: true,
        });
    }
    for (labels, buckets) in groups {
        if buckets.is_empty() {
            continue;
        }
        let (value, forced) = bucket_quantile(q, buckets);
        if forced {
            ev.note(
                Level::Info,
                format!(
                    "PromQL info: input to histogram_quantile needed to be fixed for monotonicity (see https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile) for metric name {:?}",
                    labels.name()
                ),
            );
        }
        out.push(El {
            labels,
            s: Sample::Float(value),
            t: ts_zero(),
            drop_name: true,
        });
    }
    out
}

fn ts_zero() -> i64 {
    0
}

/// Go's `strconv.ParseFloat` for a label value: decimals, exponents, `Inf`/`+Inf`/`-Inf`,
/// `NaN` in any case, hex floats are rare enough to leave out.
pub(crate) fn parse_go_float(s: &str) -> Option<f64> {
    let t = s.trim_start_matches(['+', '-']);
    let lower = t.to_ascii_lowercase();
    let negative = s.starts_with('-');
    if lower == "inf" || lower == "infinity" {
        return Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if lower == "nan" {
        return Some(f64::NAN);
    }
    if s.is_empty()
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-' | b'_'))
    {
        return None;
    }
    s.replace('_', "").parse().ok()
}

/// Go's `%g` for a float in a message.
pub(crate) fn go_g(f: f64) -> String {
    crate::value::format_float(f)
}
