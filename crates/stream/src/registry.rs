//! Schema registries: where a pipeline looks schema ids up ([`SchemaSource`]: Floe's own
//! registry in process, or an external Confluent-compatible one over HTTP), and the rules
//! of Floe's registry ([`Registry`]): one global id per distinct schema, subjects with
//! numbered versions, and compatibility levels (BACKWARD by default) checked on register.

use std::sync::Arc;

use async_trait::async_trait;
use floe_catalog::CatalogError;
pub use floe_catalog::registry::SchemaType;
use floe_catalog::registry::{SchemaRegistryStore, StoredSchema, SubjectVersion};

use crate::{Result, StreamError};

/// A schema as a registry serves it.
#[derive(Debug, Clone)]
pub struct RegisteredSchema {
    pub schema_type: SchemaType,
    pub schema: String,
    /// The schemas it references ([`crate::references`]; JSON array text, `[]` for none).
    pub references: String,
}

/// Where schema ids are looked up.
#[async_trait]
pub trait SchemaSource: Send + Sync {
    /// Schema `id`; `None` when the registry does not know it.
    async fn schema_by_id(&self, id: u32) -> Result<Option<RegisteredSchema>>;
    /// Version `version` of `subject` (what a schema reference names); `None` when the
    /// registry does not hold it.
    async fn schema_by_version(
        &self,
        subject: &str,
        version: i64,
    ) -> Result<Option<RegisteredSchema>>;
}

/// A schema source as schema references are resolved from it ([`crate::references`]): a
/// registry that cannot be asked is its error, kept apart from a reference it does not hold
/// (the first stops a pipeline, the second makes a record a dead letter).
pub(crate) struct References<'a> {
    source: &'a dyn SchemaSource,
}

impl<'a> References<'a> {
    pub fn new(source: &'a dyn SchemaSource) -> Self {
        Self { source }
    }
}

#[async_trait]
impl crate::references::ReferenceSource for References<'_> {
    async fn referenced(
        &self,
        subject: &str,
        version: i64,
    ) -> Result<Option<crate::references::Referenced>> {
        let found = self.source.schema_by_version(subject, version).await?;
        Ok(found.map(|r| crate::references::Referenced {
            schema: r.schema,
            references: r.references,
        }))
    }
}

/// A Confluent-compatible registry over HTTP (`GET {url}/schemas/ids/{id}`); credentials
/// in the URL (`https://user:secret@host`) are sent as basic authentication.
pub(crate) struct HttpRegistry {
    url: reqwest::Url,
    client: reqwest::Client,
}

impl HttpRegistry {
    pub fn new(url: &str) -> Result<Self> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| StreamError::Invalid(format!("schema-registry-url {url:?}: {e}")))?;
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| StreamError::Invalid(format!("schema registry client: {e}")))?;
        Ok(Self { url, client })
    }
}

impl HttpRegistry {
    /// The schema at `path` of the registry (`/schemas/ids/{id}`,
    /// `/subjects/{subject}/versions/{version}`).
    async fn get(&self, path: &str) -> Result<Option<RegisteredSchema>> {
        let mut url = self.url.clone();
        let user = url.username().to_string();
        let password = url.password().map(str::to_string);
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let base = url.as_str().trim_end_matches('/').to_string();
        let mut request = self
            .client
            .get(format!("{base}{path}"))
            .header("Accept", "application/vnd.schemaregistry.v1+json");
        if !user.is_empty() {
            request = request.basic_auth(user, password);
        }
        let unreachable = |e: &dyn std::fmt::Display| {
            crate::table_error("schema registry", format!("{base}: {e}"))
        };
        let response = request.send().await.map_err(|e| unreachable(&e))?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !response.status().is_success() {
            return Err(unreachable(&format!("answered {}", response.status())));
        }
        let body: serde_json::Value = response.json().await.map_err(|e| unreachable(&e))?;
        let schema = body["schema"]
            .as_str()
            .ok_or_else(|| unreachable(&"the answer has no schema"))?
            .to_string();
        let schema_type = match body["schemaType"].as_str() {
            None => SchemaType::Avro,
            Some(kind) => SchemaType::parse(kind)
                .ok_or_else(|| unreachable(&format!("unknown schema type {kind:?}")))?,
        };
        let references = match &body["references"] {
            serde_json::Value::Array(list) if !list.is_empty() => body["references"].to_string(),
            _ => "[]".to_string(),
        };
        Ok(Some(RegisteredSchema {
            schema_type,
            schema,
            references,
        }))
    }
}

