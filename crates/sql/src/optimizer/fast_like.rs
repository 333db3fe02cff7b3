//! `LIKE` patterns of several literal parts, matched by substring search.
//!
//! DataFusion (through Arrow) matches a pattern with one `%` part — `'abc%'`, `'%abc'`,
//! `'%abc%'` — by a prefix, suffix or substring test, but compiles anything longer into a
//! regular expression — again for every batch, as the kernel is handed the pattern anew each
//! time: TPC-H Q13's `o_comment NOT LIKE '%special%requests%'` took more CPU than the rest of
//! the query, a quarter of it building the expression's automaton. [`FastLike`] replaces such
//! a `LIKE` in filters with a [`PartsLike`]: the first part must start the value, the last must
//! end it, and each part between is found, in order, by a precomputed substring searcher after
//! the one before it.
//!
//! It fires anywhere in a filter's predicate (under `NOT`, `OR` or `CASE` too) on a `LIKE` or
//! `NOT LIKE` over a `Utf8`, `Utf8View` or `LargeUtf8` value whose pattern is a string literal
//! without `_` or `\` and with two or more non-empty parts between `%`s. It refuses `ILIKE`,
//! dictionaries and binaries, patterns with `_` or an escape (DataFusion refuses any `ESCAPE`
//! but `\` when planning), patterns of one part and patterns that are not literals.
//!
//! Why the answer cannot change: with `%` the only wildcard, a value matches exactly when it
//! starts with the first part, ends with the last without the two overlapping, and holds the
//! middle parts in order between them without overlap; taking each part's leftmost occurrence
//! leaves the most room for the rest, so it finds a match whenever there is one. Comparing
//! UTF-8 bytes compares characters: a valid needle found in valid text starts and ends on
//! character boundaries, and DataFusion's `LIKE` has no collation or case folding; `%` spans
//! line breaks, as Arrow's does. A null value answers null, negated or not; a literal pattern
//! cannot fail, so no error is lost or gained.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, LikeExpr, Literal};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use memchr::memmem::Finder;

use crate::optimizer::utils::map_filter_predicates;

/// The physical optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct FastLike;

impl PhysicalOptimizerRule for FastLike {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let rewritten = map_filter_predicates(plan.clone(), &parts_likes)?;
        Ok(crate::optimizer::utils::still_valid(
            plan, rewritten, config,
        ))
    }

    fn name(&self) -> &str {
        "floe_fast_like"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `predicate` with every `LIKE` it can match replaced by a [`PartsLike`], if any.
fn parts_likes(
    predicate: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    let predicate = predicate.clone().transform_up(|expr| {
        Ok(match PartsLike::try_new(&expr, schema) {
            Some(like) => Transformed::yes(Arc::new(like) as Arc<dyn PhysicalExpr>),
            None => Transformed::no(expr),
        })
    })?;
    Ok(predicate.transformed.then_some(predicate.data))
}

/// A `LIKE` whose pattern is literal parts between `%`s; see the module documentation.
#[derive(Debug)]
pub struct PartsLike {
    value: Arc<dyn PhysicalExpr>,
    negated: bool,
    /// What the value must start with, and end with (after the start).
    first: Vec<u8>,
    last: Vec<u8>,
    /// Parts found in order between them.
    middle: Vec<Finder<'static>>,
    /// The expression replaced, for display and equality.
    original: Arc<dyn PhysicalExpr>,
}

impl PartsLike {
    /// `expr` as a `PartsLike` over rows of `schema`, if it is a `LIKE` this matches: a
    /// string value (not, say, a dictionary, which Arrow's kernel unpacks) and a pattern of
    /// several literal parts.
    fn try_new(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Self> {
        // DataFusion plans `LIKE` as a binary operator; `LikeExpr` is its other form.
        let (value, pattern, negated) = if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
            let negated = match binary.op() {
                Operator::LikeMatch => false,
                Operator::NotLikeMatch => true,
                _ => return None,
            };
            (binary.left(), binary.right(), negated)
        } else {
            let like = expr.downcast_ref::<LikeExpr>()?;
            if like.case_insensitive() {
                return None;
            }
            (like.expr(), like.pattern(), like.negated())
        };
        if !matches!(
            value.data_type(schema).ok()?,
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
        ) {
            return None;
        }
        let pattern = match pattern.downcast_ref::<Literal>()?.value() {
            ScalarValue::Utf8(Some(p))
            | ScalarValue::Utf8View(Some(p))
            | ScalarValue::LargeUtf8(Some(p)) => p.clone(),
            _ => return None,
        };
        if pattern.contains(['_', '\\']) {
            return None;
        }
        let parts: Vec<&str> = pattern.split('%').collect();
        let (&first, rest) = parts.split_first()?;
        let (&last, middle) = rest.split_last()?;
        let middle: Vec<&str> = middle.iter().copied().filter(|p| !p.is_empty()).collect();
        let literal_parts =
            middle.len() + usize::from(!first.is_empty()) + usize::from(!last.is_empty());
        // One part is a prefix, suffix or substring test Arrow does well already.
        if literal_parts < 2 {
            return None;
        }
        Some(Self {
            value: value.clone(),
            negated,
            first: first.as_bytes().to_vec(),
            last: last.as_bytes().to_vec(),
            middle: middle
                .iter()
                .map(|p| Finder::new(p.as_bytes()).into_owned())
                .collect(),
            original: expr.clone(),
        })
    }

    fn matches(&self, value: &[u8]) -> bool {
        // Empty anchors are not compared at all: comparing an empty slice calls `memcmp` with
        // the empty `Vec`'s dangling address, which cost ~350 ns a row here (a masked vector
        // load of an unmapped page), ten times the substring searches.
        if value.len() < self.first.len() + self.last.len()
            || (!self.first.is_empty() && !value.starts_with(&self.first))
            || (!self.last.is_empty() && !value.ends_with(&self.last))
        {
            return false;
        }
        let mut rest = &value[self.first.len()..value.len() - self.last.len()];
        for part in &self.middle {
            match part.find(rest) {
                Some(at) => rest = &rest[at + part.needle().len()..],
                None => return false,
            }
        }
        true
    }
}

impl PartsLike {
    /// The test of every value of `values` (`value(i)` its bytes), nulls kept.
    fn answers<'a>(&self, values: &dyn Array, value: impl Fn(usize) -> &'a [u8]) -> BooleanArray {
        let bits =
            BooleanBuffer::collect_bool(values.len(), |i| self.matches(value(i)) != self.negated);
        BooleanArray::new(bits, values.logical_nulls())
    }
}

