//! The statements the fuzzer makes, as a small tree: rendered to SQL that DataFusion and
//! DuckDB read with the same meaning (every operator parenthesized, every literal typed,
//! every sort key's null order spelled out), and taken apart by [`super::shrink`].

use std::fmt::Write;

/// The column types the tables hold, and so the types expressions are generated at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Ty {
    BigInt,
    Int,
    Double,
    /// `DECIMAL(9,2)`.
    Dec9,
    /// `DECIMAL(28,6)`.
    Dec28,
    Date,
    Ts,
    Str,
    Bool,
}

impl Ty {
    pub(super) fn sql(self) -> &'static str {
        match self {
            Ty::BigInt => "BIGINT",
            Ty::Int => "INT",
            Ty::Double => "DOUBLE",
            Ty::Dec9 => "DECIMAL(9,2)",
            Ty::Dec28 => "DECIMAL(28,6)",
            Ty::Date => "DATE",
            Ty::Ts => "TIMESTAMP",
            Ty::Str => "VARCHAR",
            Ty::Bool => "BOOLEAN",
        }
    }

    pub(super) fn integer(self) -> bool {
        matches!(self, Ty::BigInt | Ty::Int)
    }

    pub(super) fn decimal(self) -> bool {
        matches!(self, Ty::Dec9 | Ty::Dec28)
    }

    pub(super) fn numeric(self) -> bool {
        self.integer() || self.decimal() || self == Ty::Double
    }

    /// Whether the two compare, and unify in a `UNION`, without a cast the engines make
    /// differently: the same type, two integers, two decimals, or an integer with any
    /// number (never a decimal with a double, which DuckDB compares as doubles).
    pub(super) fn comparable(self, other: Ty) -> bool {
        self == other
            || (self.integer() && other.numeric())
            || (other.integer() && self.numeric())
            || (self.decimal() && other.decimal())
    }
}

/// An expression and the type it has.
#[derive(Clone, Debug)]
pub(super) struct Expr {
    pub ty: Ty,
    pub kind: Kind,
}

