//! Membership in a join's build-side keys, for integer keys, as one bit test per row.
//!
//! A hash join whose build side holds few distinct keys publishes its runtime filter as
//! `key IN (k1, k2, …)` (DataFusion's in-list pushdown). TPC-H's keys, like most join keys,
//! are integers from a dense range; [`IntegerSet`] holds such a list as a [`Bitmap`] over the
//! span of its values, so a row costs a subtraction, a compare and a bit test (about 1 ns,
//! against ~10 ns for a hash lookup). Lists spread too thinly over their range for a bitmap
//! of reasonable size stay as DataFusion evaluates them. Larger build sides have their keys
//! collected into a bitmap as the join reads them ([`super::collect_keys`]).
//!
//! A list becomes a set only when it is a non-negated `IN` of integer literals (8 to 64-bit
//! signed, up to 32-bit unsigned, dates) over a bare column, dense enough for a bitmap of at
//! most [`MAX_BITS`]; negated or sparse lists, other types (`UInt64`, decimals, strings,
//! floats) and items that are not literals stay DataFusion's.
//!
//! Why a set tests exactly what its list or keys do: values compare as `i64`, which holds every
//! value of those types; a bitmap covers the whole span from its least to its greatest member,
//! and a hash set's sieve has a bit for every member, so neither misses one. Null literals are
//! left out, which changes no filter's answer (`k IN (1, NULL)` is true for 1 and null, which
//! drops the row, for anything else); a null value fails. [`IntegerSet::implies`] lets the set
//! stand for `bounds AND set` only when every bound compares the set's own column with an
//! integer literal that the set's least and greatest members already satisfy.

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

/// The largest bitmap made of an `IN` list, in bits (1 MiB).
const MAX_BITS: u64 = 1 << 23;
/// A bitmap up to this size (32 KiB, cache-resident) is kept however few its members.
const SMALL_BITS: u64 = 1 << 18;
/// The most members of a set too sparse for a bitmap that are hashed instead.
const MOST_HASHED: usize = 1 << 18;

/// Integer keys to test values against: a bitmap over their span when they are dense
/// enough, a hash set otherwise.
#[derive(Debug)]
pub(crate) enum Keys {
    Dense(Bitmap),
    Sparse(Hashed),
}

impl Keys {
    fn min(&self) -> i64 {
        match self {
            Keys::Dense(bitmap) => bitmap.min,
            Keys::Sparse(hashed) => hashed.min,
        }
    }

    fn max(&self) -> i64 {
        match self {
            Keys::Dense(bitmap) => bitmap.max,
            Keys::Sparse(hashed) => hashed.max,
        }
    }

    fn contains(&self, value: i64) -> bool {
        match self {
            Keys::Dense(bitmap) => bitmap.contains(value),
            Keys::Sparse(hashed) => hashed.contains(value),
        }
    }

    /// Bytes held.
    pub(crate) fn size(&self) -> usize {
        match self {
            Keys::Dense(bitmap) => bitmap.size(),
            Keys::Sparse(hashed) => (hashed.slots.len() + hashed.sieve.len()) * 8,
        }
    }

    /// How the keys are held, for plans.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Keys::Dense(_) => "bitmap",
            Keys::Sparse(_) => "hash set",
        }
    }
}

/// A set of integers in an open-addressing table of twice their number (rounded up to a power
/// of two), probed linearly from a multiplicative hash. In front of it, a sieve of about 32
/// bits per member (at least 2^16) addressed by the hash's top bits answers most values that
/// are not members with one bit test: a join's probe side is mostly such values, and a sieve
/// that passes few of them keeps the branch after it predictable (with one bit per member, 40 %
/// passed and a lookup cost three times as much).
#[derive(Debug)]
pub(crate) struct Hashed {
    /// `EMPTY` marks a free slot.
    slots: Vec<i64>,
    /// Bit `hash >> sieve_shift` is set for every member.
    sieve: Vec<u64>,
    sieve_shift: u32,
    shift: u32,
    /// Whether `EMPTY` itself is a member.
    holds_empty: bool,
    min: i64,
    max: i64,
}

const EMPTY: i64 = i64::MIN;

