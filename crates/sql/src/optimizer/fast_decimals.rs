//! Decimal arithmetic in 64 bits where the values allow it.
//!
//! Arrow computes `Decimal128` sums, differences and products one checked 128-bit operation
//! at a time, each into a new 16-byte-per-row array: TPC-H's `l_extendedprice * (1 -
//! l_discount) * (1 + l_tax)` costs more than reading the columns. Money columns rarely need
//! more than 64 bits. [`FastDecimals`] wraps every tree of `+`, `-` and `*` over `Decimal128`
//! values in projections and aggregate arguments into a [`Decimal64Arithmetic`] expression,
//! which bounds each operation's result from its inputs' largest magnitudes in the batch at
//! hand and, when every bound fits in 64 bits, computes the whole tree in one pass of
//! unchecked 64-bit operations per node.
//!
//! It fires on each maximal tree of `+`, `-` and `*` whose root and the root's operands are
//! `Decimal128`, in projections' expressions and in the arguments of partial and single
//! aggregations (not in filters, join keys, grouping keys or `FILTER` clauses); division,
//! casts, functions, columns and literals inside are leaves DataFusion evaluates. An
//! aggregation is rebuilt only when its schema stays the same and it keeps its dynamic filter.
//! Batch by batch it leaves the work to the original expression when a leaf is not a
//! `Decimal128` array, every leaf is one value, a value in any slot (nulls' too) needs more
//! than 64 bits, a scale would pass 38, or a node's bound passes `i64::MAX`.
//!
//! Why the answer cannot change: a decimal is an integer at a scale, and Arrow computes on
//! those integers: products of the unscaled values, sums and differences after multiplying the
//! smaller scale's operand by a power of ten. A node's bound is the product, or the rescaled
//! sum, of its inputs' largest magnitudes, so when every bound fits in `i64` no operation
//! wraps and every result is exact. Precision and scale follow Arrow's rules, which are the
//! types DataFusion gives the expression; a null in any leaf makes the row null, as in Arrow.
//! A batch that could overflow 64 bits runs DataFusion's checked 128-bit code and fails where
//! it fails; a batch that fits in 64 bits cannot overflow 128.
//!
//! A plan whose rebuilt projections promise less than a node above relies on (the orders
//! DataFusion derives through arithmetic: `price + 1` ordered as `price` is) fails DataFusion's
//! `SanityCheckPlan` and is not taken ([`crate::optimizer::utils::still_valid`]).

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Decimal128Array, RecordBatch};
use datafusion::arrow::buffer::{NullBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DECIMAL128_MAX_PRECISION, DataType, Decimal128Type, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};

use crate::optimizer::utils::map_children;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct FastDecimals;

