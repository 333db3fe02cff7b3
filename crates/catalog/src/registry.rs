//! The schema registry as the store keeps it: schemas with global ids (one id per distinct
//! schema text and type, whatever subjects use it), subjects holding numbered versions of
//! them, and compatibility levels globally and per subject. The registry's rules
//! (compatibility checks, the Confluent REST shapes) live above this; implementations live
//! in `floe-store`.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::Result;

/// A schema's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum SchemaType {
    #[default]
    Avro,
    Json,
    Protobuf,
}

impl SchemaType {
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Json => "JSON",
            SchemaType::Protobuf => "PROTOBUF",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_uppercase().as_str() {
            "AVRO" => Some(SchemaType::Avro),
            "JSON" => Some(SchemaType::Json),
            "PROTOBUF" => Some(SchemaType::Protobuf),
            _ => None,
        }
    }
}

/// A schema as stored under its global id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSchema {
    pub id: i64,
    pub schema_type: SchemaType,
    /// The text as first registered.
    pub schema: String,
    /// The normalized form equal schemas share (what the id stands for).
    pub canonical: String,
    /// Confluent schema references (JSON array text; `[]` when none).
    pub references: String,
}

/// One version of a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectVersion {
    pub subject: String,
    pub version: i64,
    pub schema: StoredSchema,
    /// Soft-deleted: hidden unless deleted versions are asked for.
    pub deleted: bool,
}

#[async_trait]
pub trait SchemaRegistryStore: Send + Sync + std::fmt::Debug {
    /// The id of the schema with this type and `canonical` form, registering it when new
    /// (`schema` is the text kept and served).
    async fn schema_id(
        &self,
        schema_type: SchemaType,
        canonical: &str,
        schema: &str,
        references: &str,
    ) -> Result<i64>;
    async fn schema_by_id(&self, id: i64) -> Result<Option<StoredSchema>>;
    /// Adds schema `id` as the subject's next version; returns the version.
    async fn add_version(&self, subject: &str, id: i64) -> Result<i64>;
    /// A subject's versions in order (soft-deleted ones only when asked).
    async fn versions(&self, subject: &str, include_deleted: bool) -> Result<Vec<SubjectVersion>>;
    /// Subjects with at least one version (soft-deleted ones only when asked).
    async fn subjects(&self, include_deleted: bool) -> Result<Vec<String>>;
    /// Soft-deletes (or, `permanent`, removes) versions of a subject; `None` = all of them.
    /// Returns the versions affected.
    async fn delete_versions(
        &self,
        subject: &str,
        version: Option<i64>,
        permanent: bool,
    ) -> Result<Vec<i64>>;
    /// Subjects and versions that use schema `id`.
    async fn usages(&self, id: i64) -> Result<Vec<(String, i64)>>;
    /// The compatibility level of a subject (`None` = the global one, which is `None`
    /// until set).
    async fn compatibility(&self, subject: Option<&str>) -> Result<Option<String>>;
    async fn set_compatibility(&self, subject: Option<&str>, level: Option<&str>) -> Result<()>;
}