/// Fibonacci hashing: the top bits of the product are well mixed.
fn hash(value: i64) -> u64 {
    (value as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Hashed {
    /// Slots of the table for `count` members.
    fn slots_for(count: usize) -> usize {
        (count.max(8) * 2).next_power_of_two()
    }

    /// Bits of the sieve for `count` members.
    fn sieve_bits_for(count: usize) -> usize {
        (count * 32).next_power_of_two().max(1 << 16)
    }

    /// Bits held by the set of `count` members, slots and sieve.
    fn bits_for(count: usize) -> u64 {
        (Self::slots_for(count) * 64 + Self::sieve_bits_for(count)) as u64
    }

    fn of(values: impl Iterator<Item = i64>, count: usize) -> Self {
        let size = Self::slots_for(count);
        let sieve_bits = Self::sieve_bits_for(count);
        let mut set = Self {
            slots: vec![EMPTY; size],
            sieve: vec![0; sieve_bits / 64],
            sieve_shift: 64 - sieve_bits.trailing_zeros(),
            shift: 64 - size.trailing_zeros(),
            holds_empty: false,
            min: i64::MAX,
            max: i64::MIN,
        };
        let mask = size - 1;
        for value in values {
            set.min = set.min.min(value);
            set.max = set.max.max(value);
            let sieved = hash(value) >> set.sieve_shift;
            set.sieve[(sieved / 64) as usize] |= 1 << (sieved % 64);
            if value == EMPTY {
                set.holds_empty = true;
                continue;
            }
            let mut at = set.slot(value);
            while set.slots[at] != EMPTY && set.slots[at] != value {
                at = (at + 1) & mask;
            }
            set.slots[at] = value;
        }
        set
    }

    fn slot(&self, value: i64) -> usize {
        (hash(value) >> self.shift) as usize
    }

    fn contains(&self, value: i64) -> bool {
        if value < self.min || value > self.max {
            return false;
        }
        let sieved = hash(value) >> self.sieve_shift;
        if self.sieve[(sieved / 64) as usize] >> (sieved % 64) & 1 == 0 {
            return false;
        }
        if value == EMPTY {
            return self.holds_empty;
        }
        let mask = self.slots.len() - 1;
        let mut at = self.slot(value);
        loop {
            match self.slots[at] {
                v if v == value => return true,
                EMPTY => return false,
                _ => at = (at + 1) & mask,
            }
        }
    }
}

/// Integer values as bits: bit `i` stands for `base + i`; `min` and `max` are the least and
/// greatest members.
#[derive(Debug, Default)]
pub(crate) struct Bitmap {
    base: i64,
    min: i64,
    max: i64,
    words: Vec<u64>,
}

impl Bitmap {
    /// The bitmap of `values` when it is dense ([`Bitmap::dense`]) and at most `max_bits`
    /// wide.
    fn of(values: &[i64], max_bits: u64) -> Option<Self> {
        let mut bitmap = Self::default();
        let (&min, &max) = (values.iter().min()?, values.iter().max()?);
        if !bitmap.cover(min, max, max_bits) {
            return None;
        }
        values.iter().for_each(|&v| bitmap.insert(v));
        bitmap.dense(bitmap.members()).then_some(bitmap)
    }

    fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    fn members(&self) -> u64 {
        self.words.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// Whether the bitmap, of `members` members, has some and is cache-sized or at most twice
    /// the size of the [`Hashed`] set of its members: a bit test is one read and no branch to
    /// mispredict, and a probe side in key order reads the bitmap in order (measured on a
    /// probe of TPC-H order keys passing 2 %: 2.5 ns a row against 6 for the hash set, and no
    /// worse than it in random order). Sparser sets are left to hash lookups.
    fn dense(&self, members: u64) -> bool {
        let span = self.max.abs_diff(self.min) + 1;
        members > 0 && (span <= SMALL_BITS || span <= 2 * Hashed::bits_for(members as usize))
    }

    /// Makes room for members in `[low, high]`, keeping the span from the least to the
    /// greatest member within `max_bits`; false (and nothing changed) when it would not be.
    pub(crate) fn cover(&mut self, low: i64, high: i64, max_bits: u64) -> bool {
        let (low, high) = if self.is_empty() {
            (low, high)
        } else {
            (low.min(self.min), high.max(self.max))
        };
        if high.abs_diff(low) >= max_bits {
            return false;
        }
        // Word-aligned (i64::MIN is a multiple of 64, so this cannot overflow).
        let first = low.div_euclid(64) * 64;
        if self.is_empty() {
            self.base = first;
        } else if first < self.base {
            // Grown downwards by at least its length (within the widest span allowed), so
            // keys arriving in descending order do not move the words once per batch.
            let needed = (first.abs_diff(self.base) / 64) as usize;
            let len = self.words.len();
            let most = (max_bits / 64 + 2) as usize;
            let grow = needed
                .max(len.min(most.saturating_sub(len)))
                .min((self.base.abs_diff(i64::MIN) / 64) as usize);
            self.words.splice(0..0, std::iter::repeat_n(0, grow));
            self.base -= (grow as i64) * 64;
        }
        let words = (high.abs_diff(self.base) / 64 + 1) as usize;
        if words > self.words.len() {
            self.words.resize(words, 0);
        }
        self.min = low;
        self.max = high;
        true
    }

    /// Adds `value`, which must lie within what [`Bitmap::cover`] made room for.
    pub(crate) fn insert(&mut self, value: i64) {
        let at = value.abs_diff(self.base);
        self.words[(at / 64) as usize] |= 1 << (at % 64);
    }

    /// Bytes held.
    pub(crate) fn size(&self) -> usize {
        self.words.capacity() * 8
    }

    /// The keys to test values against: the bitmap when it is dense, its members hashed when
    /// they are too sparse for it but few enough, otherwise none.
    pub(crate) fn into_keys(self) -> Option<Keys> {
        let count = self.members();
        if self.dense(count) {
            return Some(Keys::Dense(self));
        }
        let count = count as usize;
        if count == 0 || count > MOST_HASHED {
            return None;
        }
        let base = self.base;
        let members = self.words.iter().enumerate().flat_map(move |(i, &word)| {
            (0..64)
                .filter(move |bit| word >> bit & 1 == 1)
                .map(move |bit| base + (i as i64) * 64 + bit)
        });
        Some(Keys::Sparse(Hashed::of(members, count)))
    }

    fn contains(&self, value: i64) -> bool {
        if value < self.min || value > self.max {
            return false;
        }
        let at = value.abs_diff(self.base);
        self.words[(at / 64) as usize] >> (at % 64) & 1 == 1
    }
}

/// Membership of an integer column's values in a [`Bitmap`]: an `IN` list of integer
/// literals, or a join's build-side keys ([`super::collect_keys`]).
#[derive(Debug)]
pub(crate) struct IntegerSet {
    column: usize,
    keys: Arc<Keys>,
    /// The expression as planned, for display and equality.
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
        Some(Self::of(
            column,
            Arc::new(Keys::Dense(Bitmap::of(&values, MAX_BITS)?)),
            expr.clone(),
        ))
    }

    /// The set of `keys` tested on the column at `column`; `original` is what it stands for.
    pub(crate) fn of(column: usize, keys: Arc<Keys>, original: Arc<dyn PhysicalExpr>) -> Self {
        Self {
            column,
            keys,
            original,
        }
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
                Operator::GtEq => self.keys.min() >= bound,
                Operator::Gt => self.keys.min() > bound,
                Operator::LtEq => self.keys.max() <= bound,
                Operator::Lt => self.keys.max() < bound,
                _ => false,
            }
    }

    fn test(&self, array: &ArrayRef) -> Result<BooleanBuffer> {
        macro_rules! test_as {
            ($type:ty) => {{
                let values = array.as_primitive::<$type>().values();
                BooleanBuffer::collect_bool(values.len(), |i| self.keys.contains(values[i] as i64))
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
        let array = batch.columns().get(self.column).ok_or_else(|| {
            datafusion::common::DataFusionError::Internal(format!(
                "a key set tests column {} of a batch of {}",
                self.column,
                batch.num_columns()
            ))
        })?;
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

    #[test]
    fn a_set_is_a_bitmap_while_at_most_twice_the_size_of_its_hash_set() {
        // 10,000 keys hash into 32,768 slots of 64 bits behind a sieve of 524,288 bits:
        // 2,621,440 bits, so a bitmap may span 5,242,880.
        let spaced = |step: i64| (0..10_000).map(|i| i * step).collect::<Vec<i64>>();
        assert!(Bitmap::of(&spaced(500), MAX_BITS).is_some());
        assert!(Bitmap::of(&spaced(550), MAX_BITS).is_none());
    }
}