impl PhysicalOptimizerRule for FastDecimals {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let rewritten = rewrite(plan.clone())?;
        Ok(crate::optimizer::utils::still_valid(
            plan, rewritten, config,
        ))
    }

    fn name(&self) -> &str {
        "floe_fast_decimals"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn rewrite(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = map_children(plan, |_, child| rewrite(child))?;
    if let Some(projection) = plan.downcast_ref::<ProjectionExec>() {
        let schema = projection.input().schema();
        let mut changed = false;
        let exprs: Vec<ProjectionExpr> = projection
            .expr()
            .iter()
            .map(|p| {
                let expr = fuse(&p.expr, &schema)?;
                changed |= !Arc::ptr_eq(&expr, &p.expr);
                Ok(ProjectionExpr {
                    expr,
                    alias: p.alias.clone(),
                })
            })
            .collect::<Result<_>>()?;
        if changed {
            return Ok(Arc::new(ProjectionExec::try_new(
                exprs,
                projection.input().clone(),
            )?));
        }
    } else if let Some(aggregate) = plan.downcast_ref::<AggregateExec>()
        && matches!(
            aggregate.mode(),
            AggregateMode::Partial | AggregateMode::Single | AggregateMode::SinglePartitioned
        )
    {
        let schema = aggregate.input_schema();
        let mut changed = false;
        let mut functions: Vec<Arc<AggregateFunctionExpr>> = Vec::new();
        for function in aggregate.aggr_expr() {
            let args: Vec<Arc<dyn PhysicalExpr>> = function
                .expressions()
                .iter()
                .map(|arg| fuse(arg, &schema))
                .collect::<Result<_>>()?;
            if args
                .iter()
                .zip(function.expressions())
                .all(|(new, old)| Arc::ptr_eq(new, &old))
            {
                functions.push(function.clone());
                continue;
            }
            let order_by = function
                .order_bys()
                .iter()
                .map(|s| s.expr.clone())
                .collect();
            match function.with_new_expressions(args, order_by) {
                Some(rewritten) => {
                    changed = true;
                    functions.push(Arc::new(rewritten));
                }
                None => functions.push(function.clone()),
            }
        }
        if changed {
            let mut rewritten = AggregateExec::try_new(
                *aggregate.mode(),
                aggregate.group_expr().clone(),
                functions,
                aggregate.filter_expr().to_vec(),
                aggregate.input().clone(),
                schema,
            )?
            .with_limit_options(aggregate.limit_options());
            if let Some(filter) = aggregate.dynamic_filter_expr() {
                match rewritten.with_dynamic_filter_expr(filter.clone()) {
                    Ok(with_filter) => rewritten = with_filter,
                    // The scans below watch the original's filter: keep the original.
                    Err(_) => return Ok(plan),
                }
            }
            if rewritten.schema() == plan.schema() {
                return Ok(Arc::new(rewritten));
            }
        }
    }
    Ok(plan)
}

/// `expr` with each maximal decimal arithmetic tree in it wrapped.
fn fuse(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Result<Arc<dyn PhysicalExpr>> {
    let rewritten = expr.clone().transform_down(|e| {
        if is_decimal_arithmetic(&e, schema) {
            let fused: Arc<dyn PhysicalExpr> = Arc::new(Decimal64Arithmetic::new(e));
            return Ok(Transformed::new(fused, true, TreeNodeRecursion::Jump));
        }
        Ok(Transformed::no(e))
    })?;
    Ok(if rewritten.transformed {
        rewritten.data
    } else {
        expr.clone()
    })
}

fn arithmetic(expr: &Arc<dyn PhysicalExpr>) -> Option<&BinaryExpr> {
    expr.downcast_ref::<BinaryExpr>().filter(|b| {
        matches!(
            b.op(),
            Operator::Plus | Operator::Minus | Operator::Multiply
        )
    })
}

fn is_decimal_arithmetic(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> bool {
    let Some(binary) = arithmetic(expr) else {
        return false;
    };
    [expr, binary.left(), binary.right()]
        .iter()
        .all(|e| matches!(e.data_type(schema), Ok(DataType::Decimal128(_, _))))
}

/// A tree of decimal `+`, `-` and `*`, computed in 64 bits when its values allow.
#[derive(Debug)]
pub struct Decimal64Arithmetic {
    /// The tree as DataFusion planned it: its leaves are evaluated by it, and whole batches
    /// that could overflow 64 bits are computed by it.
    original: Arc<dyn PhysicalExpr>,
}

/// A value during evaluation: one per row or one for all.
enum Value {
    Rows(Vec<i64>),
    One(i64),
}

/// A leaf of the tree, evaluated: a decimal column's values (known to fit 64 bits), or one
/// value.
enum Leaf {
    Rows(Vec<i64>),
    One(i64),
}

/// What is known of a node before computing it: its type and largest magnitude.
struct Shape {
    precision: u8,
    scale: i8,
    bound: u128,
}

impl Decimal64Arithmetic {
    pub fn new(original: Arc<dyn PhysicalExpr>) -> Self {
        Self { original }
    }

    /// Evaluates the leaves of `expr` into `leaves` (in visiting order) and returns the tree's
    /// shape, or `None` when a value or type rules the 64-bit path out.
    fn leaves(
        expr: &Arc<dyn PhysicalExpr>,
        batch: &RecordBatch,
        leaves: &mut Vec<(Leaf, i8)>,
        nulls: &mut Option<NullBuffer>,
    ) -> Result<Option<Shape>> {
        if let Some(binary) = arithmetic(expr) {
            let Some(l) = Self::leaves(binary.left(), batch, leaves, nulls)? else {
                return Ok(None);
            };
            let Some(r) = Self::leaves(binary.right(), batch, leaves, nulls)? else {
                return Ok(None);
            };
            // Arrow's result types (arrow-arith `decimal_op`).
            let shape = match binary.op() {
                Operator::Multiply => {
                    let scale = l.scale.checked_add(r.scale).filter(|s| *s <= 38);
                    let Some(scale) = scale else {
                        return Ok(None);
                    };
                    Shape {
                        precision: (l.precision + r.precision + 1).min(DECIMAL128_MAX_PRECISION),
                        scale,
                        bound: l.bound.saturating_mul(r.bound),
                    }
                }
                _ => {
                    let scale = l.scale.max(r.scale);
                    let (Some(fl), Some(fr)) = (power(scale - l.scale), power(scale - r.scale))
                    else {
                        return Ok(None);
                    };
                    let integer = (l.precision as i8 - l.scale).max(r.precision as i8 - r.scale);
                    Shape {
                        precision: ((scale + integer) as u8 + 1).min(DECIMAL128_MAX_PRECISION),
                        scale,
                        bound: l
                            .bound
                            .saturating_mul(fl as u128)
                            .saturating_add(r.bound.saturating_mul(fr as u128)),
                    }
                }
            };
            return Ok((shape.bound <= i64::MAX as u128).then_some(shape));
        }
        let array = match expr.evaluate(batch)? {
            ColumnarValue::Array(array) => array,
            ColumnarValue::Scalar(ScalarValue::Decimal128(Some(v), p, s)) => {
                let Ok(one) = i64::try_from(v) else {
                    return Ok(None);
                };
                leaves.push((Leaf::One(one), s));
                return Ok(Some(Shape {
                    precision: p,
                    scale: s,
                    bound: v.unsigned_abs(),
                }));
            }
            ColumnarValue::Scalar(_) => return Ok(None),
        };
        let DataType::Decimal128(precision, scale) = *array.data_type() else {
            return Ok(None);
        };
        // Every slot, nulls' too: their values are computed (and then masked) as well. One
        // pass narrows the values, finds the largest magnitude and whether any needs more than
        // 64 bits (its high half is not the sign of its low half).
        let mut wide = 0i64;
        let mut bound = 0u64;
        let narrowed: Vec<i64> = array
            .as_primitive::<Decimal128Type>()
            .values()
            .iter()
            .map(|&v| {
                let low = v as i64;
                wide |= ((v >> 64) as i64) ^ (low >> 63);
                bound = bound.max(low.unsigned_abs());
                low
            })
            .collect();
        if wide != 0 {
            return Ok(None);
        }
        *nulls = NullBuffer::union(nulls.as_ref(), array.logical_nulls().as_ref());
        leaves.push((Leaf::Rows(narrowed), scale));
        Ok(Some(Shape {
            precision,
            scale,
            bound: u128::from(bound),
        }))
    }

    /// Computes `expr` from the evaluated `leaves` (consumed in visiting order).
    fn compute(
        expr: &Arc<dyn PhysicalExpr>,
        leaves: &mut std::vec::IntoIter<(Leaf, i8)>,
    ) -> (Value, i8) {
        let Some(binary) = arithmetic(expr) else {
            let (leaf, scale) = leaves.next().expect("a value per leaf");
            let value = match leaf {
                Leaf::Rows(values) => Value::Rows(values),
                Leaf::One(one) => Value::One(one),
            };
            return (value, scale);
        };
        let (l, ls) = Self::compute(binary.left(), leaves);
        let (r, rs) = Self::compute(binary.right(), leaves);
        match binary.op() {
            Operator::Multiply => (apply(l, r, |a, b| a.wrapping_mul(b)), ls + rs),
            op => {
                let scale = ls.max(rs);
                let l = rescale(l, power(scale - ls).unwrap_or(1));
                let r = rescale(r, power(scale - rs).unwrap_or(1));
                let value = if *op == Operator::Plus {
                    apply(l, r, |a, b| a.wrapping_add(b))
                } else {
                    apply(l, r, |a, b| a.wrapping_sub(b))
                };
                (value, scale)
            }
        }
    }
}

fn power(exponent: i8) -> Option<i64> {
    10i64.checked_pow(u32::try_from(exponent).ok()?)
}

fn rescale(value: Value, factor: i64) -> Value {
    if factor == 1 {
        return value;
    }
    match value {
        Value::One(v) => Value::One(v.wrapping_mul(factor)),
        Value::Rows(mut rows) => {
            rows.iter_mut().for_each(|v| *v = v.wrapping_mul(factor));
            Value::Rows(rows)
        }
    }
}

fn apply(l: Value, r: Value, f: impl Fn(i64, i64) -> i64) -> Value {
    match (l, r) {
        (Value::Rows(mut a), Value::Rows(b)) => {
            a.iter_mut().zip(&b).for_each(|(x, y)| *x = f(*x, *y));
            Value::Rows(a)
        }
        (Value::Rows(mut a), Value::One(y)) => {
            a.iter_mut().for_each(|x| *x = f(*x, y));
            Value::Rows(a)
        }
        (Value::One(x), Value::Rows(mut b)) => {
            b.iter_mut().for_each(|y| *y = f(x, *y));
            Value::Rows(b)
        }
        (Value::One(x), Value::One(y)) => Value::One(f(x, y)),
    }
}

impl PhysicalExpr for Decimal64Arithmetic {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.original.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.original.nullable(input_schema)
    }

    fn return_field(
        &self,
        input_schema: &Schema,
    ) -> Result<datafusion::arrow::datatypes::FieldRef> {
        self.original.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let mut leaves = Vec::new();
        let mut nulls = None;
        let Some(shape) = Self::leaves(&self.original, batch, &mut leaves, &mut nulls)? else {
            return self.original.evaluate(batch);
        };
        let (value, scale) = Self::compute(&self.original, &mut leaves.into_iter());
        debug_assert_eq!(scale, shape.scale);
        // Only values known in advance (no column): DataFusion folds those itself.
        let Value::Rows(rows) = value else {
            return self.original.evaluate(batch);
        };
        let values: ScalarBuffer<i128> = rows.into_iter().map(i128::from).collect();
        let array = Decimal128Array::new(values, nulls)
            .with_precision_and_scale(shape.precision, shape.scale)?;
        Ok(ColumnarValue::Array(Arc::new(array)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.original]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(Decimal64Arithmetic::new(children.remove(0))))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.original.fmt_sql(f)
    }
}

impl fmt::Display for Decimal64Arithmetic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "decimal64({})", self.original)
    }
}

