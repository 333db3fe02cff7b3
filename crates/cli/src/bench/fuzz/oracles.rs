//! The four ways a generated statement is judged, each comparing two answers as bags of
//! rows (doubles within a tolerance, [`crate::bench::suite::same_answer`]):
//!
//! - **duckdb**: Floe's answer against DuckDB's on the same rows. A statement DuckDB refuses
//!   is skipped; one Floe refuses while DuckDB answers is a failure, unless Floe refuses it
//!   with every rewrite off too: then it is something DataFusion does not plan, reported
//!   as unsupported (a missing feature, not a wrong answer) and not counted as a failure.
//! - **rewrites**: Floe with every rewrite of its own on against Floe with every one off
//!   (DataFusion's plans as DataFusion makes them): any difference, in answer or in
//!   refusal, is a rewrite's fault.
//! - **tlp** (ternary logic partitioning): for a predicate `p`, a query's rows are those of
//!   the query under `WHERE p`, under `WHERE NOT p` and under `WHERE p IS NULL`, together
//!   (`UNION` for `DISTINCT`; for one aggregate, the aggregate of the three parts').
//! - **norec**: `SELECT count(*) FROM f WHERE p` counts what
//!   `SELECT sum(CASE WHEN p THEN 1 ELSE 0 END) FROM f` counts, a form no optimizer
//!   rewrites into a filter.
//!
//! A task of Floe's that panics (or reports an internal error) fails every oracle. Under
//! `tlp` and `norec` too, a statement Floe refuses while DuckDB answers it is a failure,
//! or unsupported when Floe refuses it with every rewrite off as well.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use floe_catalog::governance::authz::Caller;
use floe_sql::{QueryOptions, SqlEngine, SqlError, SqlErrorKind};
use futures::TryStreamExt;

use super::ast::{Body, Expr, Kind, Query, Select, Source, Ty};
use super::data::{NAMESPACE, WAREHOUSE};
use super::duck::Duck;
use super::generate::Case;
use crate::bench::suite::same_answer;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Oracle {
    Rewrites,
    #[value(name = "duckdb")]
    DuckDb,
    Tlp,
    #[value(name = "norec")]
    NoRec,
}

impl Oracle {
    pub(super) fn name(self) -> &'static str {
        match self {
            Oracle::DuckDb => "duckdb",
            Oracle::Rewrites => "rewrites",
            Oracle::Tlp => "tlp",
            Oracle::NoRec => "norec",
        }
    }
}

/// What Floe made of a statement.
#[derive(Clone)]
pub(super) enum Answer {
    Rows(Vec<RecordBatch>),
    /// An ordinary error: bad SQL, an unsupported feature, a failed execution.
    Refused(String),
    /// A task that panicked, an internal error or a statement that ran out of time.
    Fault(String),
}

/// How a statement fared under one oracle.
pub(super) enum Verdict {
    Pass,
    /// The oracle does not apply, or both sides refused.
    Skip,
    Fail(Failure),
    /// Floe refuses what DuckDB answers, with and without its rewrites.
    Unsupported(Failure),
}

pub(super) struct Failure {
    pub oracle: Oracle,
    /// Equal for failures of the same kind (what failed, and the error's words without
    /// their numbers), so shrinking keeps to one failure.
    pub signature: String,
    /// The statements run and what each side answered.
    pub detail: String,
}

pub(super) struct Checker {
    pub on: Arc<SqlEngine>,
    pub off: Arc<SqlEngine>,
    pub duck: Option<Duck>,
    /// Floe's answers (rewrites on) to the statements of the current case.
    cache: HashMap<String, Answer>,
}

impl Checker {
    pub(super) fn new(on: Arc<SqlEngine>, off: Arc<SqlEngine>, duck: Option<Duck>) -> Self {
        Self {
            on,
            off,
            duck,
            cache: HashMap::new(),
        }
    }

    /// Floe with every rewrite off in place of Floe with all on, or back.
    pub(super) fn swap_engines(&mut self) {
        std::mem::swap(&mut self.on, &mut self.off);
    }

    /// `engine` in place of Floe with every rewrite on; the engine it replaces.
    pub(super) fn replace_on(&mut self, engine: Arc<SqlEngine>) -> Arc<SqlEngine> {
        std::mem::replace(&mut self.on, engine)
    }

    /// Forgets the answers kept for the last case.
    pub(super) fn forget(&mut self) {
        self.cache.clear();
    }

    async fn floe_on(&mut self, sql: &str) -> Answer {
        if let Some(answer) = self.cache.get(sql) {
            return answer.clone();
        }
        let answer = run(&self.on, sql).await;
        self.cache.insert(sql.to_string(), answer.clone());
        answer
    }

