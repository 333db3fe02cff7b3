//! Kafka Connect's JSON converter with schemas: a record is `{"schema": …, "payload": …}`, and
//! the schema says what the payload's values are — which plain JSON cannot: a `Decimal` is
//! base64 of its unscaled value, a timestamp a count of milliseconds, microseconds or
//! nanoseconds, a date a count of days (Debezium's and Connect's logical types). A JSON-format
//! pipeline takes such a record as its payload with every value in the form Floe's JSON
//! decoding reads as the schema's type, and the schema's fields as the table's columns, in
//! the schema's order — so a Debezium stream of a PostgreSQL table lands with `numeric`,
//! `timestamp`, `date` and `time` columns, not their wire forms.
//!
//! | Connect schema (`type`, `name`) | column | value taken as |
//! |---|---|---|
//! | `int8`, `int16`, `int32` | int | the number |
//! | `int64` | long | the number |
//! | `float`, `double` | float, double | the number |
//! | `boolean`, `string` | boolean, string | the value |
//! | `bytes` | binary | base64, decoded |
//! | `bytes` `…connect.data.Decimal` (`scale`, `connect.decimal.precision`) | decimal | the unscaled two's complement value at its scale |
//! | `int32` `…connect.data.Date`, `io.debezium.time.Date` | date | days since 1970-01-01 |
//! | `int32` `…connect.data.Time`, `io.debezium.time.Time` | time | milliseconds of the day |
//! | `int64` `io.debezium.time.MicroTime`, `NanoTime` | time | micro- or nanoseconds of the day |
//! | `int64` `…connect.data.Timestamp`, `io.debezium.time.Timestamp` | timestamp | milliseconds since the epoch |
//! | `int64` `io.debezium.time.MicroTimestamp`, `NanoTimestamp` | timestamp | micro- or nanoseconds (nanoseconds truncated to microseconds) |
//! | `string` `io.debezium.time.ZonedTimestamp` | timestamptz | ISO 8601 with its offset |
//! | `struct` `io.debezium.data.VariableScaleDecimal` | string | its exact decimal text |
//! | `bytes` `…connect.data.Decimal` wider than 38 digits | string | its exact decimal text |
//! | `struct`, `array`, `map` | struct, list, map | field by field |
//!
//! A `Decimal` wider than a column's 38 digits (or without its scale) is its exact decimal
//! text; a map whose keys are not strings (Connect writes it as an array of pairs) and a type
//! not listed here are their values' JSON text. A value that does not read as its schema says
//! — a date out of range, a decimal of more than 256 bytes or a scale over 1000, a field named
//! twice — makes the record a dead letter naming the field. Schemas nest at most
//! [`MOST_DEPTH`] deep.

use std::sync::Arc;

use base64::Engine;
use datafusion::arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use serde_json::{Map, Value};

use crate::Refusal;

/// How deep a Connect schema may nest.
const MOST_DEPTH: usize = 32;

/// A Connect record made plain: its payload, typed values in readable forms, and its fields.
pub(super) struct Typed {
    /// The payload as one JSON value (no newline).
    pub(super) row: Vec<u8>,
    /// The columns the schema names (a struct's fields), in its order.
    pub(super) fields: Vec<Field>,
}

/// Whether `value` starts as Connect's JSON converter writes a record with its schema (the
/// cheap check before any parse: `{` then the key `"schema"`).
pub(super) fn looks_wrapped(value: &[u8]) -> bool {
    let mut rest = value.iter().skip_while(|b| b.is_ascii_whitespace());
    if rest.next() != Some(&b'{') {
        return false;
    }
    rest.skip_while(|b| b.is_ascii_whitespace())
        .take(8)
        .copied()
        .eq(b"\"schema\"".iter().copied())
}

