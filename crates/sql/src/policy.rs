//! Row and column policies in Floe's SQL ([`floe_catalog::governance::policies`]): a table
//! read by a principal under a policy is [`PolicyTable`], which reads its table through
//! [`PolicyExec`] over the policy's filter and masks.
//!
//! Why no rewrite, pushdown or cache can show a filtered row or a masked value:
//! - The catalog hands the engine a `PolicyTable` in place of the table for that caller, so
//!   every plan over the table, from every front door, starts from it; its schema is the
//!   masked one (hidden columns are not there to name).
//! - It takes from the query only filters that cannot fail and read no masked column
//!   ([`PolicyTable::cannot_leak`]: comparisons, boolean logic, null tests, `IN` lists of
//!   columns and literals, casts that cannot fail), and only when the policy's own filter
//!   is made of the same, which give the same rows before or after the policy's filter and
//!   are evaluated with it, exactly (pruning files, filtering in the scan; not again above
//!   it); it has no statistics of its own, and
//!   is not an [`IcebergTableProvider`], so rewrites that match Floe's table (inserts,
//!   metadata reads, statistics) do not see one.
//! - Its scan is `PolicyExec` over the masks' projection over the row filter over the table's
//!   own scan. `PolicyExec` lets no filter, projection or limit through (DataFusion's defaults
//!   for an operator that says nothing): the query's predicates, dynamic filters of joins and
//!   top-k sorts stay above it and are evaluated on filtered rows and masked values only, so
//!   even an expression that fails on some value cannot fail on a row the policy hides.
//!   Below it only the policy's own filter, and the query's filters that cannot leak, are
//!   pushed into the scan. Of those conditions, the ones the bounds of the files the scan
//!   reads prove true for every row are dropped ([`unproven`]).
//! - Its statistics are those of the filter and projection below it: inexact under a row
//!   filter that the files' bounds do not prove (no `count(*)` answered from file counts),
//!   none for masked values; when the bounds prove the whole filter, every row the scan reads
//!   is the principal's, and the files' counts are the answer.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::TaskContext;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{Expr, ExprSchemable, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use floe_catalog::governance::policies::{AppliedPolicy, Mask};

use crate::scan::field_ids::FieldIds;

/// How one column of a [`PolicyTable`] reads, by its position in the table's own schema.
#[derive(Debug, Clone)]
enum Source {
    Raw(usize),
    Null(usize),
    Hash(usize),
    Expression(usize, String),
}

impl Source {
    fn column(&self) -> usize {
        match self {
            Source::Raw(i) | Source::Null(i) | Source::Hash(i) | Source::Expression(i, _) => *i,
        }
    }
}

/// A table as a principal under a row or column policy reads it.
#[derive(Debug)]
pub struct PolicyTable {
    inner: Arc<dyn TableProvider>,
    /// The table's name, for `EXPLAIN`.
    name: String,
    policy: AppliedPolicy,
    /// The field ids of the table's top-level columns.
    ids: FieldIds,
    /// The masked schema, and where each of its columns comes from.
    schema: SchemaRef,
    sources: Vec<Source>,
    /// Every row filter of the policy is made of operations that cannot fail (see
    /// [`PolicyTable::cannot_leak`]).
    filter_cannot_fail: bool,
}

impl PolicyTable {
    /// `inner` (whose top-level columns have the field ids `ids`) under `policy`.
    pub fn new(
        inner: Arc<dyn TableProvider>,
        ids: &FieldIds,
        name: String,
        policy: AppliedPolicy,
    ) -> Self {
        let raw = inner.schema();
        let mut fields = Vec::new();
        let mut sources = Vec::new();
        for (index, field) in raw.fields().iter().enumerate() {
            let mask = ids.id_of(field.name()).and_then(|id| policy.masks.get(&id));
            let (source, data_type) = match mask {
                None => (Source::Raw(index), field.data_type().clone()),
                Some(Mask::Hide) => continue,
                Some(Mask::Null) => (Source::Null(index), field.data_type().clone()),
                Some(Mask::Hash) => (Source::Hash(index), DataType::Utf8),
                Some(Mask::Expression { expression }) => (
                    Source::Expression(index, expression.clone()),
                    field.data_type().clone(),
                ),
            };
            let nullable = field.is_nullable() || !matches!(source, Source::Raw(_));
            fields.push(Field::new(field.name(), data_type, nullable));
            sources.push(source);
        }
        Self {
            filter_cannot_fail: filters_cannot_fail(&raw, &policy.row_filters),
            inner,
            name,
            policy,
            ids: ids.clone(),
            schema: Arc::new(Schema::new(fields)),
            sources,
        }
    }

