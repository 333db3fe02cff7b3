//! Membership in a join's build-side keys, for integer keys, as one bit test per row.
//!
//! A hash join whose build side holds few distinct keys publishes its runtime filter as
//! `key IN (k1, k2, …)` (DataFusion's in-list pushdown). TPC-H's keys, like most join keys,
//! are integers from a dense range; [`IntegerSet`] holds such a list as a bitmap over the span
//! of its values, so a row costs a subtraction, a compare and a bit test (about 1 ns, against
//! ~10 ns for a hash lookup). Lists spread too thinly over their range for a bitmap of
//! reasonable size stay as DataFusion evaluates them.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Int8Type, Int16Type, Int32Type, Int64Type, Schema, UInt8Type, UInt16Type,
    UInt32Type,
};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, InListExpr, Literal};

/// The largest bitmap kept, in bits (1 MiB).
const MAX_BITS: u64 = 1 << 23;
/// A bitmap up to this size (32 KiB, cache-resident) is kept however few its members.
const SMALL_BITS: u64 = 1 << 18;
/// A larger bitmap needs at least one member per this many bits.
const BITS_PER_MEMBER: u64 = 64;

/// `column IN (integer literals)` as a bitmap over `[min, min + bits)`.
#[derive(Debug)]
pub(crate) struct IntegerSet {
    column: usize,
    min: i64,
    max: i64,
    bits: Vec<u64>,
    /// The list as planned, for display and equality.
    original: Arc<dyn PhysicalExpr>,
}

impl IntegerSet {
    /// The set for `expr` when it is a non-negated `IN` list of integer literals over an integer
    /// column and a bitmap of its span is small enough. Null literals are left out (a null key
    /// joins nothing, and `IN` never passes a row for one).
    pub(crate) fn try_new(expr: &Arc<dyn PhysicalExpr>) -> Option<Self> {
        let list = expr.downcast_ref::<InListExpr>()?;
        if list.negated() {
            return None;
        }
        let column = list.expr().downcast_ref::<Column>()?.index();
        let mut values = Vec::with_capacity(list.len());
        for item in list.list() {
            let value = item.downcast_ref::<Literal>()?.value();
            if value.is_null() {
                continue;
            }
            values.push(integer(value)?);
        }
        let (&min, &max) = (values.iter().min()?, values.iter().max()?);
        // Saturating: keys at both ends of the 64-bit range make too large a span, not zero.
        let span = max.abs_diff(min).saturating_add(1);
        let dense = span <= SMALL_BITS || span <= BITS_PER_MEMBER * values.len() as u64;
        if span > MAX_BITS || !dense {
            return None;
        }
        let mut bits = vec![0u64; span.div_ceil(64) as usize];
        for value in values {
            let at = value.abs_diff(min);
            bits[(at / 64) as usize] |= 1 << (at % 64);
        }
        Some(Self {
            column,
            min,
            max,
            bits,
            original: expr.clone(),
        })
    }

    /// Whether `expr` holds for every value of the set: a conjunction of comparisons of the
    /// set's column with literals (the bounds a join publishes next to its key list).
    pub(crate) fn implies(&self, expr: &Arc<dyn PhysicalExpr>) -> bool {
        let Some(binary) = expr.downcast_ref::<BinaryExpr>() else {
            return false;
        };
        if *binary.op() == Operator::And {
            return self.implies(binary.left()) && self.implies(binary.right());
        }
        let (Some(column), Some(literal)) = (
            binary.left().downcast_ref::<Column>(),
            binary.right().downcast_ref::<Literal>(),
        ) else {
            return false;
        };
        let Some(bound) = integer(literal.value()) else {
            return false;
        };
        column.index() == self.column
            && match binary.op() {
                Operator::GtEq => self.min >= bound,
                Operator::Gt => self.min > bound,
                Operator::LtEq => self.max <= bound,
                Operator::Lt => self.max < bound,
                _ => false,
            }
    }

    fn contains(&self, value: i64) -> bool {
        if value < self.min || value > self.max {
            return false;
        }
        let at = value.abs_diff(self.min);
        self.bits[(at / 64) as usize] >> (at % 64) & 1 == 1
    }

    fn test(&self, array: &ArrayRef) -> Result<BooleanBuffer> {
        macro_rules! test_as {
            ($type:ty) => {{
                let values = array.as_primitive::<$type>().values();
                BooleanBuffer::collect_bool(values.len(), |i| self.contains(values[i] as i64))
            }};
        }
        Ok(match array.data_type() {
            DataType::Int8 => test_as!(Int8Type),
            DataType::Int16 => test_as!(Int16Type),
            DataType::Int32 => test_as!(Int32Type),
            DataType::Int64 => test_as!(Int64Type),
            DataType::UInt8 => test_as!(UInt8Type),
            DataType::UInt16 => test_as!(UInt16Type),
            DataType::UInt32 => test_as!(UInt32Type),
            DataType::Date32 => test_as!(Date32Type),
            other => return internal_err!("an integer key set over a {other} column"),
        })
    }
}

