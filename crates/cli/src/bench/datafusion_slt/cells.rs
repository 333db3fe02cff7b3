//! Answers written as DataFusion's own sqllogictest driver writes them, so that the expected
//! results in its files can be compared with Floe's: `NULL`, `true`/`false`, floats and
//! decimals rounded to 12 fractional digits without trailing zeros, the empty string as
//! `(empty)`, dictionary values by their value, everything else as Arrow displays it under
//! DataFusion's display options (durations "pretty").
//!
//! A value spanning several lines in the last column is spread over numbered rows, as
//! DataFusion's driver does for plans.

use std::str::FromStr;

use bigdecimal::BigDecimal;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Decimal256Type, DecimalType, Float16Type, Float32Type, Float64Type,
};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::config::ConfigField;

/// The rows of `batches`, one string per value.
pub(super) fn rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, ArrowError> {
    let mut display = datafusion::config::FormatOptions::default();
    display
        .set("null", "NULL")
        .map_err(|e| ArrowError::InvalidArgumentError(e.to_string()))?;
    let options: FormatOptions<'_> =
        (&display)
            .try_into()
            .map_err(|e: datafusion::error::DataFusionError| {
                ArrowError::InvalidArgumentError(e.to_string())
            })?;
    let mut rows = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            let cells = batch
                .columns()
                .iter()
                .map(|column| cell(column, row, &options))
                .collect::<Result<Vec<_>, _>>()?;
            rows.extend(spread(cells));
        }
    }
    Ok(rows)
}

/// One value as DataFusion's driver writes it.
fn cell(column: &ArrayRef, row: usize, options: &FormatOptions<'_>) -> Result<String, ArrowError> {
    if column.is_null(row) {
        return Ok("NULL".into());
    }
    Ok(match column.data_type() {
        DataType::Null => "NULL".into(),
        DataType::Boolean => column.as_boolean().value(row).to_string(),
        // Each width written as its own shortest form (a float's 3.3 is not 3.2999999523).
        DataType::Float16 => {
            let value = column.as_primitive::<Float16Type>().value(row).to_f32();
            float(value as f64, value.to_string())
        }
        DataType::Float32 => {
            let value = column.as_primitive::<Float32Type>().value(row);
            float(value as f64, value.to_string())
        }
        DataType::Float64 => {
            let value = column.as_primitive::<Float64Type>().value(row);
            float(value, value.to_string())
        }
        DataType::Decimal128(_, scale) => rounded(&Decimal128Type::format_decimal(
            column.as_primitive::<Decimal128Type>().value(row),
            u8::MAX,
            *scale,
        )),
        DataType::Decimal256(_, scale) => rounded(&Decimal256Type::format_decimal(
            column.as_primitive::<Decimal256Type>().value(row),
            u8::MAX,
            *scale,
        )),
        DataType::Utf8 => text(column.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => text(column.as_string::<i64>().value(row)),
        DataType::Utf8View => text(column.as_string_view().value(row)),
        DataType::Dictionary(_, _) => {
            let dictionary = column.as_any_dictionary();
            let key = dictionary.normalized_keys()[row];
            cell(dictionary.values(), key, options)?
        }
        _ => ArrayFormatter::try_new(column.as_ref(), options)?
            .value(row)
            .to_string(),
    })
}

fn text(value: &str) -> String {
    if value.is_empty() {
        "(empty)".into()
    } else {
        value.trim_end_matches('\n').replace('\u{0}', "\\0")
    }
}

/// A float `value`, written `plain` (its shortest decimal form at its own width) when finite.
fn float(value: f64, plain: String) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f64::INFINITY {
        "Infinity".into()
    } else if value == f64::NEG_INFINITY {
        "-Infinity".into()
    } else {
        rounded(&plain)
    }
}

/// A decimal number rounded to 12 fractional digits, written plainly without trailing zeros.
fn rounded(plain: &str) -> String {
    match BigDecimal::from_str(plain) {
        Ok(value) => value.round(12).normalized().to_plain_string(),
        Err(_) => plain.to_string(),
    }
}

/// A row whose last value spans lines becomes the row without that value, then one row per
/// line numbered `01)`, `02)`, … with the line's leading spaces written as dashes (DataFusion's
/// driver's way of keeping plans readable).
fn spread(mut cells: Vec<String>) -> Vec<Vec<String>> {
    let Some(last) = cells.pop() else {
        return vec![cells];
    };
    let lines: Vec<&str> = last.split('\n').collect();
    if lines.len() < 2 {
        cells.push(last);
        return vec![cells];
    }
    let mut rows = vec![cells];
    for (i, line) in lines.iter().enumerate() {
        let content = line.trim_start();
        let indent = "-".repeat(line.len() - content.len());
        rows.push(vec![format!("{:02}){indent}{content}", i + 1)]);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_rounded_to_twelve_digits_without_trailing_zeros() {
        let double = |v: f64| float(v, v.to_string());
        assert_eq!(double(0.1 + 0.2), "0.3");
        assert_eq!(double(2.0), "2");
        assert_eq!(double(-1.5), "-1.5");
        assert_eq!(double(f64::NAN), "NaN");
        assert_eq!(float(3.3f32 as f64, 3.3f32.to_string()), "3.3");
        assert_eq!(rounded("1.0000000000011"), "1.000000000001");
        assert_eq!(rounded("0.110"), "0.11");
    }

    #[test]
    fn a_multiline_last_value_is_spread_over_numbered_rows() {
        let rows = spread(vec!["plan".into(), "a\n  b".into()]);
        assert_eq!(
            rows,
            vec![
                vec!["plan".to_string()],
                vec!["01)a".to_string()],
                vec!["02)--b".to_string()]
            ]
        );
    }
}
