//! Shrinking a failing case: one-step reductions of its statement (a CTE, a set operation's
//! side, a join's side, a clause, a column, a list element dropped; an expression replaced by
//! one of its parts of the same type or by a constant) tried smallest first, the first that
//! still fails the same way kept, until none does or the budget is spent.
//!
//! Reductions keep the statement's determinism: an `ORDER BY … LIMIT` goes only as a whole,
//! and windows keep the total order they number rows by.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::ast::{Body, Expr, GroupShape, Kind, Query, Select, Source, Ty};
use super::generate::Case;
use super::oracles::{Checker, Failure, Oracle, Verdict};

/// The smallest case found failing like `failure`, its failure, and the steps taken.
pub(super) async fn shrink(
    checker: &mut Checker,
    case: Case,
    failure: Failure,
    budget: Duration,
) -> anyhow::Result<(Case, Failure, usize)> {
    let started = Instant::now();
    let oracle = failure.oracle;
    let (mut case, mut failure) = (case, failure);
    let mut steps = 0;
    let mut tried: HashSet<String> = HashSet::new();
    'smaller: while started.elapsed() < budget {
        let mut candidates = variants(&case, oracle);
        candidates.retain(|c| tried.insert(key(c)));
        candidates.sort_by_cached_key(|c| key(c).len());
        for candidate in candidates {
            if started.elapsed() >= budget {
                break 'smaller;
            }
            checker.forget();
            if let Verdict::Fail(f) | Verdict::Unsupported(f) =
                checker.check(oracle, &candidate).await?
                && f.signature == failure.signature
            {
                case = candidate;
                failure = f;
                steps += 1;
                continue 'smaller;
            }
        }
        break;
    }
    Ok((case, failure, steps))
}

fn key(case: &Case) -> String {
    format!("{} -- {}", case.query.sql(), case.pred.sql())
}

/// Every one-step reduction of `case`; the predicate counts only for the oracles that use it.
fn variants(case: &Case, oracle: Oracle) -> Vec<Case> {
    let mut out: Vec<Case> = query_variants(&case.query, true)
        .into_iter()
        .map(|query| Case {
            query,
            pred: case.pred.clone(),
        })
        .collect();
    if matches!(oracle, Oracle::Tlp | Oracle::NoRec) {
        out.extend(expr_variants(&case.pred).into_iter().map(|pred| Case {
            query: case.query.clone(),
            pred,
        }));
    }
    out
}

/// Reductions of a query; `top` for the statement itself, whose columns may be dropped
/// (nothing refers to them by name).
fn query_variants(q: &Query, top: bool) -> Vec<Query> {
    let mut out = Vec::new();
    let with = |f: &dyn Fn(&mut Query)| {
        let mut c = q.clone();
        f(&mut c);
        c
    };
    for i in 0..q.ctes.len() {
        out.push(with(&|c| {
            c.ctes.remove(i);
        }));
    }
    if q.limit.is_some() {
        out.push(with(&|c| {
            c.order.clear();
            c.limit = None;
        }));
        if q.limit.is_some_and(|(_, offset)| offset > 0) {
            out.push(with(&|c| c.limit = c.limit.map(|(l, _)| (l, 0))));
        }
    }
    let columns = q.first().items.len();
    if top && columns > 1 {
        for i in 0..columns {
            out.push(with(&|c| drop_column(c, i)));
        }
    }
    for body in body_variants(&q.body) {
        out.push(with(&|c| c.body = body.clone()));
    }
    for (i, cte) in q.ctes.iter().enumerate() {
        for v in query_variants(&cte.query, false) {
            out.push(with(&|c| c.ctes[i].query = v.clone()));
        }
    }
    out
}

/// Output column `i` dropped from every `SELECT` of the body, and from the `ORDER BY`.
fn drop_column(q: &mut Query, i: usize) {
    fn drop_in(body: &mut Body, i: usize) {
        match body {
            Body::Select(s) => {
                s.items.remove(i);
                for (j, (_, name)) in s.items.iter_mut().enumerate() {
                    *name = format!("c{j}");
                }
            }
            Body::Set(_, left, right) => {
                drop_in(left, i);
                drop_in(right, i);
            }
        }
    }
    drop_in(&mut q.body, i);
    q.order.retain(|(ordinal, ..)| *ordinal != i + 1);
    for (ordinal, ..) in &mut q.order {
        if *ordinal > i + 1 {
            *ordinal -= 1;
        }
    }
}

