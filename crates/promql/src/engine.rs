//! A query's life: parse, fetch each selector's series once, evaluate, shape the answer.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use promql_parser::parser::value::ValueType;
use promql_parser::parser::{self as ast, Expr};

use crate::eval::{Evaluator, Fetched, Val};
use crate::labels::METRIC_NAME;
use crate::value::{Point, QueryValue, Series};
use crate::{Error, MatchOp, Matcher, Result, Storage, Want};

/// When a query is evaluated: one instant (`start == end`), or every `step` from `start` to
/// `end` (milliseconds).
#[derive(Clone, Copy, Debug)]
pub struct QueryRange {
    pub start: i64,
    pub end: i64,
    pub step: i64,
}

impl QueryRange {
    pub fn instant(t: i64) -> Self {
        QueryRange {
            start: t,
            end: t,
            step: 1,
        }
    }
}

/// What a query may use.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Samples a query may load (Prometheus's `--query.max-samples`, 50 million by default).
    pub max_samples: usize,
    /// How long an evaluation may run (Prometheus's `--query.timeout`, 2 minutes): what a
    /// query can make the evaluator do — a subquery of a fine step over a long range —
    /// is bounded by it, checked at every step.
    pub timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_samples: 50_000_000,
            timeout: std::time::Duration::from_secs(120),
        }
    }
}

/// The evaluation settings a Prometheus server has.
#[derive(Clone, Debug)]
pub struct Engine {
    /// How far back an instant selector looks for a sample (`--query.lookback-delta`, 5m).
    pub lookback_ms: i64,
    /// The step of a subquery that names none (Prometheus: the global evaluation interval).
    pub default_subquery_step_ms: i64,
    pub limits: Limits,
    /// Set when whoever asked has gone (a client that hung up): the evaluation stops at its
    /// next check of the deadline.
    pub cancelled: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Default for Engine {
    fn default() -> Self {
        Engine {
            lookback_ms: 5 * 60 * 1000,
            default_subquery_step_ms: 60 * 1000,
            limits: Limits::default(),
            cancelled: Default::default(),
        }
    }
}

/// What a query answered, with the warnings Prometheus would attach.
#[derive(Debug)]
pub struct Answer {
    pub value: QueryValue,
    pub warnings: Vec<String>,
}

impl Engine {
    /// Parse a query, refusing what Prometheus refuses before evaluation.
    pub fn parse(&self, query: &str, range: bool) -> Result<Expr> {
        check_shape(query)?;
        let expr = ast::parse(query).map_err(|e| Error::BadData(format!("parse error: {e}")))?;
        if range {
            let kind = expr.value_type();
            if kind != ValueType::Scalar && kind != ValueType::Vector {
                return Err(Error::BadData(format!(
                    "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                    type_name(kind)
                )));
            }
        }
        Ok(expr)
    }

    /// Evaluate `query` over `range`, fetching from `storage`: an instant query when the
    /// range is one instant (a scalar, vector, matrix or string answer).
    pub async fn query(
        &self,
        storage: &dyn Storage,
        query: &str,
        range: QueryRange,
    ) -> Result<Answer> {
        let as_range = range.start != range.end;
        let plan = self.plan(query, range, as_range)?;
        let fetched = self.fetch(storage, &plan).await?;
        self.evaluate(&plan, &fetched)
    }

    /// A range query (`query_range`): always a matrix, even over a range of one step.
    pub async fn range_query(
        &self,
        storage: &dyn Storage,
        query: &str,
        range: QueryRange,
    ) -> Result<Answer> {
        let plan = self.plan(query, range, true)?;
        let fetched = self.fetch(storage, &plan).await?;
        self.evaluate(&plan, &fetched)
    }

