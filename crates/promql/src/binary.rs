//! Binary operators: arithmetic, comparisons (filtering, or `bool`), `atan2`, and the set
//! operators, between scalars and vectors, with vector matching (`on`, `ignoring`,
//! `group_left`, `group_right`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use promql_parser::parser::value::ValueType;
use promql_parser::parser::{BinaryExpr, LabelModifier, VectorMatchCardinality};

use crate::annotations::Annotation;
use crate::eval::{El, Evaluator};
use crate::labels::{Labels, METRIC_NAME};
use crate::value::{Sample, Series};
use crate::{Error, Result};

/// How the two sides' series are matched.
struct Matching {
    card: Card,
    on: bool,
    names: Vec<String>,
    include: Vec<String>,
}

#[derive(PartialEq, Clone, Copy)]
enum Card {
    OneToOne,
    ManyToOne,
    OneToMany,
    ManyToMany,
}

fn matching(b: &BinaryExpr) -> Matching {
    let (card, include) = match b.modifier.as_ref().map(|m| &m.card) {
        Some(VectorMatchCardinality::ManyToOne(l)) => (Card::ManyToOne, l.labels.clone()),
        Some(VectorMatchCardinality::OneToMany(l)) => (Card::OneToMany, l.labels.clone()),
        Some(VectorMatchCardinality::ManyToMany) => (Card::ManyToMany, Vec::new()),
        _ => (Card::OneToOne, Vec::new()),
    };
    let (on, names) = match b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
        Some(LabelModifier::Include(l)) => (true, l.labels.clone()),
        Some(LabelModifier::Exclude(l)) => (false, l.labels.clone()),
        None => (false, Vec::new()),
    };
    let set_op = is_set_op(&b.op.to_string());
    Matching {
        card: if set_op { Card::ManyToMany } else { card },
        on,
        names,
        include,
    }
}

fn is_set_op(op: &str) -> bool {
    matches!(op, "and" | "or" | "unless")
}

fn is_comparison(op: &str) -> bool {
    matches!(op, "==" | "!=" | ">" | "<" | ">=" | "<=")
}

fn drops_name(op: &str) -> bool {
    matches!(op, "+" | "-" | "*" | "/" | "^" | "%" | "atan2")
}

pub(crate) fn eval(ev: &Evaluator, b: &BinaryExpr) -> Result<Vec<Series>> {
    let op = b.op.to_string().to_lowercase();
    let return_bool = b.modifier.as_ref().is_some_and(|m| m.return_bool);
    let (lt, rt) = (b.lhs.value_type(), b.rhs.value_type());
    let lhs = ev.matrix(&b.lhs)?;
    let rhs = ev.matrix(&b.rhs)?;
    let args = [Some(lhs.as_slice()), Some(rhs.as_slice())];
    match (lt == ValueType::Scalar, rt == ValueType::Scalar) {
        (true, true) => ev.range_eval(&args, |v, _| {
            let (l, r) = (scalar(&v[0]), scalar(&v[1]));
            Ok(vec![El::float(
                Labels::empty(),
                scalar_binop(&op, l, r)?,
                false,
            )])
        }),
        (false, true) => ev.range_eval(&args, |v, _| {
            vector_scalar(ev, &op, &v[0], scalar(&v[1]), false, return_bool)
        }),
        (true, false) => ev.range_eval(&args, |v, _| {
            vector_scalar(ev, &op, &v[1], scalar(&v[0]), true, return_bool)
        }),
        (false, false) => {
            let m = matching(b);
            ev.range_eval(&args, |v, _| match op.as_str() {
                "and" | "or" | "unless" => Ok(set_op(&op, &v[0], &v[1], &m)),
                _ => vector_binop(ev, &op, &v[0], &v[1], &m, return_bool),
            })
        }
    }
}

fn scalar(v: &[El]) -> f64 {
    v.first().and_then(|e| e.s.float()).unwrap_or(f64::NAN)
}