#[async_trait]
impl SchemaSource for HttpRegistry {
    async fn schema_by_id(&self, id: u32) -> Result<Option<RegisteredSchema>> {
        self.get(&format!("/schemas/ids/{id}")).await
    }

    async fn schema_by_version(
        &self,
        subject: &str,
        version: i64,
    ) -> Result<Option<RegisteredSchema>> {
        let subject =
            percent_encoding::utf8_percent_encode(subject, percent_encoding::NON_ALPHANUMERIC);
        self.get(&format!("/subjects/{subject}/versions/{version}"))
            .await
    }
}

/// A Protobuf schema as the registry holds it (`.proto` text or a base64
/// `FileDescriptorProto`), compiled.
pub fn protobuf_descriptor(
    text: &str,
) -> std::result::Result<prost_reflect::FileDescriptor, crate::Refusal> {
    crate::format::protobuf::file(text)
}

/// A compatibility level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compatibility {
    None,
    Backward,
    BackwardTransitive,
    Forward,
    ForwardTransitive,
    Full,
    FullTransitive,
}

impl Compatibility {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.to_ascii_uppercase().as_str() {
            "NONE" => Compatibility::None,
            "BACKWARD" => Compatibility::Backward,
            "BACKWARD_TRANSITIVE" => Compatibility::BackwardTransitive,
            "FORWARD" => Compatibility::Forward,
            "FORWARD_TRANSITIVE" => Compatibility::ForwardTransitive,
            "FULL" => Compatibility::Full,
            "FULL_TRANSITIVE" => Compatibility::FullTransitive,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Compatibility::None => "NONE",
            Compatibility::Backward => "BACKWARD",
            Compatibility::BackwardTransitive => "BACKWARD_TRANSITIVE",
            Compatibility::Forward => "FORWARD",
            Compatibility::ForwardTransitive => "FORWARD_TRANSITIVE",
            Compatibility::Full => "FULL",
            Compatibility::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    fn transitive(self) -> bool {
        matches!(
            self,
            Compatibility::BackwardTransitive
                | Compatibility::ForwardTransitive
                | Compatibility::FullTransitive
        )
    }

    /// (new schema must read old data, old schema must read new data)
    fn directions(self) -> (bool, bool) {
        match self {
            Compatibility::None => (false, false),
            Compatibility::Backward | Compatibility::BackwardTransitive => (true, false),
            Compatibility::Forward | Compatibility::ForwardTransitive => (false, true),
            Compatibility::Full | Compatibility::FullTransitive => (true, true),
        }
    }
}

/// What the registry refuses, each with the Confluent error code clients expect.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// 404, 40401.
    #[error("Subject '{0}' not found.")]
    SubjectNotFound(String),
    /// 404, 40402.
    #[error("Version {0} not found.")]
    VersionNotFound(String),
    /// 404, 40403.
    #[error("Schema {0} not found.")]
    SchemaNotFound(String),
    /// 404, 40408.
    #[error("Subject '{0}' does not have subject-level compatibility configured")]
    NoSubjectConfig(String),
    /// 409, 409.
    #[error(
        "Schema being registered is incompatible with an earlier schema for subject \"{subject}\": {reason}"
    )]
    Incompatible { subject: String, reason: String },
    /// 422, 42201.
    #[error("Invalid schema: {0}")]
    InvalidSchema(String),
    /// 422, 42202.
    #[error(
        "The specified version '{0}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""
    )]
    InvalidVersion(String),
    /// 422, 42203.
    #[error(
        "Invalid compatibility level {0:?}: use NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL or FULL_TRANSITIVE"
    )]
    InvalidCompatibility(String),
    #[error(transparent)]
    Store(#[from] CatalogError),
}

