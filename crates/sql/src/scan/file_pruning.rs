//! Which data files a filter might match, from the statistics their manifest entries carry:
//! for scans planned from the manifests kept per file ([`super::manifests`]), so a filtered
//! query after a commit reads only the manifest the commit added.
//!
//! Every answer errs towards reading: a file is skipped only when its bounds or null counts
//! prove that no row of it can match (`!=` and `NOT IN` skip a file only when its bounds are
//! both the value and it has no nulls, which Iceberg counts as matching them). Anything this does not reason about (`NOT` not pushed to the leaves,
//! prefixes, NaN tests, floating-point columns, whose bounds leave NaN out) might match.
//! Iceberg's bounds of strings and binaries may be truncated, the lower one down and the upper
//! one up, which keeps them bounds.

use iceberg::expr::{BoundPredicate, BoundReference, PredicateOperator};
use iceberg::spec::{DataFile, Datum, PrimitiveType, Type};
use std::cmp::Ordering;

/// Whether `file` may hold a row `predicate` (bound to the table's schema) accepts.
pub(crate) fn might_match(predicate: &BoundPredicate, file: &DataFile) -> bool {
    match predicate {
        BoundPredicate::AlwaysTrue => true,
        BoundPredicate::AlwaysFalse => false,
        BoundPredicate::And(both) => {
            let [a, b] = both.inputs();
            might_match(a, file) && might_match(b, file)
        }
        BoundPredicate::Or(either) => {
            let [a, b] = either.inputs();
            might_match(a, file) || might_match(b, file)
        }
        BoundPredicate::Not(_) => true,
        BoundPredicate::Unary(unary) => {
            let nulls = file.null_value_counts().get(&unary.term().field().id);
            match unary.op() {
                PredicateOperator::IsNull => nulls.is_none_or(|&n| n > 0),
                PredicateOperator::NotNull => nulls.is_none_or(|&n| n < file.record_count()),
                _ => true,
            }
        }
        BoundPredicate::Binary(binary) => {
            let Some(column) = Column::of(binary.term(), file) else {
                return true;
            };
            let value = binary.literal();
            match binary.op() {
                PredicateOperator::Eq => column.may_hold(value),
                PredicateOperator::LessThan => column.min_is(value, |o| o.is_lt()),
                PredicateOperator::LessThanOrEq => column.min_is(value, |o| o.is_le()),
                PredicateOperator::GreaterThan => column.max_is(value, |o| o.is_gt()),
                PredicateOperator::GreaterThanOrEq => column.max_is(value, |o| o.is_ge()),
                PredicateOperator::NotEq => !column.only(value),
                _ => true,
            }
        }
        BoundPredicate::Set(set) => {
            let Some(column) = Column::of(set.term(), file) else {
                return true;
            };
            match set.op() {
                PredicateOperator::In => set.literals().iter().any(|v| column.may_hold(v)),
                PredicateOperator::NotIn => !set.literals().iter().any(|v| column.only(v)),
                _ => true,
            }
        }
    }
}

/// A column's statistics in one file, for a comparison with a value.
struct Column<'a> {
    lower: Option<&'a Datum>,
    upper: Option<&'a Datum>,
    /// How many rows are null, when the file says.
    nulls: Option<u64>,
    /// Every value of the column in the file is null: no comparison holds.
    all_null: bool,
}

impl<'a> Column<'a> {
    /// `None` when the column's statistics cannot be reasoned about (floating point).
    fn of(term: &BoundReference, file: &'a DataFile) -> Option<Self> {
        let field = term.field();
        if matches!(
            *field.field_type,
            Type::Primitive(PrimitiveType::Float | PrimitiveType::Double)
        ) {
            return None;
        }
        let id = field.id;
        Some(Self {
            lower: file.lower_bounds().get(&id),
            upper: file.upper_bounds().get(&id),
            nulls: file.null_value_counts().get(&id).copied(),
            all_null: file.record_count() > 0
                && file.null_value_counts().get(&id) == Some(&file.record_count()),
        })
    }

    /// Whether the smallest value compares with `value` as `holds` asks (true when unknown).
    fn min_is(&self, value: &Datum, holds: impl Fn(Ordering) -> bool) -> bool {
        !self.all_null && compare(self.lower, value).is_none_or(holds)
    }

    fn max_is(&self, value: &Datum, holds: impl Fn(Ordering) -> bool) -> bool {
        !self.all_null && compare(self.upper, value).is_none_or(holds)
    }

    fn may_hold(&self, value: &Datum) -> bool {
        self.min_is(value, |o| o.is_le()) && self.max_is(value, |o| o.is_ge())
    }

    /// Whether every row holds `value` — which `!=` and `NOT IN` reject, while they accept a
    /// null, as Iceberg evaluates them — : both bounds equal it and no row is null. Truncated
    /// bounds never equal each other: a truncated upper bound is the lower's prefix with its
    /// last character raised.
    fn only(&self, value: &Datum) -> bool {
        self.nulls == Some(0)
            && compare(self.lower, value) == Some(Ordering::Equal)
            && compare(self.upper, value) == Some(Ordering::Equal)
    }
}

