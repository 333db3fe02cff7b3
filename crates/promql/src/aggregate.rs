//! Aggregations (`sum`, `avg`, `count`, `min`, `max`, `group`, `stddev`, `stdvar`,
//! `quantile`, `topk`, `bottomk`, `limitk`, `count_values`) with `by` and `without`.

use std::collections::HashMap;
use std::sync::Arc;

use promql_parser::parser::{AggregateExpr, Expr, LabelModifier};

use crate::annotations::Annotation;
use crate::eval::{El, Evaluator, unparen};
use crate::functions::{average, kahan_inc, valid_label_name};
use crate::histogram::FloatHistogram;
use crate::labels::{Labels, METRIC_NAME};
use crate::quantile::quantile;
use crate::value::{Point, Sample, Series, format_float};
use crate::{Error, Result};

pub(crate) fn eval(ev: &Evaluator, a: &AggregateExpr) -> Result<Vec<Series>> {
    let op = a.op.to_string().to_lowercase();
    let (mut grouping, without) = match &a.modifier {
        Some(LabelModifier::Include(l)) => (l.labels.clone(), false),
        Some(LabelModifier::Exclude(l)) => (l.labels.clone(), true),
        None => (Vec::new(), false),
    };
    grouping.sort();
    if op == "count_values" {
        return count_values(ev, a, grouping, without);
    }
    let param = match &a.param {
        Some(p) if !matches!(unparen(p), Expr::StringLiteral(_)) => {
            ev.scalar_steps(p)?.first().copied().unwrap_or(f64::NAN)
        }
        _ => f64::NAN,
    };
    let input = ev.matrix(&a.expr)?;
    let key_of = |labels: &Labels| -> Vec<u8> {
        if !without && grouping.is_empty() {
            Vec::new()
        } else {
            labels.signature(&grouping, !without)
        }
    };
    let output_labels = |labels: &Labels| -> Labels {
        if without {
            let mut drop = grouping.clone();
            drop.push(METRIC_NAME.to_string());
            labels.without(&drop)
        } else if grouping.is_empty() {
            Labels::empty()
        } else {
            labels.keep(&grouping)
        }
    };
    // Each input series' group, and each group's output labels in order of first sight.
    let mut group_of = Vec::with_capacity(input.len());
    let mut groups: Vec<Labels> = Vec::new();
    // A group keeps its first series' pending name drop (`sum by (__name__) (rate(…))`
    // groups by a name that is then dropped, as in Prometheus).
    let mut group_drop: Vec<bool> = Vec::new();
    let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
    for s in &input {
        let key = key_of(&s.labels);
        let g = *index.entry(key).or_insert_with(|| {
            groups.push(output_labels(&s.labels));
            group_drop.push(s.drop_name);
            groups.len() - 1
        });
        group_of.push(g);
    }
    match op.as_str() {
        "topk" | "bottomk" | "limitk" => {
            if !param.is_nan()
                && !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&param)
            {
                return Err(Error::Execution(format!(
                    "Scalar value {} overflows int64",
                    format_float(param)
                )));
            }
            let k = if param.is_nan() {
                0
            } else {
                (param as i64).min(input.len() as i64)
            };
            if k < 1 {
                return Ok(Vec::new());
            }
            select_k(ev, &op, k as usize, &input, &group_of, groups.len())
        }
        "limit_ratio" => {
            if param.is_nan() {
                return Err(Error::Execution(format!(
                    "Ratio value {} is NaN",
                    format_float(param)
                )));
            }
            if param == 0.0 {
                return Ok(Vec::new());
            }
            let ratio = param.clamp(-1.0, 1.0);
            if ratio != param {
                ev.annotate(Annotation::InvalidRatio(param, ratio));
            }
            select_k(ev, &op, ratio_as_k(ratio), &input, &group_of, groups.len())
        }
        _ => {
            if op == "quantile" && (param.is_nan() || !(0.0..=1.0).contains(&param)) {
                ev.annotate(Annotation::InvalidQuantile(param));
            }
            let mut out: Vec<Series> = groups
                .iter()
                .zip(&group_drop)
                .map(|(l, d)| Series {
                    labels: l.clone(),
                    points: Vec::new(),
                    drop_name: *d,
                })
                .collect();
            let mut cursors = vec![0usize; input.len()];
            let mut members: Vec<Vec<&Sample>> = vec![Vec::new(); groups.len()];
            // The members' metric names, for annotations.
            let mut names: Vec<Vec<&str>> = vec![Vec::new(); groups.len()];
            for ts in ev.steps() {
                ev.check_time()?;
                for m in members.iter_mut() {
                    m.clear();
                }
                for n in names.iter_mut() {
                    n.clear();
                }
                for (i, s) in input.iter().enumerate() {
                    let c = &mut cursors[i];
                    while *c < s.points.len() && s.points[*c].t < ts {
                        *c += 1;
                    }
                    if let Some(p) = s.points.get(*c)
                        && p.t == ts
                    {
                        members[group_of[i]].push(&p.s);
                        names[group_of[i]].push(s.labels.name());
                    }
                }
                for (g, m) in members.iter().enumerate() {
                    if m.is_empty() {
                        continue;
                    }
                    if let Some(sample) = aggregate(ev, &op, param, m, &names[g])? {
                        out[g].points.push(Point { t: ts, s: sample });
                    }
                }
            }
            out.retain(|s| !s.points.is_empty());
            Ok(out)
        }
    }
}