fn body_variants(body: &Body) -> Vec<Body> {
    match body {
        Body::Select(s) => select_variants(s)
            .into_iter()
            .map(|s| Body::Select(Box::new(s)))
            .collect(),
        Body::Set(op, left, right) => {
            let mut out = vec![(**left).clone(), (**right).clone()];
            for l in body_variants(left) {
                out.push(Body::Set(op, Box::new(l), right.clone()));
            }
            for r in body_variants(right) {
                out.push(Body::Set(op, left.clone(), Box::new(r)));
            }
            out
        }
    }
}

fn select_variants(s: &Select) -> Vec<Select> {
    let mut out = Vec::new();
    let with = |f: &dyn Fn(&mut Select)| {
        let mut c = s.clone();
        f(&mut c);
        c
    };
    if s.distinct {
        out.push(with(&|c| c.distinct = false));
    }
    if let Some(filter) = &s.filter {
        out.push(with(&|c| c.filter = None));
        for v in expr_variants(filter) {
            out.push(with(&|c| c.filter = Some(v.clone())));
        }
    }
    if let Some(having) = &s.having {
        out.push(with(&|c| c.having = None));
        for v in expr_variants(having) {
            out.push(with(&|c| c.having = Some(v.clone())));
        }
    }
    if let Some(group) = &s.group {
        out.push(with(&|c| c.group = None));
        if !matches!(group.shape, GroupShape::Plain) {
            out.push(with(&|c| {
                if let Some(g) = &mut c.group {
                    g.shape = GroupShape::Plain;
                }
            }));
        }
        if let GroupShape::Sets(sets) = &group.shape {
            for i in 0..sets.len() {
                out.push(with(&|c| {
                    if let Some(g) = &mut c.group
                        && let GroupShape::Sets(sets) = &mut g.shape
                    {
                        sets.remove(i);
                    }
                }));
            }
        } else {
            for i in 0..group.keys.len() {
                out.push(with(&|c| {
                    if let Some(g) = &mut c.group {
                        g.keys.remove(i);
                        if g.keys.is_empty() {
                            c.group = None;
                        }
                    }
                }));
            }
        }
    }
    for (i, (e, _)) in s.items.iter().enumerate() {
        for v in expr_variants(e) {
            out.push(with(&|c| c.items[i].0 = v.clone()));
        }
    }
    if let Some(from) = &s.from {
        for v in source_variants(from) {
            out.push(with(&|c| c.from = Some(v.clone())));
        }
    }
    out
}

fn source_variants(source: &Source) -> Vec<Source> {
    match source {
        Source::Table(..) => vec![],
        Source::Derived(q, alias) => query_variants(q, false)
            .into_iter()
            .map(|q| Source::Derived(Box::new(q), alias.clone()))
            .collect(),
        Source::Join(kind, left, right, on) => {
            let mut out = vec![(**left).clone(), (**right).clone()];
            if let Some(on) = on {
                for v in expr_variants(on) {
                    out.push(Source::Join(*kind, left.clone(), right.clone(), Some(v)));
                }
            }
            for l in source_variants(left) {
                out.push(Source::Join(*kind, Box::new(l), right.clone(), on.clone()));
            }
            for r in source_variants(right) {
                out.push(Source::Join(*kind, left.clone(), Box::new(r), on.clone()));
            }
            out
        }
    }
}

/// A constant of `ty`, as simple as they come.
fn simplest(ty: Ty) -> Vec<Expr> {
    let text = match ty {
        Ty::Bool => return vec![Expr::lit(ty, "TRUE"), Expr::lit(ty, "FALSE")],
        Ty::BigInt => "1",
        Ty::Int => "CAST(1 AS INT)",
        Ty::Double => "CAST(1.0 AS DOUBLE)",
        Ty::Dec9 => "CAST('1.00' AS DECIMAL(9,2))",
        Ty::Dec28 => "CAST('1.000000' AS DECIMAL(28,6))",
        Ty::Date => "DATE '2024-02-29'",
        Ty::Ts => "TIMESTAMP '2024-02-28 00:00:00'",
        Ty::Str => "'a'",
    };
    vec![Expr::lit(ty, text), Expr::null(ty)]
}

