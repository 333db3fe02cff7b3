//! Filter predicates of several conditions joined by `AND`, evaluated condition by condition
//! on the rows still selected.
//!
//! DataFusion evaluates `a AND b` by evaluating `a` and, when it keeps at most a fifth of the
//! rows, evaluating `b` on those rows only; it then spreads `b`'s answers back over the batch
//! one short slice at a time, which on TPC-H Q6 (five range conditions over `lineitem`) takes
//! more time than the comparisons. [`FastConjunctions`] gives filters of two or more conditions
//! a [`Conjunction`] that does the same work, cheaper conditions first ([`cost_class`]) — a
//! condition is evaluated on the selected rows when they are at most a fifth of the batch and
//! on the whole batch otherwise, and not at all once no row is left — with the selection kept
//! as a bitmap, combined with a bitwise `AND` or, for the selected rows' answers, with one pass
//! over the selected positions. Only the columns a condition reads are gathered for it. A
//! runtime filter (a join's keys, probed per row) is evaluated on the selected rows while they
//! are at most four fifths of the batch. While the filter runs, each condition's time and the
//! share of rows it removes are measured, and every [`REORDER_EVERY`] batches the conditions
//! are ranked by time per removed row ([`Measured::rank`]), the new order taken when it
//! promises a tenth less time per row: a runtime filter whose join kept few keys (TPC-H Q19:
//! 485 parts) moves ahead of the string conditions the query names first.
//!
//! It fires on every `FilterExec` whose predicate is an `AND` of two or more conditions, on an
//! engine's plans and on workers' task plans; join filters, projections and aggregates'
//! `FILTER` clauses are not touched. Why the same rows pass: a row is kept exactly when every
//! condition is true for it. Each condition is evaluated on at least the rows still selected
//! (the whole batch, or those rows with their answers spread back to them); null counts as
//! false, as it does for a filter's whole predicate, the only place a `Conjunction` stands;
//! once no row is left no later condition could keep one; a runtime filter switched off passes
//! every row anyway. Conditions are evaluated row by row, so their order changes which rows
//! reach each one, not an `AND`'s answer. Evaluating a condition on fewer rows raises no error
//! DataFusion would not; the order adapts at run time only when no condition can fail
//! ([`cannot_fail`]).
//!
//! Conditions are put in cost order only when none of them can fail: otherwise a condition
//! such as `10 / d > 1` could divide by a zero that DataFusion's `AND`, in the query's order,
//! would have spared it. A rebuilt filter that promises less than the original (the constants,
//! equalities and orderings DataFusion derives from the predicate, which an opaque
//! `Conjunction` hides: a written-order scan's sort key fixed by `k = 1`, merged by the next
//! key) is not taken: a plan that no longer passes DataFusion's `SanityCheckPlan` with the
//! rewrite keeps its filters as they were ([`crate::optimizer::utils::still_valid`]).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use datafusion::arrow::array::{BooleanArray, RecordBatch};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{
    BinaryExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, LikeExpr, Literal, NotExpr,
};
use datafusion::physical_expr::utils::{collect_columns, split_conjunction};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

use crate::optimizer::apply_runtime_filters::{is_runtime_filter, is_switched_off};
use crate::optimizer::utils::{Kept, bitmap, compacted, kept, map_filter_predicates};

/// Share of a batch at or under which a condition is evaluated on the selected rows only
/// (DataFusion's own threshold for `AND`).
const SELECTED_ONLY: f64 = 0.2;
/// The same for a runtime filter.
const SELECTED_ONLY_RUNTIME: f64 = 0.8;
/// Batches (of all partitions) between two reconsiderations of the order of evaluation.
const REORDER_EVERY: u32 = 8;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct FastConjunctions;

