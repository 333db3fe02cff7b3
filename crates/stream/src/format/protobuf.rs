//! Protobuf values of a registry schema in the Confluent wire format: the schema compiled
//! ([`file`], [`file_with`]), the message a value's indexes name ([`message`]), its Arrow
//! fields ([`fields`]), and a decoded message as the JSON row the table's decoder reads
//! ([`json`]).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use prost_reflect::{DynamicMessage, FileDescriptor, MessageDescriptor, ReflectMessage};
use serde_json::{Map, Value as Json};

use crate::Refusal;

/// A Protobuf schema as the registry holds it — `.proto` text, or a base64
/// `FileDescriptorProto` as Confluent's Python serializer registers it — compiled, with
/// Google's well-known types importable.
pub(crate) fn file(text: &str) -> std::result::Result<FileDescriptor, Refusal> {
    file_with(text, &[])
}

/// [`file`] whose imports may be `dependencies` (schema references, by their import
/// paths).
pub(crate) fn file_with(
    text: &str,
    dependencies: &[crate::references::Dependency],
) -> std::result::Result<FileDescriptor, Refusal> {
    use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
    struct Files(Vec<File>);
    impl FileResolver for Files {
        fn open_file(&self, name: &str) -> std::result::Result<File, protox::Error> {
            self.0
                .iter()
                .find(|f| f.name() == name)
                .cloned()
                .ok_or_else(|| protox::Error::file_not_found(name))
        }
    }
    let read = |name: &str, text: &str| match File::from_source(name, text) {
        Ok(file) => Ok(file),
        Err(source_error) => {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .map_err(|_| {
                    Refusal::malformed(format!("not a Protobuf schema: {source_error}"))
                })?;
            File::decode_file_descriptor_proto(bytes.as_slice())
                .map_err(|e| Refusal::malformed(format!("not a Protobuf file descriptor: {e}")))
        }
    };
    let file = read("schema.proto", text)?;
    let name = file.name().to_string();
    let mut files = vec![file];
    for dependency in dependencies {
        files.push(
            read(&dependency.name, &dependency.schema)
                .map_err(|e| e.context(format!("referenced {}", dependency.name)))?,
        );
    }
    let mut resolver = ChainFileResolver::new();
    resolver.add(Files(files));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler
        .open_file(&name)
        .map_err(|e| Refusal::malformed(format!("the Protobuf schema does not compile: {e}")))?;
    let file = compiler
        .descriptor_pool()
        .get_file_by_name(&name)
        .ok_or_else(|| Refusal::malformed("the Protobuf schema compiled to nothing"))?;
    if file.messages().len() == 0 {
        return Err(Refusal::unsupported(
            "the Protobuf schema defines no message",
        ));
    }
    Ok(file)
}

/// The most message indexes a value may carry (the depth of nested message types).
const MAX_MESSAGE_INDEXES: usize = 64;

/// The message a value's Confluent message indexes name (a zigzag varint count, then that
/// many zigzag varints: the path through nested messages; a lone zero means the first
/// message), and the rest of the value.
pub(super) fn message<'a>(
    file: &FileDescriptor,
    body: &'a [u8],
) -> std::result::Result<(MessageDescriptor, &'a [u8]), Refusal> {
    fn varint(bytes: &mut &[u8]) -> std::result::Result<i64, Refusal> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes
                .split_first()
                .ok_or_else(|| Refusal::malformed("the message indexes end early"))?;
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                // Zigzag.
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(Refusal::malformed("a message index is too long"))
    }
    let mut rest = body;
    let count = varint(&mut rest)?;
    // Each index is a byte at least, and messages nest only so deep.
    if count < 0 || count > MAX_MESSAGE_INDEXES as i64 {
        return Err(Refusal::malformed(format!(
            "{count} message indexes: a value names its message with 0 to \
             {MAX_MESSAGE_INDEXES}"
        )));
    }
    let path: Vec<i64> = if count == 0 {
        vec![0]
    } else {
        (0..count)
            .map(|_| varint(&mut rest))
            .collect::<std::result::Result<_, _>>()?
    };
    let missing = || {
        Refusal::malformed(format!(
            "message indexes {path:?} name no message of the schema"
        ))
    };
    let first = usize::try_from(path[0]).map_err(|_| missing())?;
    let mut message = file.messages().nth(first).ok_or_else(missing)?;
    for index in &path[1..] {
        let index = usize::try_from(*index).map_err(|_| missing())?;
        let child = message.child_messages().nth(index);
        message = child.ok_or_else(missing)?;
    }
    Ok((message, rest))
}

/// The Arrow fields of a Protobuf message.
pub(super) fn fields(message: &MessageDescriptor, depth: usize) -> Vec<Field> {
    message
        .fields()
        .filter_map(|field| Some(Field::new(field.name(), field_type(&field, depth)?, true)))
        .collect()
}