/// How `bound` compares with `value`; `None` when there is no bound or they do not compare.
fn compare(bound: Option<&Datum>, value: &Datum) -> Option<Ordering> {
    bound?.partial_cmp(value)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use iceberg::expr::{Bind, Reference};
    use iceberg::spec::{
        DataContentType, DataFileBuilder, DataFileFormat, NestedField, Schema, Struct,
    };

    use super::*;

    fn schema() -> Arc<Schema> {
        Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::optional(1, "k", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::optional(2, "s", Type::Primitive(PrimitiveType::String)).into(),
                    NestedField::optional(3, "f", Type::Primitive(PrimitiveType::Double)).into(),
                ])
                .build()
                .unwrap(),
        )
    }

    /// A file of 100 rows whose `k` runs from 10 to 20 and `s` from "b" to "d", with
    /// `nulls` nulls in `k`.
    fn file(nulls: u64) -> DataFile {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("t/data/a.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(100)
            .file_size_in_bytes(1000)
            .null_value_counts(HashMap::from([(1, nulls), (2, 0)]))
            .lower_bounds(HashMap::from([
                (1, Datum::long(10)),
                (2, Datum::string("b")),
                (3, Datum::double(1.0)),
            ]))
            .upper_bounds(HashMap::from([
                (1, Datum::long(20)),
                (2, Datum::string("d")),
                (3, Datum::double(2.0)),
            ]))
            .partition_spec_id(0)
            .build()
            .unwrap()
    }

    fn matches(predicate: iceberg::expr::Predicate, file: &DataFile) -> bool {
        might_match(&predicate.bind(schema(), true).unwrap(), file)
    }

    #[test]
    fn files_are_skipped_only_when_their_statistics_prove_no_row_matches() {
        let k = || Reference::new("k");
        let s = || Reference::new("s");
        let f = file(0);
        assert!(matches(k().equal_to(Datum::long(15)), &f));
        assert!(matches(k().equal_to(Datum::long(10)), &f));
        assert!(matches(k().equal_to(Datum::long(20)), &f));
        assert!(!matches(k().equal_to(Datum::long(21)), &f));
        assert!(!matches(k().less_than(Datum::long(10)), &f));
        assert!(matches(k().less_than_or_equal_to(Datum::long(10)), &f));
        assert!(!matches(k().greater_than(Datum::long(20)), &f));
        assert!(matches(k().greater_than_or_equal_to(Datum::long(20)), &f));
        assert!(!matches(k().is_in([Datum::long(1), Datum::long(30)]), &f));
        assert!(matches(k().is_in([Datum::long(1), Datum::long(12)]), &f));
        assert!(!matches(s().equal_to(Datum::string("e")), &f));
        assert!(matches(s().equal_to(Datum::string("c")), &f));
        // Combinations.
        assert!(!matches(
            k().equal_to(Datum::long(15))
                .and(s().equal_to(Datum::string("z"))),
            &f
        ));
        assert!(matches(
            k().equal_to(Datum::long(99))
                .or(s().equal_to(Datum::string("c"))),
            &f
        ));
        // `!=` and `NOT IN` skip only a file whose every value is the one excluded.
        assert!(matches(k().not_equal_to(Datum::long(15)), &f));
        assert!(matches(k().not_equal_to(Datum::long(10)), &f));
        let constant = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("t/data/b.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(100)
            .file_size_in_bytes(1000)
            .null_value_counts(HashMap::from([(1, 0)]))
            .lower_bounds(HashMap::from([(1, Datum::long(7))]))
            .upper_bounds(HashMap::from([(1, Datum::long(7))]))
            .partition_spec_id(0)
            .build()
            .unwrap();
        assert!(!matches(k().not_equal_to(Datum::long(7)), &constant));
        assert!(matches(k().not_equal_to(Datum::long(8)), &constant));
        assert!(!matches(
            k().is_not_in([Datum::long(1), Datum::long(7)]),
            &constant
        ));
        assert!(matches(
            k().is_not_in([Datum::long(1), Datum::long(8)]),
            &constant
        ));
        // What is not reasoned about might match.
        assert!(matches(!k().equal_to(Datum::long(15)), &f));
        assert!(matches(
            Reference::new("f").greater_than(Datum::double(9.0)),
            &f
        ));
        // Null counts.
        assert!(!matches(k().is_null(), &f));
        assert!(matches(k().is_not_null(), &f));
        let all_null = file(100);
        assert!(matches(k().is_null(), &all_null));
        assert!(!matches(k().is_not_null(), &all_null));
        assert!(!matches(k().equal_to(Datum::long(15)), &all_null));
    }

    #[test]
    fn a_file_without_statistics_is_read() {
        let bare = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("t/data/b.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(5)
            .file_size_in_bytes(10)
            .partition_spec_id(0)
            .build()
            .unwrap();
        assert!(matches(Reference::new("k").equal_to(Datum::long(1)), &bare));
        assert!(matches(Reference::new("k").is_null(), &bare));
    }
}