    pub(super) async fn check(&mut self, oracle: Oracle, case: &Case) -> anyhow::Result<Verdict> {
        match oracle {
            Oracle::DuckDb => self.duckdb(case).await,
            Oracle::Rewrites => Ok(self.rewrites(case).await),
            Oracle::Tlp => self.tlp(case).await,
            Oracle::NoRec => self.norec(case).await,
        }
    }

    async fn duckdb(&mut self, case: &Case) -> anyhow::Result<Verdict> {
        let sql = case.query.sql();
        let Some(duck) = self.duck.as_mut() else {
            return Ok(Verdict::Skip);
        };
        // DuckDB works while Floe does.
        duck.send(&sql)?;
        let floe = self.floe_on(&sql).await;
        let duck = self.duck.as_mut().expect("DuckDB").receive()?;
        let fail = |signature: String, detail: String| {
            Ok(Verdict::Fail(Failure {
                oracle: Oracle::DuckDb,
                signature,
                detail: format!("statement:\n  {sql}\n{detail}"),
            }))
        };
        match (floe, duck) {
            (Answer::Fault(e), _) => fail(fault(&e), format!("Floe: {e}")),
            (_, Err(_)) => Ok(Verdict::Skip),
            (Answer::Refused(e), Ok(rows)) => {
                let signature = format!("refused: {}", words(&e));
                let detail = format!("Floe refuses: {e}\nDuckDB answers:\n{}", show(&rows));
                match run(&self.off, &sql).await {
                    Answer::Refused(_) => Ok(Verdict::Unsupported(Failure {
                        oracle: Oracle::DuckDb,
                        signature,
                        detail: format!("statement:\n  {sql}\n{detail}"),
                    })),
                    _ => fail(signature, detail),
                }
            }
            (Answer::Rows(got), Ok(expected)) => match same_answer(&got, &expected, "DuckDB") {
                Ok(()) => Ok(Verdict::Pass),
                Err(why) => fail(
                    "differs".into(),
                    format!(
                        "{why:#}\nFloe answers:\n{}\nDuckDB answers:\n{}",
                        show(&got),
                        show(&expected)
                    ),
                ),
            },
        }
    }

    async fn rewrites(&mut self, case: &Case) -> Verdict {
        let sql = case.query.sql();
        let on = self.floe_on(&sql).await;
        let off = run(&self.off, &sql).await;
        let fail = |signature: String, detail: String| {
            Verdict::Fail(Failure {
                oracle: Oracle::Rewrites,
                signature,
                detail: format!("statement:\n  {sql}\n{detail}"),
            })
        };
        match (on, off) {
            (Answer::Fault(e), _) => fail(
                format!("{} with rewrites", fault(&e)),
                format!("rewrites on: {e}"),
            ),
            (_, Answer::Fault(e)) => fail(
                format!("{} without rewrites", fault(&e)),
                format!("rewrites off: {e}"),
            ),
            (Answer::Refused(_), Answer::Refused(_)) => Verdict::Skip,
            (Answer::Refused(e), Answer::Rows(rows)) => fail(
                format!("refused with rewrites: {}", words(&e)),
                format!("rewrites on: {e}\nrewrites off answer:\n{}", show(&rows)),
            ),
            (Answer::Rows(rows), Answer::Refused(e)) => fail(
                format!("refused without rewrites: {}", words(&e)),
                format!("rewrites off: {e}\nrewrites on answer:\n{}", show(&rows)),
            ),
            (Answer::Rows(got), Answer::Rows(expected)) => {
                match same_answer(&got, &expected, "Floe without rewrites") {
                    Ok(()) => Verdict::Pass,
                    Err(why) => fail(
                        "differs".into(),
                        format!(
                            "{why:#}\nrewrites on:\n{}\nrewrites off:\n{}",
                            show(&got),
                            show(&expected)
                        ),
                    ),
                }
            }
        }
    }

    async fn tlp(&mut self, case: &Case) -> anyhow::Result<Verdict> {
        let Some(parts) = partitioned(&case.query, &case.pred) else {
            return Ok(Verdict::Skip);
        };
        self.same_in_floe(Oracle::Tlp, &case.query.sql(), &parts.sql())
            .await
    }

    async fn norec(&mut self, case: &Case) -> anyhow::Result<Verdict> {
        let Some((counted, summed)) = norec(&case.query, &case.pred) else {
            return Ok(Verdict::Skip);
        };
        self.same_in_floe(Oracle::NoRec, &counted.sql(), &summed.sql())
            .await
    }

