//! Record values to table rows: each value becomes one JSON object line that the pipeline
//! decodes against the table's schema in bulk. JSON values are taken as they are; Avro,
//! JSON Schema and Protobuf values in the Confluent wire format (a zero byte, a four-byte
//! schema id, for Protobuf the message indexes, the body) are read with their registry
//! schema, which also gives the table its columns; raw values become a `value` column
//! (Protobuf's own reading: [`protobuf`]).

pub(crate) mod protobuf;

use std::collections::HashMap;
use std::sync::Arc;

use apache_avro::Schema as AvroSchema;
use apache_avro::types::Value as AvroValue;
use datafusion::arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use prost_reflect::{DynamicMessage, FileDescriptor, MessageDescriptor};
use serde_json::{Map, Value as Json};

use crate::kafka::Format;
use crate::registry::{SchemaSource, SchemaType};
use crate::{Refusal, Result, StreamError};

/// A registry schema ready to read values with.
enum Parsed {
    Avro {
        schema: Box<AvroSchema>,
        /// The schemas it references (schema references), whose named types it uses.
        referenced: Vec<AvroSchema>,
        names: HashMap<String, AvroSchema>,
        fields: Vec<Field>,
    },
    Json {
        fields: Vec<Field>,
    },
    Protobuf {
        file: FileDescriptor,
        fields: HashMap<String, Vec<Field>>,
    },
}

/// Turns record values into JSON object lines, looking schema ids up once each.
pub(crate) struct Decoder {
    format: Format,
    registry: Option<Arc<dyn SchemaSource>>,
    schemas: HashMap<u32, Arc<Parsed>>,
}

impl Decoder {
    pub(crate) fn new(format: Format, registry: Option<Arc<dyn SchemaSource>>) -> Self {
        Self {
            format,
            registry,
            schemas: HashMap::new(),
        }
    }