impl PhysicalOptimizerRule for FastConjunctions {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let rewritten = map_filter_predicates(plan.clone(), &conjunction)?;
        Ok(crate::optimizer::utils::still_valid(
            plan, rewritten, config,
        ))
    }

    fn name(&self) -> &str {
        "floe_fast_conjunctions"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A [`Conjunction`] in place of `predicate` when it has two or more conditions.
fn conjunction(
    predicate: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    let conditions = split_conjunction(predicate);
    if conditions.len() < 2 {
        return Ok(None);
    }
    let mut order: Vec<usize> = (0..conditions.len()).collect();
    // A condition that can fail (`10 / d > 1`) stays behind the ones the query put before it,
    // which DataFusion's `AND` would have let spare it some rows.
    if conditions.iter().all(|condition| cannot_fail(condition)) {
        order.sort_by_key(|&i| cost_class(conditions[i], schema));
    }
    Ok(Some(Arc::new(Conjunction::new(predicate.clone(), order))))
}

/// Where a condition goes in the order of evaluation: comparisons of a column with a literal
/// over numbers and dates first (cheap, and the ones most often selective), then other
/// comparisons over such columns (a column against a column, arithmetic), then everything else
/// — conditions reading strings or binaries (each comparison walks bytes), `OR`s, `IN` lists,
/// functions — and runtime filters last ([`super::apply_runtime_filters`]). The order within a
/// class is the query's: TPC-H Q19's `OR` of three `l_quantity` ranges, which keeps most rows,
/// stays behind its string conditions. TPC-H Q12 names `l_shipmode IN ('MAIL', 'SHIP')` (an
/// `OR` of two string comparisons) first and one year of `l_receiptdate` last: its filter on 60
/// million `lineitem` rows took 1.6 s of CPU.
fn cost_class(condition: &Arc<dyn PhysicalExpr>, schema: &Schema) -> u8 {
    if is_runtime_filter(condition) {
        return 3;
    }
    let reads_bytes = collect_columns(condition).iter().any(|column| {
        matches!(
            schema.field(column.index()).data_type(),
            DataType::Utf8
                | DataType::Utf8View
                | DataType::LargeUtf8
                | DataType::Binary
                | DataType::BinaryView
                | DataType::LargeBinary
                | DataType::FixedSizeBinary(_)
                | DataType::Dictionary(_, _)
        )
    });
    if reads_bytes {
        return 2;
    }
    let Some(comparison) = condition
        .downcast_ref::<BinaryExpr>()
        .filter(|b| is_comparison(b.op()))
    else {
        // `OR`s, `IN` lists, functions: several operations a row, often not selective.
        return 2;
    };
    let (left, right) = (comparison.left(), comparison.right());
    let with_literal = (left.downcast_ref::<Column>().is_some()
        && right.downcast_ref::<Literal>().is_some())
        || (left.downcast_ref::<Literal>().is_some() && right.downcast_ref::<Column>().is_some());
    if with_literal { 0 } else { 1 }
}

/// `AND` of `conditions`, for a filter; see the module documentation.
#[derive(Debug)]
pub struct Conjunction {
    /// The predicate as planned (shown, and given to anything that inspects the plan).
    original: Arc<dyn PhysicalExpr>,
    /// The order of evaluation: positions in `original`'s conditions ([`cost_class`]).
    order: Vec<usize>,
    conditions: Vec<Condition>,
    /// Whether the order may change while the filter runs: only when no condition can fail
    /// (no arithmetic, cast or function), so no row reaches a condition that an error would
    /// stop where the query's order had filtered it out first.
    adapts: bool,
    adaptive: Mutex<Adaptive>,
}

/// What the batches so far tell of each condition, and the order they suggest; see
/// [`Conjunction::evaluate`].
#[derive(Debug)]
struct Adaptive {
    /// Positions in [`Conjunction::conditions`], in the order of evaluation.
    order: Vec<usize>,
    measured: Vec<Measured>,
    batches: u32,
}

/// One condition's work over recent batches (older batches count less and less).
#[derive(Debug, Default, Clone, Copy)]
struct Measured {
    /// Rows still selected when it was reached, and after it.
    selected_in: f64,
    selected_out: f64,
    /// Rows it was evaluated on (the selected ones, or the whole batch), and the time taken.
    evaluated: f64,
    nanos: f64,
}

impl Measured {
    /// Its time per row evaluated and the share of the rows reaching it that it keeps, once
    /// it has been reached.
    fn observed(&self) -> Option<(f64, f64)> {
        (self.selected_in > 0.0 && self.evaluated > 0.0).then(|| {
            (
                self.nanos / self.evaluated,
                self.selected_out / self.selected_in,
            )
        })
    }

    /// Time per row it removes: conditions are best evaluated in ascending order of this.
    fn rank(&self) -> f64 {
        self.observed()
            .map_or(f64::INFINITY, |(cost, kept)| cost / (1.0 - kept).max(1e-3))
    }

    /// `scale` × what is known plus `batch`.
    fn scaled_plus(&mut self, scale: f64, batch: &Measured) {
        self.selected_in = self.selected_in * scale + batch.selected_in;
        self.selected_out = self.selected_out * scale + batch.selected_out;
        self.evaluated = self.evaluated * scale + batch.evaluated;
        self.nanos = self.nanos * scale + batch.nanos;
    }
}

/// The time per row of evaluating conditions in `order`, each on the share of rows the ones
/// before it leave, as far as `measured` tells (a condition never reached counts nothing).
fn expected_cost(order: &[usize], measured: &[Measured]) -> f64 {
    let mut share = 1.0;
    let mut total = 0.0;
    for (cost, kept) in order.iter().filter_map(|&at| measured[at].observed()) {
        total += share * cost;
        share *= kept;
    }
    total
}

impl Adaptive {
    fn new(conditions: usize) -> Self {
        Adaptive {
            order: (0..conditions).collect(),
            measured: vec![Measured::default(); conditions],
            batches: 0,
        }
    }

    /// Adds one batch's measurements (`(position, measured)`) and, every
    /// [`REORDER_EVERY`] batches, orders the conditions by [`Measured::rank`] (conditions
    /// never reached go last, in their order) and halves what is known.
    fn record(&mut self, batch: &[(usize, Measured)]) {
        for (at, m) in batch {
            self.measured[*at].scaled_plus(1.0, m);
        }
        self.batches += 1;
        if !self.batches.is_multiple_of(REORDER_EVERY) {
            return;
        }
        let measured = &self.measured;
        let mut better = self.order.clone();
        better.sort_by(|&a, &b| measured[a].rank().total_cmp(&measured[b].rank()));
        // Conditions that select the same rows (two ends of one date range) look better
        // first in turn; the order changes only when that promises a clear gain.
        if expected_cost(&better, measured) < 0.9 * expected_cost(&self.order, measured) {
            tracing::debug!(order = ?better, ?measured, "filter conditions reordered");
            self.order = better;
        }
        for known in &mut self.measured {
            known.scaled_plus(0.5, &Measured::default());
        }
    }
}

/// One condition of a [`Conjunction`].
#[derive(Debug)]
struct Condition {
    /// The condition over the columns it reads (`columns`, in that order).
    compact: Arc<dyn PhysicalExpr>,
    columns: Vec<usize>,
    /// Share of the batch at or under which it is evaluated on the selected rows only.
    selected_only: f64,
}

impl Conjunction {
    /// `original`'s conditions, evaluated in `order` (positions among them; the query's order
    /// when it does not cover them all).
    fn new(original: Arc<dyn PhysicalExpr>, order: Vec<usize>) -> Self {
        let planned = split_conjunction(&original);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        let order = if sorted.iter().copied().eq(0..planned.len()) {
            order
        } else {
            (0..planned.len()).collect()
        };
        let conditions: Vec<Condition> = order
            .iter()
            .map(|&i| {
                let condition = planned[i];
                let selected_only = if is_runtime_filter(condition) {
                    SELECTED_ONLY_RUNTIME
                } else {
                    SELECTED_ONLY
                };
                let (mut compact, columns) = compacted(&[condition]);
                Condition {
                    compact: compact.remove(0),
                    columns,
                    selected_only,
                }
            })
            .collect();
        let adapts = planned.iter().all(|condition| cannot_fail(condition));
        Conjunction {
            original,
            adaptive: Mutex::new(Adaptive::new(conditions.len())),
            adapts,
            order,
            conditions,
        }
    }

    /// The `AND`ed conditions as planned.
    pub(crate) fn original(&self) -> &Arc<dyn PhysicalExpr> {
        &self.original
    }
}

impl PhysicalExpr for Conjunction {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(false)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let rows = batch.num_rows();
        let order = if self.adapts {
            self.adaptive
                .lock()
                .expect("conjunction lock")
                .order
                .clone()
        } else {
            (0..self.conditions.len()).collect()
        };
        let mut measured = Vec::new();
        // `None`: every row still selected.
        let mut selected: Option<BooleanBuffer> = None;
        let mut count = rows;
        for at in order {
            let condition = &self.conditions[at];
            if count == 0 {
                break;
            }
            if is_switched_off(&condition.compact) {
                continue;
            }
            let read = batch.project(&condition.columns)?;
            // The condition's own time, without gathering the selected rows for it or
            // spreading its answers back: the cost it would have at any place in the order.
            let mut nanos = 0;
            let mut timed = |batch: &RecordBatch| {
                let started = Instant::now();
                let answer = condition.compact.evaluate(batch);
                nanos = started.elapsed().as_nanos();
                answer
            };
            let evaluated = match &selected {
                Some(mask) if (count as f64) <= condition.selected_only * rows as f64 => {
                    let subset =
                        filter_record_batch(&read, &BooleanArray::new(mask.clone(), None))?;
                    let answers = kept(timed(&subset)?, count)?;
                    selected = Some(match answers {
                        Kept::All => mask.clone(),
                        Kept::None => BooleanBuffer::new_unset(rows),
                        Kept::Some(answers) => scatter(mask, &answers),
                    });
                    count
                }
                _ => {
                    let answers = kept(timed(&read)?, rows)?;
                    selected = match (answers, selected.take()) {
                        (Kept::All, s) => s,
                        (Kept::None, _) => Some(BooleanBuffer::new_unset(rows)),
                        (Kept::Some(a), None) => Some(a),
                        (Kept::Some(a), Some(s)) => Some(&s & &a),
                    };
                    rows
                }
            };
            let after = selected.as_ref().map_or(rows, |s| s.count_set_bits());
            if self.adapts {
                measured.push((
                    at,
                    Measured {
                        selected_in: count as f64,
                        selected_out: after as f64,
                        evaluated: evaluated as f64,
                        nanos: nanos as f64,
                    },
                ));
            }
            count = after;
        }
        if self.adapts {
            self.adaptive
                .lock()
                .expect("conjunction lock")
                .record(&measured);
        }
        Ok(match selected {
            None => ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))),
            Some(mask) => ColumnarValue::Array(Arc::new(BooleanArray::new(mask, None))),
        })
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.original]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        // Rebuilt (columns re-addressed, say), it keeps its order of evaluation.
        Ok(Arc::new(Conjunction::new(
            children.remove(0),
            self.order.clone(),
        )))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.original.fmt_sql(f)
    }
}