fn btos(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

fn scalar_binop(op: &str, l: f64, r: f64) -> Result<f64> {
    Ok(match op {
        "+" => l + r,
        "-" => l - r,
        "*" => l * r,
        "/" => l / r,
        "^" => l.powf(r),
        "%" => l % r,
        "atan2" => l.atan2(r),
        "==" => btos(l == r),
        "!=" => btos(l != r),
        ">" => btos(l > r),
        "<" => btos(l < r),
        ">=" => btos(l >= r),
        "<=" => btos(l <= r),
        other => {
            return Err(Error::BadData(format!(
                "operator {other:?} not allowed for Scalar operations"
            )));
        }
    })
}

/// One pair of values: the result and whether a comparison keeps it.
fn elem_binop(ev: &Evaluator, op: &str, l: &Sample, r: &Sample) -> Result<Option<(Sample, bool)>> {
    match (l, r) {
        (Sample::Float(l), Sample::Float(r)) => {
            let (l, r) = (*l, *r);
            Ok(Some(match op {
                "==" => (Sample::Float(l), l == r),
                "!=" => (Sample::Float(l), l != r),
                ">" => (Sample::Float(l), l > r),
                "<" => (Sample::Float(l), l < r),
                ">=" => (Sample::Float(l), l >= r),
                "<=" => (Sample::Float(l), l <= r),
                _ => (Sample::Float(scalar_binop(op, l, r)?), true),
            }))
        }
        (Sample::Float(f), Sample::Histogram(h)) if op == "*" => Ok(Some((
            Sample::Histogram(Arc::new(h.scaled(*f).compacted())),
            true,
        ))),
        (Sample::Histogram(h), Sample::Float(f)) if op == "*" || op == "/" => {
            let h = if op == "*" {
                h.scaled(*f)
            } else {
                h.divided(*f)
            };
            Ok(Some((Sample::Histogram(Arc::new(h.compacted())), true)))
        }
        (Sample::Histogram(a), Sample::Histogram(b)) if matches!(op, "+" | "-") => {
            let result = if op == "+" { a.add(b) } else { a.sub(b) };
            match result {
                Ok(h) => Ok(Some((Sample::Histogram(Arc::new(h.compacted())), true))),
                Err(_) => {
                    ev.annotate(Annotation::IncompatibleBucketLayout(op));
                    Ok(None)
                }
            }
        }
        (Sample::Histogram(a), Sample::Histogram(b)) if matches!(op, "==" | "!=") => {
            // Prometheus compares the operands as they are (both compacted by then).
            let equal = a.compacted().equals(&b.compacted());
            Ok(Some((Sample::Histogram(a.clone()), equal == (op == "=="))))
        }
        _ => {
            let kind = |s: &Sample| {
                if s.float().is_some() {
                    "float"
                } else {
                    "histogram"
                }
            };
            ev.annotate(Annotation::IncompatibleTypes(op, kind(l), kind(r)));
            Ok(None)
        }
    }
}

fn vector_scalar(
    ev: &Evaluator,
    op: &str,
    v: &[El],
    s: f64,
    swap: bool,
    return_bool: bool,
) -> Result<Vec<El>> {
    let mut out = Vec::with_capacity(v.len());
    let scalar = Sample::Float(s);
    for el in v {
        let (l, r) = if swap {
            (&scalar, &el.s)
        } else {
            (&el.s, &scalar)
        };
        let Some((mut value, mut keep)) = elem_binop(ev, op, l, r)? else {
            continue;
        };
        if is_comparison(op) && swap {
            value = el.s.clone();
        }
        if return_bool {
            value = Sample::Float(btos(keep));
            keep = true;
        }
        if keep {
            let drop_name = el.drop_name || drops_name(op) || return_bool;
            out.push(El {
                labels: el.labels.clone(),
                s: value,
                t: el.t,
                drop_name,
            });
        }
    }
    Ok(out)
}

fn set_op(op: &str, lhs: &[El], rhs: &[El], m: &Matching) -> Vec<El> {
    let sig = |el: &El| el.labels.signature(&m.names, m.on);
    match op {
        "and" => {
            if lhs.is_empty() || rhs.is_empty() {
                return Vec::new();
            }
            let right: HashSet<Vec<u8>> = rhs.iter().map(sig).collect();
            lhs.iter()
                .filter(|el| right.contains(&sig(el)))
                .cloned()
                .collect()
        }
        "or" => {
            let left: HashSet<Vec<u8>> = lhs.iter().map(sig).collect();
            let mut out: Vec<El> = lhs.to_vec();
            out.extend(rhs.iter().filter(|el| !left.contains(&sig(el))).cloned());
            out
        }
        _ => {
            let right: HashSet<Vec<u8>> = rhs.iter().map(sig).collect();
            lhs.iter()
                .filter(|el| !right.contains(&sig(el)))
                .cloned()
                .collect()
        }
    }
}

fn vector_binop(
    ev: &Evaluator,
    op: &str,
    lhs: &[El],
    rhs: &[El],
    m: &Matching,
    return_bool: bool,
) -> Result<Vec<El>> {
    if lhs.is_empty() || rhs.is_empty() {
        return Ok(Vec::new());
    }
    let (lhs, rhs) = if m.card == Card::OneToMany {
        (rhs, lhs)
    } else {
        (lhs, rhs)
    };
    let sig = |el: &El| el.labels.signature(&m.names, m.on);
    let mut right: HashMap<Vec<u8>, &El> = HashMap::with_capacity(rhs.len());
    for r in rhs {
        let s = sig(r);
        if let Some(dup) = right.get(&s) {
            let side = if m.card == Card::OneToMany {
                "left"
            } else {
                "right"
            };
            let matched = if m.on {
                r.labels.keep(&m.names)
            } else {
                r.labels.without(&with_name(&m.names))
            };
            return Err(Error::Execution(format!(
                "found duplicate series for the match group {matched} on the {side} hand-side of the operation: [{}, {}];many-to-many matching not allowed: matching labels must be unique on one side",
                r.labels, dup.labels
            )));
        }
        right.insert(s, r);
    }
    let mut matched: HashMap<Vec<u8>, HashSet<Labels>> = HashMap::new();
    let mut out = Vec::new();
    for l in lhs {
        let s = sig(l);
        let Some(r) = right.get(&s) else { continue };
        let (a, b) = if m.card == Card::OneToMany {
            (&r.s, &l.s)
        } else {
            (&l.s, &r.s)
        };
        let Some((mut value, keep)) = elem_binop(ev, op, a, b)? else {
            continue;
        };
        if return_bool {
            value = Sample::Float(btos(keep));
        } else if !keep {
            continue;
        }
        let metric = result_metric(&l.labels, &r.labels, op, m);
        match m.card {
            Card::OneToOne => {
                if matched.insert(s, HashSet::new()).is_some() {
                    return Err(Error::Execution(
                        "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)".into(),
                    ));
                }
            }
            _ => {
                if !matched.entry(s).or_default().insert(metric.clone()) {
                    return Err(Error::Execution(
                        "multiple matches for labels: grouping labels must ensure unique matches"
                            .into(),
                    ));
                }
            }
        }
        let drop_name = return_bool || (l.drop_name && !drops_name(op));
        out.push(El {
            labels: metric,
            s: value,
            t: l.t,
            drop_name,
        });
    }
    Ok(out)
}

fn with_name(names: &[String]) -> Vec<String> {
    let mut all = names.to_vec();
    all.push(METRIC_NAME.to_string());
    all
}

/// The labels of a result: the many side's (the left's for one-to-one), without the name
/// for arithmetic, cut to the matching labels for one-to-one, plus the `group_x` labels taken
/// from the one side.
fn result_metric(lhs: &Labels, rhs: &Labels, op: &str, m: &Matching) -> Labels {
    let mut labels = lhs.clone();
    if drops_name(op) {
        labels = labels.without_name();
    }
    if m.card == Card::OneToOne {
        labels = if m.on {
            labels.keep(&m.names)
        } else {
            labels.without(&m.names)
        };
    }
    for name in &m.include {
        labels = labels.with(name, rhs.get(name));
    }
    labels
}