impl RegistryError {
    /// The HTTP status and Confluent error code.
    pub fn codes(&self) -> (u16, u32) {
        match self {
            RegistryError::SubjectNotFound(_) => (404, 40401),
            RegistryError::VersionNotFound(_) => (404, 40402),
            RegistryError::SchemaNotFound(_) => (404, 40403),
            RegistryError::NoSubjectConfig(_) => (404, 40408),
            RegistryError::Incompatible { .. } => (409, 409),
            RegistryError::InvalidSchema(_) => (422, 42201),
            RegistryError::InvalidVersion(_) => (422, 42202),
            RegistryError::InvalidCompatibility(_) => (422, 42203),
            RegistryError::Store(_) => (500, 50001),
        }
    }
}

pub(crate) type RegistryResult<T> = std::result::Result<T, RegistryError>;

/// The default compatibility level when none is set.
pub(crate) const DEFAULT_COMPATIBILITY: Compatibility = Compatibility::Backward;

/// A schema read for comparison.
enum Checked {
    Avro(apache_avro::Schema),
    Json(serde_json::Value),
    Protobuf(prost_reflect::FileDescriptor),
}

/// Floe's registry: the rules over the store.
#[derive(Clone)]
pub struct Registry {
    store: Arc<dyn SchemaRegistryStore>,
}

impl Registry {
    pub fn new(store: Arc<dyn SchemaRegistryStore>) -> Self {
        Self { store }
    }

    pub fn store(&self) -> &Arc<dyn SchemaRegistryStore> {
        &self.store
    }