#[derive(Clone, Debug)]
pub(super) enum Kind {
    /// `qualifier.name`.
    Col(String, String),
    /// A literal, as SQL text (typed: `CAST('1.50' AS DECIMAL(9,2))`, `DATE '…'`).
    Lit(String),
    /// `CAST(NULL AS <ty>)`.
    Null,
    /// `(a <op> b)`: arithmetic, comparisons, `AND`, `OR`, `||`, `IS [NOT] DISTINCT FROM`.
    Bin(&'static str, Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    /// `e IS [NOT] NULL`.
    IsNull(Box<Expr>, bool),
    /// `e [NOT] BETWEEN lo AND hi`.
    Between(Box<Expr>, Box<Expr>, Box<Expr>, bool),
    /// `e [NOT] LIKE 'pattern'`.
    Like(Box<Expr>, String, bool),
    /// `e [NOT] IN (list)`.
    InList(Box<Expr>, Vec<Expr>, bool),
    /// `e [NOT] IN (query)`.
    InQuery(Box<Expr>, Box<Query>, bool),
    /// `[NOT] EXISTS (query)`.
    Exists(Box<Query>, bool),
    /// `(query)`, one row of one column.
    Scalar(Box<Query>),
    Case(Vec<(Expr, Expr)>, Option<Box<Expr>>),
    /// `name(args)`: `coalesce`, `nullif`, `abs`, `upper`, `lower`, `length`.
    Func(&'static str, Vec<Expr>),
    /// `CAST(e AS <ty>)`.
    Cast(Box<Expr>),
    /// `name([DISTINCT] arg)`, or `count(*)` without an argument.
    Agg(&'static str, bool, Option<Box<Expr>>),
    Window(Box<Window>),
}

/// `func(arg) OVER (PARTITION BY … ORDER BY … [ROWS BETWEEN 1 PRECEDING AND CURRENT ROW])`.
#[derive(Clone, Debug)]
pub(super) struct Window {
    pub func: &'static str,
    pub arg: Option<Expr>,
    pub partition: Vec<Expr>,
    pub order: Vec<SortKey>,
    pub rows_frame: bool,
}

#[derive(Clone, Debug)]
pub(super) struct SortKey {
    pub expr: Expr,
    pub desc: bool,
    pub nulls_first: bool,
}

/// `[WITH …] body [ORDER BY <every column> LIMIT n [OFFSET m]]`.
#[derive(Clone, Debug)]
pub(super) struct Query {
    pub ctes: Vec<Cte>,
    pub body: Body,
    /// Ordinals (from 1) with direction and null order; always every output column, so the
    /// rows a `LIMIT` keeps do not depend on how ties fall.
    pub order: Vec<(usize, bool, bool)>,
    pub limit: Option<(u32, u32)>,
}

#[derive(Clone, Debug)]
pub(super) struct Cte {
    pub name: String,
    pub query: Query,
}

#[derive(Clone, Debug)]
pub(super) enum Body {
    Select(Box<Select>),
    /// `left <op> right`, op one of `UNION`, `UNION ALL`, `INTERSECT`, … .
    Set(&'static str, Box<Body>, Box<Body>),
}

#[derive(Clone, Debug)]
pub(super) struct Select {
    pub distinct: bool,
    /// Expressions with their names.
    pub items: Vec<(Expr, String)>,
    pub from: Option<Source>,
    pub filter: Option<Expr>,
    pub group: Option<Group>,
    pub having: Option<Expr>,
}

#[derive(Clone, Debug)]
pub(super) enum Source {
    /// A table or a CTE, with its alias.
    Table(String, String),
    Derived(Box<Query>, String),
    /// `left <kind> JOIN right [ON cond]`; a cross join, or a comma, has no condition.
    Join(JoinKind, Box<Source>, Box<Source>, Option<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    Cross,
    Comma,
}

#[derive(Clone, Debug)]
pub(super) struct Group {
    pub keys: Vec<Expr>,
    pub shape: GroupShape,
}

#[derive(Clone, Debug)]
pub(super) enum GroupShape {
    Plain,
    Rollup,
    /// Each set by positions in `keys`.
    Sets(Vec<Vec<usize>>),
}

impl Expr {
    pub(super) fn new(ty: Ty, kind: Kind) -> Self {
        Self { ty, kind }
    }

    pub(super) fn lit(ty: Ty, text: impl Into<String>) -> Self {
        Self::new(ty, Kind::Lit(text.into()))
    }

    pub(super) fn null(ty: Ty) -> Self {
        Self::new(ty, Kind::Null)
    }

    pub(super) fn bin(ty: Ty, op: &'static str, a: Expr, b: Expr) -> Self {
        Self::new(ty, Kind::Bin(op, Box::new(a), Box::new(b)))
    }

    pub(super) fn and(a: Expr, b: Expr) -> Self {
        Self::bin(Ty::Bool, "AND", a, b)
    }

    pub(super) fn not(a: Expr) -> Self {
        Self::new(Ty::Bool, Kind::Not(Box::new(a)))
    }

    /// Whether an aggregate or window function occurs here outside subqueries.
    pub(super) fn aggregates(&self) -> bool {
        let mut found = false;
        self.visit(&mut |e| {
            found |= matches!(e.kind, Kind::Agg(..) | Kind::Window(_));
        });
        found
    }

    /// Calls `f` on this expression and every one inside it, subqueries left out.
    pub(super) fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        for child in self.children() {
            child.visit(f);
        }
    }

    /// The expressions directly inside this one (not those of subqueries).
    pub(super) fn children(&self) -> Vec<&Expr> {
        match &self.kind {
            Kind::Col(..) | Kind::Lit(_) | Kind::Null | Kind::Exists(..) | Kind::Scalar(_) => {
                vec![]
            }
            Kind::Bin(_, a, b) => vec![a, b],
            Kind::Not(a) | Kind::IsNull(a, _) | Kind::Like(a, ..) | Kind::Cast(a) => vec![a],
            Kind::InQuery(a, ..) => vec![a],
            Kind::Between(a, b, c, _) => vec![a, b, c],
            Kind::InList(a, list, _) => std::iter::once(&**a).chain(list).collect(),
            Kind::Case(whens, otherwise) => whens
                .iter()
                .flat_map(|(w, t)| [w, t])
                .chain(otherwise.as_deref())
                .collect(),
            Kind::Func(_, args) => args.iter().collect(),
            Kind::Agg(_, _, arg) => arg.as_deref().into_iter().collect(),
            Kind::Window(w) => w
                .arg
                .iter()
                .chain(&w.partition)
                .chain(w.order.iter().map(|k| &k.expr))
                .collect(),
        }
    }

    pub(super) fn render(&self, out: &mut String) {
        match &self.kind {
            Kind::Col(q, c) => {
                let _ = write!(out, "{q}.{c}");
            }
            Kind::Lit(text) => out.push_str(text),
            Kind::Null => {
                let _ = write!(out, "CAST(NULL AS {})", self.ty.sql());
            }
            Kind::Bin(op, a, b) => {
                out.push('(');
                a.render(out);
                let _ = write!(out, " {op} ");
                b.render(out);
                out.push(')');
            }
            Kind::Not(a) => {
                out.push_str("(NOT ");
                a.render(out);
                out.push(')');
            }
            Kind::IsNull(a, negated) => {
                out.push('(');
                a.render(out);
                out.push_str(if *negated {
                    " IS NOT NULL)"
                } else {
                    " IS NULL)"
                });
            }
            Kind::Between(a, lo, hi, negated) => {
                out.push('(');
                a.render(out);
                out.push_str(if *negated {
                    " NOT BETWEEN "
                } else {
                    " BETWEEN "
                });
                lo.render(out);
                out.push_str(" AND ");
                hi.render(out);
                out.push(')');
            }
            Kind::Like(a, pattern, negated) => {
                out.push('(');
                a.render(out);
                let not = if *negated { " NOT" } else { "" };
                let _ = write!(out, "{not} LIKE {})", quote(pattern));
            }
            Kind::InList(a, list, negated) => {
                out.push('(');
                a.render(out);
                out.push_str(if *negated { " NOT IN (" } else { " IN (" });
                for (i, e) in list.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    e.render(out);
                }
                out.push_str("))");
            }
            Kind::InQuery(a, q, negated) => {
                out.push('(');
                a.render(out);
                out.push_str(if *negated { " NOT IN (" } else { " IN (" });
                q.render(out);
                out.push_str("))");
            }
            Kind::Exists(q, negated) => {
                out.push_str(if *negated {
                    "(NOT EXISTS ("
                } else {
                    "(EXISTS ("
                });
                q.render(out);
                out.push_str("))");
            }
            Kind::Scalar(q) => {
                out.push('(');
                q.render(out);
                out.push(')');
            }
            Kind::Case(whens, otherwise) => {
                out.push_str("(CASE");
                for (w, t) in whens {
                    out.push_str(" WHEN ");
                    w.render(out);
                    out.push_str(" THEN ");
                    t.render(out);
                }
                if let Some(e) = otherwise {
                    out.push_str(" ELSE ");
                    e.render(out);
                }
                out.push_str(" END)");
            }
            Kind::Func(name, args) => {
                let _ = write!(out, "{name}(");
                render_list(out, args);
                out.push(')');
            }
            Kind::Cast(a) => {
                out.push_str("CAST(");
                a.render(out);
                let _ = write!(out, " AS {})", self.ty.sql());
            }
            Kind::Agg(name, distinct, arg) => {
                let _ = write!(out, "{name}(");
                match arg {
                    Some(arg) => {
                        if *distinct {
                            out.push_str("DISTINCT ");
                        }
                        arg.render(out);
                    }
                    None => out.push('*'),
                }
                out.push(')');
            }
            Kind::Window(w) => {
                let _ = write!(out, "{}(", w.func);
                if let Some(arg) = &w.arg {
                    arg.render(out);
                } else if w.func == "count" {
                    out.push('*');
                }
                out.push_str(") OVER (");
                if !w.partition.is_empty() {
                    out.push_str("PARTITION BY ");
                    render_list(out, &w.partition);
                }
                if !w.order.is_empty() {
                    if !w.partition.is_empty() {
                        out.push(' ');
                    }
                    out.push_str("ORDER BY ");
                    for (i, k) in w.order.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        k.expr.render(out);
                        out.push_str(direction(k.desc, k.nulls_first));
                    }
                    if w.rows_frame {
                        out.push_str(" ROWS BETWEEN 1 PRECEDING AND CURRENT ROW");
                    }
                }
                out.push(')');
            }
        }
    }

    pub(super) fn sql(&self) -> String {
        let mut out = String::new();
        self.render(&mut out);
        out
    }
}

fn direction(desc: bool, nulls_first: bool) -> &'static str {
    match (desc, nulls_first) {
        (false, false) => " ASC NULLS LAST",
        (false, true) => " ASC NULLS FIRST",
        (true, false) => " DESC NULLS LAST",
        (true, true) => " DESC NULLS FIRST",
    }
}

fn render_list(out: &mut String, list: &[Expr]) {
    for (i, e) in list.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        e.render(out);
    }
}