/// Reductions of an expression: it replaced by a part of its type or a constant, or one of
/// its parts reduced.
fn expr_variants(e: &Expr) -> Vec<Expr> {
    let mut out = Vec::new();
    match &e.kind {
        Kind::Lit(_) | Kind::Null => return out,
        Kind::Col(..) => {}
        _ => {
            out.extend(simplest(e.ty));
            for child in e.children() {
                if child.ty == e.ty {
                    out.push(child.clone());
                }
            }
        }
    }
    if let Kind::Col(..) = e.kind {
        return out;
    }
    // Parts reduced in place.
    let count = e.children().len();
    for i in 0..count {
        let child = e.children()[i].clone();
        for v in expr_variants(&child) {
            let mut c = e.clone();
            *children_mut(&mut c)[i] = v;
            out.push(c);
        }
    }
    match &e.kind {
        Kind::InList(a, list, negated) if list.len() > 1 => {
            for i in 0..list.len() {
                let mut list = list.clone();
                list.remove(i);
                out.push(Expr::new(e.ty, Kind::InList(a.clone(), list, *negated)));
            }
        }
        Kind::Case(whens, Some(_)) => {
            out.push(Expr::new(e.ty, Kind::Case(whens.clone(), None)));
        }
        Kind::InQuery(a, q, negated) => {
            for v in query_variants(q, false) {
                out.push(Expr::new(
                    e.ty,
                    Kind::InQuery(a.clone(), Box::new(v), *negated),
                ));
            }
        }
        Kind::Exists(q, negated) => {
            for v in query_variants(q, false) {
                out.push(Expr::new(e.ty, Kind::Exists(Box::new(v), *negated)));
            }
        }
        Kind::Scalar(q) => {
            for v in query_variants(q, false) {
                out.push(Expr::new(e.ty, Kind::Scalar(Box::new(v))));
            }
        }
        Kind::Window(w) => {
            // Partitions may go; the order may only where ties cannot matter.
            for i in 0..w.partition.len() {
                let mut c = w.clone();
                c.partition.remove(i);
                out.push(Expr::new(e.ty, Kind::Window(c)));
            }
            if !w.order.is_empty() && w.func != "row_number" && !w.rows_frame {
                let mut c = w.clone();
                c.order.clear();
                out.push(Expr::new(e.ty, Kind::Window(c)));
            }
        }
        _ => {}
    }
    out
}

/// The parts of an expression, in the order of [`Expr::children`], to change.
fn children_mut(e: &mut Expr) -> Vec<&mut Expr> {
    match &mut e.kind {
        Kind::Col(..) | Kind::Lit(_) | Kind::Null | Kind::Exists(..) | Kind::Scalar(_) => vec![],
        Kind::Bin(_, a, b) => vec![a, b],
        Kind::Not(a) | Kind::IsNull(a, _) | Kind::Like(a, ..) | Kind::Cast(a) => vec![a],
        Kind::InQuery(a, ..) => vec![a],
        Kind::Between(a, b, c, _) => vec![a, b, c],
        Kind::InList(a, list, _) => std::iter::once(&mut **a).chain(list.iter_mut()).collect(),
        Kind::Case(whens, otherwise) => whens
            .iter_mut()
            .flat_map(|(w, t)| [w, t])
            .chain(otherwise.as_deref_mut())
            .collect(),
        Kind::Func(_, args) => args.iter_mut().collect(),
        Kind::Agg(_, _, arg) => arg.as_deref_mut().into_iter().collect(),
        Kind::Window(w) => {
            let w = &mut **w;
            w.arg
                .iter_mut()
                .chain(w.partition.iter_mut())
                .chain(w.order.iter_mut().map(|k| &mut k.expr))
                .collect()
        }
    }
}
