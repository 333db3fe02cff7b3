//! What a record of an `upsert` or `debezium` pipeline changes: a row that replaces the row
//! of its key, or a key whose row is deleted — each as one JSON object, the form the batch
//! decodes.

use serde_json::{Map, Value};

use crate::Refusal;

/// One record's change.
#[derive(Debug, PartialEq)]
pub(super) enum Change {
    /// A row (JSON object) replacing the row of its key.
    Upsert(Vec<u8>),
    /// The key (a JSON object of the key fields) whose row is deleted.
    Delete(Vec<u8>),
    /// Nothing to change (a Debezium tombstone or message event).
    Skip,
}

/// The key a tombstone deletes, from the record's key: a JSON object holding the key
/// fields (with or without Kafka Connect's `schema`/`payload` wrapper; a key the registry
/// serialized arrives here decoded to one), or — for a key of one field — a JSON scalar or
/// plain text, taken as text (which a numeric column parses).
pub(super) fn key_of_record(key: Option<&[u8]>, fields: &[String]) -> Result<Vec<u8>, Refusal> {
    let Some(key) = key else {
        return Err(Refusal::malformed(
            "a tombstone without a record key: there is no key to delete",
        ));
    };
    // A key of Connect's JSON with its schema is read as its values were written in rows
    // (a Decimal or Date key as the row holds it).
    let typed = super::connect::typed(key).map_err(|e| e.context("the record key"))?;
    let key = typed.as_ref().map_or(key, |t| t.row.as_slice());
    let parsed = serde_json::from_slice::<Value>(key);
    let object = match (parsed, fields) {
        (Ok(Value::Object(object)), _) => {
            // Kafka Connect's JSON keys wrap the key in `schema`/`payload` too.
            let object = match unwrap_payload(Value::Object(object)) {
                Value::Object(object) => object,
                _ => {
                    return Err(Refusal::malformed(
                        "the record key's payload is not an object",
                    ));
                }
            };
            key_fields(&object, fields, "the record key")?
        }
        (Ok(Value::String(text)), [only]) => Map::from_iter([(only.clone(), Value::String(text))]),
        (Ok(Value::Number(number)), [only]) => {
            Map::from_iter([(only.clone(), Value::String(number.to_string()))])
        }
        (Err(_), [only]) => match std::str::from_utf8(key) {
            Ok(text) if text.chars().any(char::is_control) => {
                return Err(Refusal::malformed(
                    "the record key holds control characters (a key serialized for a schema \
                     registry needs the pipeline's format to be avro, json-schema or protobuf)",
                ));
            }
            Ok(text) => Map::from_iter([(only.clone(), Value::String(text.to_string()))]),
            Err(_) => {
                return Err(Refusal::malformed(
                    "the record key is neither JSON nor UTF-8 text",
                ));
            }
        },
        _ => {
            return Err(Refusal::unfit(format!(
                "the record key must be a JSON object holding the key fields {}",
                fields.join(", ")
            )));
        }
    };
    Ok(serde_json::to_vec(&Value::Object(object)).expect("JSON encodes"))
}

/// The change a Debezium event (`row`, one JSON object, with or without the
/// `schema`/`payload` wrapper of Kafka Connect's JSON converter) makes; a delete without a
/// `before` deletes the key its record key (`key`) names.
pub(super) fn debezium(
    row: &[u8],
    key: Option<&[u8]>,
    fields: &[String],
) -> Result<Change, Refusal> {
    let event: Value = serde_json::from_slice(row)
        .map_err(|e| Refusal::malformed(format!("not a JSON change event: {e}")))?;
    let Value::Object(mut event) = unwrap_payload(event) else {
        return Err(Refusal::malformed(
            "a change event's payload must be an object",
        ));
    };
    let op = match event.get("op") {
        Some(Value::String(op)) => op.clone(),
        _ => {
            return Err(Refusal::malformed(
                "a Debezium change event needs an op (c, r, u or d)",
            ));
        }
    };
    match op.as_str() {
        "c" | "r" | "u" => match event.remove("after") {
            Some(Value::Object(after)) => {
                key_fields(&after, fields, "after")?;
                Ok(Change::Upsert(
                    serde_json::to_vec(&Value::Object(after)).expect("JSON encodes"),
                ))
            }
            _ => Err(Refusal::malformed(format!(
                "a change event of op {op} needs an after object"
            ))),
        },
        "d" => match event.remove("before") {
            Some(Value::Object(before)) => Ok(Change::Delete(
                serde_json::to_vec(&Value::Object(key_fields(&before, fields, "before")?))
                    .expect("JSON encodes"),
            )),
            _ => key_of_record(key, fields).map(Change::Delete).map_err(|e| {
                Refusal::new(
                    e.kind(),
                    format!("a delete event without a before object, and {e}"),
                )
            }),
        },
        // A logical decoding message carries no row.
        "m" => Ok(Change::Skip),
        "t" => Err(Refusal::unsupported(
            "a truncate event is not materialized: the table keeps its rows",
        )),
        other => Err(Refusal::unsupported(format!(
            "op {other:?} is not a Debezium operation"
        ))),
    }
}