/// A string literal.
pub(super) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl Query {
    pub(super) fn of(select: Select) -> Self {
        Self {
            ctes: vec![],
            body: Body::Select(Box::new(select)),
            order: vec![],
            limit: None,
        }
    }

    pub(super) fn render(&self, out: &mut String) {
        if !self.ctes.is_empty() {
            out.push_str("WITH ");
            for (i, cte) in self.ctes.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{} AS (", cte.name);
                cte.query.render(out);
                out.push(')');
            }
            out.push(' ');
        }
        self.body.render(out);
        if !self.order.is_empty() {
            out.push_str(" ORDER BY ");
            for (i, (ordinal, desc, nulls_first)) in self.order.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{ordinal}{}", direction(*desc, *nulls_first));
            }
        }
        if let Some((limit, offset)) = self.limit {
            let _ = write!(out, " LIMIT {limit}");
            if offset > 0 {
                let _ = write!(out, " OFFSET {offset}");
            }
        }
    }

    pub(super) fn sql(&self) -> String {
        let mut out = String::new();
        self.render(&mut out);
        out
    }

    /// The first `SELECT` of the body: the one that names the columns.
    pub(super) fn first(&self) -> &Select {
        self.body.first()
    }
}

impl Body {
    pub(super) fn first(&self) -> &Select {
        match self {
            Body::Select(s) => s,
            Body::Set(_, left, _) => left.first(),
        }
    }

