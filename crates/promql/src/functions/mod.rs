//! PromQL's functions: those of instant vectors, applied at each step (here), those of range
//! vectors ([`range`]) and those that change labels ([`labels`]); Prometheus's `functions.go`
//! is the reference for every formula.

mod labels;
mod range;

pub use labels::valid_label_name;
pub(crate) use labels::{absent_labels, label_join, label_replace, string_arg};
pub(crate) use range::{Window, average, kahan_inc, note_non_counter, over_range};

use chrono::{Datelike, TimeZone, Timelike, Utc};
use promql_parser::parser::Expr;

use crate::annotations::Annotation;
use crate::eval::{El, Evaluator};
use crate::labels::Labels;
use crate::quantile::bucket_quantile;
use crate::value::Sample;
use crate::{Error, Result};

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
        ev.annotate(Annotation::InvalidQuantile(q));
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
            ev.annotate(Annotation::BadBucketLabel(le, el.labels.name()));
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
            ev.annotate(Annotation::MixedClassicNativeHistograms(el.labels.name()));
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
            ev.annotate(Annotation::ForcedMonotonicity(labels.name()));
        }
        out.push(El {
            labels,
            s: Sample::Float(value),
            t: 0,
            drop_name: true,
        });
    }
    out
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
