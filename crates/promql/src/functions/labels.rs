//! The functions that change labels (`label_replace`, `label_join`) and the labels
//! `absent()` answers with.

use promql_parser::parser::Expr;

use crate::eval::{Evaluator, unparen};
use crate::labels::{Labels, METRIC_NAME};
use crate::value::Series;
use crate::{Error, Result};

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

pub(crate) fn string_arg(e: &Expr) -> Result<String> {
    match unparen(e) {
        Expr::StringLiteral(s) => Ok(s.val.clone()),
        _ => Err(Error::BadData("expected a string literal".into())),
    }
}

/// A label name as PromQL writes one without quotes.
pub fn valid_label_name(name: &str) -> bool {
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
            // Go and Rust read `$1x` as group `1x` and `${1}` alike, and skip a missing group.
            caps.expand(&repl, &mut out);
            s.labels = s.labels.with(&dst, &out);
            if dst == METRIC_NAME {
                s.drop_name = false;
            }
        }
    }
    check_unique(&m)?;
    Ok(m)
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