    /// Whether Floe (rewrites on) answers `a` and `b` alike. A statement Floe refuses is a
    /// failure when DuckDB answers it, unsupported when Floe refuses it without rewrites too.
    async fn same_in_floe(&mut self, oracle: Oracle, a: &str, b: &str) -> anyhow::Result<Verdict> {
        let fail = |signature: String, detail: String| {
            Ok(Verdict::Fail(Failure {
                oracle,
                signature,
                detail: format!("statement:\n  {a}\nits equivalent:\n  {b}\n{detail}"),
            }))
        };
        let mut answers = Vec::new();
        for (which, sql) in [("statement", a), ("equivalent", b)] {
            match self.floe_on(sql).await {
                Answer::Rows(rows) => answers.push(rows),
                Answer::Fault(e) => return fail(fault(&e), format!("Floe, {which}: {e}")),
                Answer::Refused(e) => {
                    let duck_answers = match self.duck.as_mut() {
                        Some(duck) => duck.run(sql)?.ok(),
                        None => None,
                    };
                    let Some(rows) = duck_answers else {
                        return Ok(Verdict::Skip);
                    };
                    let signature = format!("refused: {}", words(&e));
                    let detail = format!(
                        "Floe refuses the {which}: {e}\nDuckDB answers it:\n{}",
                        show(&rows)
                    );
                    // Refused without rewrites too: something DataFusion does not plan.
                    if let Answer::Refused(_) = run(&self.off, sql).await {
                        return Ok(Verdict::Unsupported(Failure {
                            oracle,
                            signature,
                            detail: format!("statement:\n  {a}\nits equivalent:\n  {b}\n{detail}"),
                        }));
                    }
                    return fail(signature, detail);
                }
            }
        }
        match same_answer(&answers[0], &answers[1], "the equivalent") {
            Ok(()) => Ok(Verdict::Pass),
            Err(why) => fail(
                "differs".into(),
                format!(
                    "{why:#}\nthe statement:\n{}\nits equivalent:\n{}",
                    show(&answers[0]),
                    show(&answers[1])
                ),
            ),
        }
    }
}

/// Runs `sql` on `engine` to its last row, on a task of its own so that a panic while
/// planning is caught as one while executing is.
pub(super) async fn run(engine: &Arc<SqlEngine>, sql: &str) -> Answer {
    let (engine, sql) = (engine.clone(), sql.to_string());
    let task = tokio::spawn(async move {
        let options = QueryOptions {
            warehouse: Some(WAREHOUSE.into()),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        };
        let result = engine.query(&Caller::system(), &sql, &options).await?;
        result
            .stream
            .try_collect::<Vec<RecordBatch>>()
            .await
            .map_err(SqlError::from)
    });
    match task.await {
        Ok(Ok(batches)) => Answer::Rows(batches),
        Ok(Err(e))
            if matches!(e.kind, SqlErrorKind::Internal | SqlErrorKind::Timeout)
                || e.message.contains("panicked") =>
        {
            Answer::Fault(e.message)
        }
        Ok(Err(e)) => Answer::Refused(e.message),
        Err(e) => Answer::Fault(format!("the statement's task panicked: {e}")),
    }
}

/// A fault's signature: its message up to the error id an internal error carries.
fn fault(message: &str) -> String {
    let cause = message.split("error id").next().unwrap_or_default();
    format!("fault: {}", words(cause))
}

/// An error's first line, numbers left out, for telling failures apart.
fn words(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    let kept: String = line
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .take(80)
        .collect();
    kept
}