    /// Parses a schema, giving its canonical text (whitespace and the like normalized, so
    /// equal schemas get one id).
    fn check(
        schema_type: SchemaType,
        text: &str,
        dependencies: &[crate::references::Dependency],
    ) -> RegistryResult<(Checked, String)> {
        match schema_type {
            SchemaType::Avro => {
                let schema = crate::references::avro(text, dependencies)?;
                let canonical = serde_json::to_string(&schema)
                    .map_err(|e| RegistryError::InvalidSchema(e.to_string()))?;
                Ok((Checked::Avro(schema), canonical))
            }
            SchemaType::Json => {
                let schema: serde_json::Value = serde_json::from_str(text)
                    .map_err(|e| RegistryError::InvalidSchema(format!("not JSON: {e}")))?;
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(RegistryError::InvalidSchema(
                        "a JSON Schema is an object or a boolean".into(),
                    ));
                }
                let canonical = schema.to_string();
                Ok((Checked::Json(schema), canonical))
            }
            SchemaType::Protobuf => {
                let file = crate::format::protobuf::file_with(text, dependencies)?;
                let canonical = text.split_whitespace().collect::<Vec<_>>().join(" ");
                Ok((Checked::Protobuf(file), canonical))
            }
        }
    }

    /// The effective compatibility level of a subject.
    pub async fn level(&self, subject: Option<&str>) -> RegistryResult<Compatibility> {
        let own = match subject {
            Some(subject) => self.store.compatibility(Some(subject)).await?,
            None => None,
        };
        let level = match own {
            Some(level) => Some(level),
            None => self.store.compatibility(None).await?,
        };
        Ok(level
            .as_deref()
            .and_then(Compatibility::parse)
            .unwrap_or(DEFAULT_COMPATIBILITY))
    }

    /// The schemas `references` (JSON array text) reaches in this registry; a reference it
    /// does not hold, or a cycle, is an invalid schema.
    async fn dependencies(
        &self,
        references: &str,
    ) -> RegistryResult<Vec<crate::references::Dependency>> {
        match crate::references::resolve(&References::new(self), references).await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(refusal)) => Err(refusal.into()),
            Err(StreamError::Catalog(e)) => Err(RegistryError::Store(e)),
            Err(other) => Err(RegistryError::Store(CatalogError::Unavailable(
                other.to_string(),
            ))),
        }
    }

    /// Why `new` may not follow `existing` versions under `level`, if it may not.
    async fn incompatibility(
        &self,
        level: Compatibility,
        new: &Checked,
        existing: &[SubjectVersion],
    ) -> RegistryResult<Option<String>> {
        let (backward, forward) = level.directions();
        if !backward && !forward {
            return Ok(None);
        }
        let against: Vec<&SubjectVersion> = if level.transitive() {
            existing.iter().collect()
        } else {
            existing.last().into_iter().collect()
        };
        for old in against {
            let dependencies = self.dependencies(&old.schema.references).await?;
            let (old_checked, _) =
                Self::check(old.schema.schema_type, &old.schema.schema, &dependencies)?;
            let problem = match (new, &old_checked) {
                (Checked::Avro(new), Checked::Avro(previous)) => {
                    use apache_avro::schema_compatibility::SchemaCompatibility;
                    // Logical types ride on their physical ones, which decide what can be
                    // read (the Avro crate's checker also trips over decimals otherwise).
                    let (new, previous) = (&physical(new), &physical(previous));
                    let mut problem = None;
                    if backward && let Err(e) = SchemaCompatibility::can_read(previous, new) {
                        problem = Some(format!(
                            "the new schema cannot read data written with version {}: {e}",
                            old.version
                        ));
                    }
                    if problem.is_none()
                        && forward
                        && let Err(e) = SchemaCompatibility::can_read(new, previous)
                    {
                        problem = Some(format!(
                            "version {} cannot read data written with the new schema: {e}",
                            old.version
                        ));
                    }
                    problem
                }
                (Checked::Json(new), Checked::Json(previous)) => {
                    let mut problem = None;
                    if backward {
                        problem = json_reads(new, previous);
                    }
                    if problem.is_none() && forward {
                        problem = json_reads(previous, new);
                    }
                    problem
                }
                (Checked::Protobuf(new), Checked::Protobuf(previous)) => {
                    let mut problem = None;
                    if backward {
                        problem = protobuf_reads(new, previous);
                    }
                    if problem.is_none() && forward {
                        problem = protobuf_reads(previous, new);
                    }
                    problem
                }
                _ => Some(format!(
                    "version {} is {}, the new schema is not",
                    old.version,
                    old.schema.schema_type.as_str()
                )),
            };
            if let Some(reason) = problem {
                return Ok(Some(reason));
            }
        }
        Ok(None)
    }

    /// Registers `schema` under `subject`: the id of the version holding an equal schema,
    /// else (when compatible) a new version's. Returns (id, version).
    pub async fn register(
        &self,
        subject: &str,
        schema_type: SchemaType,
        schema: &str,
        references: &str,
    ) -> RegistryResult<(i64, i64)> {
        let dependencies = self.dependencies(references).await?;
        let (checked, canonical) = Self::check(schema_type, schema, &dependencies)?;
        let existing = self.store.versions(subject, false).await?;
        if let Some(same) = existing.iter().find(|v| {
            v.schema.schema_type == schema_type
                && v.schema.canonical == canonical
                && v.schema.references == references
        }) {
            return Ok((same.schema.id, same.version));
        }
        let level = self.level(Some(subject)).await?;
        if let Some(reason) = self.incompatibility(level, &checked, &existing).await? {
            return Err(RegistryError::Incompatible {
                subject: subject.to_string(),
                reason,
            });
        }
        let id = self
            .store
            .schema_id(schema_type, &canonical, schema, references)
            .await?;
        let version = self.store.add_version(subject, id).await?;
        Ok((id, version))
    }

    /// Whether `schema` could be registered after `version` (`None` = all versions the
    /// level looks at) of `subject`; the reasons when not.
    pub async fn compatible(
        &self,
        subject: &str,
        version: Option<&str>,
        schema_type: SchemaType,
        schema: &str,
        references: &str,
    ) -> RegistryResult<Option<String>> {
        let dependencies = self.dependencies(references).await?;
        let (checked, _) = Self::check(schema_type, schema, &dependencies)?;
        let existing = self.store.versions(subject, false).await?;
        let level = self.level(Some(subject)).await?;
        let against = match version {
            None => existing,
            Some(version) => vec![self.version(subject, version).await?],
        };
        self.incompatibility(level, &checked, &against).await
    }

    /// The version of a subject holding a schema equal to `schema`.
    pub async fn lookup(
        &self,
        subject: &str,
        schema_type: SchemaType,
        schema: &str,
        references: &str,
    ) -> RegistryResult<SubjectVersion> {
        let dependencies = self.dependencies(references).await?;
        let (_, canonical) = Self::check(schema_type, schema, &dependencies)?;
        let versions = self.store.versions(subject, false).await?;
        if versions.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        versions
            .into_iter()
            .find(|v| v.schema.schema_type == schema_type && v.schema.canonical == canonical)
            .ok_or_else(|| RegistryError::SchemaNotFound(format!("for subject '{subject}'")))
    }

    /// A version by number, `latest` or `-1`.
    pub async fn version(&self, subject: &str, version: &str) -> RegistryResult<SubjectVersion> {
        let versions = self.store.versions(subject, false).await?;
        if versions.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        if version == "latest" || version == "-1" {
            return Ok(versions.last().cloned().expect("not empty"));
        }
        let number: i64 = version
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| RegistryError::InvalidVersion(version.to_string()))?;
        versions
            .into_iter()
            .find(|v| v.version == number)
            .ok_or_else(|| RegistryError::VersionNotFound(version.to_string()))
    }

    pub async fn schema(&self, id: i64) -> RegistryResult<StoredSchema> {
        self.store
            .schema_by_id(id)
            .await?
            .ok_or_else(|| RegistryError::SchemaNotFound(id.to_string()))
    }
}