    /// What `EXPLAIN` shows of the policy.
    fn describe(&self) -> String {
        let raw = self.inner.schema();
        let masks: Vec<String> = self
            .sources
            .iter()
            .filter_map(|s| {
                let name = raw.field(s.column()).name();
                match s {
                    Source::Raw(_) => None,
                    Source::Null(_) => Some(format!("{name}: null")),
                    Source::Hash(_) => Some(format!("{name}: hash")),
                    Source::Expression(_, e) => Some(format!("{name}: {e}")),
                }
            })
            .chain(
                raw.fields()
                    .iter()
                    .filter(|f| self.schema.field_with_name(f.name()).is_err())
                    .map(|f| format!("{}: hidden", f.name())),
            )
            .collect();
        format!(
            "table={}, roles=[{}], row_filter=[{}], masks=[{}]",
            self.name,
            self.policy.roles.join(", "),
            self.policy.row_filters.join(" AND "),
            masks.join(", ")
        )
    }
}

impl PolicyTable {
    /// Whether the query's filter `expr` may be evaluated below the policy: it reads only
    /// columns the policy leaves as they are, and is made only of operations that cannot
    /// fail ([`only_safe_operations`]: no arithmetic or functions, which could fail on a
    /// hidden row's value and so tell of it). Such a filter gives the same rows before or
    /// after the policy's filter; evaluated in the scan, it prunes files and decodes fewer
    /// rows. Never when the policy's own filter could fail: the query's filters would then
    /// choose, by the files they prune, which hidden rows that filter meets, and its error
    /// would tell whether one of them holds a value it fails on.
    fn cannot_leak(&self, expr: &Expr) -> bool {
        let raw = |name: &str| {
            let at = self.schema.index_of(name).ok()?;
            matches!(self.sources[at], Source::Raw(_))
                .then(|| self.schema.field(at).data_type().clone())
        };
        self.filter_cannot_fail && only_safe_operations(expr, &raw)
    }
}