/// An answer as a table, its first rows.
pub(super) fn show(batches: &[RecordBatch]) -> String {
    const ROWS: usize = 40;
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut kept = Vec::new();
    let mut left = ROWS;
    for batch in batches {
        if left == 0 {
            break;
        }
        let take = batch.num_rows().min(left);
        kept.push(batch.slice(0, take));
        left -= take;
    }
    let table = datafusion::arrow::util::pretty::pretty_format_batches(&kept)
        .map(|t| t.to_string())
        .unwrap_or_else(|e| format!("(cannot show: {e})"));
    let more = if total > ROWS {
        format!("\n  … {} rows in all", total)
    } else {
        String::new()
    };
    let table = if kept.iter().all(|b| b.num_rows() == 0) {
        "  (no rows)".to_string()
    } else {
        table
            .lines()
            .map(|l| format!("  {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!("{table}{more}")
}

/// The ternary-logic partitioning of `query` on `pred`, when its first `SELECT` is the whole
/// statement and plain (no grouping, windows or `LIMIT`), or one aggregate that partitions.
pub(super) fn partitioned(query: &Query, pred: &Expr) -> Option<Query> {
    let Body::Select(select) = &query.body else {
        return None;
    };
    if query.limit.is_some() || select.group.is_some() || select.having.is_some() {
        return None;
    }
    let aggregated = select.items.iter().any(|(e, _)| e.aggregates());
    let parts = |select: &Select| -> Vec<Select> {
        let is_null = Expr::new(Ty::Bool, Kind::IsNull(Box::new(pred.clone()), false));
        [pred.clone(), Expr::not(pred.clone()), is_null]
            .into_iter()
            .map(|p| {
                let mut part = select.clone();
                part.filter = Some(match part.filter.take() {
                    Some(f) => Expr::and(f, p),
                    None => p,
                });
                part
            })
            .collect()
    };
    let union = |op: &'static str, parts: Vec<Select>| -> Body {
        let mut parts = parts.into_iter().map(|s| Body::Select(Box::new(s)));
        let first = parts.next().expect("three parts");
        parts.fold(first, |acc, part| {
            Body::Set(op, Box::new(acc), Box::new(part))
        })
    };
    if !aggregated {
        let op = if select.distinct {
            "UNION"
        } else {
            "UNION ALL"
        };
        return Some(Query {
            ctes: query.ctes.clone(),
            body: union(op, parts(select)),
            order: vec![],
            limit: None,
        });
    }
    // One aggregate: the count of the parts summed, their sum summed, their min's min….
    let [(agg, name)] = select.items.as_slice() else {
        return None;
    };
    let Kind::Agg(func, distinct, _) = &agg.kind else {
        return None;
    };
    let outer = match (*func, distinct) {
        ("count" | "sum", false) => "sum",
        ("min", _) => "min",
        ("max", _) => "max",
        _ => return None,
    };
    let inner = Query {
        ctes: vec![],
        body: union("UNION ALL", parts(select)),
        order: vec![],
        limit: None,
    };
    let column = Expr::new(agg.ty, Kind::Col("tlp".into(), name.clone()));
    let combined = Select {
        distinct: false,
        items: vec![(
            Expr::new(agg.ty, Kind::Agg(outer, false, Some(Box::new(column)))),
            name.clone(),
        )],
        from: Some(Source::Derived(Box::new(inner), "tlp".into())),
        filter: None,
        group: None,
        having: None,
    };
    Some(Query {
        ctes: query.ctes.clone(),
        body: Body::Select(Box::new(combined)),
        order: vec![],
        limit: None,
    })
}

/// The two counts of NoREC over the first `SELECT`'s `FROM`, for `p` its `WHERE` and `pred`
/// together.
///
/// Left out when `p` holds a subquery: DataFusion 54 plans `EXISTS` and `IN (subquery)` only
/// in filters, and no subquery inside an aggregate's argument ("Physical plan does not
/// support logical expression ScalarSubquery").
pub(super) fn norec(query: &Query, pred: &Expr) -> Option<(Query, Query)> {
    let first = query.first();
    let from = first.from.clone()?;
    let p = match &first.filter {
        Some(f) => Expr::and(f.clone(), pred.clone()),
        None => pred.clone(),
    };
    let mut predicate_subquery = false;
    p.visit(&mut |e| {
        predicate_subquery |= matches!(
            e.kind,
            Kind::Exists(..) | Kind::InQuery(..) | Kind::Scalar(_)
        );
    });
    if predicate_subquery {
        return None;
    }
    let count = Expr::new(Ty::BigInt, Kind::Agg("count", false, None));
    let one_if = Expr::new(
        Ty::BigInt,
        Kind::Case(
            vec![(p.clone(), Expr::lit(Ty::BigInt, "1"))],
            Some(Box::new(Expr::lit(Ty::BigInt, "0"))),
        ),
    );
    let sum = Expr::new(Ty::BigInt, Kind::Agg("sum", false, Some(Box::new(one_if))));
    let summed = Expr::new(
        Ty::BigInt,
        Kind::Func("coalesce", vec![sum, Expr::lit(Ty::BigInt, "0")]),
    );
    let select = |item: Expr, filter: Option<Expr>| Query {
        ctes: query.ctes.clone(),
        body: Body::Select(Box::new(Select {
            distinct: false,
            items: vec![(item, "c0".into())],
            from: Some(from.clone()),
            filter,
            group: None,
            having: None,
        })),
        order: vec![],
        limit: None,
    };
    Some((select(count, Some(p)), select(summed, None)))
}