/// The fields of a Debezium envelope's schema (Avro's, or Connect's JSON) become the fields of
/// its `after` row: the table follows the row, not the envelope. False (and `fields` left)
/// when they hold no `after` struct.
pub(super) fn row_fields(fields: &mut Vec<datafusion::arrow::datatypes::Field>) -> bool {
    use datafusion::arrow::datatypes::DataType;
    const ENVELOPE: [&str; 9] = [
        "before",
        "after",
        "source",
        "op",
        "ts_ms",
        "ts_us",
        "ts_ns",
        "transaction",
        "updateDescription",
    ];
    let row: Vec<_> = fields
        .iter()
        .find_map(|f| match (f.name().as_str(), f.data_type()) {
            ("after", DataType::Struct(children)) => Some(children.iter().cloned().collect()),
            _ => None,
        })
        .unwrap_or_default();
    if row.is_empty() {
        return false;
    }
    fields.retain(|f| !ENVELOPE.contains(&f.name().as_str()));
    for child in row {
        if !fields.iter().any(|f| f.name() == child.name()) {
            fields.push(child.as_ref().clone().with_nullable(true));
        }
    }
    true
}

/// Kafka Connect's JSON converter with schemas wraps a value as `{"schema": …, "payload": …}`.
fn unwrap_payload(value: Value) -> Value {
    match value {
        Value::Object(mut object)
            if object.len() == 2
                && object.contains_key("schema")
                && object.contains_key("payload") =>
        {
            object.remove("payload").expect("checked")
        }
        other => other,
    }
}

/// The key `fields` of `object`, each present and not null.
fn key_fields(
    object: &Map<String, Value>,
    fields: &[String],
    what: &str,
) -> Result<Map<String, Value>, Refusal> {
    fields
        .iter()
        .map(|field| match object.get(field) {
            Some(Value::Null) | None => Err(Refusal::unfit(format!(
                "{what} has no value for the key {field}"
            ))),
            Some(value) => Ok((field.clone(), value.clone())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fields: &[&str]) -> Vec<String> {
        fields.iter().map(|f| f.to_string()).collect()
    }

    fn text(bytes: Result<Vec<u8>, Refusal>) -> String {
        String::from_utf8(bytes.unwrap()).unwrap()
    }

    #[test]
    fn a_tombstone_deletes_the_key_its_record_key_names() {
        // A scalar key is taken as text, which a numeric key column parses.
        assert_eq!(
            text(key_of_record(Some(b"42"), &key(&["id"]))),
            r#"{"id":"42"}"#
        );
        assert_eq!(
            text(key_of_record(Some(br#""42""#), &key(&["id"]))),
            r#"{"id":"42"}"#
        );
        // Magic byte 0 and a schema id: serialized for a registry, not text.
        assert!(key_of_record(Some(b"\0\0\0\0\x01\x02"), &key(&["id"])).is_err());
        assert_eq!(
            text(key_of_record(Some(b"user-7"), &key(&["id"]))),
            r#"{"id":"user-7"}"#
        );
        assert_eq!(
            text(key_of_record(
                Some(br#"{"a":1,"b":"x","c":true}"#),
                &key(&["a", "b"])
            )),
            r#"{"a":1,"b":"x"}"#
        );
        assert_eq!(
            text(key_of_record(
                Some(br#"{"schema":{"type":"struct"},"payload":{"id":5}}"#),
                &key(&["id"])
            )),
            r#"{"id":5}"#
        );
        assert!(key_of_record(None, &key(&["id"])).is_err());
        assert!(key_of_record(Some(br#"{"a":1}"#), &key(&["a", "b"])).is_err());
        assert!(key_of_record(Some(b"7"), &key(&["a", "b"])).is_err());
        assert!(key_of_record(Some(b"null"), &key(&["a"])).is_err());
    }

    #[test]
    fn debezium_events_become_upserts_and_deletes() {
        let id = key(&["id"]);
        let created = br#"{"schema":{},"payload":{"before":null,"after":{"id":1,"name":"a"},"op":"c","source":{"lsn":10}}}"#;
        assert_eq!(
            debezium(created, None, &id).unwrap(),
            Change::Upsert(br#"{"id":1,"name":"a"}"#.to_vec())
        );
        let updated = br#"{"before":{"id":1,"name":"a"},"after":{"id":1,"name":"b"},"op":"u"}"#;
        assert_eq!(
            debezium(updated, None, &id).unwrap(),
            Change::Upsert(br#"{"id":1,"name":"b"}"#.to_vec())
        );
        let snapshot = br#"{"after":{"id":2,"name":"c"},"op":"r"}"#;
        assert!(matches!(
            debezium(snapshot, None, &id).unwrap(),
            Change::Upsert(_)
        ));
        let deleted = br#"{"before":{"id":1,"name":null},"after":null,"op":"d"}"#;
        assert_eq!(
            debezium(deleted, None, &id).unwrap(),
            Change::Delete(br#"{"id":1}"#.to_vec())
        );
        // A delete whose before is missing deletes the record key's key.
        assert_eq!(
            debezium(br#"{"op":"d","before":null}"#, Some(br#"{"id":9}"#), &id).unwrap(),
            Change::Delete(br#"{"id":9}"#.to_vec())
        );
        assert_eq!(
            debezium(br#"{"op":"m","message":{}}"#, None, &id).unwrap(),
            Change::Skip
        );
        for bad in [
            &br#"{"op":"t"}"#[..],
            br#"{"after":{"id":1}}"#,
            br#"{"op":"c","after":null}"#,
            br#"{"op":"c","after":{"name":"no key"}}"#,
            br#"{"op":"d","before":null}"#,
            br#"{"op":"x","after":{"id":1}}"#,
            b"not json",
        ] {
            assert!(
                debezium(bad, None, &id).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
