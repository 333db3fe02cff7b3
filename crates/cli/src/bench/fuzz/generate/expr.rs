//! Expressions: predicates, values of a type, aggregates, windows and subqueries.

use rand::Rng;
use rand::seq::IndexedRandom;

use super::super::ast::{Expr, Kind, Query, Select, SortKey, Source, Ty, Window};
use super::super::data::{STRINGS, Table};
use super::{Col, Gen, and_opt};

impl Gen<'_> {
    pub(super) fn column_of(&mut self, scope: &[Col], ty: Ty) -> Option<Expr> {
        let of: Vec<&Col> = scope.iter().filter(|c| c.ty == ty).collect();
        of.choose(&mut self.rng).map(|c| c.expr())
    }

    /// A literal comparable with values of `ty` (an aggregate's result, say).
    pub(super) fn literal_like(&mut self, ty: Ty) -> Expr {
        match ty {
            Ty::BigInt | Ty::Int => Expr::lit(Ty::BigInt, self.rng.random_range(0..6).to_string()),
            other => self.literal(other),
        }
    }

    /// A predicate over `scope`, `depth` levels of AND/OR/NOT at most.
    pub(super) fn bool_expr(&mut self, scope: &[Col], depth: usize, subqueries: bool) -> Expr {
        if depth > 0 && self.chance(0.45) {
            return match self.pick(&[4, 3, 1, 1]) {
                0 => Expr::and(
                    self.bool_expr(scope, depth - 1, subqueries),
                    self.bool_expr(scope, depth - 1, subqueries),
                ),
                1 => Expr::bin(
                    Ty::Bool,
                    "OR",
                    self.bool_expr(scope, depth - 1, subqueries),
                    self.bool_expr(scope, depth - 1, subqueries),
                ),
                2 => Expr::not(self.bool_expr(scope, depth - 1, subqueries)),
                _ => {
                    let when = self.bool_expr(scope, depth - 1, false);
                    let then = self.bool_expr(scope, depth - 1, false);
                    let otherwise = self.bool_expr(scope, depth - 1, false);
                    Expr::new(
                        Ty::Bool,
                        Kind::Case(vec![(when, then)], Some(Box::new(otherwise))),
                    )
                }
            };
        }
        let col = scope.choose(&mut self.rng).expect("a column").clone();
        let lhs = if self.chance(0.8) {
            col.expr()
        } else {
            self.value(col.ty, scope, 1, false)
        };
        let weights = [6, 2, 2, 2, 3, 1, if subqueries { 4 } else { 0 }];
        match self.pick(&weights) {
            0 => {
                let rhs = if self.chance(0.6) {
                    self.literal(col.ty)
                } else {
                    let others: Vec<&Col> =
                        scope.iter().filter(|c| c.ty.comparable(col.ty)).collect();
                    others
                        .choose(&mut self.rng)
                        .expect("the column itself")
                        .expr()
                };
                let op = if col.ty == Ty::Bool {
                    *["=", "<>", "IS DISTINCT FROM", "IS NOT DISTINCT FROM"]
                        .choose(&mut self.rng)
                        .expect("ops")
                } else {
                    *["=", "<>", "<", "<=", ">", ">=", "IS DISTINCT FROM"]
                        .choose(&mut self.rng)
                        .expect("ops")
                };
                Expr::bin(Ty::Bool, op, lhs, rhs)
            }
            1 => Expr::new(Ty::Bool, Kind::IsNull(Box::new(lhs), self.chance(0.5))),
            2 if col.ty != Ty::Bool => {
                let (lo, hi) = (self.literal(col.ty), self.literal(col.ty));
                let negated = self.chance(0.3);
                Expr::new(
                    Ty::Bool,
                    Kind::Between(Box::new(lhs), Box::new(lo), Box::new(hi), negated),
                )
            }
            3 => match self.column_of(scope, Ty::Str) {
                Some(s) => {
                    let pattern = self.pattern();
                    Expr::new(Ty::Bool, Kind::Like(Box::new(s), pattern, self.chance(0.3)))
                }
                None => Expr::new(Ty::Bool, Kind::IsNull(Box::new(lhs), true)),
            },
            4 => {
                let mut list: Vec<Expr> = (0..self.rng.random_range(1..4))
                    .map(|_| self.literal(col.ty))
                    .collect();
                if self.chance(0.35) {
                    let at = self.rng.random_range(0..=list.len());
                    list.insert(at, Expr::null(col.ty));
                }
                Expr::new(
                    Ty::Bool,
                    Kind::InList(Box::new(lhs), list, self.chance(0.5)),
                )
            }
            5 => match self.column_of(scope, Ty::Bool) {
                Some(b) => b,
                None => Expr::new(Ty::Bool, Kind::IsNull(Box::new(lhs), false)),
            },
            6 => self.subquery_predicate(scope, &col),
            _ => Expr::new(Ty::Bool, Kind::IsNull(Box::new(lhs), false)),
        }
    }

    /// `LIKE` patterns: `%` and `_` among the characters the strings hold.
    pub(super) fn pattern(&mut self) -> String {
        const PIECES: [&str; 12] = [
            "%", "_", "a", "b", "%_", "a%", "_b", "x_y", "é", "日", "%%", "",
        ];
        if self.chance(0.3) {
            return (0..self.rng.random_range(1..4))
                .map(|_| *PIECES.choose(&mut self.rng).expect("pieces"))
                .collect();
        }
        // A string the tables hold, with runs of it turned into `%` and characters into `_`
        // (several literal parts between `%`s, as in `'%special%requests%'`), and now and
        // then one character changed so that it nearly matches.
        let text: Vec<char> = STRINGS
            .choose(&mut self.rng)
            .expect("strings")
            .chars()
            .collect();
        // Half the patterns have no `_`: only `%` patterns go to Floe's own LIKE matcher.
        let wildcards = if self.chance(0.5) {
            [6, 3, 1]
        } else {
            [6, 3, 0]
        };
        let mut pattern = String::new();
        if self.chance(0.3) {
            pattern.push('%');
        }
        let mut at = 0;
        while at < text.len() {
            match self.pick(&wildcards) {
                1 => {
                    pattern.push('%');
                    at += self.rng.random_range(0..3);
                }
                2 => {
                    pattern.push('_');
                    at += 1;
                }
                _ => {
                    pattern.push(text[at]);
                    at += 1;
                }
            }
        }
        if self.chance(0.3) {
            pattern.push('%');
        }
        if self.chance(0.2) {
            pattern.push(*['a', 'z', 'é'].choose(&mut self.rng).expect("characters"));
        }
        pattern
    }

    /// `IN (subquery)`, `NOT IN`, `[NOT] EXISTS` (correlated by an equality or not), or a
    /// comparison with a scalar subquery.
    pub(super) fn subquery_predicate(&mut self, outer: &[Col], col: &Col) -> Expr {
        match self.pick(&[3, 3, 2]) {
            0 => {
                let (from, scope, join_filter) = self.from(2);
                let inner: Vec<&Col> = scope.iter().filter(|c| c.ty.comparable(col.ty)).collect();
                let Some(item) = inner.choose(&mut self.rng).map(|c| c.expr()) else {
                    return Expr::new(Ty::Bool, Kind::IsNull(Box::new(col.expr()), true));
                };
                let filter = if self.chance(0.6) {
                    Some(self.bool_expr(&scope, 1, false))
                } else {
                    None
                };
                let filter = match join_filter {
                    Some(cond) => Some(and_opt(filter, cond)),
                    None => filter,
                };
                let select = Select {
                    distinct: self.chance(0.2),
                    items: vec![(item, "c0".into())],
                    from: Some(from),
                    filter,
                    group: None,
                    having: None,
                };
                let negated = self.chance(0.5);
                Expr::new(
                    Ty::Bool,
                    Kind::InQuery(Box::new(col.expr()), Box::new(Query::of(select)), negated),
                )
            }
            1 => {
                let one = Expr::lit(Ty::BigInt, "1");
                let select = self.correlated(outer, one);
                let negated = self.chance(0.5);
                Expr::new(Ty::Bool, Kind::Exists(Box::new(Query::of(select)), negated))
            }
            _ => {
                let scalar = self.scalar(outer);
                let bound = self.literal_like(scalar.ty);
                let op = *["=", "<>", "<", ">="].choose(&mut self.rng).expect("ops");
                Expr::bin(Ty::Bool, op, scalar, bound)
            }
        }
    }

    /// `SELECT item FROM <source> WHERE [inner.x = outer.y AND] [p]`.
    pub(super) fn correlated(&mut self, outer: &[Col], item: Expr) -> Select {
        let (from, scope) = self.source(2);
        let mut filter = if self.chance(0.5) {
            Some(self.bool_expr(&scope, 1, false))
        } else {
            None
        };
        if !outer.is_empty() && self.chance(0.7) {
            let key = self.equality(&scope, outer, false);
            filter = Some(and_opt(filter, key));
        }
        Select {
            distinct: false,
            items: vec![(item, "c0".into())],
            from: Some(from),
            filter,
            group: None,
            having: None,
        }
    }

    /// `(SELECT agg(x) FROM … [correlated])`.
    pub(super) fn scalar(&mut self, outer: &[Col]) -> Expr {
        let placeholder = Expr::lit(Ty::BigInt, "1");
        let mut select = self.correlated(outer, placeholder);
        let scope = columns_of(&select, self.tables, &self.ctes);
        let agg = self.aggregate(&scope);
        let ty = agg.ty;
        select.items = vec![(agg, "c0".into())];
        Expr::new(ty, Kind::Scalar(Box::new(Query::of(select))))
    }

    /// An aggregate over `scope`'s columns.
    pub(super) fn aggregate(&mut self, scope: &[Col]) -> Expr {
        let col = scope.choose(&mut self.rng).expect("a column").clone();
        let arg = if self.chance(0.8) || col.ty == Ty::Bool {
            col.expr()
        } else {
            self.value(col.ty, scope, 1, false)
        };
        let distinct = self.chance(0.2);
        let numeric = arg.ty.numeric();
        match self.pick(&[
            2,
            3,
            if numeric { 3 } else { 0 },
            2,
            2,
            if numeric { 1 } else { 0 },
        ]) {
            0 => Expr::new(Ty::BigInt, Kind::Agg("count", false, None)),
            1 => Expr::new(
                Ty::BigInt,
                Kind::Agg("count", distinct, Some(Box::new(arg))),
            ),
            2 => {
                let ty = match arg.ty {
                    Ty::Int | Ty::BigInt => Ty::BigInt,
                    Ty::Double => Ty::Double,
                    _ => Ty::Dec28,
                };
                Expr::new(ty, Kind::Agg("sum", distinct, Some(Box::new(arg))))
            }
            3 => Expr::new(arg.ty, Kind::Agg("min", distinct, Some(Box::new(arg)))),
            4 => Expr::new(arg.ty, Kind::Agg("max", distinct, Some(Box::new(arg)))),
            _ => Expr::new(Ty::Double, Kind::Agg("avg", distinct, Some(Box::new(arg)))),
        }
    }

    /// An aggregate whose result has type `ty`.
    pub(super) fn aggregate_of(&mut self, ty: Ty, scope: &[Col]) -> Expr {
        match self.column_of(scope, ty) {
            Some(col) => {
                let name = if self.chance(0.5) { "min" } else { "max" };
                Expr::new(ty, Kind::Agg(name, false, Some(Box::new(col))))
            }
            None if ty == Ty::BigInt => Expr::new(Ty::BigInt, Kind::Agg("count", false, None)),
            None => self.literal(ty),
        }
    }

    /// A window function over `scope`, and whether the order of rows equal in every column
    /// decides which row gets which value (a numbering, a row frame): those are ordered by
    /// every column, so that which of two such rows comes first cannot change the answer
    /// (they give the same bag either way), and come only when `order_sensitive` allows.
    pub(super) fn window(&mut self, scope: &[Col], order_sensitive: bool) -> (Expr, bool) {
        let functions: &[&str] = if order_sensitive {
            &[
                "row_number",
                "rank",
                "dense_rank",
                "sum",
                "count",
                "min",
                "max",
            ]
        } else {
            &["rank", "dense_rank", "sum", "count", "min", "max"]
        };
        let func = *functions.choose(&mut self.rng).expect("functions");
        let partition: Vec<Expr> = (0..self.pick(&[2, 3, 1]))
            .map(|_| scope.choose(&mut self.rng).expect("a column").expr())
            .collect();
        let arg = match func {
            "sum" => scope.iter().filter(|c| c.ty.numeric()).collect::<Vec<_>>(),
            "count" | "min" | "max" => scope.iter().collect(),
            _ => vec![],
        }
        .choose(&mut self.rng)
        .map(|c| c.expr());
        let rows_frame = order_sensitive && arg.is_some() && self.chance(0.3);
        let total = func == "row_number" || rows_frame;
        let order_cols: Vec<Col> = if total {
            scope.to_vec()
        } else if matches!(func, "rank" | "dense_rank") || self.chance(0.5) {
            (0..self.rng.random_range(1..3))
                .map(|_| scope.choose(&mut self.rng).expect("a column").clone())
                .collect()
        } else {
            vec![]
        };
        let order = order_cols
            .iter()
            .map(|c| SortKey {
                expr: c.expr(),
                desc: self.chance(0.3),
                nulls_first: self.chance(0.5),
            })
            .collect();
        let ty = match (func, &arg) {
            ("sum", Some(a)) if a.ty.integer() => Ty::BigInt,
            ("sum", Some(a)) if a.ty.decimal() => Ty::Dec28,
            ("min" | "max", Some(a)) => a.ty,
            ("sum", _) => Ty::Double,
            _ => Ty::BigInt,
        };
        let func = if arg.is_none() && matches!(func, "sum" | "min" | "max") {
            "count"
        } else {
            func
        };
        let sensitive = func == "row_number" || rows_frame;
        let window = Expr::new(
            ty,
            Kind::Window(Box::new(Window {
                func,
                arg,
                partition,
                order,
                rows_frame,
            })),
        );
        (window, sensitive)
    }

    /// An expression of type `ty` over `scope`.
    pub(super) fn value(&mut self, ty: Ty, scope: &[Col], depth: usize, subqueries: bool) -> Expr {
        if ty == Ty::Bool {
            return self.bool_expr(scope, depth.min(1), false);
        }
        if depth == 0 || self.chance(0.35) {
            return match self.pick(&[6, 3, 1]) {
                0 => self
                    .column_of(scope, ty)
                    .unwrap_or_else(|| self.literal(ty)),
                1 => self.literal(ty),
                _ => Expr::null(ty),
            };
        }
        let sub = |g: &mut Self| g.value(ty, scope, depth - 1, false);
        let numeric = ty.numeric();
        let weights = [
            if numeric { 4 } else { 0 },
            2,
            2,
            1,
            if numeric { 1 } else { 0 },
            if ty == Ty::Str { 2 } else { 0 },
            2,
            if subqueries { 1 } else { 0 },
        ];
        match self.pick(&weights) {
            0 => {
                let op = match ty {
                    Ty::Int | Ty::BigInt | Ty::Double => {
                        *["+", "-", "*"].choose(&mut self.rng).expect("ops")
                    }
                    _ => *["+", "-"].choose(&mut self.rng).expect("ops"),
                };
                let a = sub(self);
                // Products only with a small positive constant: no overflow, and no -0.0
                // (which engines may group or order apart from 0.0).
                let b = match (op, ty) {
                    ("*", Ty::Double) => Expr::lit(
                        ty,
                        format!("CAST({}.0 AS DOUBLE)", self.rng.random_range(2..4)),
                    ),
                    ("*", _) => Expr::lit(ty, self.rng.random_range(2..4).to_string()),
                    _ => sub(self),
                };
                Expr::bin(ty, op, a, b)
            }
            1 => {
                let when = self.bool_expr(scope, 1, false);
                let (then, otherwise) = (sub(self), sub(self));
                Expr::new(
                    ty,
                    Kind::Case(vec![(when, then)], Some(Box::new(otherwise))),
                )
            }
            2 => Expr::new(ty, Kind::Func("coalesce", vec![sub(self), sub(self)])),
            3 => Expr::new(ty, Kind::Func("nullif", vec![sub(self), sub(self)])),
            4 => Expr::new(ty, Kind::Func("abs", vec![sub(self)])),
            5 => match self.pick(&[1, 1, 2]) {
                0 => Expr::new(ty, Kind::Func("upper", vec![sub(self)])),
                1 => Expr::new(ty, Kind::Func("lower", vec![sub(self)])),
                _ => Expr::bin(ty, "||", sub(self), sub(self)),
            },
            6 => self.cast_to(ty, scope, depth),
            _ => {
                let scalar = self.scalar(scope);
                if scalar.ty == ty {
                    scalar
                } else {
                    self.literal(ty)
                }
            }
        }
    }

    /// `CAST(e AS ty)` from a type whose values all convert to `ty` the same way in both
    /// engines (widening only; to text only from integers, dates and booleans).
    pub(super) fn cast_to(&mut self, ty: Ty, scope: &[Col], depth: usize) -> Expr {
        let from: &[Ty] = match ty {
            Ty::BigInt => &[Ty::Int],
            Ty::Double => &[Ty::Int, Ty::BigInt],
            Ty::Dec9 => &[Ty::Int],
            Ty::Dec28 => &[Ty::Int, Ty::BigInt, Ty::Dec9],
            Ty::Date => &[Ty::Ts],
            Ty::Str => &[Ty::Int, Ty::BigInt, Ty::Date, Ty::Bool],
            _ => &[],
        };
        match from.choose(&mut self.rng) {
            Some(&source) => {
                let e = self.value(source, scope, depth - 1, false);
                Expr::new(ty, Kind::Cast(Box::new(e)))
            }
            None => self
                .column_of(scope, ty)
                .unwrap_or_else(|| self.literal(ty)),
        }
    }
}

/// The columns a one-source `SELECT` made by [`Gen::correlated`] reads.
fn columns_of(select: &Select, tables: &[Table], ctes: &[(String, Vec<(String, Ty)>)]) -> Vec<Col> {
    let Some(Source::Table(name, alias)) = &select.from else {
        return vec![];
    };
    let columns: Vec<(String, Ty)> = match tables.iter().find(|t| t.name == name) {
        Some(t) => t
            .columns
            .iter()
            .map(|&(n, ty)| (n.to_string(), ty))
            .collect(),
        None => ctes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.clone())
            .unwrap_or_default(),
    };
    columns
        .into_iter()
        .map(|(name, ty)| Col {
            qual: alias.clone(),
            name,
            ty,
        })
        .collect()
}
