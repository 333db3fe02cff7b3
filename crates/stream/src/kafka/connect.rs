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
//! | `struct`, `array`, `map` | struct, list, map | field by field |
//!
//! A value that does not read as its schema says makes the record a dead letter naming the
//! field. Schemas nest at most [`MOST_DEPTH`] deep; a schema of a type not listed here leaves
//! the record to be taken as plain JSON (its payload typed by its values).

use std::sync::Arc;

use base64::Engine;
use datafusion::arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use serde_json::{Map, Value};

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
fn looks_wrapped(value: &[u8]) -> bool {
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
pub(super) fn typed(value: &[u8]) -> Result<Option<Typed>, String> {
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
    if schema.get("type").and_then(Value::as_str) != Some("struct") {
        return Ok(None);
    }
    // A schema this does not know (a newer Connect's) leaves the record to be taken as plain
    // JSON, as before there were schemas.
    let Ok(DataType::Struct(fields)) = data_type(&schema, 0) else {
        return Ok(None);
    };
    let payload = match payload {
        Value::Null => return Ok(None),
        payload => payload,
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

/// The Arrow type of a Connect schema.
fn data_type(schema: &Value, depth: usize) -> Result<DataType, String> {
    if depth > MOST_DEPTH {
        return Err(format!("the schema nests deeper than {MOST_DEPTH}"));
    }
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
    Ok(match (kind, name(schema)) {
        ("bytes", Some("org.apache.kafka.connect.data.Decimal")) => {
            let scale: i8 = parameter(schema, "scale")
                .and_then(|s| s.parse().ok())
                .ok_or("a Decimal schema needs its scale")?;
            let precision: u8 = parameter(schema, "connect.decimal.precision")
                .and_then(|p| p.parse().ok())
                .unwrap_or(38);
            if precision == 0 || precision > 38 || scale < 0 || scale as u8 > precision {
                return Err(format!(
                    "a Decimal of precision {precision} and scale {scale} has no column type"
                ));
            }
            DataType::Decimal128(precision, scale)
        }
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
        ) => micros,
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
            let mut fields = Vec::new();
            for field in schema
                .get("fields")
                .and_then(Value::as_array)
                .ok_or("a struct schema needs its fields")?
            {
                let name = field
                    .get("field")
                    .and_then(Value::as_str)
                    .ok_or("a struct's field needs its name")?;
                fields.push(Field::new(name, data_type(field, depth + 1)?, true));
            }
            DataType::Struct(Fields::from(fields))
        }
        ("array", _) => {
            let items = schema
                .get("items")
                .ok_or("an array schema needs its items")?;
            DataType::List(Arc::new(Field::new(
                "element",
                data_type(items, depth + 1)?,
                true,
            )))
        }
        ("map", _) => {
            let keys = schema.get("keys").ok_or("a map schema needs its keys")?;
            let values = schema
                .get("values")
                .ok_or("a map schema needs its values")?;
            DataType::Map(
                Arc::new(Field::new(
                    "key_value",
                    DataType::Struct(Fields::from(vec![
                        Field::new("key", data_type(keys, depth + 1)?, false),
                        Field::new("value", data_type(values, depth + 1)?, true),
                    ])),
                    false,
                )),
                false,
            )
        }
        (other, _) => return Err(format!("a Connect schema of type {other:?} is not known")),
    })
}

/// `value` in the form Floe's JSON decoding reads as `schema`'s type; `at` names it.
fn plain(schema: &Value, value: Value, at: &str, depth: usize) -> Result<Value, String> {
    if value.is_null() || depth > MOST_DEPTH {
        return Ok(Value::Null);
    }
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let wrong = |what: &str| format!("{at} is not {what}: {value}");
    let integer = |value: &Value| value.as_i64().ok_or_else(|| wrong("an integer"));
    Ok(match (kind, name(schema)) {
        ("bytes", Some("org.apache.kafka.connect.data.Decimal")) => {
            let scale: u32 = parameter(schema, "scale")
                .and_then(|s| s.parse().ok())
                .ok_or("a Decimal schema needs its scale")?;
            let text = value.as_str().ok_or_else(|| wrong("base64 text"))?;
            Value::String(decimal(
                &unscaled(text).map_err(|e| format!("{at}: {e}"))?,
                scale,
            ))
        }
        ("int32", Some("org.apache.kafka.connect.data.Date" | "io.debezium.time.Date")) => {
            let days = integer(&value)?;
            let date = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
                .and_then(|epoch| epoch.checked_add_signed(chrono::Duration::days(days)))
                .ok_or_else(|| wrong("a date"))?;
            Value::String(date.format("%Y-%m-%d").to_string())
        }
        ("int32", Some("org.apache.kafka.connect.data.Time" | "io.debezium.time.Time")) => {
            time_of_day(integer(&value)?.checked_mul(1000), at)?
        }
        ("int64", Some("io.debezium.time.MicroTime")) => time_of_day(Some(integer(&value)?), at)?,
        ("int64", Some("io.debezium.time.NanoTime")) => {
            time_of_day(Some(integer(&value)? / 1000), at)?
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
                .ok_or_else(|| wrong("a variable-scale decimal"))?;
            let text = value
                .get("value")
                .and_then(Value::as_str)
                .ok_or_else(|| wrong("a variable-scale decimal"))?;
            Value::String(decimal(
                &unscaled(text).map_err(|e| format!("{at}: {e}"))?,
                scale,
            ))
        }
        ("bytes", _) => {
            let text = value.as_str().ok_or_else(|| wrong("base64 text"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| format!("{at} is not base64: {e}"))?;
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
                .ok_or("a struct schema needs its fields")?
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
                .ok_or("an array schema needs its items")?;
            Value::Array(
                items
                    .into_iter()
                    .map(|item| plain(schema, item, at, depth + 1))
                    .collect::<Result<_, _>>()?,
            )
        }
        ("map", _) => {
            let values = schema
                .get("values")
                .ok_or("a map schema needs its values")?;
            match value {
                // A map of text keys is an object; others are arrays of [key, value] pairs.
                Value::Object(entries) => Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| Ok((k, plain(values, v, at, depth + 1)?)))
                        .collect::<Result<_, String>>()?,
                ),
                _ => return Err(wrong("a map with text keys")),
            }
        }
        _ => value,
    })
}

