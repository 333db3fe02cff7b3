//! Prometheus's PromQL test scripts (`promql/promqltest/testdata/*.test` in the Prometheus
//! module): `load` series, `clear`, and `eval` instant or range queries with their expected
//! results. Parsed here so that Floe's evaluator (in memory, in `tests/promqltest.rs`) and
//! Floe's HTTP API (through a live server) are both judged by them.

use std::collections::HashMap;

use crate::histogram::{CounterResetHint, FloatHistogram};
use crate::labels::Labels;
use crate::quantile::almost_equal;
use crate::value::{Point, QueryValue, Sample, Series, stale_nan};
use crate::{Matcher, Result, Storage};

/// One value of a series description: absent (`_`), or a sample.
pub type SeqValue = Option<Sample>;

#[derive(Debug)]
pub enum Command {
    Clear,
    Load {
        interval_ms: i64,
        series: Vec<(Labels, Vec<SeqValue>)>,
        with_nhcb: bool,
    },
    Eval(Eval),
}

#[derive(Debug, Default)]
pub struct Eval {
    /// The script line (1-based) of the `eval`.
    pub line: usize,
    pub expr: String,
    pub start: i64,
    pub end: i64,
    pub step: i64,
    pub range: bool,
    pub fail: bool,
    pub warn: bool,
    pub info: bool,
    pub ordered: bool,
    pub fail_message: Option<String>,
    pub fail_regexp: Option<String>,
    /// A scalar answer.
    pub scalar: Option<f64>,
    /// Series answers: labels and values at each step.
    pub expected: Vec<(Labels, Vec<SeqValue>)>,
}

/// Go's `model.ParseDuration`: `1h30m`, `5m`, `10s`, `100ms`, `1d`, `1w`, `1y`, or a number of
/// seconds.
pub fn parse_duration(s: &str) -> Option<i64> {
    if s.is_empty() {
        return None;
    }
    if let Ok(secs) = s.parse::<f64>() {
        return Some((secs * 1000.0).round() as i64);
    }
    let mut total = 0i64;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let ms = match unit {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "y" => 31_536_000_000,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(ms)?)?;
    }
    Some(total)
}

/// Parse a script.
pub fn parse(text: &str) -> std::result::Result<Vec<Command>, String> {
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let l = l.trim();
            if l.starts_with('#') {
                String::new()
            } else {
                l.to_string()
            }
        })
        .collect();
    let mut cmds = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = &lines[i];
        if l.is_empty() {
            i += 1;
            continue;
        }
        let word = l.split_whitespace().next().unwrap_or("").to_lowercase();
        if word == "clear" {
            cmds.push(Command::Clear);
            i += 1;
        } else if word.starts_with("load") {
            let interval = l
                .split_whitespace()
                .nth(1)
                .and_then(parse_duration)
                .ok_or(format!("line {}: bad load", i + 1))?;
            let mut series = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].is_empty() {
                series.push(parse_series(&lines[i]).map_err(|e| format!("line {}: {e}", i + 1))?);
                i += 1;
            }
            cmds.push(Command::Load {
                interval_ms: interval,
                series,
                with_nhcb: word == "load_with_nhcb",
            });
        } else if word.starts_with("eval") {
            let mut ev = parse_eval_line(l).map_err(|e| format!("line {}: {e}", i + 1))?;
            ev.line = i + 1;
            i += 1;
            while i < lines.len() && !lines[i].is_empty() {
                let d = &lines[i];
                i += 1;
                if ev.fail && d.starts_with("expected_fail_message") {
                    ev.fail_message = Some(d["expected_fail_message".len()..].trim().to_string());
                    break;
                }
                if ev.fail && d.starts_with("expected_fail_regexp") {
                    ev.fail_regexp = Some(d["expected_fail_regexp".len()..].trim().to_string());
                    break;
                }
                if let Some(f) = parse_number(d) {
                    ev.scalar = Some(f);
                    break;
                }
                ev.expected
                    .push(parse_series(d).map_err(|e| format!("line {}: {e}", i))?);
            }
            cmds.push(Command::Eval(ev));
        } else {
            return Err(format!("line {}: unknown command {l:?}", i + 1));
        }
    }
    Ok(cmds)
}