    /// Parse a query and find what each of its selectors reads. CPU only, and recursive over
    /// the query's tree: a server runs it on a thread of a large stack. A tree deeper than
    /// [`MAX_DEPTH`] (a chain of a thousand `+`, which no bracket count catches) is refused
    /// here, so that what is kept can be walked, evaluated and dropped on any thread.
    pub fn plan(&self, query: &str, range: QueryRange, as_range: bool) -> Result<Plan> {
        if range.step <= 0 {
            return Err(Error::BadData(
                "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
            ));
        }
        let expr = Box::new(self.parse(query, as_range)?);
        if depth(&expr, 0) > MAX_DEPTH {
            return Err(Error::BadData(format!(
                "query nested more than {MAX_DEPTH} operators deep"
            )));
        }
        let mut wanted = Vec::new();
        collect_selectors(&expr, range.start, range.end, range, self, &mut wanted)?;
        if wanted.len() > MAX_SELECTORS {
            return Err(Error::BadData(format!(
                "query of {} selectors: at most {MAX_SELECTORS} are taken",
                wanted.len()
            )));
        }
        Ok(Plan {
            expr,
            wanted,
            range,
            as_range,
        })
    }

    /// Every selector's series, read from `storage` once each (a selector written twice with
    /// the same window is read once): the half of an evaluation that waits on storage.
    pub async fn fetch(&self, storage: &dyn Storage, plan: &Plan) -> Result<Selected> {
        // Identical selectors are read once; the distinct ones are handed to the storage
        // together, so that it may serve several from one read.
        let mut position: HashMap<String, usize> = HashMap::new();
        let mut wants: Vec<Want<'_>> = Vec::new();
        let mut uses: Vec<((usize, usize), usize)> = Vec::new();
        for (key, matchers, mint, maxt) in &plan.wanted {
            let identity = format!("{matchers:?}/{mint}/{maxt}");
            let at = *position.entry(identity).or_insert_with(|| {
                wants.push(Want {
                    matchers,
                    mint: *mint,
                    maxt: *maxt,
                });
                wants.len() - 1
            });
            uses.push((*key, at));
        }
        let mut read = storage.select_many(&wants).await?;
        if read.len() != wants.len() {
            return Err(Error::Storage(format!(
                "the storage answered {} selectors of {}",
                read.len(),
                wants.len()
            )));
        }
        let mut left = vec![0usize; wants.len()];
        for (_, at) in &uses {
            left[*at] += 1;
        }
        // Each further use of a read is a copy held in memory: counted against the query's
        // samples as the storage counted the read itself.
        let mut copied = 0usize;
        let mut fetched: Fetched = HashMap::new();
        for (key, at) in uses {
            left[at] -= 1;
            let series = if left[at] == 0 {
                std::mem::take(&mut read[at])
            } else {
                copied += read[at].iter().map(|s| s.points.len()).sum::<usize>();
                if copied > self.limits.max_samples {
                    return Err(crate::too_many_samples(self.limits.max_samples));
                }
                read[at].clone()
            };
            fetched.insert(key, series);
        }
        Ok(Selected(fetched))
    }

    /// The other half: the expression evaluated over what [`Engine::fetch`] read. CPU only
    /// and recursive: a server runs it on a thread of a large stack, off its async workers.
    pub fn evaluate(&self, plan: &Plan, fetched: &Selected) -> Result<Answer> {
        let ev = Evaluator::new(self, &fetched.0, plan.range);
        let value = ev.eval(&plan.expr)?;
        let warnings = ev.take_warnings();
        let value = shape(&plan.expr, value, plan.range, plan.as_range)?;
        Ok(Answer { value, warnings })
    }
}

/// How many operators, functions and brackets deep a query's tree may be.
pub const MAX_DEPTH: usize = 256;

/// How many selectors a query may have.
pub const MAX_SELECTORS: usize = 500;

/// A parsed query and what its selectors read ([`Engine::plan`]). The tree is boxed: the
/// fetched series are found by their selector node's address, which moving the plan keeps.
pub struct Plan {
    expr: Box<Expr>,
    wanted: Wanted,
    range: QueryRange,
    as_range: bool,
}

/// The depth of a tree, counted no further than just past [`MAX_DEPTH`].
fn depth(expr: &Expr, at: usize) -> usize {
    if at > MAX_DEPTH {
        return at;
    }
    let down = |e: &Expr| depth(e, at + 1);
    match expr {
        Expr::Aggregate(a) => down(&a.expr).max(a.param.as_deref().map_or(at, down)),
        Expr::Unary(u) => down(&u.expr),
        Expr::Binary(b) => down(&b.lhs).max(down(&b.rhs)),
        Expr::Paren(p) => down(&p.expr),
        Expr::Subquery(s) => down(&s.expr),
        Expr::Call(c) => c.args.args.iter().map(|a| down(a)).max().unwrap_or(at),
        _ => at,
    }
}

/// The series every selector of one expression read ([`Engine::fetch`]).
pub struct Selected(Fetched);

fn type_name(kind: ValueType) -> &'static str {
    match kind {
        ValueType::Vector => "instant vector",
        ValueType::Scalar => "scalar",
        ValueType::Matrix => "range vector",
        ValueType::String => "string",
    }
}