/// The unscaled value of a Connect decimal: base64 of its big-endian two's complement bytes.
fn unscaled(text: &str) -> Result<i128, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("not base64: {e}"))?;
    if bytes.is_empty() || bytes.len() > 16 {
        return Err(format!(
            "a decimal of {} bytes does not fit 38 digits",
            bytes.len()
        ));
    }
    let negative = bytes[0] & 0x80 != 0;
    let mut full = [if negative { 0xff } else { 0 }; 16];
    full[16 - bytes.len()..].copy_from_slice(&bytes);
    Ok(i128::from_be_bytes(full))
}

/// `unscaled` at `scale` as decimal text (`1250` at 2: `12.50`).
fn decimal(unscaled: &i128, scale: u32) -> String {
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if *unscaled < 0 { "-" } else { "" };
    let scale = scale as usize;
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    format!("{sign}{whole}.{fraction}")
}

fn timestamp(micros: Option<i64>, at: &str) -> Result<Value, String> {
    let time = micros
        .and_then(chrono::DateTime::from_timestamp_micros)
        .ok_or_else(|| format!("{at} is not a timestamp"))?;
    Ok(Value::String(
        time.naive_utc().format("%Y-%m-%dT%H:%M:%S%.6f").to_string(),
    ))
}

fn time_of_day(micros: Option<i64>, at: &str) -> Result<Value, String> {
    let micros = micros
        .filter(|m| (0..86_400_000_000).contains(m))
        .ok_or_else(|| format!("{at} is not a time of day"))?;
    let time = chrono::NaiveTime::from_num_seconds_from_midnight_opt(
        (micros / 1_000_000) as u32,
        (micros % 1_000_000) as u32 * 1000,
    )
    .ok_or_else(|| format!("{at} is not a time of day"))?;
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
    fn decimals_of_every_sign_and_scale() {
        // 1234567.89, -1, and 0.05 as Connect encodes them.
        assert_eq!(decimal(&unscaled("B1vNFQ==").unwrap(), 2), "1234567.89");
        assert_eq!(decimal(&unscaled("/w==").unwrap(), 2), "-0.01");
        assert_eq!(decimal(&unscaled("BQ==").unwrap(), 2), "0.05");
        assert_eq!(decimal(&unscaled("BQ==").unwrap(), 0), "5");
        assert!(unscaled("AAAAAAAAAAAAAAAAAAAAAAAA").is_err());
    }

    #[test]
    fn plain_json_and_bad_values() {
        assert!(typed(br#"{"id": 1}"#).unwrap().is_none());
        assert!(typed(br#"{"schema": 1}"#).unwrap().is_none());
        let unknown = r#"{"schema":{"type":"struct","fields":[{"type":"int128","field":"x"}]},"payload":{"x":1}}"#;
        assert!(typed(unknown.as_bytes()).unwrap().is_none());
        let bad = EVENT.replace("\"born\":7306", "\"born\":\"yesterday\"");
        let refused = typed(bad.as_bytes()).err().expect("refused");
        assert!(refused.contains("the payload.after.born"), "{refused}");
    }
}