fn ignored(ev: &Evaluator, op: &str) {
    ev.annotate(Annotation::HistogramIgnoredInAggregation(op));
}

/// One group's aggregate at one step.
fn aggregate(
    ev: &Evaluator,
    op: &str,
    param: f64,
    samples: &[&Sample],
    names: &[&str],
) -> Result<Option<Sample>> {
    let floats: Vec<f64> = samples.iter().filter_map(|s| s.float()).collect();
    let hists: Vec<(&Arc<FloatHistogram>, &str)> = samples
        .iter()
        .zip(names)
        .filter_map(|(s, n)| s.histogram().map(|h| (h, *n)))
        .collect();
    let f = |v: f64| Ok(Some(Sample::Float(v)));
    match op {
        "count" => f(samples.len() as f64),
        "group" => f(1.0),
        "sum" | "avg" => {
            if !floats.is_empty() && !hists.is_empty() {
                ev.annotate(Annotation::MixedFloatsHistograms(None));
                return Ok(None);
            }
            if !hists.is_empty() {
                let mut acc = (**hists[0].0).clone();
                for (i, (h, name)) in hists.iter().enumerate().skip(1) {
                    let next = if op == "avg" {
                        acc.add_to_mean(h, i + 1)
                    } else {
                        acc.add(h)
                    };
                    match next {
                        Ok(s) => acc = s,
                        Err(kind) => {
                            ev.annotate(Annotation::IncompatibleHistograms(kind, name));
                            return Ok(None);
                        }
                    }
                }
                return Ok(Some(Sample::Histogram(Arc::new(acc.compacted()))));
            }
            if op == "sum" {
                let (mut sum, mut c) = (0.0, 0.0);
                for v in &floats {
                    (sum, c) = kahan_inc(*v, sum, c);
                }
                f(sum + c)
            } else {
                f(average(floats.iter().copied()))
            }
        }
        "min" | "max" | "stddev" | "stdvar" | "quantile" => {
            if !hists.is_empty() {
                ignored(ev, op);
            }
            if floats.is_empty() {
                return Ok(None);
            }
            match op {
                "max" => f(floats
                    .iter()
                    .skip(1)
                    .fold(floats[0], |m, &v| if m < v || m.is_nan() { v } else { m })),
                "min" => f(floats
                    .iter()
                    .skip(1)
                    .fold(floats[0], |m, &v| if m > v || m.is_nan() { v } else { m })),
                "quantile" => f(quantile(param, floats)),
                _ => {
                    let first = floats[0];
                    let (mut value, mut mean, mut count) = (
                        if first.is_nan() || first.is_infinite() {
                            f64::NAN
                        } else {
                            0.0
                        },
                        first,
                        1.0,
                    );
                    for &v in &floats[1..] {
                        count += 1.0;
                        let delta = v - mean;
                        mean += delta / count;
                        value += delta * (v - mean);
                    }
                    let var = value / count;
                    f(if op == "stddev" { var.sqrt() } else { var })
                }
            }
        }
        other => Err(Error::BadData(format!(
            "aggregation {other:?} is not supported"
        ))),
    }
}

