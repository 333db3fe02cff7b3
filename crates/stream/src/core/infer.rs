//! One schema inference from JSON rows, for every door: Arrow's JSON inference (numbers,
//! booleans, strings, nested objects and lists), then text that always reads as an RFC 3339
//! timestamp made a timestamp (with a zone when the texts carry one) and text that always
//! reads as a date made a date, judged on the first [`JUDGED_ROWS`] rows.

use std::collections::HashMap;

use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::arrow::error::ArrowError;
use serde_json::Value;

/// Rows whose texts decide whether a text field is a timestamp or a date.
pub const JUDGED_ROWS: usize = 1000;

/// The fields `rows` (parsed JSON objects, or the error that stopped parsing one) suggest.
pub fn infer_fields<I>(rows: I) -> Result<Vec<Field>, ArrowError>
where
    I: IntoIterator<Item = Result<Value, ArrowError>>,
{
    let mut judged: Vec<Value> = Vec::new();
    let rows = rows.into_iter().inspect(|row| {
        if let Ok(row) = row
            && judged.len() < JUDGED_ROWS
        {
            judged.push(row.clone());
        }
    });
    let schema = datafusion::arrow::json::reader::infer_json_schema_from_iterator(rows)?;
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    refine_texts(&mut fields, &judged);
    Ok(fields)
}

/// The fields NDJSON `rows` suggest (every line a JSON object).
pub fn infer_ndjson(rows: &[u8]) -> Result<Vec<Field>, ArrowError> {
    infer_fields(
        rows.split(|b| *b == b'\n')
            .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
            .map(|line| {
                serde_json::from_slice::<Value>(line)
                    .map_err(|e| ArrowError::JsonError(e.to_string()))
            }),
    )
}

/// Text fields of `fields` whose values in `rows` all read as timestamps (or dates) become
/// timestamps (or dates).
fn refine_texts(fields: &mut [Field], rows: &[Value]) {
    // Per text field: (seen, all zoned timestamps, all naive timestamps, all dates).
    let mut kinds: HashMap<usize, (bool, bool, bool, bool)> = fields
        .iter()
        .enumerate()
        .filter(|(_, f)| f.data_type() == &DataType::Utf8)
        .map(|(i, _)| (i, (false, true, true, true)))
        .collect();
    if kinds.is_empty() {
        return;
    }
    for row in rows {
        let Value::Object(object) = row else {
            continue;
        };
        for (i, kind) in kinds.iter_mut() {
            let Some(Value::String(text)) = object.get(fields[*i].name()) else {
                continue;
            };
            kind.0 = true;
            kind.1 &= chrono::DateTime::parse_from_rfc3339(text).is_ok();
            kind.2 &= chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").is_ok();
            kind.3 &= chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok();
        }
    }
    for (i, (seen, zoned, naive, date)) in kinds {
        let data_type = match (seen, zoned, naive, date) {
            (false, ..) => continue,
            (true, true, _, _) => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            (true, _, true, _) => DataType::Timestamp(TimeUnit::Microsecond, None),
            (true, _, _, true) => DataType::Date32,
            _ => continue,
        };
        fields[i] = Field::new(fields[i].name(), data_type, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_dates_are_told_from_text() {
        let rows = b"{\"at\": \"2026-12-03T10:00:00Z\", \"day\": \"2026-12-03\", \"local\": \"2026-12-03T10:00:00\", \"name\": \"x\", \"n\": 1}\n\
                     {\"at\": \"2026-12-04T10:00:00+01:00\", \"day\": \"2026-12-04\", \"local\": \"2026-12-04T10:00:00.5\", \"name\": \"2026-12-04\", \"n\": 2}\n";
        let fields = infer_ndjson(rows).unwrap();
        let kind = |name: &str| {
            fields
                .iter()
                .find(|f| f.name() == name)
                .unwrap()
                .data_type()
                .clone()
        };
        assert_eq!(
            kind("at"),
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
        );
        assert_eq!(kind("day"), DataType::Date32);
        assert_eq!(
            kind("local"),
            DataType::Timestamp(TimeUnit::Microsecond, None)
        );
        assert_eq!(kind("name"), DataType::Utf8);
        assert_eq!(kind("n"), DataType::Int64);
    }
}