impl fmt::Display for PartsLike {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.original)
    }
}

crate::same_as_inner_expr!(PartsLike, original);

impl PhysicalExpr for PartsLike {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.value.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let values = self.value.evaluate(batch)?.into_array(batch.num_rows())?;
        let answers = match values.data_type() {
            DataType::Utf8View => {
                let strings = values.as_string_view();
                self.answers(&values, |i| strings.value(i).as_bytes())
            }
            DataType::Utf8 => {
                let strings = values.as_string::<i32>();
                self.answers(&values, |i| strings.value(i).as_bytes())
            }
            DataType::LargeUtf8 => {
                let strings = values.as_string::<i64>();
                self.answers(&values, |i| strings.value(i).as_bytes())
            }
            other => return internal_err!("LIKE over a {other} value"),
        };
        Ok(ColumnarValue::Array(Arc::new(answers)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.value]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let Some(value) = children.pop() else {
            return internal_err!("LIKE takes one value");
        };
        // The original re-addressed alike (its first child is the value, then the pattern),
        // so that it compares, hashes and prints as this expression now reads.
        let mut originals: Vec<Arc<dyn PhysicalExpr>> =
            self.original.children().into_iter().cloned().collect();
        let Some(first) = originals.first_mut() else {
            return internal_err!("LIKE without a value");
        };
        *first = value.clone();
        let original = Arc::clone(&self.original).with_new_children(originals)?;
        Ok(Arc::new(Self {
            value,
            negated: self.negated,
            first: self.first.clone(),
            last: self.last.clone(),
            middle: self.middle.clone(),
            original,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.original.fmt_sql(f)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringViewArray;
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{Column, lit};

    use super::*;

    /// The pattern as DataFusion plans it (a binary operator), checked to give the same
    /// `PartsLike` as the `LikeExpr` form.
    fn like(pattern: &str, negated: bool) -> Option<PartsLike> {
        let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new("s", 0));
        let op = if negated {
            Operator::NotLikeMatch
        } else {
            Operator::LikeMatch
        };
        let binary: Arc<dyn PhysicalExpr> =
            Arc::new(BinaryExpr::new(column.clone(), op, lit(pattern)));
        let like: Arc<dyn PhysicalExpr> =
            Arc::new(LikeExpr::new(negated, false, column, lit(pattern)));
        let schema = Schema::new(vec![Field::new("s", DataType::Utf8View, true)]);
        let (planned, other) = (
            PartsLike::try_new(&binary, &schema),
            PartsLike::try_new(&like, &schema),
        );
        assert_eq!(planned.is_some(), other.is_some(), "{pattern}");
        planned
    }

    #[test]
    fn values_other_than_strings_are_left_to_arrow() {
        let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new("s", 0));
        let binary: Arc<dyn PhysicalExpr> =
            Arc::new(BinaryExpr::new(column, Operator::LikeMatch, lit("%a%b%")));
        let dictionary = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        let schema = Schema::new(vec![Field::new("s", dictionary, true)]);
        assert!(PartsLike::try_new(&binary, &schema).is_none());
    }

    fn answers(like: &PartsLike, values: Vec<Option<&str>>) -> Vec<Option<bool>> {
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8View, true)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(StringViewArray::from(values))]).unwrap();
        let answers = like.evaluate(&batch).unwrap().into_array(1).unwrap();
        answers.as_boolean().iter().collect()
    }

    #[test]
    fn parts_are_found_in_order_between_the_anchors() {
        let like = like("%special%requests%", false).expect("two parts");
        let values = vec![
            Some("the special deposits requests"),
            Some("requests special"),
            Some("specialrequests"),
            Some("special"),
            None,
            Some("spécial requests, special requests"),
        ];
        assert_eq!(
            answers(&like, values),
            [
                Some(true),
                Some(false),
                Some(true),
                Some(false),
                None,
                Some(true)
            ]
        );
        let anchored = self::like("ab%cd%ef", false).expect("three parts");
        let values = vec![
            Some("abcdef"),
            Some("ab cd ef"),
            Some("abcdefx"),
            Some("xabcdef"),
            Some("abef"),
            // The ends may not overlap the parts between.
            Some("abcdf"),
            Some("abcd"),
        ];
        assert_eq!(
            answers(&anchored, values),
            [
                Some(true),
                Some(true),
                Some(false),
                Some(false),
                Some(false),
                Some(false),
                Some(false)
            ]
        );
        let negated = self::like("%a%b%", true).expect("two parts");
        assert_eq!(
            answers(&negated, vec![Some("ab"), Some("ba"), None]),
            [Some(false), Some(true), None]
        );
    }

    #[test]
    fn patterns_arrow_handles_well_or_that_need_more_are_left_alone() {
        for pattern in ["abc%", "%abc", "%abc%", "abc", "%", "a_c%d%", "a\\%c%d%"] {
            assert!(like(pattern, false).is_none(), "{pattern}");
        }
    }
}