/// Whether `expr` is made only of operations that cannot fail, over the columns `column`
/// gives a type for (others are not allowed): comparisons, `AND`/`OR`/`NOT`, null and truth tests, `BETWEEN` and `IN` lists of
/// literals and columns, and casts that cannot fail (of a literal, already folded or not;
/// from an integer to a wider integer or to `Float64`; between the string types).
fn only_safe_operations(expr: &Expr, column: &dyn Fn(&str) -> Option<DataType>) -> bool {
    use datafusion::logical_expr::Operator::*;
    let mut safe = true;
    let _ = expr.apply(|e| {
        safe = match e {
            Expr::Column(c) => column(&c.name).is_some(),
            Expr::Literal(..) => true,
            Expr::BinaryExpr(binary) => matches!(
                binary.op,
                Eq | NotEq | Lt | LtEq | Gt | GtEq | And | Or | IsDistinctFrom | IsNotDistinctFrom
            ),
            Expr::Not(_)
            | Expr::IsNull(_)
            | Expr::IsNotNull(_)
            | Expr::IsTrue(_)
            | Expr::IsFalse(_)
            | Expr::IsNotTrue(_)
            | Expr::IsNotFalse(_)
            | Expr::IsUnknown(_)
            | Expr::IsNotUnknown(_)
            | Expr::Between(_)
            | Expr::InList(_) => true,
            Expr::Cast(cast) => match cast.expr.as_ref() {
                Expr::Literal(..) => true,
                Expr::Column(c) => column(&c.name)
                    .is_some_and(|from| cast_cannot_fail(&from, cast.field.data_type())),
                _ => false,
            },
            _ => false,
        };
        Ok(if safe {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    safe
}

/// Whether every one of `filters` (row filters over a table of schema `raw`), as DataFusion
/// evaluates it (its operands' types made to agree), is made only of operations that cannot
/// fail. One that does not parse can fail.
fn filters_cannot_fail(raw: &Schema, filters: &[String]) -> bool {
    use datafusion::logical_expr::simplify::SimplifyContext;
    use datafusion::optimizer::simplify_expressions::ExprSimplifier;
    static PARSER: std::sync::LazyLock<SessionState> = std::sync::LazyLock::new(|| {
        let mut state = datafusion::execution::session_state::SessionStateBuilder::new()
            .with_default_features()
            .build();
        // Without Floe's functions a filter calling one does not parse, and counts as one
        // that can fail.
        let _ = crate::register_functions(&mut state);
        state
    });
    if filters.is_empty() {
        return true;
    }
    let Ok(schema) = DFSchema::try_from(raw.clone()) else {
        return false;
    };
    let schema = Arc::new(schema);
    let simplifier = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(schema.clone())
            .build(),
    );
    let column = |name: &str| {
        raw.field_with_name(name)
            .ok()
            .map(|f| f.data_type().clone())
    };
    filters.iter().all(|sql| {
        PARSER
            .create_logical_expr(sql, &schema)
            .and_then(|expr| simplifier.coerce(expr, &schema))
            .is_ok_and(|expr| only_safe_operations(&expr, &column))
    })
}

/// Whether every value of type `from` casts to `to`: an integer to a wider integer of the
/// same signedness or to `Float64`, a string type to another.
fn cast_cannot_fail(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let rank = |t: &DataType| match t {
        Int8 => Some((true, 1)),
        Int16 => Some((true, 2)),
        Int32 => Some((true, 3)),
        Int64 => Some((true, 4)),
        UInt8 => Some((false, 1)),
        UInt16 => Some((false, 2)),
        UInt32 => Some((false, 3)),
        UInt64 => Some((false, 4)),
        _ => None,
    };
    let text = |t: &DataType| matches!(t, Utf8 | Utf8View | LargeUtf8);
    match (rank(from), rank(to)) {
        (Some((signed, a)), Some((signed_to, b))) => signed == signed_to && a <= b,
        (Some(_), None) => matches!(to, Float64),
        _ => text(from) && text(to),
    }
}

/// Parses `sql`, a policy's expression, over `schema`: a scalar expression of its columns
/// (no subqueries, aggregates or window functions).
fn parse(state: &SessionState, sql: &str, schema: &DFSchema, what: &str) -> Result<Expr> {
    let expr = state.create_logical_expr(sql, schema).map_err(|e| {
        DataFusionError::Plan(format!("the {what} of a row or column policy ({sql}): {e}"))
    })?;
    let mut refused = None;
    expr.apply(|e| {
        refused = match e {
            Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_) => Some("a subquery"),
            Expr::AggregateFunction(_) => Some("an aggregate"),
            Expr::WindowFunction(_) => Some("a window function"),
            Expr::Placeholder(_) => Some("a parameter"),
            _ => None,
        };
        Ok(if refused.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    match refused {
        Some(what_found) => Err(DataFusionError::Plan(format!(
            "the {what} of a row or column policy ({sql}) holds {what_found}: it must be an \
             expression over the table's own columns"
        ))),
        None => Ok(expr),
    }
}

/// A policy's parts as expressions over the table's columns.
struct Compiled {
    filter: Option<Expr>,
    /// Each output column's expression, and its name.
    columns: Vec<(Expr, String)>,
}

impl PolicyTable {
    /// The filter and the expressions of the output columns at `projection`.
    fn compile(&self, state: &SessionState, projection: &[usize]) -> Result<Compiled> {
        let raw = self.inner.schema();
        let schema = DFSchema::try_from(raw.as_ref().clone())?;
        let mut filter: Option<Expr> = None;
        for sql in &self.policy.row_filters {
            let expr = parse(state, sql, &schema, "row filter")?;
            let data_type = expr.get_type(&schema)?;
            if data_type != DataType::Boolean && data_type != DataType::Null {
                return Err(DataFusionError::Plan(format!(
                    "the row filter of a row or column policy ({sql}) is {data_type}, not a \
                     predicate"
                )));
            }
            filter = Some(match filter {
                None => expr,
                Some(held) => held.and(expr),
            });
        }
        let column = |index: usize| Expr::Column(raw.field(index).name().into());
        let columns = projection
            .iter()
            .map(|&at| {
                let field = self.schema.field(at);
                let expr = match &self.sources[at] {
                    Source::Raw(i) => column(*i),
                    Source::Null(_) => {
                        Expr::Literal(ScalarValue::try_from(field.data_type())?, None)
                    }
                    Source::Hash(i) => {
                        let name = raw.field(*i).name().replace('"', "\"\"");
                        parse(
                            state,
                            &format!("encode(sha256(CAST(\"{name}\" AS VARCHAR)), 'hex')"),
                            &schema,
                            "hash mask",
                        )?
                    }
                    Source::Expression(i, sql) => {
                        let expr = parse(state, sql, &schema, "mask")?;
                        if self.reads_only_what_its_policy_shows(*i, &expr) {
                            datafusion::logical_expr::cast(expr, field.data_type().clone())
                        } else {
                            Expr::Literal(ScalarValue::try_from(field.data_type())?, None)
                        }
                    }
                };
                Ok((expr, field.name().clone()))
            })
            .collect::<Result<_>>()?;
        Ok(Compiled { filter, columns })
    }

    /// Whether `expr`, the expression mask of the table's column `column`, reads no column
    /// that another of the principal's policies masks more strictly than the expression's
    /// own policy does: otherwise it would show what that policy hides (a column hidden by
    /// one role's policy read out through another's expression), and the column reads NULL.
    fn reads_only_what_its_policy_shows(&self, column: usize, expr: &Expr) -> bool {
        let raw = self.inner.schema();
        let Some(id) = self.ids.id_of(raw.field(column).name()) else {
            return false;
        };
        let Some(origins) = self.policy.expression_origins.get(&id) else {
            return false;
        };
        let read: Vec<Option<i32>> = expr
            .column_refs()
            .into_iter()
            .map(|c| self.ids.id_of(&c.name))
            .collect();
        origins.iter().any(|origin| {
            read.iter()
                .all(|id| id.is_some_and(|id| self.policy.masks.get(&id) == origin.get(&id)))
        })
    }

    /// Checks that the policy's expressions are valid over the table (what setting a policy
    /// asks before it is kept).
    pub fn check(&self, state: &SessionState) -> Result<()> {
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        let compiled = self.compile(state, &all)?;
        let schema = DFSchema::try_from(self.inner.schema().as_ref().clone())?;
        for (expr, name) in &compiled.columns {
            expr.get_type(&schema)
                .map_err(|e| DataFusionError::Plan(format!("the mask of column {name}: {e}")))?;
        }
        Ok(())
    }
}

#[async_trait]
impl TableProvider for PolicyTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|filter| {
                // `scan` evaluates it, exactly, below the policy.
                if self.cannot_leak(filter) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        session: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let state = session
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| {
                DataFusionError::Internal("a policy's table planned outside a session".into())
            })?;
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        let projection = projection.unwrap_or(&all);
        let mut compiled = self.compile(state, projection)?;
        // The query's own filters that cannot fail or read a masked value, evaluated with
        // the policy's (they commute with it) so that they prune and filter in the scan.
        for filter in filters.iter().filter(|f| self.cannot_leak(f)) {
            // Named as the table's own columns (the query qualifies them).
            let filter = filter
                .clone()
                .transform(|e| {
                    Ok(match e {
                        Expr::Column(c) => datafusion::common::tree_node::Transformed::yes(
                            Expr::Column(datafusion::common::Column::new_unqualified(c.name)),
                        ),
                        other => datafusion::common::tree_node::Transformed::no(other),
                    })
                })?
                .data;
            compiled.filter = Some(match compiled.filter.take() {
                None => filter,
                Some(held) => held.and(filter),
            });
        }
        // The table's columns the filter and the output columns read.
        let raw = self.inner.schema();
        let mut needed = BTreeSet::new();
        for expr in compiled
            .columns
            .iter()
            .map(|(e, _)| e)
            .chain(&compiled.filter)
        {
            for column in expr.column_refs() {
                needed.insert(raw.index_of(&column.name)?);
            }
        }
        let needed: Vec<usize> = needed.into_iter().collect();
        let pruning: Vec<Expr> = compiled.filter.iter().cloned().collect();
        let scan = self
            .inner
            .scan(session, Some(&needed), &pruning, None)
            .await?;
        let read = DFSchema::try_from(scan.schema().as_ref().clone())?;
        let by_bounds = state
            .config()
            .get_extension::<crate::optimizer::Rewrites>()
            .is_none_or(|rewrites| rewrites.policy_bounds);
        let filter = match compiled.filter {
            Some(filter) if by_bounds => unproven(filter, &scan, &read),
            filter => filter,
        };
        let mut plan: Arc<dyn ExecutionPlan> = scan;
        if let Some(filter) = filter {
            let predicate = session.create_physical_expr(filter, &read)?;
            plan = Arc::new(FilterExec::try_new(predicate, plan)?);
        }
        let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = compiled
            .columns
            .into_iter()
            .map(|(expr, name)| Ok((session.create_physical_expr(expr, &read)?, name)))
            .collect::<Result<_>>()?;
        let plan = Arc::new(ProjectionExec::try_new(exprs, plan)?);
        Ok(Arc::new(PolicyExec::new(plan, self.describe())))
    }
}

/// `filter` less the conditions (its `AND`ed parts) that every row `scan` reads is known to
/// meet by the bounds and null counts of the files it reads (Iceberg's metadata of the files
/// left after pruning; an identity partition's value is such a bound): a tenant's
/// `region = 'eu'` over a table, or over the files of it a query reads, that hold only `eu`
/// rows costs no comparison per row. `None` when no condition is left. Only a condition
/// DataFusion's simplifier folds to `true` under those bounds is dropped; every other is kept
/// as written. `read` is `scan`'s schema.
fn unproven(filter: Expr, scan: &Arc<dyn ExecutionPlan>, read: &DFSchema) -> Option<Expr> {
    match file_bounds(scan) {
        Some(stats) => without_proven(filter, not_null_bounds(&scan.schema(), &stats), read),
        None => Some(filter),
    }
}

/// `filter` less the conditions that `guarantees` (ranges of columns of `read`) prove true.
fn without_proven(
    filter: Expr,
    guarantees: Vec<(
        Expr,
        datafusion::logical_expr::interval_arithmetic::NullableInterval,
    )>,
    read: &DFSchema,
) -> Option<Expr> {
    use datafusion::logical_expr::simplify::SimplifyContext;
    use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
    use datafusion::optimizer::simplify_expressions::ExprSimplifier;
    if guarantees.is_empty() {
        return Some(filter);
    }
    let context = SimplifyContext::builder()
        .with_schema(Arc::new(read.clone()))
        .build();
    let simplifier = ExprSimplifier::new(context).with_guarantees(guarantees);
    conjunction(
        split_conjunction_owned(filter)
            .into_iter()
            .filter(|condition| {
                // Types made to agree first (a string literal against a `Utf8View`
                // column): the bounds compare with values of the column's own type.
                let proven = simplifier
                    .coerce(condition.clone(), read)
                    .and_then(|coerced| simplifier.simplify(coerced));
                !matches!(
                    proven,
                    Ok(Expr::Literal(ScalarValue::Boolean(Some(true)), _))
                )
            }),
    )
}

/// The statistics of the rows `plan` reads, when they are the bounds of data files alone: a
/// scan of files (whose statistics Floe's table provider takes from the files' Iceberg
/// metadata) or a union of such scans. Rows from elsewhere (acknowledged rows not yet
/// committed, held in memory) have no bounds, and then there are none.
fn file_bounds(plan: &Arc<dyn ExecutionPlan>) -> Option<datafusion::common::Statistics> {
    if crate::optimizer::utils::file_scan(plan).is_some() {
        return plan
            .partition_statistics(None)
            .ok()
            .map(Arc::unwrap_or_clone);
    }
    plan.downcast_ref::<datafusion::physical_plan::union::UnionExec>()?;
    let parts = plan
        .children()
        .into_iter()
        .map(file_bounds)
        .collect::<Option<Vec<_>>>()?;
    datafusion::common::Statistics::try_merge_iter(parts.iter(), &plan.schema()).ok()
}

/// Each column's range from `stats`, for the columns known to hold no NULL and both of whose
/// bounds are known, as the simplifier's guarantees. Floating point columns have none: NaN
/// lies outside Iceberg's bounds.
fn not_null_bounds(
    schema: &Schema,
    stats: &datafusion::common::Statistics,
) -> Vec<(
    Expr,
    datafusion::logical_expr::interval_arithmetic::NullableInterval,
)> {
    use datafusion::logical_expr::interval_arithmetic::{Interval, NullableInterval};
    schema
        .fields()
        .iter()
        .zip(&stats.column_statistics)
        .filter_map(|(field, column)| {
            if matches!(
                field.data_type(),
                DataType::Float16 | DataType::Float32 | DataType::Float64
            ) || column.null_count.get_value() != Some(&0)
            {
                return None;
            }
            let min = column.min_value.get_value()?;
            let max = column.max_value.get_value()?;
            let typed = |v: &ScalarValue| !v.is_null() && v.data_type() == *field.data_type();
            if !typed(min) || !typed(max) {
                return None;
            }
            let values = Interval::try_new(min.clone(), max.clone()).ok()?;
            Some((
                Expr::Column(datafusion::common::Column::new_unqualified(field.name())),
                NullableInterval::NotNull { values },
            ))
        })
        .collect()
}

/// The top of a policy's scan: passes its input on and lets nothing of the plan above
/// through (see the module's doc). Shown in `EXPLAIN` with the policy it applies.
#[derive(Debug)]
pub struct PolicyExec {
    input: Arc<dyn ExecutionPlan>,
    description: String,
    properties: Arc<PlanProperties>,
}

impl PolicyExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, description: String) -> Self {
        let properties = input.properties().clone();
        Self {
            input,
            description,
            properties,
        }
    }

    /// What the policy is, as `EXPLAIN` shows it (and the plan codec carries it).
    pub fn description(&self) -> &str {
        &self.description
    }
}

impl DisplayAs for PolicyExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "PolicyExec: {}", self.description)
    }
}