fn field_type(field: &prost_reflect::FieldDescriptor, depth: usize) -> Option<DataType> {
    use prost_reflect::Kind;
    if depth > 32 {
        return None;
    }
    let kind_type = |kind: Kind| -> Option<DataType> {
        Some(match kind {
            Kind::Double => DataType::Float64,
            Kind::Float => DataType::Float32,
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => DataType::Int32,
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint32 | Kind::Fixed32 => {
                DataType::Int64
            }
            Kind::Uint64 | Kind::Fixed64 => DataType::Decimal128(20, 0),
            Kind::Bool => DataType::Boolean,
            Kind::String | Kind::Enum(_) => DataType::Utf8,
            Kind::Bytes => DataType::Binary,
            Kind::Message(message) if message.full_name() == "google.protobuf.Timestamp" => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
            }
            Kind::Message(message) => {
                let children = fields(&message, depth + 1);
                if children.is_empty() {
                    return None;
                }
                DataType::Struct(Fields::from(children))
            }
        })
    };
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            return None;
        };
        return Some(DataType::Map(
            Arc::new(Field::new(
                "key_value",
                DataType::Struct(Fields::from(vec![
                    Field::new("key", DataType::Utf8, false),
                    Field::new(
                        "value",
                        field_type(&entry.map_entry_value_field(), depth + 1)?,
                        true,
                    ),
                ])),
                false,
            )),
            false,
        ));
    }
    let element = kind_type(field.kind())?;
    Some(if field.is_list() {
        DataType::List(Arc::new(Field::new("element", element, true)))
    } else {
        element
    })
}

/// A Protobuf message as JSON the table's decoder reads: every field (unset ones at their
/// default, unset message fields and proto3 `optional`s as null), enums by name, bytes as
/// hex, timestamps in microseconds.
pub(super) fn json(message: &DynamicMessage) -> std::result::Result<Json, Refusal> {
    let mut object = Map::new();
    for field in message.descriptor().fields() {
        let value = if field.supports_presence() && !message.has_field(&field) {
            Json::Null
        } else {
            value_json(&message.get_field(&field), &field.kind())?
        };
        object.insert(field.name().to_string(), value);
    }
    Ok(Json::Object(object))
}

fn value_json(
    value: &prost_reflect::Value,
    kind: &prost_reflect::Kind,
) -> std::result::Result<Json, Refusal> {
    use prost_reflect::{Kind, MapKey, Value};
    Ok(match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(i) => Json::from(*i),
        Value::I64(i) => Json::from(*i),
        Value::U32(u) => Json::from(*u),
        Value::U64(u) => Json::from(*u),
        Value::F32(f) => {
            serde_json::Number::from_f64(f64::from(*f)).map_or(Json::Null, Json::Number)
        }
        Value::F64(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(hex::encode(b)),
        Value::EnumNumber(n) => match kind {
            Kind::Enum(e) => e.get_value(*n).map_or_else(
                || Json::String(n.to_string()),
                |v| Json::String(v.name().to_string()),
            ),
            _ => Json::from(*n),
        },
        Value::Message(m) if m.descriptor().full_name() == "google.protobuf.Timestamp" => {
            let part = |name: &str| match m.get_field_by_name(name).as_deref() {
                Some(Value::I64(v)) => *v,
                Some(Value::I32(v)) => i64::from(*v),
                _ => 0,
            };
            let (seconds, nanos) = (part("seconds"), part("nanos"));
            let micros = seconds
                .checked_mul(1_000_000)
                .and_then(|us| us.checked_add(nanos / 1000))
                .ok_or_else(|| {
                    Refusal::unsupported(format!(
                        "timestamp {seconds} s {nanos} ns is out of range"
                    ))
                })?;
            Json::from(micros)
        }
        Value::Message(m) => json(m)?,
        Value::List(items) => Json::Array(
            items
                .iter()
                .map(|i| value_json(i, kind))
                .collect::<std::result::Result<_, _>>()?,
        ),
        Value::Map(entries) => {
            let value_kind = match kind {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                other => other.clone(),
            };
            let mut object = Map::new();
            for (key, item) in entries {
                let key = match key {
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(i) => i.to_string(),
                    MapKey::I64(i) => i.to_string(),
                    MapKey::U32(u) => u.to_string(),
                    MapKey::U64(u) => u.to_string(),
                    MapKey::String(s) => s.clone(),
                };
                object.insert(key, value_json(item, &value_kind)?);
            }
            Json::Object(object)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_out_of_range_are_refused_not_wrapped() {
        let compiled = file(
            "syntax = \"proto3\"; import \"google/protobuf/timestamp.proto\";\n\
             message M { google.protobuf.Timestamp at = 1; }",
        )
        .unwrap();
        let descriptor = compiled.messages().next().unwrap();
        let mut message = DynamicMessage::new(descriptor.clone());
        let timestamp = descriptor.get_field_by_name("at").unwrap();
        let prost_reflect::Kind::Message(kind) = timestamp.kind() else {
            panic!("a message field");
        };
        let mut at = DynamicMessage::new(kind);
        at.set_field_by_name("seconds", prost_reflect::Value::I64(i64::MAX));
        message.set_field(&timestamp, prost_reflect::Value::Message(at.clone()));
        assert!(
            json(&message)
                .unwrap_err()
                .to_string()
                .contains("out of range")
        );
        at.set_field_by_name("seconds", prost_reflect::Value::I64(2));
        message.set_field(&timestamp, prost_reflect::Value::Message(at));
        assert_eq!(json(&message).unwrap()["at"], Json::from(2_000_000));
    }

    #[test]
    fn forged_message_indexes_are_refused_not_a_panic() {
        let compiled = file("syntax = \"proto3\"; message M { int64 a = 1; }").unwrap();
        // Zigzag 1 is -1: a negative count of indexes left the path empty, and `path[0]`
        // panicked on every retry of the record.
        assert!(
            message(&compiled, &[1])
                .unwrap_err()
                .to_string()
                .contains("-1 message indexes")
        );
        assert!(
            message(&compiled, &[0xfe, 0x01])
                .unwrap_err()
                .to_string()
                .contains("127 message")
        );
        let (found, rest) = message(&compiled, &[0, 8, 1]).unwrap();
        assert_eq!((found.name(), rest), ("M", &[8u8, 1][..]));
        assert!(message(&compiled, &[2, 2]).is_err());
    }
}