/// `value` as Connect's JSON converter with schemas wrote it, made plain ([`Typed`]); none
/// when it is not such a record (plain JSON is taken as it is).
pub(super) fn typed(value: &[u8]) -> Result<Option<Typed>, Refusal> {
    if !looks_wrapped(value) {
        return Ok(None);
    }
    let Ok(Value::Object(mut record)) = serde_json::from_slice::<Value>(value) else {
        return Ok(None);
    };
    if record.len() != 2 || !record.contains_key("payload") {
        return Ok(None);
    }
    let schema = record.remove("schema").expect("checked");
    let payload = record.remove("payload").expect("checked");
    let described = schema.get("type").and_then(Value::as_str) == Some("struct")
        && schema.get("fields").is_some_and(Value::is_array);
    if !described || payload.is_null() {
        return Ok(None);
    }
    let DataType::Struct(fields) = data_type(&schema, 0)? else {
        return Ok(None);
    };
    let row = plain(&schema, payload, "the payload", 0)?;
    Ok(Some(Typed {
        row: serde_json::to_vec(&row).expect("JSON encodes"),
        fields: fields.iter().map(|f| f.as_ref().clone()).collect(),
    }))
}

fn name(schema: &Value) -> Option<&str> {
    schema.get("name").and_then(Value::as_str)
}

fn parameter<'a>(schema: &'a Value, key: &str) -> Option<&'a str> {
    schema.get("parameters")?.get(key)?.as_str()
}

/// Whether a map schema's keys are strings (a JSON object); Connect writes other maps as
/// arrays of pairs.
fn text_keys(schema: &Value) -> bool {
    schema.pointer("/keys/type").and_then(Value::as_str) == Some("string")
}

/// The precision and scale of a `Decimal` schema when a decimal column holds it.
fn decimal_type(schema: &Value) -> Option<(u8, i8)> {
    let scale: i8 = parameter(schema, "scale")?.parse().ok()?;
    let precision: u8 = match parameter(schema, "connect.decimal.precision") {
        Some(p) => p.parse().ok()?,
        None => 38,
    };
    (precision > 0 && precision <= 38 && scale >= 0 && scale as u8 <= precision)
        .then_some((precision, scale))
}

/// The Arrow type of a Connect schema.
fn data_type(schema: &Value, depth: usize) -> Result<DataType, Refusal> {
    if depth > MOST_DEPTH {
        return Err(Refusal::unsupported(format!(
            "the schema nests deeper than {MOST_DEPTH}"
        )));
    }
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("");
    Ok(match (kind, name(schema)) {
        ("bytes", Some("org.apache.kafka.connect.data.Decimal")) => match decimal_type(schema) {
            Some((precision, scale)) => DataType::Decimal128(precision, scale),
            None => DataType::Utf8,
        },
        ("int32", Some("org.apache.kafka.connect.data.Date" | "io.debezium.time.Date")) => {
            DataType::Date32
        }
        ("int32", Some("org.apache.kafka.connect.data.Time" | "io.debezium.time.Time"))
        | ("int64", Some("io.debezium.time.MicroTime" | "io.debezium.time.NanoTime")) => {
            DataType::Time64(TimeUnit::Microsecond)
        }
        (
            "int64",
            Some(
                "org.apache.kafka.connect.data.Timestamp"
                | "io.debezium.time.Timestamp"
                | "io.debezium.time.MicroTimestamp"
                | "io.debezium.time.NanoTimestamp",
            ),
        ) => DataType::Timestamp(TimeUnit::Microsecond, None),
        ("string", Some("io.debezium.time.ZonedTimestamp")) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
        }
        ("struct", Some("io.debezium.data.VariableScaleDecimal")) => DataType::Utf8,
        ("int8" | "int16" | "int32", _) => DataType::Int32,
        ("int64", _) => DataType::Int64,
        // Connect's JSON converter names them `float` and `double`.
        ("float" | "float32", _) => DataType::Float32,
        ("double" | "float64", _) => DataType::Float64,
        ("boolean", _) => DataType::Boolean,
        ("string", _) => DataType::Utf8,
        ("bytes", _) => DataType::Binary,
        ("struct", _) => {
            let mut fields: Vec<Field> = Vec::new();
            for field in schema
                .get("fields")
                .and_then(Value::as_array)
                .ok_or_else(|| Refusal::malformed("a struct schema needs its fields"))?
            {
                let name = field
                    .get("field")
                    .and_then(Value::as_str)
                    .ok_or_else(|| Refusal::malformed("a struct's field needs its name"))?;
                if fields.iter().any(|f| f.name() == name) {
                    return Err(Refusal::malformed(format!(
                        "the schema names the field {name:?} twice"
                    )));
                }
                fields.push(Field::new(name, data_type(field, depth + 1)?, true));
            }
            DataType::Struct(Fields::from(fields))
        }
        ("array", _) => {
            let items = schema
                .get("items")
                .ok_or_else(|| Refusal::malformed("an array schema needs its items"))?;
            DataType::List(Arc::new(Field::new(
                "element",
                data_type(items, depth + 1)?,
                true,
            )))
        }
        ("map", _) if text_keys(schema) => {
            let values = schema
                .get("values")
                .ok_or_else(|| Refusal::malformed("a map schema needs its values"))?;
            DataType::Map(
                Arc::new(Field::new(
                    "key_value",
                    DataType::Struct(Fields::from(vec![
                        Field::new("key", DataType::Utf8, false),
                        Field::new("value", data_type(values, depth + 1)?, true),
                    ])),
                    false,
                )),
                false,
            )
        }
        // Maps of other keys, and types this does not know (a newer Connect's): JSON text.
        _ => DataType::Utf8,
    })
}

