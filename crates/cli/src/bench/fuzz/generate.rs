//! Random statements from a small grammar over the generated tables, kept to SQL that
//! DataFusion and DuckDB read with the same meaning: typed literals, no division, no
//! comparisons between decimals and doubles, explicit null order, windows whose rows are
//! numbered over a total order, `LIMIT` only under an `ORDER BY` of every output column, and
//! correlated subqueries correlated by one equality.

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use super::ast::{Body, Cte, Expr, Group, GroupShape, JoinKind, Kind, Query, Select, Source, Ty};
use super::data::{Table, literal, value};

mod expr;

/// One generated test: a statement, and a predicate over the columns of its first `SELECT`'s
/// `FROM` for the partitioning oracles.
#[derive(Clone, Debug)]
pub(super) struct Case {
    pub query: Query,
    pub pred: Expr,
}

/// A column in scope.
#[derive(Clone, Debug)]
struct Col {
    qual: String,
    name: String,
    ty: Ty,
}

impl Col {
    fn expr(&self) -> Expr {
        Expr::new(self.ty, Kind::Col(self.qual.clone(), self.name.clone()))
    }
}

struct Gen<'a> {
    rng: StdRng,
    tables: &'a [Table],
    /// The statement's CTEs so far, with their columns.
    ctes: Vec<(String, Vec<(String, Ty)>)>,
    aliases: usize,
}

/// The case of statement `seed`.
pub(super) fn case(seed: u64, tables: &[Table]) -> Case {
    let mut g = Gen {
        rng: StdRng::seed_from_u64(seed),
        tables,
        ctes: vec![],
        aliases: 0,
    };
    let mut ctes = Vec::new();
    for n in 0..g.pick(&[5, 3, 1]) {
        let (select, _, types) = g.select(&[], None, 1);
        let name = format!("w{n}");
        let columns = (0..types.len())
            .map(|i| (format!("c{i}"), types[i]))
            .collect();
        ctes.push(Cte {
            name: name.clone(),
            query: Query::of(select),
        });
        g.ctes.push((name, columns));
    }
    let (first, scope, types) = g.select(&[], None, 0);
    let mut body = Body::Select(Box::new(first));
    let mut sets = 0;
    while sets < 2 && g.chance(if sets == 0 { 0.3 } else { 0.2 }) {
        let op = *[
            "UNION",
            "UNION ALL",
            "INTERSECT",
            "EXCEPT",
            "INTERSECT ALL",
            "EXCEPT ALL",
        ]
        .choose(&mut g.rng)
        .expect("set operations");
        let (right, _, _) = g.select(&[], Some(&types), 1);
        body = Body::Set(op, Box::new(body), Box::new(Body::Select(Box::new(right))));
        sets += 1;
    }
    let mut query = Query {
        ctes,
        body,
        order: vec![],
        limit: None,
    };
    if g.chance(0.25) {
        query.order = (1..=types.len())
            .map(|i| (i, g.chance(0.5), g.chance(0.5)))
            .collect();
        let offset = if g.chance(0.3) {
            g.rng.random_range(1..4)
        } else {
            0
        };
        query.limit = Some((g.rng.random_range(0..9), offset));
    }
    let subqueries = g.chance(0.3);
    let pred = g.bool_expr(&scope, 2, subqueries);
    Case { query, pred }
}

