//! DataFusion filters as Iceberg predicates, so scan planning can skip partitions (manifest
//! summaries and partition values) and files (column metrics) before anything is read.
//!
//! Only what converts exactly is converted: comparisons of a column with a literal, `IS
//! [NOT] NULL`, `[NOT] IN`, `BETWEEN`, `LIKE 'prefix%'`, and `AND`/`OR`/`NOT` of those. A
//! conjunct that does not convert is left out (the filter is still applied to the rows), an
//! `OR` with a side that does not convert is left out whole.

use datafusion::arrow::datatypes::{DataType, Schema, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use iceberg::expr::{Predicate, Reference};
use iceberg::spec::Datum;

/// The conjunction of every filter that converts, or `None` when none does.
pub fn to_iceberg(filters: &[Expr], schema: &Schema) -> Option<Predicate> {
    filters
        .iter()
        .filter_map(|f| convert(f, schema))
        .reduce(Predicate::and)
}

fn convert(expr: &Expr, schema: &Schema) -> Option<Predicate> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => match (convert(left, schema), convert(right, schema)) {
                (Some(l), Some(r)) => Some(l.and(r)),
                (one, other) => one.or(other),
            },
            Operator::Or => Some(convert(left, schema)?.or(convert(right, schema)?)),
            _ => comparison(left, *op, right, schema),
        },
        Expr::Not(inner) => Some(!convert(inner, schema)?),
        Expr::IsNull(inner) => Some(Reference::new(column(inner, schema)?.0).is_null()),
        Expr::IsNotNull(inner) => Some(Reference::new(column(inner, schema)?.0).is_not_null()),
        Expr::InList(list) => {
            let (name, data_type) = column(&list.expr, schema)?;
            let values = list
                .list
                .iter()
                .map(|v| datum(literal(v)?, &data_type))
                .collect::<Option<Vec<_>>>()?;
            let reference = Reference::new(name);
            Some(if list.negated {
                reference.is_not_in(values)
            } else {
                reference.is_in(values)
            })
        }
        Expr::Between(between) => {
            let (name, data_type) = column(&between.expr, schema)?;
            let low = datum(literal(&between.low)?, &data_type)?;
            let high = datum(literal(&between.high)?, &data_type)?;
            let inside = Reference::new(name.clone())
                .greater_than_or_equal_to(low)
                .and(Reference::new(name).less_than_or_equal_to(high));
            Some(if between.negated { !inside } else { inside })
        }
        Expr::Like(like) if !like.case_insensitive && like.escape_char.is_none() => {
            let (name, _) = column(&like.expr, schema)?;
            let pattern = match literal(&like.pattern)? {
                ScalarValue::Utf8(Some(p))
                | ScalarValue::Utf8View(Some(p))
                | ScalarValue::LargeUtf8(Some(p)) => p,
                _ => return None,
            };
            let prefix = pattern.strip_suffix('%')?;
            if prefix.contains(['%', '_', '\\']) {
                return None;
            }
            let reference = Reference::new(name);
            let datum = Datum::string(prefix);
            Some(if like.negated {
                reference.not_starts_with(datum)
            } else {
                reference.starts_with(datum)
            })
        }
        _ => None,
    }
}

fn comparison(left: &Expr, op: Operator, right: &Expr, schema: &Schema) -> Option<Predicate> {
    // Column on the left; a literal on the left flips the operator.
    let (col, value, op) = match (column(left, schema), literal(right)) {
        (Some(c), Some(v)) => (c, v, op),
        _ => (column(right, schema)?, literal(left)?, flip(op)?),
    };
    let (name, data_type) = col;
    let value = datum(value, &data_type)?;
    let reference = Reference::new(name);
    Some(match op {
        Operator::Eq => reference.equal_to(value),
        Operator::NotEq => reference.not_equal_to(value),
        Operator::Lt => reference.less_than(value),
        Operator::LtEq => reference.less_than_or_equal_to(value),
        Operator::Gt => reference.greater_than(value),
        Operator::GtEq => reference.greater_than_or_equal_to(value),
        _ => return None,
    })
}