    /// The value as one JSON object (no newline), or why it cannot be a row. Fields of the
    /// value's registry schema that `fields` lacks are added to it. An unreachable registry
    /// is an error of the pipeline, not of the record.
    pub(crate) async fn decode(
        &mut self,
        payload: &[u8],
        fields: &mut Vec<Field>,
    ) -> Result<std::result::Result<Vec<u8>, Refusal>> {
        match self.format {
            // Only the first byte is checked here: the batch's decode finds malformed JSON,
            // and its record-by-record retry names it.
            Format::Json => Ok(match payload.iter().find(|b| !b.is_ascii_whitespace()) {
                Some(b'{') => Ok(payload.to_vec()),
                _ => Err(object_error(payload)
                    .unwrap_or_else(|| Refusal::malformed("a record must be a JSON object"))),
            }),
            Format::Raw => {
                if fields.is_empty() {
                    fields.push(Field::new("value", DataType::Binary, true));
                }
                let mut row = Vec::with_capacity(payload.len() * 2 + 12);
                row.extend_from_slice(b"{\"value\":\"");
                row.extend_from_slice(hex::encode(payload).as_bytes());
                row.extend_from_slice(b"\"}");
                Ok(Ok(row))
            }
            Format::Avro | Format::JsonSchema | Format::Protobuf => {
                let (id, body) = match wire_format(payload) {
                    Ok(framed) => framed,
                    Err(error) => return Ok(Err(error)),
                };
                let parsed = match self.parsed(id).await? {
                    Ok(parsed) => parsed,
                    Err(error) => return Ok(Err(error)),
                };
                let (schema_fields, row) = match parsed.as_ref() {
                    Parsed::Avro {
                        schema,
                        referenced,
                        names,
                        fields,
                    } => {
                        let mut reader = body;
                        let row = crate::avro_scan::check(schema, names, body)
                            .and_then(|()| {
                                // With references, the named types of the schema and of
                                // those it references, together.
                                if referenced.is_empty() {
                                    apache_avro::from_avro_datum(schema, &mut reader, None)
                                } else {
                                    // Referenced ones first: a type is defined before it
                                    // is used.
                                    let mut all: Vec<&AvroSchema> = referenced.iter().collect();
                                    all.push(schema.as_ref());
                                    apache_avro::from_avro_datum_schemata(
                                        schema,
                                        all,
                                        &mut reader,
                                        None,
                                    )
                                }
                                .map_err(|e| Refusal::malformed(e.to_string()))
                            })
                            .map_err(|e| e.context(format!("not Avro of schema {id}")))
                            .and_then(|value| avro_json(&value, schema, names))
                            .and_then(|json| match json {
                                Json::Object(_) => json_row(&json),
                                _ => Err(Refusal::unsupported(format!(
                                    "schema {id} is not an Avro record: a row needs one"
                                ))),
                            });
                        (fields, row)
                    }
                    Parsed::Json { fields } => (
                        fields,
                        match object_error(body) {
                            None => Ok(body.to_vec()),
                            Some(error) => Err(error),
                        },
                    ),
                    Parsed::Protobuf { file, fields } => {
                        let (message, bytes) = match protobuf::message(file, body) {
                            Ok(found) => found,
                            Err(error) => return Ok(Err(error.context(format!("schema {id}")))),
                        };
                        let row = DynamicMessage::decode(message.clone(), bytes)
                            .map_err(|e| {
                                Refusal::malformed(format!(
                                    "not Protobuf {} of schema {id}: {e}",
                                    message.full_name()
                                ))
                            })
                            .and_then(|decoded| protobuf::json(&decoded))
                            .and_then(|json| json_row(&json));
                        let Some(message_fields) = fields.get(message.full_name()) else {
                            return Ok(Err(Refusal::malformed(format!(
                                "schema {id} has no message {}",
                                message.full_name()
                            ))));
                        };
                        (message_fields, row)
                    }
                };
                for field in schema_fields {
                    match fields.iter_mut().find(|f| f.name() == field.name()) {
                        None => fields.push(field.clone()),
                        // Schemas of one batch may differ by a widening: the wider wins.
                        Some(known) if wider(field.data_type(), known.data_type()) => {
                            *known = field.clone();
                        }
                        Some(_) => {}
                    }
                }
                Ok(row)
            }
        }
    }

    /// Schema `id`, parsed, from the cache or the registry. `Ok(Err)` when the registry
    /// does not know it or it does not fit the pipeline's format (the record is a dead
    /// letter); `Err` when the registry cannot be asked.
    async fn parsed(&mut self, id: u32) -> Result<std::result::Result<Arc<Parsed>, Refusal>> {
        if let Some(parsed) = self.schemas.get(&id) {
            return Ok(Ok(parsed.clone()));
        }
        let Some(registry) = &self.registry else {
            return Err(StreamError::Invalid(
                "this format needs a schema registry: set schema-registry-url".into(),
            ));
        };
        let Some(registered) = registry.schema_by_id(id).await? else {
            return Ok(Err(Refusal::unsupported(format!(
                "schema id {id} is not in the schema registry"
            ))));
        };
        // The schemas it references, from the same registry (which may fail to answer).
        let source = crate::registry::References::new(registry.as_ref());
        let of_schema = |error: Refusal| Ok(Err(error.context(format!("schema {id}"))));
        let resolved = crate::references::resolve(&source, &registered.references).await?;
        let dependencies = match resolved {
            Ok(found) => found,
            Err(error) => return of_schema(error),
        };
        let parsed = match (self.format, registered.schema_type) {
            (Format::Avro, SchemaType::Avro) => match parse_avro(&registered.schema, &dependencies)
            {
                Ok(parsed) => parsed,
                Err(error) => return of_schema(error),
            },
            (Format::JsonSchema, SchemaType::Json) => {
                match json_schema_fields(&registered.schema) {
                    Ok(fields) => Parsed::Json { fields },
                    Err(error) => return of_schema(error),
                }
            }
            (Format::Protobuf, SchemaType::Protobuf) => {
                match protobuf::file_with(&registered.schema, &dependencies) {
                    Ok(file) => {
                        let mut fields = HashMap::new();
                        let mut pending: Vec<MessageDescriptor> = file.messages().collect();
                        while let Some(message) = pending.pop() {
                            pending.extend(message.child_messages());
                            fields.insert(
                                message.full_name().to_string(),
                                protobuf::fields(&message, 0),
                            );
                        }
                        Parsed::Protobuf { file, fields }
                    }
                    Err(error) => return of_schema(error),
                }
            }
            (format, found) => {
                return Ok(Err(Refusal::unsupported(format!(
                    "schema {id} is {} but the pipeline reads {format:?}",
                    found.as_str()
                ))));
            }
        };
        let parsed = Arc::new(parsed);
        self.schemas.insert(id, parsed.clone());
        Ok(Ok(parsed))
    }
}