fn parse_eval_line(l: &str) -> std::result::Result<Eval, String> {
    let (head, rest) = l.split_once(char::is_whitespace).ok_or("bad eval")?;
    let mut ev = Eval::default();
    match head {
        "eval" => {}
        "eval_fail" => ev.fail = true,
        "eval_warn" => ev.warn = true,
        "eval_info" => ev.info = true,
        "eval_ordered" => ev.ordered = true,
        other => return Err(format!("unknown eval {other}")),
    }
    let rest = rest.trim_start();
    if let Some(r) = rest.strip_prefix("instant") {
        let r = r.trim_start();
        let r = r
            .strip_prefix("at")
            .ok_or("instant without at")?
            .trim_start();
        let (at, expr) = r.split_once(char::is_whitespace).ok_or("bad instant")?;
        ev.start = parse_duration(at).ok_or("bad time")?;
        ev.end = ev.start;
        ev.step = 1;
        ev.expr = expr.trim().to_string();
    } else if let Some(r) = rest.strip_prefix("range") {
        let words: Vec<&str> = r.split_whitespace().collect();
        if words.len() < 7 || words[0] != "from" || words[2] != "to" || words[4] != "step" {
            return Err("bad range".into());
        }
        ev.range = true;
        ev.start = parse_duration(words[1]).ok_or("bad from")?;
        ev.end = parse_duration(words[3]).ok_or("bad to")?;
        ev.step = parse_duration(words[5]).ok_or("bad step")?;
        // The expression is everything after the step's value, spaces as written.
        let mut rest = r;
        for w in &words[..6] {
            let at = rest.find(w).unwrap_or(0) + w.len();
            rest = &rest[at..];
        }
        ev.expr = rest.trim().to_string();
    } else {
        return Err("eval neither instant nor range".into());
    }
    Ok(ev)
}

/// A plain number line (a scalar's expected value).
fn parse_number(s: &str) -> Option<f64> {
    if s.contains(char::is_whitespace) || s.contains('{') {
        return None;
    }
    parse_value(s)
}

fn parse_value(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    match lower.trim_start_matches(['+', '-']) {
        "inf" => {
            return Some(if s.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            });
        }
        "nan" => return Some(f64::NAN),
        _ => {}
    }
    if let Some(hex) = lower.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok().map(|v| v as f64);
    }
    s.parse::<f64>().ok()
}

/// `metric{a="b"} 1+2x3 _ stale {{schema:0 count:1}}`.
pub fn parse_series(line: &str) -> std::result::Result<(Labels, Vec<SeqValue>), String> {
    let (desc, values) = split_descriptor(line)?;
    let labels = parse_labels(desc)?;
    Ok((labels, parse_values(values)?))
}

fn split_descriptor(line: &str) -> std::result::Result<(&str, &str), String> {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() && !bytes[i].is_ascii_whitespace() && bytes[i] != b'{' {
        i += 1;
    }
    if i < bytes.len() && bytes[i] == b'{' {
        let mut in_quote = false;
        let mut escaped = false;
        i += 1;
        while i < bytes.len() {
            let c = bytes[i];
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_quote = !in_quote;
            } else if c == b'}' && !in_quote {
                i += 1;
                break;
            }
            i += 1;
        }
    }
    Ok((&line[..i], line[i..].trim()))
}

fn parse_labels(desc: &str) -> std::result::Result<Labels, String> {
    if let Some(name) = desc.strip_suffix("{}") {
        // The parser refuses an empty selector; as a label set it is fine.
        let pairs = if name.is_empty() {
            Vec::new()
        } else {
            vec![(crate::labels::METRIC_NAME.to_string(), name.to_string())]
        };
        return Ok(Labels::new(pairs));
    }
    let expr = promql_parser::parser::parse(desc).map_err(|e| format!("series {desc:?}: {e}"))?;
    let promql_parser::parser::Expr::VectorSelector(vs) = expr else {
        return Err(format!("series {desc:?} is not a selector"));
    };
    let mut pairs: Vec<(String, String)> = vs
        .matchers
        .matchers
        .iter()
        .map(|m| (m.name.clone(), m.value.clone()))
        .collect();
    if let Some(name) = vs.name
        && !pairs.iter().any(|(n, _)| n == crate::labels::METRIC_NAME)
    {
        pairs.push((crate::labels::METRIC_NAME.to_string(), name));
    }
    Ok(Labels::new(pairs))
}