impl ExecutionPlan for PolicyExec {
    fn name(&self) -> &str {
        "PolicyExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match children.pop() {
            Some(input) if children.is_empty() => {
                Ok(Arc::new(PolicyExec::new(input, self.description.clone())))
            }
            _ => Err(DataFusionError::Internal("PolicyExec has one input".into())),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }

    fn partition_statistics(
        &self,
        partition: Option<usize>,
    ) -> Result<Arc<datafusion::common::Statistics>> {
        self.input.partition_statistics(partition)
    }
}

/// A column of a table's schema as of an older snapshot (`then`) that its current schema
/// (`now`) does not hold under the same name and field id: one dropped since (perhaps
/// replaced by another of that name), or renamed. A policy is kept over the current schema —
/// its masks by field id, its row filter by column name — so it does not apply to such a
/// snapshot: the old column holds values no mask covers, or the filter would read another
/// column under its name.
pub fn column_changed_since<'a>(then: &'a FieldIds, now: &FieldIds) -> Option<&'a str> {
    then.columns()
        .find(|(name, id)| now.id_of(name) != Some(*id))
        .map(|(name, _)| name)
}

/// The masks a policy's request names by column, by the field ids of table schema `schema`:
/// the error names a column the table does not have.
pub fn mask_ids(
    schema: &iceberg::spec::Schema,
    masks: &[(String, Mask)],
) -> Result<BTreeMap<i32, (String, Mask)>, String> {
    let ids = FieldIds::of(schema);
    let mut by_id = BTreeMap::new();
    for (column, mask) in masks {
        let id = ids
            .id_of(column)
            .ok_or_else(|| format!("the table has no top-level column {column:?}"))?;
        if by_id.insert(id, (column.clone(), mask.clone())).is_some() {
            return Err(format!("column {column:?} is masked twice"));
        }
    }
    Ok(by_id)
}