/// A literal's integer value, for the types [`IntegerSet`] handles.
fn integer(value: &ScalarValue) -> Option<i64> {
    Some(match value {
        ScalarValue::Int8(Some(v)) => *v as i64,
        ScalarValue::Int16(Some(v)) => *v as i64,
        ScalarValue::Int32(Some(v)) => *v as i64,
        ScalarValue::Int64(Some(v)) => *v,
        ScalarValue::UInt8(Some(v)) => *v as i64,
        ScalarValue::UInt16(Some(v)) => *v as i64,
        ScalarValue::UInt32(Some(v)) => *v as i64,
        ScalarValue::Date32(Some(v)) => *v as i64,
        _ => return None,
    })
}

impl PhysicalExpr for IntegerSet {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(false)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let array = batch.column(self.column);
        let mut passed = self.test(array)?;
        // A null key passes nothing, whatever its slot holds.
        if let Some(nulls) = array.logical_nulls() {
            passed = &passed & nulls.inner();
        }
        Ok(ColumnarValue::Array(Arc::new(BooleanArray::new(
            passed, None,
        ))))
    }

    // Reads one column by position; built after the filter's columns were addressed.
    crate::leaf_of_original!(original);
}

impl fmt::Display for IntegerSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bitmap({})", self.original)
    }
}

crate::same_as_inner_expr!(IntegerSet, original);

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, Int64Array};
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{in_list, lit};

    fn schema(data_type: DataType) -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("other", DataType::Utf8, true),
            Field::new("k", data_type, true),
        ]))
    }

    fn set_of(list: Vec<ScalarValue>, data_type: DataType) -> Option<IntegerSet> {
        let schema = schema(data_type);
        let column = Arc::new(Column::new("k", 1)) as Arc<dyn PhysicalExpr>;
        let list = list.into_iter().map(lit).collect();
        let expr = in_list(column, list, &false, &schema).unwrap();
        IntegerSet::try_new(&expr)
    }

    fn passing(set: &IntegerSet, keys: ArrayRef) -> Vec<bool> {
        let others = Arc::new(datafusion::arrow::array::StringArray::from(vec![
            "x";
            keys.len()
        ]));
        let batch =
            RecordBatch::try_new(schema(keys.data_type().clone()), vec![others, keys]).unwrap();
        let ColumnarValue::Array(result) = set.evaluate(&batch).unwrap() else {
            panic!("an array");
        };
        result.as_boolean().iter().map(|b| b.unwrap()).collect()
    }

    #[test]
    fn members_pass_and_everything_else_fails() {
        let list = [7i64, 9, 70, -3, 9]
            .map(|v| ScalarValue::Int64(Some(v)))
            .to_vec();
        let set = set_of(list, DataType::Int64).expect("a dense list");
        let keys = Arc::new(Int64Array::from(vec![
            Some(7),
            Some(8),
            None,
            Some(-3),
            Some(70),
            Some(71),
            Some(-4),
            Some(i64::MIN),
            Some(9),
        ]));
        assert_eq!(
            passing(&set, keys),
            [true, false, false, true, true, false, false, false, true]
        );
    }

    #[test]
    fn null_literals_are_left_out_and_bounds_are_implied() {
        let list = vec![
            ScalarValue::Int32(Some(100)),
            ScalarValue::Int32(None),
            ScalarValue::Int32(Some(164)),
        ];
        let set = set_of(list, DataType::Int32).expect("a dense list");
        let keys = Arc::new(Int32Array::from(vec![Some(100), None, Some(164), Some(0)]));
        assert_eq!(passing(&set, keys), [true, false, true, false]);
        let column = || Arc::new(Column::new("k", 1)) as Arc<dyn PhysicalExpr>;
        let compare = |op, v: i32| -> Arc<dyn PhysicalExpr> {
            Arc::new(BinaryExpr::new(column(), op, lit(v)))
        };
        let bounds: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            compare(Operator::GtEq, 100),
            Operator::And,
            compare(Operator::LtEq, 164),
        ));
        assert!(set.implies(&bounds));
        assert!(!set.implies(&compare(Operator::Gt, 100)));
        assert!(!set.implies(&compare(Operator::Eq, 100)));
    }

    #[test]
    fn sparse_lists_are_left_to_datafusion() {
        let list = [0i64, 1 << 40]
            .map(|v| ScalarValue::Int64(Some(v)))
            .to_vec();
        assert!(set_of(list, DataType::Int64).is_none());
        let extremes = [i64::MIN, i64::MAX]
            .map(|v| ScalarValue::Int64(Some(v)))
            .to_vec();
        assert!(set_of(extremes, DataType::Int64).is_none());
        let strings = vec![ScalarValue::Utf8(Some("a".into()))];
        assert!(set_of(strings, DataType::Utf8).is_none());
    }
}