/// An Avro schema with its logical types dropped (decimals as bytes or fixed, timestamps
/// as longs, …).
fn physical(schema: &apache_avro::Schema) -> apache_avro::Schema {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(object) => {
                if object.remove("logicalType").is_some() {
                    object.remove("precision");
                    object.remove("scale");
                }
                object.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let Ok(mut json) = serde_json::to_value(schema) else {
        return schema.clone();
    };
    strip(&mut json);
    apache_avro::Schema::parse(&json).unwrap_or_else(|_| schema.clone())
}

/// Why a reader with JSON Schema `reader` cannot take every document valid under `writer`,
/// if it cannot (top-level properties): a property required now but not before, or a
/// property whose type changed other than integer to number.
fn json_reads(reader: &serde_json::Value, writer: &serde_json::Value) -> Option<String> {
    let required = |schema: &serde_json::Value| -> Vec<String> {
        schema["required"]
            .as_array()
            .map(|names| {
                names
                    .iter()
                    .filter_map(|n| n.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let writer_required = required(writer);
    for name in required(reader) {
        if !writer_required.contains(&name) {
            return Some(format!(
                "property {name:?} is required by the reader but not by the writer"
            ));
        }
    }
    let (Some(reader_properties), Some(writer_properties)) = (
        reader["properties"].as_object(),
        writer["properties"].as_object(),
    ) else {
        return None;
    };
    for (name, reading) in reader_properties {
        let Some(written) = writer_properties.get(name) else {
            continue;
        };
        let (read_type, written_type) = (&reading["type"], &written["type"]);
        let widened = read_type == "number" && written_type == "integer";
        if read_type != written_type && !widened && !read_type.is_null() {
            return Some(format!(
                "property {name:?} changed type from {written_type} to {read_type}"
            ));
        }
    }
    if writer["additionalProperties"] != serde_json::Value::Bool(false)
        && reader["additionalProperties"] == serde_json::Value::Bool(false)
    {
        return Some("the reader forbids additional properties the writer allows".into());
    }
    None
}

/// Why messages written with Protobuf schema `writer` cannot be read with `reader`, if
/// they cannot: the writer's first message (what values without indexes mean) is gone, or a
/// field number both know changed its wire type or its cardinality (varint types — int32,
/// int64, uint32, uint64, bool, enums — are interchangeable, as are sint32/sint64,
/// fixed32/sfixed32, fixed64/sfixed64 and string/bytes; messages must keep their name).
fn protobuf_reads(
    reader: &prost_reflect::FileDescriptor,
    writer: &prost_reflect::FileDescriptor,
) -> Option<String> {
    use prost_reflect::Kind;
    fn wire(kind: &Kind) -> String {
        match kind {
            Kind::Int32
            | Kind::Int64
            | Kind::Uint32
            | Kind::Uint64
            | Kind::Bool
            | Kind::Enum(_) => "varint".into(),
            Kind::Sint32 | Kind::Sint64 => "zigzag".into(),
            Kind::Fixed32 | Kind::Sfixed32 => "fixed32".into(),
            Kind::Fixed64 | Kind::Sfixed64 => "fixed64".into(),
            Kind::String | Kind::Bytes => "bytes".into(),
            Kind::Float => "float".into(),
            Kind::Double => "double".into(),
            Kind::Message(m) => format!("message {}", m.full_name()),
        }
    }
    let pool = reader.parent_pool();
    if let Some(first) = writer.messages().next()
        && pool.get_message_by_name(first.full_name()).is_none()
    {
        return Some(format!("message {} was removed", first.full_name()));
    }
    let mut pending: Vec<prost_reflect::MessageDescriptor> = writer.messages().collect();
    while let Some(written) = pending.pop() {
        pending.extend(written.child_messages());
        let Some(read) = pool.get_message_by_name(written.full_name()) else {
            continue;
        };
        for field in written.fields() {
            let Some(other) = read.get_field(field.number()) else {
                continue;
            };
            let shape = |f: &prost_reflect::FieldDescriptor| (f.is_list(), f.is_map());
            if wire(&field.kind()) != wire(&other.kind()) || shape(&field) != shape(&other) {
                return Some(format!(
                    "field {} of {} changed from {} to {}",
                    field.number(),
                    written.full_name(),
                    field.name(),
                    other.name()
                ));
            }
        }
    }
    None
}

/// Floe's registry as a pipeline's schema source.
#[async_trait]
impl SchemaSource for Registry {
    async fn schema_by_id(&self, id: u32) -> Result<Option<RegisteredSchema>> {
        Ok(self
            .store
            .schema_by_id(i64::from(id))
            .await?
            .map(registered))
    }

    async fn schema_by_version(
        &self,
        subject: &str,
        version: i64,
    ) -> Result<Option<RegisteredSchema>> {
        let versions = self.store.versions(subject, false).await?;
        Ok(versions
            .into_iter()
            .find(|v| v.version == version)
            .map(|v| registered(v.schema)))
    }
}

fn registered(stored: StoredSchema) -> RegisteredSchema {
    RegisteredSchema {
        schema_type: stored.schema_type,
        schema: stored.schema,
        references: stored.references,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_schema_changes_are_judged() {
        let old = serde_json::json!({"type": "object", "properties": {"id": {"type": "integer"}}});
        let added = serde_json::json!({"type": "object",
            "properties": {"id": {"type": "number"}, "name": {"type": "string"}}});
        let required = serde_json::json!({"type": "object", "required": ["name"],
            "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}});
        let retyped =
            serde_json::json!({"type": "object", "properties": {"id": {"type": "string"}}});
        assert_eq!(json_reads(&added, &old), None);
        assert!(json_reads(&required, &old).unwrap().contains("required"));
        assert!(json_reads(&retyped, &old).unwrap().contains("changed type"));
    }

    #[test]
    fn protobuf_changes_are_judged() {
        let file = |body: &str| {
            crate::format::protobuf::file(&format!("syntax = \"proto3\"; package p; {body}"))
                .unwrap()
        };
        let old = file("message M { int32 a = 1; string b = 2; }");
        let added = file("message M { int64 a = 1; string b = 2; repeated int32 c = 3; }");
        let retyped = file("message M { int32 a = 1; double b = 2; }");
        let repeated = file("message M { repeated int32 a = 1; string b = 2; }");
        let renamed = file("message N { int32 a = 1; }");
        assert_eq!(protobuf_reads(&added, &old), None);
        assert!(protobuf_reads(&retyped, &old).unwrap().contains("field 2"));
        assert!(protobuf_reads(&repeated, &old).unwrap().contains("field 1"));
        assert!(protobuf_reads(&renamed, &old).unwrap().contains("removed"));
    }

    #[test]
    fn levels_parse_and_print() {
        for text in ["NONE", "BACKWARD", "FORWARD_TRANSITIVE", "FULL"] {
            assert_eq!(Compatibility::parse(text).unwrap().as_str(), text);
        }
        assert!(Compatibility::parse("SIDEWAYS").is_none());
    }
}