/// Checks `policy` over a table of Iceberg schema `schema`: its row filters are predicates and
/// it and its masks plan over the table's columns, without subqueries (what setting a policy
/// asks before it is kept). The error says what is wrong.
pub fn validate(schema: &iceberg::spec::Schema, policy: AppliedPolicy) -> Result<(), String> {
    let arrow = crate::scan::provider::arrow_schema(schema).map_err(|e| e.to_string())?;
    let ids = FieldIds::of(schema);
    let table = PolicyTable::new(
        Arc::new(datafusion::datasource::empty::EmptyTable::new(arrow)),
        &ids,
        String::new(),
        policy,
    );
    let mut state = datafusion::execution::session_state::SessionStateBuilder::new()
        .with_default_features()
        .build();
    crate::register_functions(&mut state).map_err(|e| e.to_string())?;
    table.check(&state).map_err(|e| e.to_string())
}

/// `plan` with what `EXPLAIN` shows from the first policy's barrier on left out, when `plan`
/// is an `EXPLAIN`'s ([`below_policies_left_out`]): the table's own scan below it — the files
/// left after pruning by the query's filters, and the conditions the files' bounds did not
/// prove — tells of the rows the policy hides (that no row of a pruned file, hidden or not,
/// meets a filter). The barrier's first line, with the policy, stays. Plans are printed indented (other formats are refused under a
/// policy, [`crate::engine`]'s surface check).
pub fn without_what_the_policy_keeps_back(
    plan: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    use datafusion::common::display::StringifiedPlan;
    use datafusion::physical_plan::explain::ExplainExec;
    let Some(explain) = plan.downcast_ref::<ExplainExec>() else {
        return Ok(plan);
    };
    if !explain
        .stringified_plans()
        .iter()
        .any(|p| p.plan.contains("PolicyExec"))
    {
        return Ok(plan);
    }
    let plans = explain
        .stringified_plans()
        .iter()
        .map(|p| StringifiedPlan::new(p.plan_type.clone(), below_policies_left_out(&p.plan)))
        .collect();
    Ok(Arc::new(ExplainExec::new(
        explain.schema(),
        plans,
        explain.verbose(),
    )))
}