/// Whether `a` is a widening of `b` (int to long, float to double, more decimal digits).
fn wider(a: &DataType, b: &DataType) -> bool {
    match (a, b) {
        (DataType::Int64, DataType::Int32) | (DataType::Float64, DataType::Float32) => true,
        (DataType::Decimal128(p, s), DataType::Decimal128(q, t)) => s == t && p > q,
        _ => false,
    }
}

/// A JSON value as a row's bytes.
fn json_row(json: &Json) -> std::result::Result<Vec<u8>, Refusal> {
    serde_json::to_vec(json).map_err(|e| Refusal::malformed(e.to_string()))
}

/// The schema id and body of a value in the Confluent wire format.
fn wire_format(payload: &[u8]) -> std::result::Result<(u32, &[u8]), Refusal> {
    match payload {
        [0, a, b, c, d, body @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), body)),
        [] => Err(Refusal::malformed("an empty value has no schema id")),
        _ => Err(Refusal::malformed(
            "not in the Confluent wire format (a zero byte and a four-byte schema id first)",
        )),
    }
}

/// Why a value cannot be a row of a JSON pipeline, if it cannot: it must be one JSON
/// object. Checked without building the value.
pub(crate) fn object_error(payload: &[u8]) -> Option<Refusal> {
    let first = payload.iter().find(|b| !b.is_ascii_whitespace());
    let valid = serde_json::from_slice::<serde::de::IgnoredAny>(payload);
    let kind = match (first, valid) {
        (Some(b'{'), Ok(_)) => return None,
        (_, Err(e)) => return Some(Refusal::malformed(format!("not JSON: {e}"))),
        (Some(b'['), _) => "an array",
        (Some(b'"'), _) => "a string",
        (Some(b't' | b'f'), _) => "a boolean",
        (Some(b'n'), _) => "null",
        _ => "a number",
    };
    Some(Refusal::malformed(format!(
        "a record must be a JSON object, not {kind}"
    )))
}

/// An Avro schema (its named types possibly defined in `dependencies`, schema references)
/// with its named types and the Arrow fields of its top-level record.
fn parse_avro(
    text: &str,
    dependencies: &[crate::references::Dependency],
) -> std::result::Result<Parsed, Refusal> {
    let schema = crate::references::avro(text, dependencies)?;
    let mut names = HashMap::new();
    let referenced = crate::references::avro_dependencies(dependencies)?;
    for named in &referenced {
        collect_names(named, &mut names);
    }
    collect_names(&schema, &mut names);
    let AvroSchema::Record(record) = &schema else {
        return Err(Refusal::unsupported("the Avro schema is not a record"));
    };
    let fields = record
        .fields
        .iter()
        .filter_map(|f| avro_field(&f.name, &f.schema, &names))
        .collect();
    Ok(Parsed::Avro {
        schema: Box::new(schema),
        referenced,
        names,
        fields,
    })
}