/// The answer in the kind the expression has, with metric names dropped where the
/// evaluation asked (and a label set that then repeats refused, as Prometheus does).
fn shape(expr: &Expr, value: Val, range: QueryRange, as_range: bool) -> Result<QueryValue> {
    let series = match value {
        Val::String(s) => {
            return Ok(QueryValue::String {
                t: range.start,
                v: s,
            });
        }
        Val::Matrix(m) => m,
    };
    let mut series: Vec<Series> = series
        .into_iter()
        .filter(|s| !s.points.is_empty())
        .map(|mut s| {
            if s.drop_name {
                s.labels = s.labels.without_name();
                s.drop_name = false;
            }
            s
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    for s in &series {
        if !seen.insert(s.labels.clone()) {
            return Err(Error::Execution(
                "vector cannot contain metrics with the same labelset".into(),
            ));
        }
    }
    let kind = expr.value_type();
    if as_range {
        if kind == ValueType::Scalar {
            for s in &mut series {
                s.labels = crate::Labels::empty();
            }
        }
        series.sort_by(|a, b| a.labels.cmp(&b.labels));
        return Ok(QueryValue::Matrix(series));
    }
    Ok(match kind {
        ValueType::Scalar => {
            let v = series
                .first()
                .and_then(|s| s.points.first())
                .and_then(|p| p.s.float())
                .unwrap_or(f64::NAN);
            QueryValue::Scalar { t: range.start, v }
        }
        ValueType::Vector => QueryValue::Vector(
            series
                .into_iter()
                .filter_map(|s| {
                    let labels = s.labels;
                    s.points.into_iter().next().map(|p| {
                        (
                            labels,
                            Point {
                                t: range.start,
                                s: p.s,
                            },
                        )
                    })
                })
                .collect(),
        ),
        ValueType::Matrix => {
            series.sort_by(|a, b| a.labels.cmp(&b.labels));
            QueryValue::Matrix(series)
        }
        ValueType::String => QueryValue::String {
            t: range.start,
            v: String::new(),
        },
    })
}

/// A series selector (`match[]` of the metadata endpoints): its matcher sets (one per `or`
/// alternative).
pub fn parse_selector(text: &str) -> Result<Vec<Vec<Matcher>>> {
    check_shape(text)?;
    match ast::parse(text).map_err(Error::BadData)? {
        Expr::VectorSelector(vs) => selector_matchers(&vs),
        _ => Err(Error::BadData(format!("{text:?} is not a series selector"))),
    }
}

/// The matcher sets of every selector of a query (what it can read): the selectors
/// [`Engine::plan`] finds, with its checks of the query's shape and depth.
pub fn selectors_of(query: &str) -> Result<Vec<Vec<Matcher>>> {
    let plan = Engine::default().plan(query, QueryRange::instant(0), false)?;
    Ok(plan
        .wanted
        .into_iter()
        .map(|(_, matchers, _, _)| matchers)
        .collect())
}

/// Milliseconds of a duration.
pub(crate) fn millis(d: &Duration) -> i64 {
    d.as_millis().min(MAX_MILLIS as u128) as i64
}

/// The longest duration and the furthest time from the epoch a query may name, in
/// milliseconds (about 35,000 years): sums of a query's times, offsets and ranges then stay
/// far from `i64`'s bounds, so no arithmetic of the evaluator can overflow.
pub const MAX_MILLIS: i64 = 1 << 50;

/// How deeply a query may nest parentheses, brackets and braces. The evaluator, and the
/// parser's tree, recurse once per level: a query of thousands of nested parentheses would
/// exhaust a thread's stack (aborting the process) where this refuses it.
pub const MAX_NESTING: usize = 200;

/// The longest query text taken.
pub const MAX_QUERY_BYTES: usize = 256 << 10;

fn check_shape(query: &str) -> Result<()> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(Error::BadData(format!(
            "query of {} bytes: at most {MAX_QUERY_BYTES} are taken",
            query.len()
        )));
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in query.bytes() {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_NESTING {
        return Err(Error::BadData(format!(
            "query nested {deepest} levels deep: at most {MAX_NESTING} are taken"
        )));
    }
    Ok(())
}

pub(crate) fn offset_millis(o: &Option<ast::Offset>) -> i64 {
    match o {
        None => 0,
        Some(ast::Offset::Pos(d)) => millis(d),
        Some(ast::Offset::Neg(d)) => -millis(d),
    }
}

/// The time an `@` modifier fixes, if any.
pub(crate) fn at_millis(at: &Option<ast::AtModifier>, range: QueryRange) -> Option<i64> {
    match at {
        None => None,
        Some(ast::AtModifier::Start) => Some(range.start),
        Some(ast::AtModifier::End) => Some(range.end),
        Some(ast::AtModifier::At(t)) => Some(system_time_millis(t)),
    }
}

fn system_time_millis(t: &SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => millis(&d),
        Err(e) => -millis(&e.duration()),
    }
}

/// The matchers a selector stands for: its metric name as `__name__=` unless a matcher
/// already names it.
pub(crate) fn selector_matchers(vs: &ast::VectorSelector) -> Result<Vec<Vec<Matcher>>> {
    let convert = |list: &[promql_parser::label::Matcher]| -> Result<Vec<Matcher>> {
        let mut out: Vec<Matcher> = list.iter().map(convert_matcher).collect::<Result<_>>()?;
        if let Some(name) = &vs.name
            && !out.iter().any(|m| m.name == METRIC_NAME)
        {
            out.push(Matcher {
                name: METRIC_NAME.into(),
                op: MatchOp::Equal,
                value: name.clone(),
            });
        }
        Ok(out)
    };
    let mut sets = vec![convert(&vs.matchers.matchers)?];
    for alt in &vs.matchers.or_matchers {
        sets.push(convert(alt)?);
    }
    if vs.matchers.matchers.is_empty() && !vs.matchers.or_matchers.is_empty() {
        sets.remove(0);
    }
    Ok(sets)
}

fn convert_matcher(m: &promql_parser::label::Matcher) -> Result<Matcher> {
    use promql_parser::label::MatchOp as P;
    let op = match &m.op {
        P::Equal => MatchOp::Equal,
        P::NotEqual => MatchOp::NotEqual,
        P::Re(r) => MatchOp::Regex(dotall(r)?),
        P::NotRe(r) => MatchOp::NotRegex(dotall(r)?),
    };
    Ok(Matcher {
        name: m.name.clone(),
        op,
        value: m.value.clone(),
    })
}

/// Prometheus's regular expressions let `.` match a newline (they compile with `(?s)`).
fn dotall(r: &regex::Regex) -> Result<regex::Regex> {
    // Compiled programs are bounded (a matcher is a client's text): 1 MiB, past which the
    // query is refused rather than compiled.
    regex::RegexBuilder::new(&format!("(?s:{})", r.as_str()))
        .size_limit(1 << 20)
        .build()
        .map_err(|e| Error::BadData(format!("invalid regular expression {}: {e}", r.as_str())))
}

type Wanted = Vec<((usize, usize), Vec<Matcher>, i64, i64)>;

/// Every selector with the samples its evaluation over times `lo..=hi` may read.
fn collect_selectors(
    expr: &Expr,
    lo: i64,
    hi: i64,
    range: QueryRange,
    engine: &Engine,
    out: &mut Wanted,
) -> Result<()> {
    let refs = |offset: &Option<ast::Offset>, at: &Option<ast::AtModifier>| {
        let off = offset_millis(offset);
        match at_millis(at, range) {
            Some(t) => (t - off, t - off),
            None => (lo.saturating_sub(off), hi.saturating_sub(off)),
        }
    };
    match expr {
        Expr::VectorSelector(vs) => {
            let (a, b) = refs(&vs.offset, &vs.at);
            push_selector(vs, a.saturating_sub(engine.lookback_ms), b, out)?;
        }
        Expr::MatrixSelector(ms) => {
            let (a, b) = refs(&ms.vs.offset, &ms.vs.at);
            push_selector(&ms.vs, a.saturating_sub(millis(&ms.range)), b, out)?;
        }
        Expr::Subquery(sq) => {
            let (a, b) = refs(&sq.offset, &sq.at);
            collect_selectors(
                &sq.expr,
                a.saturating_sub(millis(&sq.range)),
                b,
                range,
                engine,
                out,
            )?;
        }
        Expr::Aggregate(a) => {
            collect_selectors(&a.expr, lo, hi, range, engine, out)?;
            if let Some(p) = &a.param {
                collect_selectors(p, lo, hi, range, engine, out)?;
            }
        }
        Expr::Unary(u) => collect_selectors(&u.expr, lo, hi, range, engine, out)?,
        Expr::Binary(b) => {
            collect_selectors(&b.lhs, lo, hi, range, engine, out)?;
            collect_selectors(&b.rhs, lo, hi, range, engine, out)?;
        }
        Expr::Paren(p) => collect_selectors(&p.expr, lo, hi, range, engine, out)?,
        Expr::Call(c) => {
            for arg in &c.args.args {
                collect_selectors(arg, lo, hi, range, engine, out)?;
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
    Ok(())
}

fn push_selector(vs: &ast::VectorSelector, mint: i64, maxt: i64, out: &mut Wanted) -> Result<()> {
    let node = vs as *const ast::VectorSelector as usize;
    for (i, set) in selector_matchers(vs)?.into_iter().enumerate() {
        // Alternatives of one selector (`{a="1" or b="2"}`) are fetched apart and merged.
        out.push(((node, i), set, mint, maxt));
    }
    Ok(())
}

/// The keys under which a selector's alternatives were fetched: the node's address (the
/// expression is borrowed unchanged from the fetch to the end of the evaluation) and the
/// alternative's place.
pub(crate) fn selector_keys(vs: &ast::VectorSelector) -> Vec<(usize, usize)> {
    let node = vs as *const ast::VectorSelector as usize;
    // As many as `selector_matchers` makes, without compiling their expressions again.
    let alternatives = if vs.matchers.matchers.is_empty() && !vs.matchers.or_matchers.is_empty() {
        vs.matchers.or_matchers.len()
    } else {
        1 + vs.matchers.or_matchers.len()
    };
    (0..alternatives).map(|i| (node, i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A storage with no series that notes each selector it is asked for.
    #[derive(Default)]
    struct Noting(Mutex<Vec<String>>);

    #[async_trait::async_trait]
    impl Storage for Noting {
        async fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<Series>> {
            let names: Vec<String> = matchers
                .iter()
                .map(|m| format!("{}={}", m.name, m.value))
                .collect();
            self.0
                .lock()
                .unwrap()
                .push(format!("{} {mint}..{maxt}", names.join(",")));
            Ok(Vec::new())
        }
    }

    #[tokio::test]
    async fn identical_selectors_are_read_once() {
        let storage = Noting::default();
        let engine = Engine::default();
        let plan = engine
            .plan(
                "x + x + y + rate(x[5m]) + x offset 1h",
                QueryRange::instant(7_200_000),
                false,
            )
            .unwrap();
        engine.fetch(&storage, &plan).await.unwrap();
        let mut asked = storage.0.into_inner().unwrap();
        asked.sort();
        // `x` at an instant reads its lookback, as `x[5m]` does: one read for the three;
        // `x offset 1h` and `y` are others.
        assert_eq!(
            asked,
            [
                "__name__=x 3300000..3600000",
                "__name__=x 6900000..7200000",
                "__name__=y 6900000..7200000"
            ]
        );
    }
}