fn parse_values(s: &str) -> std::result::Result<Vec<SeqValue>, String> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        if rest.starts_with("{{") {
            let end = rest.find("}}").ok_or("unclosed histogram")? + 2;
            let first = parse_histogram(&rest[2..end - 2])?;
            rest = rest[end..].trim_start();
            // {{a}}+{{b}}xN, {{a}}-{{b}}xN, {{a}}xN
            if let Some(r) = rest.strip_prefix('x') {
                let n_len = r.bytes().take_while(|b| b.is_ascii_digit()).count();
                let n: usize = r[..n_len].parse().map_err(|_| "bad repeat")?;
                for _ in 0..=n {
                    out.push(Some(Sample::Histogram(std::sync::Arc::new(first.clone()))));
                }
                rest = r[n_len..].trim_start();
            } else if (rest.starts_with("+{{") || rest.starts_with("-{{")) && rest.len() > 3 {
                let sign = if rest.starts_with('+') { 1.0 } else { -1.0 };
                let end = rest.find("}}").ok_or("unclosed histogram")? + 2;
                let inc = parse_histogram(&rest[3..end - 2])?;
                let r = rest[end..]
                    .strip_prefix('x')
                    .ok_or("histogram series without x")?;
                let n_len = r.bytes().take_while(|b| b.is_ascii_digit()).count();
                let n: usize = r[..n_len].parse().map_err(|_| "bad repeat")?;
                let mut cur = first.clone();
                for _ in 0..=n {
                    out.push(Some(Sample::Histogram(std::sync::Arc::new(cur.clone()))));
                    cur = step_histogram(&cur, &inc, sign);
                }
                rest = r[n_len..].trim_start();
            } else {
                out.push(Some(Sample::Histogram(std::sync::Arc::new(first))));
            }
            continue;
        }
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let item = &rest[..end];
        rest = rest[end..].trim_start();
        parse_item(item, &mut out)?;
    }
    Ok(out)
}

fn parse_item(item: &str, out: &mut Vec<SeqValue>) -> std::result::Result<(), String> {
    if item == "_" {
        out.push(None);
        return Ok(());
    }
    if let Some(n) = item.strip_prefix("_x") {
        let n: usize = n.parse().map_err(|_| format!("bad item {item}"))?;
        out.extend(std::iter::repeat_n(None, n));
        return Ok(());
    }
    if item == "stale" {
        out.push(Some(Sample::Float(stale_nan())));
        return Ok(());
    }
    // a, axN, a+bxN, a-bxN
    let (head, times) = match item.rfind('x') {
        Some(p) if item[p + 1..].bytes().all(|b| b.is_ascii_digit()) && p + 1 < item.len() => (
            &item[..p],
            Some(
                item[p + 1..]
                    .parse::<usize>()
                    .map_err(|_| format!("bad item {item}"))?,
            ),
        ),
        _ => (item, None),
    };
    let Some(n) = times else {
        out.push(Some(Sample::Float(
            parse_value(head).ok_or(format!("bad value {item}"))?,
        )));
        return Ok(());
    };
    // Split a+b / a-b at a sign that is not the first character nor follows an exponent.
    let bytes = head.as_bytes();
    let split = (1..bytes.len())
        .rev()
        .find(|&i| (bytes[i] == b'+' || bytes[i] == b'-') && !matches!(bytes[i - 1], b'e' | b'E'));
    let (start, inc) = match split {
        Some(p) => (
            parse_value(&head[..p]).ok_or(format!("bad value {item}"))?,
            parse_value(&head[p..]).ok_or(format!("bad increment {item}"))?,
        ),
        None => {
            if head == "stale" {
                out.extend(std::iter::repeat_n(Some(Sample::Float(stale_nan())), n + 1));
                return Ok(());
            }
            (parse_value(head).ok_or(format!("bad value {item}"))?, 0.0)
        }
    };
    let mut v = start;
    for _ in 0..=n {
        out.push(Some(Sample::Float(v)));
        v += inc;
    }
    Ok(())
}

fn step_histogram(h: &FloatHistogram, inc: &FloatHistogram, sign: f64) -> FloatHistogram {
    let mut next = if sign > 0.0 { h.add(inc) } else { h.sub(inc) }.unwrap_or_else(|_| h.clone());
    next.counter_reset_hint = h.counter_reset_hint;
    next.schema = h.schema;
    next
}