fn collect_names(schema: &AvroSchema, names: &mut HashMap<String, AvroSchema>) {
    match schema {
        AvroSchema::Record(record) => {
            names.insert(record.name.fullname(None), schema.clone());
            for field in &record.fields {
                collect_names(&field.schema, names);
            }
        }
        AvroSchema::Enum(e) => {
            names.insert(e.name.fullname(None), schema.clone());
        }
        AvroSchema::Fixed(f) => {
            names.insert(f.name.fullname(None), schema.clone());
        }
        AvroSchema::Array(array) => collect_names(&array.items, names),
        AvroSchema::Map(map) => collect_names(&map.types, names),
        AvroSchema::Union(union) => {
            for variant in union.variants() {
                collect_names(variant, names);
            }
        }
        _ => {}
    }
}

fn resolve<'a>(schema: &'a AvroSchema, names: &'a HashMap<String, AvroSchema>) -> &'a AvroSchema {
    match schema {
        AvroSchema::Ref { name } => names.get(&name.fullname(None)).unwrap_or(schema),
        _ => schema,
    }
}

/// The Arrow field of an Avro field; `None` for what a column cannot hold (unions of
/// several types, a bare null).
fn avro_field(
    name: &str,
    schema: &AvroSchema,
    names: &HashMap<String, AvroSchema>,
) -> Option<Field> {
    Some(Field::new(name, avro_type(schema, names, 0)?, true))
}

fn avro_type(
    schema: &AvroSchema,
    names: &HashMap<String, AvroSchema>,
    depth: usize,
) -> Option<DataType> {
    if depth > 32 {
        // A recursive type: columns cannot nest without end.
        return None;
    }
    let utc = || Some(Arc::from("+00:00"));
    Some(match resolve(schema, names) {
        AvroSchema::Boolean => DataType::Boolean,
        AvroSchema::Int => DataType::Int32,
        AvroSchema::Long => DataType::Int64,
        AvroSchema::Float => DataType::Float32,
        AvroSchema::Double => DataType::Float64,
        AvroSchema::Bytes | AvroSchema::Fixed(_) | AvroSchema::Duration => DataType::Binary,
        AvroSchema::String | AvroSchema::Enum(_) | AvroSchema::Uuid | AvroSchema::BigDecimal => {
            DataType::Utf8
        }
        AvroSchema::Date => DataType::Date32,
        AvroSchema::TimeMillis | AvroSchema::TimeMicros => DataType::Time64(TimeUnit::Microsecond),
        AvroSchema::TimestampMillis | AvroSchema::TimestampMicros | AvroSchema::TimestampNanos => {
            DataType::Timestamp(TimeUnit::Microsecond, utc())
        }
        AvroSchema::LocalTimestampMillis
        | AvroSchema::LocalTimestampMicros
        | AvroSchema::LocalTimestampNanos => DataType::Timestamp(TimeUnit::Microsecond, None),
        AvroSchema::Decimal(decimal) if decimal.precision <= 38 => {
            DataType::Decimal128(decimal.precision as u8, decimal.scale as i8)
        }
        AvroSchema::Decimal(_) => DataType::Utf8,
        AvroSchema::Array(array) => DataType::List(Arc::new(Field::new(
            "element",
            avro_type(&array.items, names, depth + 1)?,
            true,
        ))),
        AvroSchema::Map(map) => DataType::Map(
            Arc::new(Field::new(
                "key_value",
                DataType::Struct(Fields::from(vec![
                    Field::new("key", DataType::Utf8, false),
                    Field::new("value", avro_type(&map.types, names, depth + 1)?, true),
                ])),
                false,
            )),
            false,
        ),
        AvroSchema::Union(union) => {
            let variants: Vec<&AvroSchema> = union
                .variants()
                .iter()
                .filter(|v| !matches!(v, AvroSchema::Null))
                .collect();
            match variants.as_slice() {
                [only] => avro_type(only, names, depth)?,
                _ => return None,
            }
        }
        AvroSchema::Record(record) => {
            let fields: Vec<Field> = record
                .fields
                .iter()
                .filter_map(|f| {
                    Some(Field::new(
                        &f.name,
                        avro_type(&f.schema, names, depth + 1)?,
                        true,
                    ))
                })
                .collect();
            if fields.is_empty() {
                return None;
            }
            DataType::Struct(Fields::from(fields))
        }
        AvroSchema::Null | AvroSchema::Ref { .. } => return None,
    })
}

