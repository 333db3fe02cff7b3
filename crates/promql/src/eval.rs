//! The evaluator: every expression is evaluated at every step of the query at once, into
//! series of points on the step grid, as Prometheus's engine does (`rangeEval`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use promql_parser::parser::{self as ast, Expr};

use crate::engine::{Engine, QueryRange, at_millis, millis, offset_millis, selector_keys};
use crate::labels::Labels;
use crate::value::{Point, Sample, Series};
use crate::{Error, Result, functions};

/// Each selector's series as fetched, by node and alternative.
pub(crate) type Fetched = HashMap<(usize, usize), Vec<Series>>;

/// An evaluated expression: series on the step grid (scalars are one series without
/// labels), or a string.
pub(crate) enum Val {
    Matrix(Vec<Series>),
    String(String),
}

/// One element of an instant vector at a step.
#[derive(Clone, Debug)]
pub(crate) struct El {
    pub labels: Labels,
    pub s: Sample,
    /// The sample's own time (what `timestamp()` answers).
    pub t: i64,
    pub drop_name: bool,
}

impl El {
    pub fn float(labels: Labels, f: f64, drop_name: bool) -> El {
        El {
            labels,
            s: Sample::Float(f),
            t: 0,
            drop_name,
        }
    }
}

/// How severe an annotation is (Prometheus's warnings and infos).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Warning,
    Info,
}

struct Shared<'a> {
    engine: &'a Engine,
    fetched: &'a Fetched,
    query: QueryRange,
    samples: Cell<usize>,
    deadline: std::time::Instant,
    ticks: Cell<u32>,
    notes: RefCell<Vec<(Level, String)>>,
}

pub(crate) struct Evaluator<'a> {
    shared: Rc<Shared<'a>>,
    pub start: i64,
    pub end: i64,
    pub interval: i64,
}

/// A range of samples a range function reads at each step: a matrix selector's series or a
/// subquery's, with the window's length and where it ends.
pub(crate) struct RangeArg {
    pub series: Vec<Series>,
    pub range: i64,
    pub offset: i64,
    pub at: Option<i64>,
}

pub(crate) fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        other => other,
    }
}

impl<'a> Evaluator<'a> {
    pub fn new(engine: &'a Engine, fetched: &'a Fetched, query: QueryRange) -> Self {
        let shared = Shared {
            engine,
            fetched,
            query,
            samples: Cell::new(0),
            deadline: std::time::Instant::now() + engine.limits.timeout,
            ticks: Cell::new(0),
            notes: RefCell::new(Vec::new()),
        };
        Evaluator {
            shared: Rc::new(shared),
            start: query.start,
            end: query.end,
            interval: query.step.max(1),
        }
    }