/// `text`, a printed plan, up to its first `PolicyExec` line (the policy's first line), and
/// then a note. What follows it is left out whatever it is — the policy's scan, and the rest of
/// the plan after it: a node's text may hold a line break (a string in the query, a path), so
/// no line's indentation tells where the policy's scan ends. Lines before it are nodes above
/// it or beside it, which a query may see.
fn below_policies_left_out(text: &str) -> String {
    let mut kept = Vec::new();
    for line in text.lines() {
        kept.push(line.to_string());
        if let Some(at) = line.find("PolicyExec") {
            kept.push(format!(
                "{}(the rest of the plan, from the table read under a row or column policy, is \
                 not shown)",
                " ".repeat(line[..at].chars().count())
            ));
            break;
        }
    }
    let mut out = kept.join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// The policies `plan` reads tables under, each as `table (roles …)`: for the statement's
/// audit record.
pub fn applied_in(plan: &datafusion::logical_expr::LogicalPlan) -> Vec<String> {
    let mut applied = BTreeSet::new();
    let _ = plan.apply_with_subqueries(|node| {
        if let datafusion::logical_expr::LogicalPlan::TableScan(scan) = node
            && let Ok(provider) = datafusion::datasource::source_as_provider(&scan.source)
            && let Some(table) = provider.downcast_ref::<PolicyTable>()
        {
            applied.insert(format!(
                "{} (roles {})",
                table.name,
                table.policy.roles.join(", ")
            ));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    applied.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(text: &str) -> FieldIds {
        FieldIds::decode(text).expect("id=name lines")
    }

    /// `filter` over columns `id` (Int64), `region` (Utf8View), `score` (Float64) and
    /// `level` (Int64), whose bounds are `stats`, less what they prove.
    fn kept(filter: &str, stats: [(Option<ScalarValue>, Option<ScalarValue>, usize); 4]) -> String {
        use datafusion::common::stats::Precision;
        use datafusion::common::{ColumnStatistics, Statistics};
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("region", DataType::Utf8View, true),
            Field::new("score", DataType::Float64, true),
            Field::new("level", DataType::Int64, true),
        ]);
        let read = DFSchema::try_from(schema.clone()).unwrap();
        let mut statistics = Statistics::new_unknown(&schema);
        for (column, (min, max, nulls)) in statistics.column_statistics.iter_mut().zip(stats) {
            *column = ColumnStatistics {
                min_value: min.map_or(Precision::Absent, Precision::Inexact),
                max_value: max.map_or(Precision::Absent, Precision::Inexact),
                null_count: Precision::Exact(nulls),
                ..ColumnStatistics::new_unknown()
            };
        }
        let state = datafusion::execution::session_state::SessionStateBuilder::new()
            .with_default_features()
            .build();
        let filter = state.create_logical_expr(filter, &read).unwrap();
        match without_proven(filter, not_null_bounds(&schema, &statistics), &read) {
            Some(expr) => expr.to_string(),
            None => "none".into(),
        }
    }

    #[test]
    fn only_conditions_the_bounds_prove_for_every_row_are_dropped() {
        let int = |v: i64| Some(ScalarValue::Int64(Some(v)));
        let text = |v: &str| Some(ScalarValue::Utf8View(Some(v.into())));
        let float = |v: f64| Some(ScalarValue::Float64(Some(v)));
        let stats = [
            (int(0), int(99), 0),
            (text("eu"), text("eu"), 0),
            (float(0.0), float(1.0), 0),
            (int(0), int(9), 2),
        ];
        // Every id is at least 0 and every region `eu`: nothing left to evaluate.
        assert_eq!(kept("id >= -5 AND region = 'eu'", stats.clone()), "none");
        // A bound that does not cover every row, or that would make the condition false
        // (kept as written), keeps the condition.
        assert_eq!(
            kept("id >= 5 AND id < 100", stats.clone()),
            "id >= Int64(5)"
        );
        assert_eq!(
            kept("region <> 'eu'", stats.clone()),
            "region != Utf8(\"eu\")"
        );
        // A column with NULLs: `level >= 0` is false for them.
        assert_eq!(kept("level >= 0", stats.clone()), "level >= Int64(0)");
        // Floats may hold NaN, which Iceberg's bounds leave out.
        assert_eq!(kept("score <= 1", stats.clone()), "score <= Int64(1)");
        // Unknown bounds prove nothing; an OR is proven as a whole.
        let mut unknown = stats.clone();
        unknown[0] = (None, int(99), 0);
        assert_eq!(kept("id >= 0", unknown), "id >= Int64(0)");
        assert_eq!(
            kept("(id < 0 OR region = 'eu') AND level = 3", stats),
            "level = Int64(3)"
        );
    }

    #[test]
    fn only_a_row_filter_that_cannot_fail_lets_the_querys_filters_below_it() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("region", DataType::Utf8View, true),
            Field::new("score", DataType::Float64, true),
        ]);
        let cannot_fail = |filter: &str| filters_cannot_fail(&schema, &[filter.to_string()]);
        assert!(cannot_fail("region = 'eu' AND id >= 1"));
        assert!(cannot_fail("id IN (1, 2) OR score IS NULL OR score > 2"));
        assert!(cannot_fail("id > 3000000000"), "id widened to Int64");
        assert!(!cannot_fail("CAST(region AS BIGINT) > 0"));
        assert!(!cannot_fail("id % 1000 >= 0"));
        assert!(!cannot_fail("region > 5"), "region cast to a number");
        assert!(!cannot_fail("length(region) > 2"));
        assert!(!cannot_fail("no_such_column = 1"));
        assert!(filters_cannot_fail(&schema, &[]));
        assert!(!filters_cannot_fail(
            &schema,
            &["id >= 1".to_string(), "1 / id > 0".to_string()]
        ));
        assert!(cast_cannot_fail(&DataType::Int32, &DataType::Int64));
        assert!(cast_cannot_fail(&DataType::Int64, &DataType::Float64));
        assert!(!cast_cannot_fail(&DataType::Int64, &DataType::Int32));
        assert!(!cast_cannot_fail(&DataType::UInt64, &DataType::Int64));
        assert!(!cast_cannot_fail(&DataType::Utf8, &DataType::Int64));
        assert!(!cast_cannot_fail(&DataType::Binary, &DataType::Utf8));
    }

    #[test]
    fn explain_leaves_out_what_lies_below_a_policy() {
        let plan = "ProjectionExec: expr=[id@0 as id]\n  HashJoinExec: on=[(id@0, id@0)]\n    \
                    PolicyExec: table=default.hr.people\n      FilterExec: salary@1 > 5 OR name@2 = a\n\
                    Z\n          DataSourceExec: file_groups={1 group: [[a.parquet]]}\n    \
                    DataSourceExec: file_groups={1 group: [[b.parquet]]}\n";
        assert_eq!(
            below_policies_left_out(plan),
            "ProjectionExec: expr=[id@0 as id]\n  HashJoinExec: on=[(id@0, id@0)]\n    \
             PolicyExec: table=default.hr.people\n    (the rest of the plan, from the table \
             read under a row or column policy, is not shown)\n"
        );
        // In a stage's frame.
        let framed = "┌───── Stage 1\n│ PolicyExec: t\n│   FilterExec: x\n└──────\n";
        assert_eq!(
            below_policies_left_out(framed),
            "┌───── Stage 1\n│ PolicyExec: t\n  (the rest of the plan, from the table read \
             under a row or column policy, is not shown)\n"
        );
    }

    #[test]
    fn a_snapshot_reads_under_the_policy_only_with_the_current_columns() {
        let now = ids("1=id\n2=region\n5=ssn\n6=added");
        // Columns added since are fine: the old snapshot lacks them.
        assert_eq!(column_changed_since(&ids("1=id\n2=region"), &now), None);
        // `ssn` dropped and added again: the old one is another column.
        assert_eq!(
            column_changed_since(&ids("1=id\n2=region\n3=ssn"), &now),
            Some("ssn")
        );
        // Renamed since (or dropped): no mask or filter of the current schema covers it.
        assert_eq!(
            column_changed_since(&ids("1=id\n2=area"), &now),
            Some("area")
        );
    }
}