/// `value` in the form Floe's JSON decoding reads as `schema`'s type; `at` names it.
fn plain(schema: &Value, value: Value, at: &str, depth: usize) -> Result<Value, Refusal> {
    if value.is_null() {
        return Ok(Value::Null);
    }
    if depth > MOST_DEPTH {
        return Err(Refusal::unsupported(format!(
            "{at} nests deeper than {MOST_DEPTH}"
        )));
    }
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let wrong = |what: &str| Refusal::malformed(format!("{at} is not {what}: {}", shown(&value)));
    let integer = |value: &Value| value.as_i64().ok_or_else(|| wrong("an integer"));
    Ok(match (kind, name(schema)) {
        ("bytes", Some("org.apache.kafka.connect.data.Decimal")) => {
            let text = value.as_str().ok_or_else(|| wrong("base64 text"))?;
            let scale = parameter(schema, "scale")
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|s| *s <= MOST_SCALE)
                .ok_or_else(|| {
                    Refusal::unsupported(format!(
                        "{at}: a Decimal needs a scale of at most {MOST_SCALE}"
                    ))
                })?;
            Value::String(decimal(text, scale).map_err(|e| e.context(at))?)
        }
        ("int32", Some("org.apache.kafka.connect.data.Date" | "io.debezium.time.Date")) => {
            let days = i32::try_from(integer(&value)?).map_err(|_| wrong("a date"))?;
            let date = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
                .zip(chrono::Duration::try_days(i64::from(days)))
                .and_then(|(epoch, days)| epoch.checked_add_signed(days))
                .ok_or_else(|| wrong("a date"))?;
            Value::String(date.format("%Y-%m-%d").to_string())
        }
        ("int32", Some("org.apache.kafka.connect.data.Time" | "io.debezium.time.Time")) => {
            time_of_day(integer(&value)?.checked_mul(1000), at)?
        }
        ("int64", Some("io.debezium.time.MicroTime")) => time_of_day(Some(integer(&value)?), at)?,
        ("int64", Some("io.debezium.time.NanoTime")) => {
            time_of_day(Some(integer(&value)?.div_euclid(1000)), at)?
        }
        (
            "int64",
            Some("org.apache.kafka.connect.data.Timestamp" | "io.debezium.time.Timestamp"),
        ) => timestamp(integer(&value)?.checked_mul(1000), at)?,
        ("int64", Some("io.debezium.time.MicroTimestamp")) => {
            timestamp(Some(integer(&value)?), at)?
        }
        ("int64", Some("io.debezium.time.NanoTimestamp")) => {
            timestamp(Some(integer(&value)?.div_euclid(1000)), at)?
        }
        ("struct", Some("io.debezium.data.VariableScaleDecimal")) => {
            let scale = value
                .get("scale")
                .and_then(Value::as_u64)
                .and_then(|s| u32::try_from(s).ok())
                .filter(|s| *s <= MOST_SCALE)
                .ok_or_else(|| wrong("a variable-scale decimal"))?;
            let text = value
                .get("value")
                .and_then(Value::as_str)
                .ok_or_else(|| wrong("a variable-scale decimal"))?;
            Value::String(decimal(text, scale).map_err(|e| e.context(at))?)
        }
        ("bytes", _) => {
            let text = value.as_str().ok_or_else(|| wrong("base64 text"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| Refusal::malformed(format!("{at} is not base64: {e}")))?;
            // Floe's JSON decoding reads a binary column from hex.
            Value::String(hex::encode(bytes))
        }
        ("struct", _) => {
            let Value::Object(mut object) = value else {
                return Err(wrong("an object"));
            };
            let mut plain_object = Map::new();
            for field in schema
                .get("fields")
                .and_then(Value::as_array)
                .ok_or_else(|| Refusal::malformed("a struct schema needs its fields"))?
            {
                let Some(name) = field.get("field").and_then(Value::as_str) else {
                    continue;
                };
                let inner = object.remove(name).unwrap_or(Value::Null);
                let at = format!("{at}.{name}");
                plain_object.insert(name.to_string(), plain(field, inner, &at, depth + 1)?);
            }
            Value::Object(plain_object)
        }
        ("array", _) => {
            let Value::Array(items) = value else {
                return Err(wrong("an array"));
            };
            let schema = schema
                .get("items")
                .ok_or_else(|| Refusal::malformed("an array schema needs its items"))?;
            Value::Array(
                items
                    .into_iter()
                    .map(|item| plain(schema, item, at, depth + 1))
                    .collect::<Result<_, _>>()?,
            )
        }
        ("map", _) if text_keys(schema) => {
            let values = schema
                .get("values")
                .ok_or_else(|| Refusal::malformed("a map schema needs its values"))?;
            let Value::Object(entries) = value else {
                return Err(wrong("a map with text keys"));
            };
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| Ok((k, plain(values, v, at, depth + 1)?)))
                    .collect::<Result<_, Refusal>>()?,
            )
        }
        (
            "int8" | "int16" | "int32" | "int64" | "float" | "float32" | "double" | "float64"
            | "boolean" | "string",
            _,
        ) => value,
        // Maps of other keys and types this does not know: JSON text (see `data_type`).
        _ => match value {
            Value::String(text) => Value::String(text),
            other => Value::String(other.to_string()),
        },
    })
}

