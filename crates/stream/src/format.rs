//! Record values to table rows: each value becomes one JSON object line that the pipeline
//! decodes against the table's schema in bulk. JSON values are taken as they are; Avro,
//! JSON Schema and Protobuf values in the Confluent wire format (a zero byte, a four-byte
//! schema id, for Protobuf the message indexes, the body) are read with their registry
//! schema, which also gives the table its columns; raw values become a `value` column.

use std::collections::HashMap;
use std::sync::Arc;

use apache_avro::Schema as AvroSchema;
use apache_avro::types::Value as AvroValue;
use datafusion::arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use prost_reflect::{DynamicMessage, FileDescriptor, MessageDescriptor, ReflectMessage};
use serde_json::{Map, Value as Json};

use crate::kafka::Format;
use crate::registry::{SchemaSource, SchemaType};
use crate::{Result, StreamError};

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
    ) -> Result<std::result::Result<Vec<u8>, String>> {
        match self.format {
            // Only the first byte is checked here: the batch's decode finds malformed JSON,
            // and its record-by-record retry names it.
            Format::Json => Ok(match payload.iter().find(|b| !b.is_ascii_whitespace()) {
                Some(b'{') => Ok(payload.to_vec()),
                _ => Err(object_error(payload)
                    .unwrap_or_else(|| "a record must be a JSON object".into())),
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
                                .map_err(|e| e.to_string())
                            })
                            .map_err(|e| format!("not Avro of schema {id}: {e}"))
                            .and_then(|value| avro_json(&value, schema, names))
                            .and_then(|json| match json {
                                Json::Object(_) => {
                                    serde_json::to_vec(&json).map_err(|e| e.to_string())
                                }
                                _ => Err(format!(
                                    "schema {id} is not an Avro record: a row needs one"
                                )),
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
                        let (message, bytes) = match protobuf_message(file, body) {
                            Ok(found) => found,
                            Err(error) => return Ok(Err(format!("schema {id}: {error}"))),
                        };
                        let row = DynamicMessage::decode(message.clone(), bytes)
                            .map_err(|e| {
                                format!("not Protobuf {} of schema {id}: {e}", message.full_name())
                            })
                            .and_then(|decoded| protobuf_json(&decoded))
                            .and_then(|json| serde_json::to_vec(&json).map_err(|e| e.to_string()));
                        let Some(message_fields) = fields.get(message.full_name()) else {
                            return Ok(Err(format!(
                                "schema {id} has no message {}",
                                message.full_name()
                            )));
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
    async fn parsed(&mut self, id: u32) -> Result<std::result::Result<Arc<Parsed>, String>> {
        if let Some(parsed) = self.schemas.get(&id) {
            return Ok(Ok(parsed.clone()));
        }
        let Some(registry) = &self.registry else {
            return Err(StreamError::Invalid(
                "this format needs a schema registry: set schema-registry-url".into(),
            ));
        };
        let Some(registered) = registry.schema_by_id(id).await? else {
            return Ok(Err(format!("schema id {id} is not in the schema registry")));
        };
        // The schemas it references, from the same registry.
        let source = crate::registry::References::new(registry.as_ref());
        let dependencies = match crate::references::resolve(&source, &registered.references).await {
            Ok(found) => found,
            Err(error) => {
                if let Some(unreachable) = source.unreachable() {
                    return Err(unreachable);
                }
                return Ok(Err(format!("schema {id}: {error}")));
            }
        };
        let parsed = match (self.format, registered.schema_type) {
            (Format::Avro, SchemaType::Avro) => match parse_avro(&registered.schema, &dependencies)
            {
                Ok(parsed) => parsed,
                Err(error) => return Ok(Err(format!("schema {id}: {error}"))),
            },
            (Format::JsonSchema, SchemaType::Json) => {
                match json_schema_fields(&registered.schema) {
                    Ok(fields) => Parsed::Json { fields },
                    Err(error) => return Ok(Err(format!("schema {id}: {error}"))),
                }
            }
            (Format::Protobuf, SchemaType::Protobuf) => {
                match protobuf_file_with(&registered.schema, &dependencies) {
                    Ok(file) => {
                        let mut fields = HashMap::new();
                        let mut pending: Vec<MessageDescriptor> = file.messages().collect();
                        while let Some(message) = pending.pop() {
                            pending.extend(message.child_messages());
                            fields.insert(
                                message.full_name().to_string(),
                                protobuf_fields(&message, 0),
                            );
                        }
                        Parsed::Protobuf { file, fields }
                    }
                    Err(error) => return Ok(Err(format!("schema {id}: {error}"))),
                }
            }
            (format, found) => {
                return Ok(Err(format!(
                    "schema {id} is {} but the pipeline reads {format:?}",
                    found.as_str()
                )));
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

/// The schema id and body of a value in the Confluent wire format.
fn wire_format(payload: &[u8]) -> std::result::Result<(u32, &[u8]), String> {
    match payload {
        [0, a, b, c, d, body @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), body)),
        [] => Err("an empty value has no schema id".into()),
        _ => Err(
            "not in the Confluent wire format (a zero byte and a four-byte schema id first)".into(),
        ),
    }
}

/// Why a value cannot be a row of a JSON pipeline, if it cannot: it must be one JSON
/// object. Checked without building the value.
pub(crate) fn object_error(payload: &[u8]) -> Option<String> {
    let first = payload.iter().find(|b| !b.is_ascii_whitespace());
    let valid = serde_json::from_slice::<serde::de::IgnoredAny>(payload);
    let kind = match (first, valid) {
        (Some(b'{'), Ok(_)) => return None,
        (_, Err(e)) => return Some(format!("not JSON: {e}")),
        (Some(b'['), _) => "an array",
        (Some(b'"'), _) => "a string",
        (Some(b't' | b'f'), _) => "a boolean",
        (Some(b'n'), _) => "null",
        _ => "a number",
    };
    Some(format!("a record must be a JSON object, not {kind}"))
}

/// An Avro schema (its named types possibly defined in `dependencies`, schema references)
/// with its named types and the Arrow fields of its top-level record.
fn parse_avro(
    text: &str,
    dependencies: &[crate::references::Dependency],
) -> std::result::Result<Parsed, String> {
    let schema = crate::references::avro(text, dependencies)?;
    let mut names = HashMap::new();
    let referenced = crate::references::avro_dependencies(dependencies)?;
    for named in &referenced {
        collect_names(named, &mut names);
    }
    collect_names(&schema, &mut names);
    let AvroSchema::Record(record) = &schema else {
        return Err("the Avro schema is not a record".into());
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
) -> std::result::Result<Json, String> {
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
                .ok_or_else(|| format!("timestamp {t} ms is out of range"))?,
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
                return Err("a decimal value without a decimal schema".into());
            };
            let bytes: Vec<u8> = decimal
                .try_into()
                .map_err(|e: apache_avro::Error| e.to_string())?;
            Json::String(decimal_text(&bytes, decimal_schema.scale)?)
        }
        AvroValue::Union(index, inner) => {
            let AvroSchema::Union(union) = schema else {
                return Err("a union value without a union schema".into());
            };
            let variant = union
                .variants()
                .get(*index as usize)
                .ok_or("a union branch beyond the schema's")?;
            avro_json(inner, variant, names)?
        }
        AvroValue::Array(items) => {
            let AvroSchema::Array(array) = schema else {
                return Err("an array value without an array schema".into());
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
                return Err("a map value without a map schema".into());
            };
            let mut object = Map::new();
            for (key, item) in entries {
                object.insert(key.clone(), avro_json(item, &map.types, names)?);
            }
            Json::Object(object)
        }
        AvroValue::Record(fields) => {
            let AvroSchema::Record(record) = schema else {
                return Err("a record value without a record schema".into());
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
fn decimal_text(bytes: &[u8], scale: usize) -> std::result::Result<String, String> {
    if bytes.len() > 16 {
        return Err("a decimal wider than 38 digits".into());
    }
    // The text is as wide as the scale: a schema's scale is not a width to trust.
    if scale > MAX_DECIMAL_SCALE {
        return Err(format!(
            "a decimal of scale {scale}, more than the {MAX_DECIMAL_SCALE} Floe reads"
        ));
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
fn json_schema_fields(text: &str) -> std::result::Result<Vec<Field>, String> {
    let root: Json = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let properties = object_properties(&root, &root, 0)
        .ok_or("a JSON Schema for rows must describe an object with properties")?;
    Ok(properties)
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

/// A Protobuf schema as the registry holds it — `.proto` text, or a base64
/// `FileDescriptorProto` as Confluent's Python serializer registers it — compiled, with
/// Google's well-known types importable.
pub(crate) fn protobuf_file(text: &str) -> std::result::Result<FileDescriptor, String> {
    protobuf_file_with(text, &[])
}

/// [`protobuf_file`] whose imports may be `dependencies` (schema references, by their import
/// paths).
pub(crate) fn protobuf_file_with(
    text: &str,
    dependencies: &[crate::references::Dependency],
) -> std::result::Result<FileDescriptor, String> {
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
                .map_err(|_| format!("not a Protobuf schema: {source_error}"))?;
            File::decode_file_descriptor_proto(bytes.as_slice())
                .map_err(|e| format!("not a Protobuf file descriptor: {e}"))
        }
    };
    let file = read("schema.proto", text)?;
    let name = file.name().to_string();
    let mut files = vec![file];
    for dependency in dependencies {
        files.push(
            read(&dependency.name, &dependency.schema)
                .map_err(|e| format!("referenced {}: {e}", dependency.name))?,
        );
    }
    let mut resolver = ChainFileResolver::new();
    resolver.add(Files(files));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler
        .open_file(&name)
        .map_err(|e| format!("the Protobuf schema does not compile: {e}"))?;
    let file = compiler
        .descriptor_pool()
        .get_file_by_name(&name)
        .ok_or("the Protobuf schema compiled to nothing")?;
    if file.messages().len() == 0 {
        return Err("the Protobuf schema defines no message".into());
    }
    Ok(file)
}

/// The most message indexes a value may carry (the depth of nested message types).
const MAX_MESSAGE_INDEXES: usize = 64;

/// The message a value's Confluent message indexes name (a zigzag varint count, then that
/// many zigzag varints: the path through nested messages; a lone zero means the first
/// message), and the rest of the value.
fn protobuf_message<'a>(
    file: &FileDescriptor,
    body: &'a [u8],
) -> std::result::Result<(MessageDescriptor, &'a [u8]), String> {
    fn varint(bytes: &mut &[u8]) -> std::result::Result<i64, String> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes.split_first().ok_or("the message indexes end early")?;
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                // Zigzag.
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err("a message index is too long".into())
    }
    let mut rest = body;
    let count = varint(&mut rest)?;
    // Each index is a byte at least, and messages nest only so deep.
    if count < 0 || count > MAX_MESSAGE_INDEXES as i64 {
        return Err(format!(
            "{count} message indexes: a value names its message with 0 to \
             {MAX_MESSAGE_INDEXES}"
        ));
    }
    let path: Vec<i64> = if count == 0 {
        vec![0]
    } else {
        (0..count)
            .map(|_| varint(&mut rest))
            .collect::<std::result::Result<_, _>>()?
    };
    let missing = || format!("message indexes {path:?} name no message of the schema");
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
fn protobuf_fields(message: &MessageDescriptor, depth: usize) -> Vec<Field> {
    message
        .fields()
        .filter_map(|field| {
            Some(Field::new(
                field.name(),
                protobuf_type(&field, depth)?,
                true,
            ))
        })
        .collect()
}

fn protobuf_type(field: &prost_reflect::FieldDescriptor, depth: usize) -> Option<DataType> {
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
                let fields = protobuf_fields(&message, depth + 1);
                if fields.is_empty() {
                    return None;
                }
                DataType::Struct(Fields::from(fields))
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
                        protobuf_type(&entry.map_entry_value_field(), depth + 1)?,
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
fn protobuf_json(message: &DynamicMessage) -> std::result::Result<Json, String> {
    let mut object = Map::new();
    for field in message.descriptor().fields() {
        let value = if field.supports_presence() && !message.has_field(&field) {
            Json::Null
        } else {
            protobuf_value(&message.get_field(&field), &field.kind())?
        };
        object.insert(field.name().to_string(), value);
    }
    Ok(Json::Object(object))
}

fn protobuf_value(
    value: &prost_reflect::Value,
    kind: &prost_reflect::Kind,
) -> std::result::Result<Json, String> {
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
                .ok_or_else(|| format!("timestamp {seconds} s {nanos} ns is out of range"))?;
            Json::from(micros)
        }
        Value::Message(m) => protobuf_json(m)?,
        Value::List(items) => Json::Array(
            items
                .iter()
                .map(|i| protobuf_value(i, kind))
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
                object.insert(key, protobuf_value(item, &value_kind)?);
            }
            Json::Object(object)
        }
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
                .contains("scale 1099511627776")
        );
        assert!(decimal_text(&[0x05], usize::MAX).is_err());
        assert_eq!(decimal_text(&[0x05], 76).unwrap().len(), 78);
    }

    #[test]
    fn timestamps_out_of_range_are_refused_not_wrapped() {
        let schema = AvroSchema::TimestampMillis;
        let names = HashMap::new();
        let refused = avro_json(&AvroValue::TimestampMillis(i64::MAX), &schema, &names);
        assert!(refused.unwrap_err().contains("out of range"));
        assert_eq!(
            avro_json(&AvroValue::TimestampMillis(-5), &schema, &names).unwrap(),
            Json::from(-5000)
        );
        let file = protobuf_file(
            "syntax = \"proto3\"; import \"google/protobuf/timestamp.proto\";\n\
             message M { google.protobuf.Timestamp at = 1; }",
        )
        .unwrap();
        let descriptor = file.messages().next().unwrap();
        let mut message = DynamicMessage::new(descriptor.clone());
        let timestamp = descriptor.get_field_by_name("at").unwrap();
        let prost_reflect::Kind::Message(kind) = timestamp.kind() else {
            panic!("a message field");
        };
        let mut at = DynamicMessage::new(kind);
        at.set_field_by_name("seconds", prost_reflect::Value::I64(i64::MAX));
        message.set_field(&timestamp, prost_reflect::Value::Message(at.clone()));
        assert!(
            protobuf_json(&message)
                .unwrap_err()
                .contains("out of range")
        );
        at.set_field_by_name("seconds", prost_reflect::Value::I64(2));
        message.set_field(&timestamp, prost_reflect::Value::Message(at));
        assert_eq!(
            protobuf_json(&message).unwrap()["at"],
            Json::from(2_000_000)
        );
    }

    #[test]
    fn forged_message_indexes_are_refused_not_a_panic() {
        let file = protobuf_file("syntax = \"proto3\"; message M { int64 a = 1; }").unwrap();
        // Zigzag 1 is -1: a negative count of indexes left the path empty, and `path[0]`
        // panicked on every retry of the record.
        assert!(
            protobuf_message(&file, &[1])
                .unwrap_err()
                .contains("-1 message indexes")
        );
        assert!(
            protobuf_message(&file, &[0xfe, 0x01])
                .unwrap_err()
                .contains("127 message")
        );
        let (message, rest) = protobuf_message(&file, &[0, 8, 1]).unwrap();
        assert_eq!((message.name(), rest), ("M", &[8u8, 1][..]));
        assert!(protobuf_message(&file, &[2, 2]).is_err());
    }

    #[test]
    fn values_outside_the_wire_format_are_named() {
        assert!(
            wire_format(b"{\"a\":1}")
                .unwrap_err()
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
        assert!(object_error(b"[1]").unwrap().contains("an array"));
        assert!(object_error(b"12").unwrap().contains("a number"));
        assert!(object_error(b"{\"a\":").unwrap().contains("not JSON"));
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