/// An Avro value as JSON the table's decoder reads: bytes as hex, times in microseconds,
/// decimals as text, enums by symbol.
fn avro_json(
    value: &AvroValue,
    schema: &AvroSchema,
    names: &HashMap<String, AvroSchema>,
) -> std::result::Result<Json, Refusal> {
    let schema = resolve(schema, names);
    Ok(match value {
        AvroValue::Null => Json::Null,
        AvroValue::Boolean(b) => Json::Bool(*b),
        AvroValue::Int(i) => Json::from(*i),
        AvroValue::Long(l) => Json::from(*l),
        AvroValue::Float(f) => {
            serde_json::Number::from_f64(*f as f64).map_or(Json::Null, Json::Number)
        }
        AvroValue::Double(d) => serde_json::Number::from_f64(*d).map_or(Json::Null, Json::Number),
        AvroValue::Bytes(bytes) | AvroValue::Fixed(_, bytes) => Json::String(hex::encode(bytes)),
        AvroValue::String(s) | AvroValue::Enum(_, s) => Json::String(s.clone()),
        AvroValue::Uuid(u) => Json::String(u.to_string()),
        AvroValue::Date(d) => Json::from(*d),
        AvroValue::TimeMillis(t) => Json::from(i64::from(*t) * 1000),
        AvroValue::TimeMicros(t) => Json::from(*t),
        AvroValue::TimestampMillis(t) | AvroValue::LocalTimestampMillis(t) => Json::from(
            t.checked_mul(1000)
                .ok_or_else(|| Refusal::unsupported(format!("timestamp {t} ms is out of range")))?,
        ),
        AvroValue::TimestampMicros(t) | AvroValue::LocalTimestampMicros(t) => Json::from(*t),
        AvroValue::TimestampNanos(t) | AvroValue::LocalTimestampNanos(t) => Json::from(t / 1000),
        AvroValue::Duration(d) => {
            let bytes: [u8; 12] = (*d).into();
            Json::String(hex::encode(bytes))
        }
        AvroValue::BigDecimal(d) => Json::String(d.to_string()),
        AvroValue::Decimal(decimal) => {
            let AvroSchema::Decimal(decimal_schema) = schema else {
                return Err(Refusal::malformed(
                    "a decimal value without a decimal schema",
                ));
            };
            let bytes: Vec<u8> = decimal
                .try_into()
                .map_err(|e: apache_avro::Error| Refusal::malformed(e.to_string()))?;
            Json::String(decimal_text(&bytes, decimal_schema.scale)?)
        }
        AvroValue::Union(index, inner) => {
            let AvroSchema::Union(union) = schema else {
                return Err(Refusal::malformed("a union value without a union schema"));
            };
            let variant = union
                .variants()
                .get(*index as usize)
                .ok_or_else(|| Refusal::malformed("a union branch beyond the schema's"))?;
            avro_json(inner, variant, names)?
        }
        AvroValue::Array(items) => {
            let AvroSchema::Array(array) = schema else {
                return Err(Refusal::malformed("an array value without an array schema"));
            };
            Json::Array(
                items
                    .iter()
                    .map(|item| avro_json(item, &array.items, names))
                    .collect::<std::result::Result<_, _>>()?,
            )
        }
        AvroValue::Map(entries) => {
            let AvroSchema::Map(map) = schema else {
                return Err(Refusal::malformed("a map value without a map schema"));
            };
            let mut object = Map::new();
            for (key, item) in entries {
                object.insert(key.clone(), avro_json(item, &map.types, names)?);
            }
            Json::Object(object)
        }
        AvroValue::Record(fields) => {
            let AvroSchema::Record(record) = schema else {
                return Err(Refusal::malformed("a record value without a record schema"));
            };
            let mut object = Map::new();
            for ((name, item), field) in fields.iter().zip(&record.fields) {
                object.insert(name.clone(), avro_json(item, &field.schema, names)?);
            }
            Json::Object(object)
        }
    })
}