    fn sub(&self, start: i64, end: i64, interval: i64) -> Evaluator<'a> {
        Evaluator {
            shared: self.shared.clone(),
            start,
            end,
            interval,
        }
    }

    /// The warnings and infos the evaluation noted, as Prometheus words them, deduplicated.
    pub fn take_warnings(&self) -> Vec<String> {
        self.take_notes().into_iter().map(|(_, n)| n).collect()
    }

    pub fn take_notes(&self) -> Vec<(Level, String)> {
        let mut notes = std::mem::take(&mut *self.shared.notes.borrow_mut());
        let mut seen = std::collections::HashSet::new();
        notes.retain(|n| seen.insert(n.1.clone()));
        notes
    }

    /// Note a warning or info for the answer.
    pub fn annotate(&self, a: crate::annotations::Annotation) {
        self.shared
            .notes
            .borrow_mut()
            .push((a.level(), a.to_string()));
    }

    pub fn query(&self) -> QueryRange {
        self.shared.query
    }

    pub fn steps(&self) -> impl Iterator<Item = i64> + use<> {
        let (start, end, interval) = (self.start, self.end, self.interval);
        (0..)
            .map(move |i| start + i * interval)
            .take_while(move |t| *t <= end)
    }

    pub fn step_count(&self) -> usize {
        ((self.end - self.start) / self.interval + 1).max(0) as usize
    }

    /// Whether the evaluation may go on: an error once its time is up.
    pub fn check_time(&self) -> Result<()> {
        if self
            .shared
            .engine
            .cancelled
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(Error::Timeout("query execution (cancelled)"));
        }
        if std::time::Instant::now() > self.shared.deadline {
            return Err(Error::Timeout("query execution"));
        }
        Ok(())
    }

    /// One unit of work of an inner loop: the deadline is checked every 1,024 of them.
    pub fn tick(&self) -> Result<()> {
        let n = self.shared.ticks.get().wrapping_add(1);
        self.shared.ticks.set(n);
        if n.is_multiple_of(1024) {
            self.check_time()?;
        }
        Ok(())
    }

    /// Charge samples against the query's limit.
    pub fn charge(&self, n: usize) -> Result<()> {
        let total = self.shared.samples.get().saturating_add(n);
        self.shared.samples.set(total);
        if total > self.shared.engine.limits.max_samples {
            return Err(too_many_samples(self.shared.engine.limits.max_samples));
        }
        Ok(())
    }

    pub fn eval(&self, expr: &Expr) -> Result<Val> {
        match expr {
            Expr::Paren(p) => self.eval(&p.expr),
            Expr::NumberLiteral(n) => Ok(Val::Matrix(vec![self.constant(n.val)?])),
            Expr::StringLiteral(s) => Ok(Val::String(s.val.clone())),
            Expr::VectorSelector(vs) => Ok(Val::Matrix(self.vector_selector(vs, false)?)),
            Expr::MatrixSelector(_) | Expr::Subquery(_) => {
                // As a query of its own (an instant query answering a range vector): the
                // window at the evaluation time.
                let arg = self.range_arg(expr)?;
                let t = arg.at.unwrap_or(self.start) - arg.offset;
                let series = arg
                    .series
                    .into_iter()
                    .filter_map(|s| {
                        let points: Vec<Point> = s
                            .points
                            .into_iter()
                            .filter(|p| p.t > t - arg.range && p.t <= t)
                            .collect();
                        (!points.is_empty()).then_some(Series {
                            labels: s.labels,
                            points,
                            drop_name: false,
                        })
                    })
                    .collect();
                Ok(Val::Matrix(series))
            }
            Expr::Unary(u) => {
                let mut m = self.matrix(&u.expr)?;
                for s in &mut m {
                    s.drop_name = true;
                    for p in &mut s.points {
                        p.s = match &p.s {
                            Sample::Float(f) => Sample::Float(-f),
                            Sample::Histogram(h) => {
                                Sample::Histogram(std::sync::Arc::new(h.scaled(-1.0)))
                            }
                        };
                    }
                }
                Ok(Val::Matrix(m))
            }
            Expr::Binary(b) => Ok(Val::Matrix(crate::binary::eval(self, b)?)),
            Expr::Aggregate(a) => Ok(Val::Matrix(crate::aggregate::eval(self, a)?)),
            Expr::Call(c) => Ok(Val::Matrix(self.call(c)?)),
            Expr::Extension(_) => Err(Error::BadData("unsupported expression".into())),
        }
    }

    /// Evaluate an expression that must give series.
    pub fn matrix(&self, expr: &Expr) -> Result<Vec<Series>> {
        match self.eval(expr)? {
            Val::Matrix(m) => Ok(m),
            Val::String(_) => Err(Error::Execution(
                "expected a vector or scalar, got a string".into(),
            )),
        }
    }

    /// A scalar's value at every step.
    pub fn scalar_steps(&self, expr: &Expr) -> Result<Vec<f64>> {
        let m = self.matrix(expr)?;
        let mut out = vec![f64::NAN; self.step_count()];
        if let Some(s) = m.first() {
            for p in &s.points {
                let i = ((p.t - self.start) / self.interval) as usize;
                if let (Some(slot), Some(f)) = (out.get_mut(i), p.s.float()) {
                    *slot = f;
                }
            }
        }
        Ok(out)
    }

    fn constant(&self, v: f64) -> Result<Series> {
        self.charge(self.step_count())?;
        Ok(Series {
            labels: Labels::empty(),
            points: self
                .steps()
                .map(|t| Point {
                    t,
                    s: Sample::Float(v),
                })
                .collect(),
            drop_name: false,
        })
    }

    /// The series a selector fetched (its alternatives merged).
    fn selected(&self, vs: &ast::VectorSelector) -> Result<Vec<Series>> {
        let keys = selector_keys(vs);
        if keys.len() == 1 {
            return Ok(self
                .shared
                .fetched
                .get(&keys[0])
                .cloned()
                .unwrap_or_default());
        }
        let mut merged: Vec<Series> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for k in keys {
            for s in self.shared.fetched.get(&k).into_iter().flatten() {
                if seen.insert(s.labels.clone()) {
                    merged.push(s.clone());
                }
            }
        }
        Ok(merged)
    }

    /// An instant selector at every step: each series' newest sample no older than the
    /// lookback, unless that sample is a stale marker. With `timestamps`, the value is the
    /// sample's own time in seconds (`timestamp()`).
    pub fn vector_selector(
        &self,
        vs: &ast::VectorSelector,
        timestamps: bool,
    ) -> Result<Vec<Series>> {
        let offset = offset_millis(&vs.offset);
        let at = at_millis(&vs.at, self.query());
        let lookback = self.shared.engine.lookback_ms;
        let mut out = Vec::new();
        for s in self.selected(vs)? {
            self.check_time()?;
            let mut points = Vec::new();
            let mut cursor = 0usize;
            for ts in self.steps() {
                self.tick()?;
                let r = at.unwrap_or(ts) - offset;
                // Newest point at or before r: points are in time order and r never decreases.
                if at.is_some() {
                    cursor = s.points.partition_point(|p| p.t <= r);
                } else {
                    while cursor < s.points.len() && s.points[cursor].t <= r {
                        cursor += 1;
                    }
                }
                let Some(p) = cursor.checked_sub(1).map(|i| &s.points[i]) else {
                    continue;
                };
                if p.t <= r - lookback || p.s.is_stale() {
                    continue;
                }
                let sample = if timestamps {
                    Sample::Float(p.t as f64 / 1000.0)
                } else {
                    p.s.clone()
                };
                // Charged as it is made: a subquery of a fine step is stopped by the limit
                // long before its points fill memory.
                self.charge(sample.weight())?;
                points.push(Point { t: ts, s: sample });
            }
            if !points.is_empty() {
                out.push(Series {
                    labels: s.labels.clone(),
                    points,
                    drop_name: timestamps,
                });
            }
        }
        Ok(out)
    }

    /// The argument of a range function: a matrix selector's fetched series, or a subquery's
    /// evaluation.
    pub fn range_arg(&self, expr: &Expr) -> Result<RangeArg> {
        match unparen(expr) {
            Expr::MatrixSelector(ms) => {
                let mut series = self.selected(&ms.vs)?;
                for s in &mut series {
                    s.points.retain(|p| !p.s.is_stale());
                }
                series.retain(|s| !s.points.is_empty());
                Ok(RangeArg {
                    series,
                    range: millis(&ms.range),
                    offset: offset_millis(&ms.vs.offset),
                    at: at_millis(&ms.vs.at, self.query()),
                })
            }
            Expr::Subquery(sq) => {
                let offset = offset_millis(&sq.offset);
                let range = millis(&sq.range);
                let at = at_millis(&sq.at, self.query());
                let step = sq
                    .step
                    .as_ref()
                    .map(millis)
                    .unwrap_or(self.shared.engine.default_subquery_step_ms)
                    .max(1);
                let (ref_start, ref_end) = match at {
                    Some(t) => (t - offset, t - offset),
                    None => (self.start - offset, self.end - offset),
                };
                // The first step after the window's start that is a multiple of the step.
                let first = ref_start - range;
                let mut start = step * (first / step);
                if start <= first {
                    start += step;
                }
                // Each inner step is work whether or not a series has a sample there: a
                // millisecond step over months would run for the whole deadline.
                let inner_steps = (ref_end - start) / step + 1;
                if inner_steps > MAX_SUBQUERY_STEPS {
                    return Err(Error::BadData(format!(
                        "subquery of {inner_steps} steps: at most {MAX_SUBQUERY_STEPS} are evaluated (use a longer step)"
                    )));
                }
                let mut series = if start <= ref_end {
                    self.sub(start, ref_end, step).matrix(&sq.expr)?
                } else {
                    Vec::new()
                };
                for s in &mut series {
                    if s.drop_name {
                        s.labels = s.labels.without_name();
                        s.drop_name = false;
                    }
                    for p in &mut s.points {
                        if let Sample::Histogram(h) = &p.s
                            && h.counter_reset_hint != crate::histogram::CounterResetHint::Gauge
                        {
                            let mut h = (**h).clone();
                            h.counter_reset_hint = crate::histogram::CounterResetHint::Unknown;
                            p.s = Sample::Histogram(std::sync::Arc::new(h));
                        }
                    }
                }
                Ok(RangeArg {
                    series,
                    range,
                    offset,
                    at,
                })
            }
            _ => Err(Error::Execution("expected a range vector".into())),
        }
    }

    /// Apply `f` to the instant vectors of `args` at every step, collecting what it answers
    /// into series. At a single step the answer keeps `f`'s order (`sort()` relies on it).
    pub fn range_eval(
        &self,
        args: &[Option<&[Series]>],
        mut f: impl FnMut(&[Vec<El>], i64) -> Result<Vec<El>>,
    ) -> Result<Vec<Series>> {
        let mut cursors: Vec<Vec<usize>> = args
            .iter()
            .map(|a| vec![0; a.map_or(0, |m| m.len())])
            .collect();
        let mut vectors: Vec<Vec<El>> = vec![Vec::new(); args.len()];
        let instant = self.start == self.end;
        let mut out: Vec<Series> = Vec::new();
        let mut index: HashMap<Labels, (usize, i64)> = HashMap::new();
        for ts in self.steps() {
            self.check_time()?;
            for (i, arg) in args.iter().enumerate() {
                vectors[i].clear();
                let Some(m) = arg else { continue };
                for (j, s) in m.iter().enumerate() {
                    let c = &mut cursors[i][j];
                    while *c < s.points.len() && s.points[*c].t < ts {
                        *c += 1;
                    }
                    if let Some(p) = s.points.get(*c)
                        && p.t == ts
                    {
                        vectors[i].push(El {
                            labels: s.labels.clone(),
                            s: p.s.clone(),
                            t: ts,
                            drop_name: s.drop_name,
                        });
                    }
                }
            }
            let result = f(&vectors, ts)?;
            self.charge(result.len())?;
            if instant {
                // Repeated label sets are refused once names are dropped (engine::shape).
                return Ok(result
                    .into_iter()
                    .map(|el| Series {
                        labels: el.labels,
                        points: vec![Point { t: ts, s: el.s }],
                        drop_name: el.drop_name,
                    })
                    .collect());
            }
            for el in result {
                match index.get_mut(&el.labels) {
                    Some((k, last)) => {
                        if *last == ts {
                            return Err(same_labelset());
                        }
                        *last = ts;
                        out[*k].points.push(Point { t: ts, s: el.s });
                    }
                    None => {
                        index.insert(el.labels.clone(), (out.len(), ts));
                        out.push(Series {
                            labels: el.labels,
                            points: vec![Point { t: ts, s: el.s }],
                            drop_name: el.drop_name,
                        });
                    }
                }
            }
        }
        Ok(out)
    }

    fn call(&self, c: &ast::Call) -> Result<Vec<Series>> {
        let name = c.func.name;
        let args: Vec<&Expr> = c.args.args.iter().map(|a| a.as_ref()).collect();
        match name {
            "label_replace" => return functions::label_replace(self, &args),
            "label_join" => return functions::label_join(self, &args),
            "timestamp" => {
                if let Expr::VectorSelector(vs) = unparen(args[0]) {
                    return self.vector_selector(vs, true);
                }
            }
            _ => {}
        }
        if let Some(idx) = args
            .iter()
            .position(|a| matches!(unparen(a), Expr::MatrixSelector(_) | Expr::Subquery(_)))
        {
            return self.range_call(name, &args, idx);
        }
        let mut mats: Vec<Option<Vec<Series>>> = Vec::with_capacity(args.len());
        for a in &args {
            mats.push(match self.eval(a)? {
                Val::Matrix(m) => Some(m),
                Val::String(_) => None,
            });
        }
        let refs: Vec<Option<&[Series]>> = mats.iter().map(|m| m.as_deref()).collect();
        if name == "absent" {
            let labels = functions::absent_labels(args[0]);
            return self.range_eval(&refs, |v, _| {
                Ok(if v[0].is_empty() {
                    vec![El::float(labels.clone(), 1.0, false)]
                } else {
                    Vec::new()
                })
            });
        }
        self.range_eval(&refs, |v, ts| functions::instant(self, name, v, &args, ts))
    }

    /// A function over a range vector: its window at every step, series by series.
    fn range_call(&self, name: &str, args: &[&Expr], idx: usize) -> Result<Vec<Series>> {
        let arg = self.range_arg(args[idx])?;
        let mut scalars: Vec<Option<Vec<f64>>> = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            scalars.push(if i == idx {
                None
            } else {
                Some(self.scalar_steps(a)?)
            });
        }
        let drop_name = name != "last_over_time";
        let mut out = Vec::new();
        let mut window: Vec<Point> = Vec::new();
        for s in &arg.series {
            self.check_time()?;
            let mut points = Vec::new();
            let (mut lo, mut hi) = (0usize, 0usize);
            for (step, ts) in self.steps().enumerate() {
                self.tick()?;
                let end = arg.at.unwrap_or(ts) - arg.offset;
                let start = end - arg.range;
                if arg.at.is_some() {
                    lo = s.points.partition_point(|p| p.t <= start);
                    hi = s.points.partition_point(|p| p.t <= end);
                } else {
                    while lo < s.points.len() && s.points[lo].t <= start {
                        lo += 1;
                    }
                    hi = hi.max(lo);
                    while hi < s.points.len() && s.points[hi].t <= end {
                        hi += 1;
                    }
                }
                if lo >= hi {
                    continue;
                }
                window.clear();
                window.extend_from_slice(&s.points[lo..hi]);
                self.charge(window.len())?;
                let others: Vec<f64> = scalars
                    .iter()
                    .map(|v| v.as_ref().map_or(f64::NAN, |v| v[step]))
                    .collect();
                let ctx = functions::Window {
                    ts,
                    start,
                    end,
                    range: arg.range,
                    labels: &s.labels,
                    args: &others,
                };
                if let Some(sample) = functions::over_range(self, name, &window, &ctx)? {
                    points.push(Point { t: ts, s: sample });
                }
            }
            if name == "rate" || name == "increase" {
                let floats = points.iter().any(|p| p.s.float().is_some());
                functions::note_non_counter(self, &s.labels, floats, args[idx]);
            }
            if !points.is_empty() {
                out.push(Series {
                    labels: s.labels.clone(),
                    points,
                    drop_name,
                });
            }
        }
        if name == "absent_over_time" {
            let steps = self.step_count();
            let mut found = vec![false; steps];
            for s in &out {
                for p in &s.points {
                    found[((p.t - self.start) / self.interval) as usize] = true;
                }
            }
            let points: Vec<Point> = self
                .steps()
                .zip(found)
                .filter(|(_, f)| !f)
                .map(|(t, _)| Point {
                    t,
                    s: Sample::Float(1.0),
                })
                .collect();
            if points.is_empty() {
                return Ok(Vec::new());
            }
            return Ok(vec![Series {
                labels: functions::absent_labels(args[idx]),
                points,
                drop_name: true,
            }]);
        }
        Ok(out)
    }
}

/// Prometheus's refusal of a query past its sample limit, with the limit.
pub fn too_many_samples(limit: usize) -> Error {
    Error::Execution(format!(
        "query processing would load too many samples into memory in query execution (max-query-samples: {limit})"
    ))
}

/// How many steps one subquery may evaluate (a day at a tenth of a second is 864,000).
pub const MAX_SUBQUERY_STEPS: i64 = 10_000_000;

pub(crate) fn same_labelset() -> Error {
    Error::Execution("vector cannot contain metrics with the same labelset".into())
}