crate::same_as_inner_expr!(Decimal64Arithmetic, original);

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::ArrayRef;
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{Column, Literal, binary};

    use super::*;

    fn decimals(values: &[Option<i128>], precision: u8, scale: i8) -> ArrayRef {
        Arc::new(
            values
                .iter()
                .copied()
                .collect::<Decimal128Array>()
                .with_precision_and_scale(precision, scale)
                .unwrap(),
        )
    }

    /// `price * (1 - discount) * (1 + tax) - price + 7.5`, fused and as DataFusion computes it.
    fn both(batch: &RecordBatch) -> (ColumnarValue, Result<ColumnarValue>) {
        let expr = both_expr(batch);
        let fused = Decimal64Arithmetic::new(expr.clone());
        (expr.evaluate(batch).unwrap(), fused.evaluate(batch))
    }

    fn both_expr(batch: &RecordBatch) -> Arc<dyn PhysicalExpr> {
        let schema = batch.schema();
        let col = |name: &str| -> Arc<dyn PhysicalExpr> {
            Arc::new(Column::new_with_schema(name, &schema).unwrap())
        };
        let lit = |v: i128, p: u8, s: i8| -> Arc<dyn PhysicalExpr> {
            Arc::new(Literal::new(ScalarValue::Decimal128(Some(v), p, s)))
        };
        let one_minus = binary(lit(1, 20, 0), Operator::Minus, col("discount"), &schema).unwrap();
        let one_plus = binary(lit(1, 20, 0), Operator::Plus, col("tax"), &schema).unwrap();
        let product = binary(col("price"), Operator::Multiply, one_minus, &schema).unwrap();
        let product = binary(product, Operator::Multiply, one_plus, &schema).unwrap();
        let less = binary(product, Operator::Minus, col("price"), &schema).unwrap();
        let expr = binary(less, Operator::Plus, lit(75, 3, 1), &schema).unwrap();
        assert!(is_decimal_arithmetic(&expr, &schema));
        expr
    }

    fn batch(
        price: &[Option<i128>],
        discount: &[Option<i128>],
        tax: &[Option<i128>],
    ) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("price", DataType::Decimal128(15, 2), true),
            Field::new("discount", DataType::Decimal128(15, 2), true),
            Field::new("tax", DataType::Decimal128(15, 2), true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                decimals(price, 15, 2),
                decimals(discount, 15, 2),
                decimals(tax, 15, 2),
            ],
        )
        .unwrap()
    }

    #[test]
    fn fused_arithmetic_gives_arrows_values_and_type() {
        let batch = batch(
            &[Some(9_999_999), Some(-12_345), None, Some(0), Some(100)],
            &[Some(5), Some(10), Some(7), None, Some(100)],
            &[Some(8), Some(-3), Some(1), Some(2), Some(0)],
        );
        let (expected, fused) = both(&batch);
        let (ColumnarValue::Array(expected), ColumnarValue::Array(fused)) =
            (expected, fused.unwrap())
        else {
            panic!("arrays expected");
        };
        assert_eq!(expected.data_type(), fused.data_type());
        assert_eq!(expected.as_ref(), fused.as_ref());
        assert_eq!(fused.null_count(), 2);
    }

    #[test]
    fn values_beyond_64_bits_are_computed_as_before() {
        // About 10^14 * 10^4 * 10^2 at scale 6 needs more than 64 bits (not 128): the
        // original expression computes the batch.
        let big = 99_999_999_999_999i128;
        let batch = batch(
            &[Some(big), Some(1)],
            &[Some(-1_000_000), Some(2)],
            &[Some(8), Some(3)],
        );
        let bound =
            Decimal64Arithmetic::leaves(&both_expr(&batch), &batch, &mut Vec::new(), &mut None)
                .unwrap();
        assert!(bound.is_none(), "the batch must take the 128-bit path");
        let (expected, fused) = both(&batch);
        let (ColumnarValue::Array(expected), ColumnarValue::Array(fused)) =
            (expected, fused.unwrap())
        else {
            panic!("arrays expected");
        };
        assert_eq!(expected.as_ref(), fused.as_ref());
    }

    #[test]
    fn a_column_value_beyond_64_bits_takes_the_128_bit_path() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Decimal128(38, 0), true),
            Field::new("b", DataType::Decimal128(38, 0), true),
        ]));
        for wide in [1i128 << 70, -(1i128 << 70), i128::from(i64::MIN) - 1] {
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    decimals(&[Some(3), Some(wide)], 38, 0),
                    decimals(&[Some(2), Some(0)], 38, 0),
                ],
            )
            .unwrap();
            let a: Arc<dyn PhysicalExpr> = Arc::new(Column::new_with_schema("a", &schema).unwrap());
            let b: Arc<dyn PhysicalExpr> = Arc::new(Column::new_with_schema("b", &schema).unwrap());
            // `a * b`: 0 times the wide value fits, but the value itself does not narrow.
            let expr = binary(a, Operator::Multiply, b, &schema).unwrap();
            let shape =
                Decimal64Arithmetic::leaves(&expr, &batch, &mut Vec::new(), &mut None).unwrap();
            assert!(shape.is_none(), "{wide} must take the 128-bit path");
            let fused = Decimal64Arithmetic::new(expr.clone())
                .evaluate(&batch)
                .unwrap();
            let (ColumnarValue::Array(expected), ColumnarValue::Array(fused)) =
                (expr.evaluate(&batch).unwrap(), fused)
            else {
                panic!("arrays expected");
            };
            assert_eq!(expected.as_ref(), fused.as_ref());
        }
    }
}