/// A value as an error shows it: at most 100 characters.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(100) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

/// The most digits after the point a decimal's text may have.
const MOST_SCALE: u32 = 1000;
/// The most bytes a decimal's unscaled value may take (some 600 digits).
const MOST_DECIMAL_BYTES: usize = 256;

/// A Connect decimal — base64 of its unscaled value's big-endian two's complement bytes — at
/// `scale` as decimal text (`BOI=` at 2: `12.50`).
fn decimal(base64_text: &str, scale: u32) -> Result<String, Refusal> {
    let mut bytes = base64::engine::general_purpose::STANDARD
        .decode(base64_text)
        .map_err(|e| Refusal::malformed(format!("not base64: {e}")))?;
    if bytes.is_empty() || bytes.len() > MOST_DECIMAL_BYTES {
        return Err(Refusal::unsupported(format!(
            "a decimal of {} bytes is not one Floe reads (at most {MOST_DECIMAL_BYTES})",
            bytes.len()
        )));
    }
    let negative = bytes[0] & 0x80 != 0;
    if negative {
        // Its magnitude: the two's complement negated.
        for b in bytes.iter_mut() {
            *b = !*b;
        }
        for b in bytes.iter_mut().rev() {
            let (sum, carry) = b.overflowing_add(1);
            *b = sum;
            if !carry {
                break;
            }
        }
    }
    // Base 256 to base 10, by repeated division.
    let mut digits = Vec::new();
    while bytes.iter().any(|b| *b != 0) {
        let mut remainder = 0u32;
        for b in bytes.iter_mut() {
            let value = (remainder << 8) | u32::from(*b);
            *b = (value / 10) as u8;
            remainder = value % 10;
        }
        digits.push(b'0' + remainder as u8);
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    digits.reverse();
    let digits = String::from_utf8(digits).expect("ASCII digits");
    let sign = if negative { "-" } else { "" };
    let scale = scale as usize;
    if scale == 0 {
        return Ok(format!("{sign}{digits}"));
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    Ok(format!("{sign}{whole}.{fraction}"))
}

fn timestamp(micros: Option<i64>, at: &str) -> Result<Value, Refusal> {
    let time = micros
        .and_then(chrono::DateTime::from_timestamp_micros)
        .ok_or_else(|| Refusal::malformed(format!("{at} is not a timestamp")))?;
    Ok(Value::String(
        time.naive_utc().format("%Y-%m-%dT%H:%M:%S%.6f").to_string(),
    ))
}

fn time_of_day(micros: Option<i64>, at: &str) -> Result<Value, Refusal> {
    let not_a_time = || Refusal::malformed(format!("{at} is not a time of day"));
    let micros = micros
        .filter(|m| (0..86_400_000_000).contains(m))
        .ok_or_else(not_a_time)?;
    let time = chrono::NaiveTime::from_num_seconds_from_midnight_opt(
        (micros / 1_000_000) as u32,
        (micros % 1_000_000) as u32 * 1000,
    )
    .ok_or_else(not_a_time)?;
    Ok(Value::String(time.format("%H:%M:%S%.6f").to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Debezium PostgreSQL change event as Connect's JSON converter writes it, shortened.
    const EVENT: &str = r#"{"schema":{"type":"struct","fields":[
        {"type":"struct","fields":[
          {"type":"int32","optional":false,"field":"id"},
          {"type":"double","optional":true,"field":"score"},
          {"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,
           "parameters":{"scale":"2","connect.decimal.precision":"12"},"field":"amount"},
          {"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"at"},
          {"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"born"},
          {"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1,"field":"wakes"},
          {"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"seen"},
          {"type":"bytes","optional":true,"field":"raw"},
          {"type":"array","items":{"type":"string"},"optional":true,"field":"tags"}
        ],"optional":true,"name":"pg.public.t.Value","field":"after"},
        {"type":"string","optional":false,"field":"op"}
      ],"optional":false,"name":"pg.public.t.Envelope"},
      "payload":{"after":{"id":1,"score":1.5,"amount":"BOI=","at":1714557600123456,"born":7306,"wakes":3600000001,
                 "seen":"2024-05-01T10:00:00.5+02:00","raw":"AP8=","tags":["a"]},"op":"c"}}"#;

    #[test]
    fn debeziums_logical_types_become_their_columns_and_readable_values() {
        let typed = typed(EVENT.as_bytes()).unwrap().expect("a Connect record");
        let row: Value = serde_json::from_slice(&typed.row).unwrap();
        assert_eq!(
            row,
            serde_json::json!({"after": {"id": 1, "score": 1.5, "amount": "12.50", "at": "2024-05-01T10:00:00.123456",
                "born": "1990-01-02", "wakes": "01:00:00.000001", "seen": "2024-05-01T10:00:00.5+02:00",
                "raw": "00ff", "tags": ["a"]}, "op": "c"})
        );
        let DataType::Struct(after) = typed.fields[0].data_type() else {
            panic!("after is a struct")
        };
        let types: Vec<_> = after.iter().map(|f| f.data_type().clone()).collect();
        assert_eq!(
            types[..8],
            [
                DataType::Int32,
                DataType::Float64,
                DataType::Decimal128(12, 2),
                DataType::Timestamp(TimeUnit::Microsecond, None),
                DataType::Date32,
                DataType::Time64(TimeUnit::Microsecond),
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                DataType::Binary,
            ]
        );
    }

    #[test]
    fn decimals_of_every_sign_scale_and_width() {
        // 1234567.89, -0.01, 0.05, 5, -128 and 0 as Connect encodes them.
        assert_eq!(decimal("B1vNFQ==", 2).unwrap(), "1234567.89");
        assert_eq!(decimal("/w==", 2).unwrap(), "-0.01");
        assert_eq!(decimal("BQ==", 2).unwrap(), "0.05");
        assert_eq!(decimal("BQ==", 0).unwrap(), "5");
        assert_eq!(decimal("gA==", 0).unwrap(), "-128");
        assert_eq!(decimal("AA==", 3).unwrap(), "0.000");
        // 2^128, wider than any decimal column: exact all the same.
        let mut wide = vec![1u8];
        wide.extend([0u8; 16]);
        let wide = base64::engine::general_purpose::STANDARD.encode(wide);
        assert_eq!(
            decimal(&wide, 0).unwrap(),
            "340282366920938463463374607431768211456"
        );
        assert!(decimal(&"A".repeat(400), 0).is_err());
        assert!(decimal("not base64!", 0).is_err());
    }

    #[test]
    fn values_that_would_not_fit_are_refused_not_panicked_on() {
        let with = |schema: &str, value: &str| {
            let record = format!(
                r#"{{"schema":{{"type":"struct","fields":[{schema}]}},"payload":{{"x":{value}}}}}"#
            );
            typed(record.as_bytes())
        };
        let date = r#"{"type":"int32","name":"io.debezium.time.Date","field":"x"}"#;
        assert!(with(date, "200000000000").is_err());
        assert!(with(date, "-3000000000").is_err());
        let scaled =
            r#"{"type":"struct","name":"io.debezium.data.VariableScaleDecimal","field":"x"}"#;
        assert!(with(scaled, r#"{"scale":4000000000,"value":"AQ=="}"#).is_err());
        let nano = r#"{"type":"int64","name":"io.debezium.time.NanoTime","field":"x"}"#;
        assert!(with(nano, "-999").is_err());
        let twice = r#"{"type":"int32","field":"x"},{"type":"int32","field":"x"}"#;
        assert!(with(twice, "1").is_err());
        // A Decimal wider than 38 digits is its exact text; a type not known, its JSON text.
        let wide = r#"{"type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2","connect.decimal.precision":"65"},"field":"x"}"#;
        let typed_wide = with(wide, r#""BOI=""#).unwrap().unwrap();
        assert_eq!(typed_wide.fields[0].data_type(), &DataType::Utf8);
        assert_eq!(
            String::from_utf8(typed_wide.row).unwrap(),
            r#"{"x":"12.50"}"#
        );
        let unknown = r#"{"type":"int128","field":"x"}"#;
        let typed_unknown = with(unknown, "[1,2]").unwrap().unwrap();
        assert_eq!(
            String::from_utf8(typed_unknown.row).unwrap(),
            r#"{"x":"[1,2]"}"#
        );
    }

    #[test]
    fn plain_json_and_bad_values() {
        assert!(typed(br#"{"id": 1}"#).unwrap().is_none());
        assert!(typed(br#"{"schema": 1}"#).unwrap().is_none());
        let bad = EVENT.replace("\"born\":7306", "\"born\":\"yesterday\"");
        let refused = typed(bad.as_bytes()).err().expect("refused").to_string();
        assert!(refused.contains("the payload.after.born"), "{refused}");
    }
}