    fn render(&self, out: &mut String) {
        match self {
            Body::Select(s) => s.render(out),
            Body::Set(op, left, right) => {
                // Parenthesized operands keep INTERSECT's precedence over UNION out of play.
                out.push('(');
                left.render(out);
                let _ = write!(out, ") {op} (");
                right.render(out);
                out.push(')');
            }
        }
    }
}

impl Select {
    pub(super) fn render(&self, out: &mut String) {
        out.push_str(if self.distinct {
            "SELECT DISTINCT "
        } else {
            "SELECT "
        });
        for (i, (e, name)) in self.items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            e.render(out);
            let _ = write!(out, " AS {name}");
        }
        if let Some(from) = &self.from {
            out.push_str(" FROM ");
            from.render(out);
        }
        if let Some(filter) = &self.filter {
            out.push_str(" WHERE ");
            filter.render(out);
        }
        if let Some(group) = &self.group {
            out.push_str(" GROUP BY ");
            match &group.shape {
                GroupShape::Plain => render_list(out, &group.keys),
                GroupShape::Rollup => {
                    out.push_str("ROLLUP (");
                    render_list(out, &group.keys);
                    out.push(')');
                }
                GroupShape::Sets(sets) => {
                    out.push_str("GROUPING SETS (");
                    for (i, set) in sets.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        out.push('(');
                        for (j, &k) in set.iter().enumerate() {
                            if j > 0 {
                                out.push_str(", ");
                            }
                            group.keys[k].render(out);
                        }
                        out.push(')');
                    }
                    out.push(')');
                }
            }
        }
        if let Some(having) = &self.having {
            out.push_str(" HAVING ");
            having.render(out);
        }
    }
}

impl Source {
    fn render(&self, out: &mut String) {
        match self {
            Source::Table(name, alias) => {
                let _ = write!(out, "{name} AS {alias}");
            }
            Source::Derived(q, alias) => {
                out.push('(');
                q.render(out);
                let _ = write!(out, ") AS {alias}");
            }
            Source::Join(kind, left, right, on) => {
                left.render(out);
                out.push_str(match kind {
                    JoinKind::Inner => " JOIN ",
                    JoinKind::Left => " LEFT JOIN ",
                    JoinKind::Right => " RIGHT JOIN ",
                    JoinKind::Full => " FULL JOIN ",
                    JoinKind::Cross => " CROSS JOIN ",
                    JoinKind::Comma => ", ",
                });
                // A join on the right is parenthesized so it binds as generated.
                let nested = matches!(**right, Source::Join(..));
                if nested {
                    out.push('(');
                }
                right.render(out);
                if nested {
                    out.push(')');
                }
                if let Some(on) = on {
                    out.push_str(" ON ");
                    on.render(out);
                }
            }
        }
    }
}