/// The largest decimal scale read (Arrow's widest decimal, 256 bits, has 76 digits).
const MAX_DECIMAL_SCALE: usize = 76;

/// A big-endian two's-complement unscaled value with `scale` as decimal text.
fn decimal_text(bytes: &[u8], scale: usize) -> std::result::Result<String, Refusal> {
    if bytes.len() > 16 {
        return Err(Refusal::unsupported("a decimal wider than 38 digits"));
    }
    // The text is as wide as the scale: a schema's scale is not a width to trust.
    if scale > MAX_DECIMAL_SCALE {
        return Err(Refusal::unsupported(format!(
            "a decimal of scale {scale}, more than the {MAX_DECIMAL_SCALE} Floe reads"
        )));
    }
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let mut buffer = if negative { [0xff; 16] } else { [0; 16] };
    buffer[16 - bytes.len()..].copy_from_slice(bytes);
    let unscaled = i128::from_be_bytes(buffer);
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale == 0 {
        return Ok(format!("{sign}{digits}"));
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    Ok(format!("{sign}{whole}.{fraction}"))
}

/// The Arrow fields of a JSON Schema's top-level object: `string` (with `date-time` and
/// `date` formats as timestamps and dates), `integer` as long, `number` as double,
/// `boolean`, arrays of those and nested objects; `$ref`s into `definitions`/`$defs` and
/// `["T", "null"]` or `oneOf`/`anyOf` with null are followed. Properties of other shapes are
/// left out of the table.
fn json_schema_fields(text: &str) -> std::result::Result<Vec<Field>, Refusal> {
    let root: Json =
        serde_json::from_str(text).map_err(|e| Refusal::malformed(format!("not JSON: {e}")))?;
    object_properties(&root, &root, 0).ok_or_else(|| {
        Refusal::unsupported("a JSON Schema for rows must describe an object with properties")
    })
}

fn object_properties(schema: &Json, root: &Json, depth: usize) -> Option<Vec<Field>> {
    let schema = follow_ref(schema, root);
    let properties = schema.get("properties")?.as_object()?;
    let fields: Vec<Field> = properties
        .iter()
        .filter_map(|(name, property)| {
            Some(Field::new(
                name,
                json_schema_type(property, root, depth + 1)?,
                true,
            ))
        })
        .collect();
    Some(fields)
}

fn follow_ref<'a>(schema: &'a Json, root: &'a Json) -> &'a Json {
    let mut schema = schema;
    for _ in 0..16 {
        let Some(target) = schema.get("$ref").and_then(Json::as_str) else {
            break;
        };
        let Some(found) = target
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
        else {
            break;
        };
        schema = found;
    }
    schema
}

fn json_schema_type(schema: &Json, root: &Json, depth: usize) -> Option<DataType> {
    if depth > 32 {
        return None;
    }
    let schema = follow_ref(schema, root);
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema.get(key).and_then(Json::as_array) {
            let non_null: Vec<&Json> = options
                .iter()
                .filter(|o| follow_ref(o, root).get("type").and_then(Json::as_str) != Some("null"))
                .collect();
            return match non_null.as_slice() {
                [only] => json_schema_type(only, root, depth),
                _ => None,
            };
        }
    }
    let kind = match schema.get("type")? {
        Json::String(kind) => kind.as_str(),
        Json::Array(kinds) => {
            let non_null: Vec<&str> = kinds
                .iter()
                .filter_map(Json::as_str)
                .filter(|k| *k != "null")
                .collect();
            match non_null.as_slice() {
                [only] => *only,
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(match kind {
        "string" => match schema.get("format").and_then(Json::as_str) {
            Some("date-time") => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            Some("date") => DataType::Date32,
            _ => DataType::Utf8,
        },
        "integer" => DataType::Int64,
        "number" => DataType::Float64,
        "boolean" => DataType::Boolean,
        "array" => DataType::List(Arc::new(Field::new(
            "element",
            json_schema_type(schema.get("items")?, root, depth + 1)?,
            true,
        ))),
        "object" => {
            let fields = object_properties(schema, root, depth)?;
            if fields.is_empty() {
                return None;
            }
            DataType::Struct(Fields::from(fields))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_read_as_text_with_their_scale() {
        assert_eq!(decimal_text(&[0x30, 0x39], 2).unwrap(), "123.45");
        assert_eq!(decimal_text(&[0xcf, 0xc7], 2).unwrap(), "-123.45");
        assert_eq!(decimal_text(&[0x05], 3).unwrap(), "0.005");
        assert_eq!(decimal_text(&[0x05], 0).unwrap(), "5");
    }

    #[test]
    fn forged_decimal_scales_are_refused_not_formatted() {
        assert!(
            decimal_text(&[0x05], 1 << 40)
                .unwrap_err()
                .to_string()
                .contains("scale 1099511627776")
        );
        assert!(decimal_text(&[0x05], usize::MAX).is_err());
        assert_eq!(decimal_text(&[0x05], 76).unwrap().len(), 78);
    }

    #[test]
    fn avro_timestamps_out_of_range_are_refused_not_wrapped() {
        let schema = AvroSchema::TimestampMillis;
        let names = HashMap::new();
        let refused = avro_json(&AvroValue::TimestampMillis(i64::MAX), &schema, &names);
        assert!(refused.unwrap_err().to_string().contains("out of range"));
        assert_eq!(
            avro_json(&AvroValue::TimestampMillis(-5), &schema, &names).unwrap(),
            Json::from(-5000)
        );
    }

    #[test]
    fn values_outside_the_wire_format_are_named() {
        assert!(
            wire_format(b"{\"a\":1}")
                .unwrap_err()
                .to_string()
                .contains("wire format")
        );
        assert_eq!(
            wire_format(&[0, 0, 0, 1, 7, 42]).unwrap(),
            (263, &[42u8][..])
        );
    }

    #[test]
    fn json_objects_are_told_from_other_json() {
        assert_eq!(object_error(br#" {"a": [1, 2]}"#), None);
        let refused = |payload: &[u8]| object_error(payload).unwrap().to_string();
        assert!(refused(b"[1]").contains("an array"));
        assert!(refused(b"12").contains("a number"));
        assert!(refused(b"{\"a\":").contains("not JSON"));
    }

    #[test]
    fn json_schemas_give_typed_columns() {
        let fields = json_schema_fields(
            r##"{"type": "object", "definitions": {"geo": {"type": "object",
                 "properties": {"lat": {"type": "number"}}}},
                 "properties": {"id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
                 "tags": {"type": "array", "items": {"type": "string"}},
                 "where": {"$ref": "#/definitions/geo"},
                 "note": {"type": ["string", "null"]}, "any": {}}}"##,
        )
        .unwrap();
        let named: HashMap<&str, &DataType> = fields
            .iter()
            .map(|f| (f.name().as_str(), f.data_type()))
            .collect();
        assert_eq!(named["id"], &DataType::Int64);
        assert!(matches!(
            named["at"],
            DataType::Timestamp(TimeUnit::Microsecond, Some(_))
        ));
        assert!(matches!(named["tags"], DataType::List(_)));
        assert!(matches!(named["where"], DataType::Struct(_)));
        assert_eq!(named["note"], &DataType::Utf8);
        assert!(!named.contains_key("any"));
    }
}