impl Gen<'_> {
    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    /// An index drawn with these weights.
    fn pick(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        let mut at = self.rng.random_range(0..total);
        for (i, &w) in weights.iter().enumerate() {
            if at < w {
                return i;
            }
            at -= w;
        }
        weights.len() - 1
    }

    fn alias(&mut self, prefix: &str) -> String {
        self.aliases += 1;
        format!("{prefix}{}", self.aliases)
    }

    fn literal(&mut self, ty: Ty) -> Expr {
        let v = value(&mut self.rng, ty);
        Expr::lit(ty, literal(&v, ty))
    }

    /// A `SELECT`, its `FROM`'s columns and its output types; with `want`, its items have
    /// these types (or ones comparable, as the second operand of a set operation).
    fn select(
        &mut self,
        outer: &[Col],
        want: Option<&[Ty]>,
        depth: usize,
    ) -> (Select, Vec<Col>, Vec<Ty>) {
        let (from, scope, join_filter) = self.from(depth);
        let mut visible: Vec<Col> = scope.clone();
        visible.extend(outer.iter().cloned());
        let mut filter = if self.chance(0.7) {
            Some(self.bool_expr(&scope, 2, depth < 2))
        } else {
            None
        };
        if self.chance(0.2) {
            // A filter fixing a column to a constant.
            let col = scope.choose(&mut self.rng).expect("a column").clone();
            let fixed = Expr::bin(Ty::Bool, "=", col.expr(), self.literal(col.ty));
            filter = Some(and_opt(filter, fixed));
        }
        if let Some(cond) = join_filter {
            filter = Some(and_opt(filter, cond));
        }
        let mut select = Select {
            distinct: false,
            items: vec![],
            from: Some(from),
            filter,
            group: None,
            having: None,
        };
        let mode = match want {
            Some(_) => self.pick(&[3, 1, 0]),
            None => self.pick(&[5, 3, 2]),
        };
        let mut types = Vec::new();
        let count = want.map_or_else(|| self.rng.random_range(1..5), |w| w.len());
        match mode {
            // Plain, maybe DISTINCT, maybe with scalar subqueries.
            0 => {
                select.distinct = self.chance(0.15);
                for i in 0..count {
                    let ty = self.item_type(want, i, &scope);
                    let e = if self.chance(0.6) {
                        self.column_of(&scope, ty)
                            .unwrap_or_else(|| self.value(ty, &scope, 1, depth < 2))
                    } else {
                        self.value(ty, &scope, 2, depth < 2)
                    };
                    types.push(e.ty);
                    select.items.push((e, format!("c{i}")));
                }
            }
            // Grouped.
            1 => {
                let mut keys: Vec<Expr> = Vec::new();
                if want.is_none() {
                    for _ in 0..self.pick(&[2, 4, 3, 1]) {
                        let col = scope.choose(&mut self.rng).expect("a column").expr();
                        if !keys.iter().any(|k| k.sql() == col.sql()) {
                            keys.push(col);
                        }
                    }
                }
                for key in &keys {
                    if self.chance(0.7) {
                        select.items.push((key.clone(), String::new()));
                    }
                }
                let aggregates = if select.items.is_empty() { 1 } else { 0 };
                for i in 0..count.max(aggregates) {
                    let e = match want {
                        Some(_) => {
                            let ty = self.item_type(want, i, &scope);
                            self.aggregate_of(ty, &scope)
                        }
                        None => self.aggregate(&scope),
                    };
                    select.items.push((e, String::new()));
                }
                for (i, (e, name)) in select.items.iter_mut().enumerate() {
                    *name = format!("c{i}");
                    types.push(e.ty);
                }
                if !keys.is_empty() || self.chance(0.2) {
                    let shape = match self.pick(&[6, 2, 2]) {
                        1 if !keys.is_empty() => GroupShape::Rollup,
                        2 if !keys.is_empty() => {
                            let mut sets = vec![(0..keys.len()).collect::<Vec<_>>()];
                            for _ in 0..self.rng.random_range(1..3) {
                                let set: Vec<usize> =
                                    (0..keys.len()).filter(|_| self.chance(0.5)).collect();
                                sets.push(set);
                            }
                            GroupShape::Sets(sets)
                        }
                        _ => GroupShape::Plain,
                    };
                    if !keys.is_empty() {
                        select.group = Some(Group { keys, shape });
                    }
                }
                if self.chance(0.3) {
                    let agg = self.aggregate(&scope);
                    let bound = self.literal_like(agg.ty);
                    let op = *["=", "<>", "<", ">=", ">"]
                        .choose(&mut self.rng)
                        .expect("ops");
                    select.having = Some(Expr::bin(Ty::Bool, op, agg, bound));
                }
            }
            // Windows.
            _ => {
                // One numbering or row frame at most: two of them, ordered differently,
                // pair up rows equal in every column in an order the answer cannot fix.
                let mut order_sensitive = false;
                for i in 0..count {
                    let e = if i == 0 || self.chance(0.4) {
                        let (e, sensitive) = self.window(&scope, !order_sensitive);
                        order_sensitive |= sensitive;
                        e
                    } else {
                        let ty = scope.choose(&mut self.rng).expect("a column").ty;
                        self.value(ty, &scope, 1, false)
                    };
                    types.push(e.ty);
                    select.items.push((e, format!("c{i}")));
                }
            }
        }
        (select, scope, types)
    }

    /// The type of output column `i`: `want`'s (or, now and then, one of its family), or a
    /// column's type.
    fn item_type(&mut self, want: Option<&[Ty]>, i: usize, scope: &[Col]) -> Ty {
        match want {
            Some(types) => {
                let ty = types[i];
                if self.chance(0.3) {
                    match ty {
                        Ty::Int => return Ty::BigInt,
                        Ty::BigInt => return Ty::Int,
                        Ty::Dec9 => return Ty::Dec28,
                        Ty::Dec28 => return Ty::Dec9,
                        _ => {}
                    }
                }
                ty
            }
            None => scope.choose(&mut self.rng).expect("a column").ty,
        }
    }

    /// A `FROM` of one to three sources, its columns, and, for a cross join, the filter
    /// that goes with it.
    fn from(&mut self, depth: usize) -> (Source, Vec<Col>, Option<Expr>) {
        let (mut from, mut scope) = self.source(depth);
        let mut filter = None;
        let joins = self.pick(&[5, 4, 1]);
        for n in 0..joins {
            let (right, right_scope) = self.source(depth);
            let kinds = [
                JoinKind::Inner,
                JoinKind::Inner,
                JoinKind::Left,
                JoinKind::Left,
                JoinKind::Right,
                JoinKind::Full,
                JoinKind::Cross,
                JoinKind::Comma,
            ];
            // A comma binds looser than JOIN: `a, b JOIN c ON …` cannot see `a` in its ON.
            let kinds = if n + 1 < joins {
                &kinds[..7]
            } else {
                &kinds[..]
            };
            let kind = *kinds.choose(&mut self.rng).expect("join kinds");
            let key = self.equality(&scope, &right_scope, true);
            let on = match kind {
                JoinKind::Cross | JoinKind::Comma => {
                    filter = Some(and_opt(filter, key));
                    None
                }
                _ if self.chance(0.35) => {
                    // An extra condition, on one side or across both.
                    let mut both = scope.clone();
                    both.extend(right_scope.iter().cloned());
                    let side = match self.pick(&[2, 2, 1]) {
                        0 => &right_scope,
                        1 => &scope,
                        _ => &both,
                    };
                    let side = side.clone();
                    Some(Expr::and(key, self.bool_expr(&side, 1, false)))
                }
                _ => Some(key),
            };
            from = Source::Join(kind, Box::new(from), Box::new(right), on);
            scope.extend(right_scope);
        }
        (from, scope, filter)
    }

    /// `l = r` between comparable columns of the two sides (or, with `loose`, now and then
    /// `l <= r`; or a comparison of a column with a constant when none are comparable).
    fn equality(&mut self, left: &[Col], right: &[Col], loose: bool) -> Expr {
        for _ in 0..8 {
            let l = left.choose(&mut self.rng).expect("a column");
            let candidates: Vec<&Col> = right.iter().filter(|r| r.ty.comparable(l.ty)).collect();
            if let Some(r) = candidates.choose(&mut self.rng) {
                let op = if loose && self.chance(0.1) { "<=" } else { "=" };
                return Expr::bin(Ty::Bool, op, l.expr(), r.expr());
            }
        }
        let r = right.choose(&mut self.rng).expect("a column").clone();
        Expr::bin(Ty::Bool, "=", r.expr(), self.literal(r.ty))
    }

    /// A table, a CTE or a derived table, with its columns.
    fn source(&mut self, depth: usize) -> (Source, Vec<Col>) {
        let choice = self.pick(&[7, if self.ctes.is_empty() { 0 } else { 5 }, 1]);
        if choice == 2 && depth < 2 {
            let (select, _, types) = self.select(&[], None, depth + 1);
            let alias = self.alias("q");
            let cols = (0..types.len())
                .map(|i| Col {
                    qual: alias.clone(),
                    name: format!("c{i}"),
                    ty: types[i],
                })
                .collect();
            return (Source::Derived(Box::new(Query::of(select)), alias), cols);
        }
        let (name, columns): (String, Vec<(String, Ty)>) = if choice == 1 {
            self.ctes.choose(&mut self.rng).expect("a CTE").clone()
        } else {
            let table = self.tables.choose(&mut self.rng).expect("a table");
            let columns = table
                .columns
                .iter()
                .map(|&(n, ty)| (n.to_string(), ty))
                .collect();
            (table.name.to_string(), columns)
        };
        let alias = self.alias("a");
        let cols = columns
            .into_iter()
            .map(|(name, ty)| Col {
                qual: alias.clone(),
                name,
                ty,
            })
            .collect();
        (Source::Table(name, alias), cols)
    }
}

fn and_opt(a: Option<Expr>, b: Expr) -> Expr {
    match a {
        Some(a) => Expr::and(a, b),
        None => b,
    }
}