fn flip(op: Operator) -> Option<Operator> {
    Some(match op {
        Operator::Eq | Operator::NotEq => op,
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        _ => return None,
    })
}

/// A plain reference to a top-level column of the table, with its type.
fn column(expr: &Expr, schema: &Schema) -> Option<(String, DataType)> {
    match expr {
        Expr::Column(c) => {
            let field = schema.field_with_name(&c.name).ok()?;
            Some((c.name.clone(), field.data_type().clone()))
        }
        _ => None,
    }
}

fn literal(expr: &Expr) -> Option<ScalarValue> {
    match expr {
        Expr::Literal(value, _) if !value.is_null() => Some(value.clone()),
        _ => None,
    }
}

/// The literal as an Iceberg value of the column's type; `None` when it does not convert
/// exactly (then the filter is not used for pruning). Decimals are not converted yet: iceberg
/// 0.10 builds decimal values only from its own decimal type.
fn datum(value: ScalarValue, column_type: &DataType) -> Option<Datum> {
    let value = if value.data_type() == *column_type {
        value
    } else {
        let cast = value.cast_to(column_type).ok()?;
        // Only exact casts: a cast back must give the original.
        if cast.cast_to(&value.data_type()).ok()? != value {
            return None;
        }
        cast
    };
    Some(match value {
        ScalarValue::Boolean(Some(v)) => Datum::bool(v),
        ScalarValue::Int32(Some(v)) => Datum::int(v),
        ScalarValue::Int64(Some(v)) => Datum::long(v),
        ScalarValue::Float32(Some(v)) => Datum::float(v),
        ScalarValue::Float64(Some(v)) => Datum::double(v),
        ScalarValue::Utf8(Some(v))
        | ScalarValue::Utf8View(Some(v))
        | ScalarValue::LargeUtf8(Some(v)) => Datum::string(v),
        ScalarValue::Date32(Some(v)) => Datum::date(v),
        ScalarValue::TimestampMicrosecond(Some(v), tz) => match (column_type, tz) {
            (DataType::Timestamp(TimeUnit::Microsecond, Some(_)), _) => {
                Datum::timestamptz_micros(v)
            }
            _ => Datum::timestamp_micros(v),
        },
        ScalarValue::TimestampNanosecond(Some(v), tz) => match tz {
            Some(_) => Datum::timestamptz_nanos(v),
            None => Datum::timestamp_nanos(v),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;
    use datafusion::logical_expr::{col, lit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("n", DataType::Int32, true),
            Field::new("city", DataType::Utf8View, true),
            Field::new("day", DataType::Date32, true),
        ])
    }

    #[test]
    fn converts_what_prunes_and_skips_the_rest() {
        let s = schema();
        let p = to_iceberg(&[col("id").gt(lit(5i64)), lit(3i64).lt_eq(col("n"))], &s).unwrap();
        assert_eq!(p.to_string(), "(id > 5) AND (n >= 3)");
        // A function of a column does not convert; the other conjunct still prunes.
        let p = to_iceberg(
            &[
                col("city").like(lit("os%")),
                datafusion::functions::expr_fn::abs(col("id")).eq(lit(1i64)),
            ],
            &s,
        )
        .unwrap();
        assert_eq!(p.to_string(), "city STARTS WITH \"os\"");
        // An OR with an unconvertible side is dropped whole.
        assert!(
            to_iceberg(
                &[col("id")
                    .eq(lit(1i64))
                    .or(datafusion::functions::expr_fn::abs(col("id")).eq(lit(1i64)))],
                &s
            )
            .is_none()
        );
        // A literal that does not fit the column's type exactly is not used.
        assert!(to_iceberg(&[col("n").eq(lit(5_000_000_000i64))], &s).is_none());
        assert_eq!(
            to_iceberg(&[col("n").eq(lit(7i64))], &s)
                .unwrap()
                .to_string(),
            "n = 7"
        );
    }
}