/// `topk`, `bottomk` and `limitk`: the chosen input series themselves, at each step.
fn select_k(
    ev: &Evaluator,
    op: &str,
    k: usize,
    input: &[Series],
    group_of: &[usize],
    groups: usize,
) -> Result<Vec<Series>> {
    let mut cursors = vec![0usize; input.len()];
    let mut out: Vec<Series> = Vec::new();
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let instant = ev.start == ev.end;
    for ts in ev.steps() {
        ev.check_time()?;
        let mut members: Vec<Vec<(usize, &Sample)>> = vec![Vec::new(); groups];
        for (i, s) in input.iter().enumerate() {
            let c = &mut cursors[i];
            while *c < s.points.len() && s.points[*c].t < ts {
                *c += 1;
            }
            if let Some(p) = s.points.get(*c)
                && p.t == ts
            {
                members[group_of[i]].push((i, &p.s));
            }
        }
        for m in members {
            let chosen: Vec<(usize, &Sample)> = if op == "limitk" {
                m.into_iter().take(k).collect()
            } else if op == "limit_ratio" {
                let ratio = k_as_ratio(k);
                m.into_iter()
                    .filter(|(i, _)| in_ratio(ratio, &input[*i].labels))
                    .collect()
            } else {
                let mut fl: Vec<(usize, f64, &Sample)> = Vec::new();
                for (i, s) in m {
                    match s.float() {
                        Some(v) => fl.push((i, v, s)),
                        None => ignored(ev, op),
                    }
                }
                let top = op == "topk";
                // Largest (smallest) first, NaN last; the earlier series wins a tie.
                fl.sort_by(|a, b| match (a.1.is_nan(), b.1.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ => {
                        if top {
                            b.1.total_cmp(&a.1)
                        } else {
                            a.1.total_cmp(&b.1)
                        }
                    }
                });
                fl.into_iter().take(k).map(|(i, _, s)| (i, s)).collect()
            };
            for (i, s) in chosen {
                let labels = &input[i].labels;
                let point = Point {
                    t: ts,
                    s: s.clone(),
                };
                if instant {
                    out.push(Series {
                        labels: labels.clone(),
                        points: vec![point],
                        drop_name: input[i].drop_name,
                    });
                    continue;
                }
                match index.get(labels) {
                    Some(&j) => out[j].points.push(point),
                    None => {
                        index.insert(labels.clone(), out.len());
                        out.push(Series {
                            labels: labels.clone(),
                            points: vec![point],
                            drop_name: input[i].drop_name,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

// limit_ratio passes its ratio through select_k's `k` (as the bits of the float).
fn ratio_as_k(ratio: f64) -> usize {
    ratio.to_bits() as usize
}

fn k_as_ratio(k: usize) -> f64 {
    f64::from_bits(k as u64)
}

/// Whether `limit_ratio(ratio, …)` keeps a series: its place in [0, 1) by Prometheus's hash of
/// its labels, below the ratio (or, for a negative ratio, at or above 1 + ratio).
fn in_ratio(ratio: f64, labels: &Labels) -> bool {
    let offset = labels.prometheus_hash() as f64 / u64::MAX as f64;
    (ratio >= 0.0 && offset < ratio) || (ratio < 0.0 && offset >= 1.0 + ratio)
}

/// `count_values(label, v)`: how many series have each value, the value as a label.
fn count_values(
    ev: &Evaluator,
    a: &AggregateExpr,
    mut grouping: Vec<String>,
    without: bool,
) -> Result<Vec<Series>> {
    let label = match a.param.as_deref().map(unparen) {
        Some(Expr::StringLiteral(s)) => s.val.clone(),
        _ => return Err(Error::BadData("count_values needs a label name".into())),
    };
    if !valid_label_name(&label) {
        return Err(Error::Execution(format!("invalid label name {label:?}")));
    }
    if !without {
        grouping.push(label.clone());
        grouping.sort();
    }
    let input = ev.matrix(&a.expr)?;
    ev.range_eval(&[Some(&input)], |v, _| {
        let mut counts: Vec<(Labels, f64)> = Vec::new();
        let mut index: HashMap<Labels, usize> = HashMap::new();
        for el in &v[0] {
            let value = match &el.s {
                Sample::Float(f) => format_float(*f),
                Sample::Histogram(h) => h.to_string(),
            };
            let labels = el.labels.with(&label, &value);
            let out = if without {
                let mut drop = grouping.clone();
                drop.push(METRIC_NAME.to_string());
                labels.without(&drop)
            } else {
                labels.keep(&grouping)
            };
            match index.get(&out) {
                Some(&i) => counts[i].1 += 1.0,
                None => {
                    index.insert(out.clone(), counts.len());
                    counts.push((out, 1.0));
                }
            }
        }
        Ok(counts
            .into_iter()
            .map(|(l, c)| El::float(l, c, false))
            .collect())
    })
}