/// `=`, `<>`, `<`, `<=`, `>`, `>=`.
fn is_comparison(op: &Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
    )
}

/// Whether evaluating `expr` cannot fail on any row: comparisons, `LIKE`, `IN` lists, null
/// tests and their `AND`, `OR` and `NOT` over columns and literals, and runtime filters.
fn cannot_fail(expr: &Arc<dyn PhysicalExpr>) -> bool {
    let own = if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
        let like = matches!(
            binary.op(),
            Operator::LikeMatch
                | Operator::NotLikeMatch
                | Operator::ILikeMatch
                | Operator::NotILikeMatch
        );
        is_comparison(binary.op())
            || matches!(
                binary.op(),
                Operator::IsDistinctFrom
                    | Operator::IsNotDistinctFrom
                    | Operator::And
                    | Operator::Or
            )
            // A pattern given per row is compiled per row, which can fail.
            || (like && binary.right().downcast_ref::<Literal>().is_some())
    } else {
        is_runtime_filter(expr)
            || expr.downcast_ref::<Column>().is_some()
            || expr.downcast_ref::<Literal>().is_some()
            || expr.downcast_ref::<InListExpr>().is_some()
            || expr.downcast_ref::<IsNullExpr>().is_some()
            || expr.downcast_ref::<IsNotNullExpr>().is_some()
            || expr.downcast_ref::<NotExpr>().is_some()
            || expr
                .downcast_ref::<LikeExpr>()
                .is_some_and(|like| like.pattern().downcast_ref::<Literal>().is_some())
            || expr
                .downcast_ref::<crate::optimizer::fast_like::PartsLike>()
                .is_some()
    };
    own && (is_runtime_filter(expr) || expr.children().into_iter().all(cannot_fail))
}