/// `schema:0 sum:5 count:4 z_bucket:1 z_bucket_w:0.001 buckets:[1 2 1] offset:1
/// n_buckets:[..] n_offset:.. counter_reset_hint:gauge custom_values:[..]`.
pub(crate) fn parse_histogram(s: &str) -> std::result::Result<FloatHistogram, String> {
    let mut h = FloatHistogram::default();
    let (mut buckets, mut n_buckets) = (Vec::new(), Vec::new());
    let (mut offset, mut n_offset) = (0i32, 0i32);
    let mut rest = s.trim();
    while !rest.is_empty() {
        let colon = rest.find(':').ok_or(format!("bad histogram {s}"))?;
        let key = rest[..colon].trim();
        rest = rest[colon + 1..].trim_start();
        let value;
        if rest.starts_with('[') {
            let end = rest.find(']').ok_or("unclosed list")?;
            value = &rest[1..end];
            rest = rest[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            value = &rest[..end];
            rest = rest[end..].trim_start();
        }
        let list = || -> std::result::Result<Vec<f64>, String> {
            value
                .split_whitespace()
                .map(|v| parse_value(v).ok_or(format!("bad number {v}")))
                .collect()
        };
        let num = || parse_value(value).ok_or(format!("bad number {value}"));
        match key {
            "schema" => h.schema = num()? as i32,
            "sum" => h.sum = num()?,
            "count" => h.count = num()?,
            "z_bucket" => h.zero_count = num()?,
            "z_bucket_w" => h.zero_threshold = num()?,
            "buckets" => buckets = list()?,
            "n_buckets" => n_buckets = list()?,
            "offset" => offset = num()? as i32,
            "n_offset" => n_offset = num()? as i32,
            "custom_values" => h.custom_values = list()?,
            "counter_reset_hint" => {
                h.counter_reset_hint = match value {
                    "gauge" => CounterResetHint::Gauge,
                    "reset" => CounterResetHint::CounterReset,
                    "not_reset" => CounterResetHint::NotCounterReset,
                    _ => CounterResetHint::Unknown,
                }
            }
            other => return Err(format!("unknown histogram field {other}")),
        }
    }
    // The test notation's buckets start at index `offset` (Prometheus's bucket numbering).
    h.positive = buckets
        .into_iter()
        .enumerate()
        .map(|(i, c)| (offset + i as i32, c))
        .collect();
    h.negative = n_buckets
        .into_iter()
        .enumerate()
        .map(|(i, c)| (n_offset + i as i32, c))
        .collect();
    if h.uses_custom_buckets() {
        // Custom buckets are numbered from 0.
    }
    Ok(h)
}

/// Series in memory, for the scripts and for tests.
#[derive(Default)]
pub struct MemStorage {
    pub series: HashMap<Labels, Vec<Point>>,
}

impl MemStorage {
    pub fn add(&mut self, labels: Labels, points: impl IntoIterator<Item = Point>) {
        let entry = self.series.entry(labels).or_default();
        entry.extend(points);
        entry.sort_by_key(|p| p.t);
        entry.dedup_by_key(|p| p.t);
    }
}

#[async_trait::async_trait]
impl Storage for MemStorage {
    async fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<Series>> {
        let mut out: Vec<Series> = self
            .series
            .iter()
            .filter(|(labels, _)| matchers.iter().all(|m| m.matches_labels(labels)))
            .map(|(labels, points)| Series {
                labels: labels.clone(),
                points: points
                    .iter()
                    .filter(|p| p.t >= mint && p.t <= maxt)
                    .cloned()
                    .collect(),
                drop_name: false,
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }
}

/// The points a `load` writes, series by series (a series described twice keeps its last
/// description; `load_with_nhcb` adds each classic histogram as one of custom buckets).
pub fn load_points(
    interval_ms: i64,
    series: &[(Labels, Vec<SeqValue>)],
    with_nhcb: bool,
) -> Vec<(Labels, Vec<Point>)> {
    let mut defs: HashMap<Labels, Vec<Point>> = HashMap::new();
    for (labels, values) in series {
        let points = values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                v.clone().map(|s| Point {
                    t: i as i64 * interval_ms,
                    s,
                })
            })
            .collect();
        defs.insert(labels.clone(), points);
    }
    let mut out = if with_nhcb {
        custom_bucket_histograms(&defs)
    } else {
        Vec::new()
    };
    out.extend(defs);
    out
}

/// Load a script's series into memory storage.
pub fn load(
    storage: &mut MemStorage,
    interval_ms: i64,
    series: &[(Labels, Vec<SeqValue>)],
    with_nhcb: bool,
) {
    for (labels, points) in load_points(interval_ms, series, with_nhcb) {
        storage.add(labels, points);
    }
}

/// Whether an `eval` passed, as Prometheus's runner judges it: its answer (with the
/// warnings and infos it carried) or its error against what the script expects. None when
/// it passed, else why not.
pub fn judge(
    ev: &Eval,
    outcome: std::result::Result<(&QueryValue, &[String]), String>,
) -> Option<String> {
    match (outcome, ev.fail) {
        (Err(e), true) => match (&ev.fail_message, &ev.fail_regexp) {
            (Some(m), _) if *m != e => Some(format!("expected error {m:?}, got {e}")),
            (_, Some(r))
                if !regex::Regex::new(r)
                    .map(|r| r.is_match(&e))
                    .unwrap_or(false) =>
            {
                Some(format!("expected error matching {r:?}, got {e}"))
            }
            _ => None,
        },
        (Err(e), false) => Some(format!("error: {e}")),
        (Ok(_), true) => Some("expected an error".into()),
        (Ok((value, notes)), false) => {
            let warnings = notes
                .iter()
                .filter(|w| w.starts_with("PromQL warning"))
                .count();
            let infos = notes
                .iter()
                .filter(|w| w.starts_with("PromQL info"))
                .count();
            if !ev.ordered && ev.warn != (warnings > 0) {
                Some(format!("warnings {notes:?} (expected: {})", ev.warn))
            } else if !ev.ordered && !ev.warn && ev.info != (infos > 0) {
                Some(format!("infos {notes:?} (expected: {})", ev.info))
            } else {
                compare(ev, value)
            }
        }
    }
}

/// `load_with_nhcb`: classic histograms (`_bucket` with `le`, `_sum`, `_count`) also loaded as
/// native histograms of custom buckets under the family's name.
fn custom_bucket_histograms(defs: &HashMap<Labels, Vec<Point>>) -> Vec<(Labels, Vec<Point>)> {
    #[derive(Default)]
    struct Temp {
        buckets: Vec<(f64, f64)>,
        count: Option<f64>,
        sum: f64,
    }
    let mut families: HashMap<Labels, std::collections::BTreeMap<i64, Temp>> = HashMap::new();
    for (labels, points) in defs {
        let name = labels.name();
        let (base, kind) = if let Some(b) = name.strip_suffix("_bucket") {
            (b, 0)
        } else if let Some(b) = name.strip_suffix("_sum") {
            (b, 1)
        } else if let Some(b) = name.strip_suffix("_count") {
            (b, 2)
        } else {
            continue;
        };
        let le = if kind == 0 {
            match crate::functions::parse_go_float(labels.get("le")) {
                Some(le) if !le.is_nan() => Some(le),
                _ => continue,
            }
        } else {
            None
        };
        let family = labels
            .with(crate::labels::METRIC_NAME, base)
            .without(&["le".to_string()]);
        let by_time = families.entry(family).or_default();
        for p in points {
            let Some(f) = p.s.float() else { continue };
            let t = by_time.entry(p.t).or_default();
            match (kind, le) {
                (0, Some(le)) => {
                    let at = t.buckets.partition_point(|b| b.0 < le);
                    t.buckets.insert(at, (le, f));
                }
                (1, _) => t.sum = f,
                _ => t.count = Some(f),
            }
        }
    }
    let mut out = Vec::new();
    for (labels, by_time) in families {
        let mut points = Vec::new();
        for (t, mut temp) in by_time {
            let count = temp
                .count
                .or(temp.buckets.last().map(|b| b.1))
                .unwrap_or(0.0);
            if temp.buckets.last().map(|b| b.0) != Some(f64::INFINITY) {
                temp.buckets.push((f64::INFINITY, count));
            }
            if temp.buckets.last().map(|b| b.1) != Some(count) {
                continue;
            }
            let mut h = FloatHistogram {
                schema: crate::histogram::CUSTOM_BUCKETS_SCHEMA,
                count,
                sum: temp.sum,
                ..Default::default()
            };
            let mut prev = 0.0;
            for (i, (le, c)) in temp.buckets.iter().enumerate() {
                h.positive.push((i as i32, c - prev));
                prev = *c;
                if le.is_finite() {
                    h.custom_values.push(*le);
                }
            }
            points.push(Point {
                t,
                s: Sample::Histogram(std::sync::Arc::new(h.compacted())),
            });
        }
        out.push((labels, points));
    }
    out
}

/// Compare an answer with what the script expects; None when they agree, else why not.
pub fn compare(ev: &Eval, value: &QueryValue) -> Option<String> {
    const EPS: f64 = 0.000001;
    let expected: HashMap<&Labels, &Vec<SeqValue>> =
        ev.expected.iter().map(|(l, v)| (l, v)).collect();
    let same = |a: &Sample, b: &Sample| match (a, b) {
        (Sample::Float(x), Sample::Float(y)) => almost_equal(*x, *y, EPS),
        (Sample::Histogram(x), Sample::Histogram(y)) => histograms_match(x, y),
        _ => false,
    };
    match value {
        QueryValue::Scalar { v, .. } => match ev.scalar {
            Some(want) if almost_equal(want, *v, EPS) => None,
            Some(want) => Some(format!("expected scalar {want} but got {v}")),
            None => Some(format!(
                "expected vector or matrix result, but got scalar {v}"
            )),
        },
        QueryValue::String { .. } => Some("unexpected string".into()),
        QueryValue::Vector(samples) => {
            if ev.scalar.is_some() {
                return Some("expected scalar result, but got vector".into());
            }
            for (pos, (labels, p)) in samples.iter().enumerate() {
                let Some(want) = expected.get(labels) else {
                    return Some(format!("unexpected metric {labels} in result"));
                };
                if ev.ordered && ev.expected.iter().position(|(l, _)| l == labels) != Some(pos) {
                    return Some(format!("metric {labels} at position {pos}"));
                }
                match want.first().cloned().flatten() {
                    Some(w) if same(&w, &p.s) => {}
                    w => return Some(format!("expected {w:?} for {labels} but got {:?}", p.s)),
                }
            }
            if samples.len() != expected.len() {
                return Some(format!(
                    "expected {} series, got {}",
                    expected.len(),
                    samples.len()
                ));
            }
            None
        }
        QueryValue::Matrix(series) => {
            if ev.scalar.is_some() {
                return Some("expected scalar result, but got matrix".into());
            }
            if ev.ordered {
                return Some("expected ordered result, but query returned a matrix".into());
            }
            for s in series {
                let Some(want) = expected.get(&s.labels) else {
                    return Some(format!("unexpected metric {} in result", s.labels));
                };
                let want: Vec<Point> = want
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| {
                        v.clone().map(|s| Point {
                            t: ev.start + i as i64 * ev.step,
                            s,
                        })
                    })
                    .collect();
                if want.len() != s.points.len() {
                    return Some(format!(
                        "expected {} points for {}, got {}",
                        want.len(),
                        s.labels,
                        s.points.len()
                    ));
                }
                for (w, g) in want.iter().zip(&s.points) {
                    if w.t != g.t || !same(&w.s, &g.s) {
                        return Some(format!(
                            "for {} expected {:?} at {}, got {:?} at {}",
                            s.labels, w.s, w.t, g.s, g.t
                        ));
                    }
                }
            }
            if series.len() != expected.len() {
                return Some(format!(
                    "expected {} series, got {}",
                    expected.len(),
                    series.len()
                ));
            }
            None
        }
    }
}

fn histograms_match(a: &FloatHistogram, b: &FloatHistogram) -> bool {
    const EPS: f64 = 0.000001;
    let (a, b) = (a.compacted(), b.compacted());
    let counts = |x: &[(i32, f64)], y: &[(i32, f64)]| {
        x.len() == y.len()
            && x.iter()
                .zip(y)
                .all(|(p, q)| p.0 == q.0 && almost_equal(p.1, q.1, EPS))
    };
    a.schema == b.schema
        && almost_equal(a.count, b.count, EPS)
        && almost_equal(a.sum, b.sum, EPS)
        && a.zero_threshold == b.zero_threshold
        && almost_equal(a.zero_count, b.zero_count, EPS)
        && a.custom_values == b.custom_values
        && counts(&a.positive, &b.positive)
        && counts(&a.negative, &b.negative)
}
