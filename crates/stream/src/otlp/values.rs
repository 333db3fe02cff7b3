//! OTLP values as table values: attributes as maps of text, any value as text, ids as hex,
//! nanoseconds as microsecond timestamps.

use std::borrow::Cow;

use base64::Engine;
use datafusion::arrow::array::{MapBuilder, MapFieldNames, StringBuilder};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::Refusal;

/// The `service.name` OTLP's semantic conventions give a resource that names none.
pub const UNKNOWN_SERVICE: &str = "unknown_service";

/// A map column's builder: text keys, text values.
pub type TextMap = MapBuilder<StringBuilder, StringBuilder>;

/// Named as Iceberg's maps are read (`key_value` of `key` and `value`).
pub fn text_map() -> TextMap {
    let names = MapFieldNames {
        entry: "key_value".into(),
        key: "key".into(),
        value: "value".into(),
    };
    MapBuilder::new(Some(names), StringBuilder::new(), StringBuilder::new())
}

/// Attributes ready to be appended (duplicate keys dropped, values as text): a resource's or
/// scope's are prepared once and appended to each of its records' rows.
pub struct Prepared<'a>(Vec<(&'a str, Option<Cow<'a, str>>)>);

/// `attributes` prepared: a key given twice keeps its last value.
pub fn prepare(attributes: &[KeyValue]) -> Prepared<'_> {
    fn entry(kv: &KeyValue) -> (&str, Option<Cow<'_, str>>) {
        (kv.key.as_str(), kv.value.as_ref().and_then(text_of))
    }
    // Few attributes (the usual case) are checked for duplicates pairwise, without hashing.
    let duplicated = if attributes.len() <= 32 {
        attributes
            .iter()
            .enumerate()
            .any(|(i, kv)| attributes[i + 1..].iter().any(|other| other.key == kv.key))
    } else {
        let mut seen = std::collections::HashSet::with_capacity(attributes.len());
        !attributes.iter().all(|kv| seen.insert(kv.key.as_str()))
    };
    if !duplicated {
        return Prepared(attributes.iter().map(entry).collect());
    }
    // Last wins: walk from the end, keep the first of each key, then in their order.
    let mut seen = std::collections::HashSet::new();
    let mut kept: Vec<_> = attributes
        .iter()
        .rev()
        .filter(|kv| seen.insert(kv.key.as_str()))
        .map(entry)
        .collect();
    kept.reverse();
    Prepared(kept)
}

/// Appends prepared attributes as one map value.
pub fn push_prepared(builder: &mut TextMap, attributes: &Prepared<'_>) {
    for (key, value) in &attributes.0 {
        builder.keys().append_value(key);
        builder.values().append_option(value.as_deref());
    }
    builder
        .append(true)
        .expect("keys and values are appended in pairs");
}

/// Appends `attributes` as one map value (a key given twice keeps its last value).
pub fn push_attributes(builder: &mut TextMap, attributes: &[KeyValue]) {
    push_prepared(builder, &prepare(attributes));
}

/// An OTLP value as text: strings as they are, numbers and booleans as written, bytes in
/// base64, arrays and key-value lists as JSON; `None` for an empty value.
pub fn text(value: &AnyValue) -> Option<String> {
    text_of(value).map(Cow::into_owned)
}

/// [`text`], borrowing a string value.
pub fn text_of(value: &AnyValue) -> Option<Cow<'_, str>> {
    Some(match value.value.as_ref()? {
        Value::StringValue(s) => Cow::Borrowed(s.as_str()),
        Value::BoolValue(b) => Cow::Owned(b.to_string()),
        Value::IntValue(i) => Cow::Owned(i.to_string()),
        Value::DoubleValue(d) => Cow::Owned(d.to_string()),
        Value::BytesValue(b) => Cow::Owned(base64::engine::general_purpose::STANDARD.encode(b)),
        Value::StringValueStrindex(i) => Cow::Owned(i.to_string()),
        Value::ArrayValue(_) | Value::KvlistValue(_) => Cow::Owned(json(value).to_string()),
    })
}

/// An OTLP value as JSON.
fn json(value: &AnyValue) -> serde_json::Value {
    use serde_json::Value as J;
    match value.value.as_ref() {
        None => J::Null,
        Some(Value::StringValue(s)) => J::String(s.clone()),
        Some(Value::BoolValue(b)) => J::Bool(*b),
        Some(Value::IntValue(i)) => J::from(*i),
        Some(Value::DoubleValue(d)) => J::from(*d),
        Some(Value::BytesValue(b)) => {
            J::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        Some(Value::StringValueStrindex(i)) => J::from(*i),
        Some(Value::ArrayValue(array)) => J::Array(array.values.iter().map(json).collect()),
        Some(Value::KvlistValue(list)) => J::Object(
            list.values
                .iter()
                .map(|kv| {
                    let value = kv.value.as_ref().map_or(J::Null, json);
                    (kv.key.clone(), value)
                })
                .collect(),
        ),
    }
}

/// A resource's `service.name`, or [`UNKNOWN_SERVICE`].
pub fn service_name(resource: Option<&Resource>) -> String {
    resource
        .and_then(|r| {
            r.attributes
                .iter()
                .rev()
                .find(|kv| kv.key == "service.name")
        })
        .and_then(|kv| kv.value.as_ref())
        .and_then(text)
        .unwrap_or_else(|| UNKNOWN_SERVICE.to_string())
}

/// A trace (16 bytes) or span (8 bytes) id as lowercase hex; empty is no id. Any other length
/// is not an OTLP id: the record carrying it is refused.
pub fn hex_id(id: &[u8], length: usize, what: &str) -> Result<Option<String>, Refusal> {
    match id.len() {
        0 => Ok(None),
        n if n == length => Ok(Some(hex::encode(id))),
        n => Err(Refusal::malformed(format!(
            "{what} has {n} bytes; OTLP's have {length}"
        ))),
    }
}

/// An id of a record already checked by [`hex_id`] as lowercase hex in `buffer`; `None` for
/// no id.
pub fn hex_in<'b>(id: &[u8], buffer: &'b mut [u8; 64]) -> Option<&'b str> {
    if id.is_empty() || id.len() > 32 {
        return None;
    }
    let out = &mut buffer[..id.len() * 2];
    hex::encode_to_slice(id, out).ok()?;
    std::str::from_utf8(out).ok()
}

/// Nanoseconds since the epoch as microseconds; 0 (unset) is none.
pub fn micros(nanos: u64) -> Option<i64> {
    (nanos != 0).then_some((nanos / 1000) as i64)
}

/// An unsigned OTLP count as a table's signed one (counts past 2^63 are clamped).
pub fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