/// The selection `mask` narrowed by `answers`, one per selected row in order.
fn scatter(mask: &BooleanBuffer, answers: &BooleanBuffer) -> BooleanBuffer {
    let kept = mask
        .set_indices()
        .zip(answers.iter())
        .filter_map(|(position, keep)| keep.then_some(position));
    bitmap(kept, mask.len())
}

impl fmt::Display for Conjunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.original)
    }
}

crate::same_as_inner_expr!(Conjunction, original);

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::binary;

    use datafusion::physical_plan::filter::FilterExec;

    use super::*;

    #[test]
    fn keeps_exactly_the_rows_every_condition_keeps() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        let a: Int64Array = (0..1000i64).map(|i| (i % 7 != 3).then_some(i)).collect();
        let b: Int64Array = (0..1000i64)
            .map(|i| (i % 11 != 5).then_some(i % 13))
            .collect();
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(a), Arc::new(b)]).unwrap();
        let col = |n: &str| -> Arc<dyn PhysicalExpr> {
            Arc::new(Column::new_with_schema(n, &schema).unwrap())
        };
        let lit = |v: i64| -> Arc<dyn PhysicalExpr> {
            Arc::new(Literal::new(ScalarValue::Int64(Some(v))))
        };
        // The first keeps a tenth (the rest on the selected rows), then the whole batch.
        for bound in [100, 900] {
            let first = binary(col("a"), Operator::Lt, lit(bound), &schema).unwrap();
            let second = binary(col("b"), Operator::Gt, lit(4), &schema).unwrap();
            let third = binary(col("a"), Operator::NotEq, lit(50), &schema).unwrap();
            let and = binary(first, Operator::And, second, &schema).unwrap();
            let predicate = binary(and, Operator::And, third, &schema).unwrap();
            let conjunction = Conjunction::new(predicate.clone(), vec![0, 1, 2]);
            let ColumnarValue::Array(got) = conjunction.evaluate(&batch).unwrap() else {
                panic!("an array");
            };
            let expected: Vec<bool> = (0..1000i64)
                .map(|i| {
                    let a = (i % 7 != 3).then_some(i);
                    let b = (i % 11 != 5).then_some(i % 13);
                    matches!((a, b), (Some(a), Some(b)) if a < bound && b > 4 && a != 50)
                })
                .collect();
            let got: Vec<bool> = got.as_boolean().iter().map(|v| v == Some(true)).collect();
            assert_eq!(got, expected);
        }
    }

    #[test]
    fn the_order_follows_what_conditions_remove() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        let a: Int64Array = (0..8192i64).map(Some).collect();
        let b: Int64Array = (0..8192i64).map(|i| Some(i % 100)).collect();
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(a), Arc::new(b)]).unwrap();
        let col = |n: &str| -> Arc<dyn PhysicalExpr> {
            Arc::new(Column::new_with_schema(n, &schema).unwrap())
        };
        let lit = |v: i64| -> Arc<dyn PhysicalExpr> {
            Arc::new(Literal::new(ScalarValue::Int64(Some(v))))
        };
        // The first keeps every row, the second one in a hundred.
        let keeps_all = binary(col("a"), Operator::GtEq, lit(0), &schema).unwrap();
        let keeps_few = binary(col("b"), Operator::Eq, lit(7), &schema).unwrap();
        let predicate = binary(keeps_all.clone(), Operator::And, keeps_few, &schema).unwrap();
        let conjunction = Conjunction::new(predicate, vec![0, 1]);
        assert!(conjunction.adapts);
        for _ in 0..REORDER_EVERY {
            let ColumnarValue::Array(got) = conjunction.evaluate(&batch).unwrap() else {
                panic!("an array");
            };
            assert_eq!(got.as_boolean().true_count(), 82);
        }
        assert_eq!(conjunction.adaptive.lock().unwrap().order, [1, 0]);
        let ColumnarValue::Array(got) = conjunction.evaluate(&batch).unwrap() else {
            panic!("an array");
        };
        assert_eq!(got.as_boolean().true_count(), 82);

        // A condition that can fail (division) keeps the query's order.
        let ratio = binary(col("a"), Operator::Divide, col("b"), &schema).unwrap();
        let fallible = binary(ratio, Operator::Gt, lit(1), &schema).unwrap();
        let predicate = binary(keeps_all, Operator::And, fallible, &schema).unwrap();
        assert!(!Conjunction::new(predicate, vec![0, 1]).adapts);
    }

    #[test]
    fn cheap_conditions_go_first() {
        use datafusion::datasource::memory::MemorySourceConfig;
        let schema = Arc::new(Schema::new(vec![
            Field::new("mode", DataType::Utf8View, true),
            Field::new("shipped", DataType::Date32, true),
            Field::new("committed", DataType::Date32, true),
        ]));
        let col = |n: &str| -> Arc<dyn PhysicalExpr> {
            Arc::new(Column::new_with_schema(n, &schema).unwrap())
        };
        let day = Arc::new(Literal::new(ScalarValue::Date32(Some(9000))));
        let mail = Arc::new(Literal::new(ScalarValue::Utf8View(Some("MAIL".into()))));
        // TPC-H Q12's shape: the string condition first, the date range last.
        let by_mode = binary(col("mode"), Operator::Eq, mail, &schema).unwrap();
        let late = binary(col("shipped"), Operator::Gt, col("committed"), &schema).unwrap();
        let recent = binary(col("shipped"), Operator::GtEq, day, &schema).unwrap();
        let and = binary(by_mode, Operator::And, late, &schema).unwrap();
        let predicate = binary(and, Operator::And, recent, &schema).unwrap();
        let input = MemorySourceConfig::try_new_exec(&[vec![]], schema.clone(), None).unwrap();
        let filter: Arc<dyn ExecutionPlan> =
            Arc::new(FilterExec::try_new(predicate, input).unwrap());
        let plan = FastConjunctions
            .optimize(filter, &ConfigOptions::default())
            .unwrap();
        let filter = plan.downcast_ref::<FilterExec>().unwrap();
        let conjunction = filter.predicate().downcast_ref::<Conjunction>().unwrap();
        let order: Vec<&[usize]> = conjunction
            .conditions
            .iter()
            .map(|c| c.columns.as_slice())
            .collect();
        // The date against a literal, the two dates, the string.
        assert_eq!(order, [&[1][..], &[1, 2][..], &[0][..]]);
        // Rebuilt with new children, the order stays.
        let rebuilt = Arc::clone(filter.predicate())
            .with_new_children(vec![conjunction.original.clone()])
            .unwrap();
        let rebuilt = rebuilt.downcast_ref::<Conjunction>().unwrap();
        let order: Vec<&[usize]> = rebuilt
            .conditions
            .iter()
            .map(|c| c.columns.as_slice())
            .collect();
        assert_eq!(order, [&[1][..], &[1, 2][..], &[0][..]]);
    }
}
