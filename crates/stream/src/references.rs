//! Confluent schema references: a schema that names types defined in other subjects' schemas
//! (Avro named types, Protobuf imports) lists them as `{"name", "subject", "version"}`; the
//! schema is read together with every schema it references, directly or through others.
//!
//! [`resolve`] gathers those schemas from a [`ReferenceSource`] (Floe's registry store, or an
//! external registry over HTTP), each once, those referenced before those that reference
//! them, within bounds a registered schema cannot exceed by accident: [`MOST_SCHEMAS`] in all
//! and [`MOST_DEPTH`] levels; a cycle is refused by name. [`avro`] and [`protobuf`] then parse a
//! schema with them.

use std::collections::HashSet;

use apache_avro::Schema as AvroSchema;
use async_trait::async_trait;
use prost_reflect::FileDescriptor;
use serde::Deserialize;

/// The most schemas one schema may reference, all levels together.
pub const MOST_SCHEMAS: usize = 256;
/// The most levels of references.
pub const MOST_DEPTH: usize = 16;

/// One reference as a registry stores and serves it.
#[derive(Debug, Clone, Deserialize)]
pub struct Reference {
    /// The Avro type's full name or the Protobuf import path.
    pub name: String,
    pub subject: String,
    pub version: i64,
}

/// A referenced schema's text and its own references (JSON array text).
#[derive(Debug, Clone)]
pub struct Referenced {
    pub schema: String,
    pub references: String,
}

/// A referenced schema, by the name its referrer gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Dependency {
    pub name: String,
    pub schema: String,
}

/// Where referenced schemas are found.
#[async_trait]
pub trait ReferenceSource: Send + Sync {
    /// Version `version` of `subject`; `Ok(None)` when there is no such version.
    async fn referenced(&self, subject: &str, version: i64) -> Result<Option<Referenced>, String>;
}

/// The references a registry's JSON array text lists (`[]`, empty or absent: none).
pub fn parse(references: &str) -> Result<Vec<Reference>, String> {
    let text = references.trim();
    if text.is_empty() || text == "null" {
        return Ok(Vec::new());
    }
    serde_json::from_str(text).map_err(|e| format!("references: {e}"))
}

/// Every schema `references` (JSON array text) reaches, each once, referenced ones first.
pub async fn resolve(
    source: &dyn ReferenceSource,
    references: &str,
) -> Result<Vec<Dependency>, String> {
    let mut found = Vec::new();
    let mut done = HashSet::new();
    let mut path = Vec::new();
    visit(
        source,
        &parse(references)?,
        &mut found,
        &mut done,
        &mut path,
    )
    .await?;
    Ok(found)
}

/// Depth first: a reference's own references before it; `path` holds the chain being
/// resolved, for cycles and depth.
async fn visit(
    source: &dyn ReferenceSource,
    references: &[Reference],
    found: &mut Vec<Dependency>,
    done: &mut HashSet<(String, i64)>,
    path: &mut Vec<(String, i64)>,
) -> Result<(), String> {
    for reference in references {
        let key = (reference.subject.clone(), reference.version);
        if done.contains(&key) {
            continue;
        }
        if path.contains(&key) {
            return Err(format!(
                "the references form a cycle through {} version {}",
                reference.subject, reference.version
            ));
        }
        if path.len() >= MOST_DEPTH {
            return Err(format!("references nest deeper than {MOST_DEPTH} levels"));
        }
        if found.len() >= MOST_SCHEMAS {
            return Err(format!("more than {MOST_SCHEMAS} referenced schemas"));
        }
        let referenced = source
            .referenced(&reference.subject, reference.version)
            .await?
            .ok_or_else(|| {
                format!(
                    "the reference {:?} names {} version {}, which the registry does not hold",
                    reference.name, reference.subject, reference.version
                )
            })?;
        path.push(key.clone());
        let nested = parse(&referenced.references)?;
        Box::pin(visit(source, &nested, found, done, path)).await?;
        path.pop();
        done.insert(key);
        found.push(Dependency {
            name: reference.name.clone(),
            schema: referenced.schema,
        });
    }
    Ok(())
}

/// An Avro schema whose named types may be defined in `dependencies`.
pub fn avro(text: &str, dependencies: &[Dependency]) -> Result<AvroSchema, String> {
    if dependencies.is_empty() {
        return AvroSchema::parse_str(text).map_err(|e| format!("not an Avro schema: {e}"));
    }
    AvroSchema::parse_str_with_list(text, dependencies.iter().map(|d| d.schema.as_str()))
        .map(|(schema, _)| schema)
        .map_err(|e| format!("not an Avro schema with its references: {e}"))
}

/// The named types `dependencies` define (what a schema parsed with them may refer to).
pub fn avro_dependencies(dependencies: &[Dependency]) -> Result<Vec<AvroSchema>, String> {
    if dependencies.is_empty() {
        return Ok(Vec::new());
    }
    AvroSchema::parse_list(dependencies.iter().map(|d| d.schema.as_str()))
        .map_err(|e| format!("a referenced Avro schema: {e}"))
}

/// A Protobuf schema whose imports may be `dependencies` (by their reference names, the
/// import paths).
pub fn protobuf(text: &str, dependencies: &[Dependency]) -> Result<FileDescriptor, String> {
    crate::format::protobuf_file_with(text, dependencies)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct Store(HashMap<(String, i64), Referenced>);

    #[async_trait]
    impl ReferenceSource for Store {
        async fn referenced(
            &self,
            subject: &str,
            version: i64,
        ) -> Result<Option<Referenced>, String> {
            Ok(self.0.get(&(subject.to_string(), version)).cloned())
        }
    }

    fn refs(list: &[(&str, &str, i64)]) -> String {
        serde_json::to_string(
            &list
                .iter()
                .map(|(n, s, v)| serde_json::json!({"name": n, "subject": s, "version": v}))
                .collect::<Vec<_>>(),
        )
        .unwrap()
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn references_resolve_depth_first_and_cycles_are_refused() {
        let money = r#"{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"long"}]}"#;
        let line = r#"{"type":"record","name":"Line","namespace":"shop","fields":[{"name":"price","type":"shop.Money"}]}"#;
        let order = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"lines","type":{"type":"array","items":"shop.Line"}},{"name":"total","type":"shop.Money"}]}"#;
        let store = Store(HashMap::from([
            (
                ("money".to_string(), 1),
                Referenced {
                    schema: money.into(),
                    references: "[]".into(),
                },
            ),
            (
                ("line".to_string(), 1),
                Referenced {
                    schema: line.into(),
                    references: refs(&[("shop.Money", "money", 1)]),
                },
            ),
        ]));
        let found = block_on(resolve(
            &store,
            &refs(&[("shop.Line", "line", 1), ("shop.Money", "money", 1)]),
        ))
        .unwrap();
        let names: Vec<&str> = found.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["shop.Money", "shop.Line"]);
        let schema = avro(order, &found).unwrap();
        assert!(matches!(schema, AvroSchema::Record(_)));
        assert!(avro(order, &[]).is_err());

        let missing = block_on(resolve(&store, &refs(&[("x", "nope", 3)]))).unwrap_err();
        assert!(missing.contains("nope version 3"), "{missing}");
        let looped = Store(HashMap::from([
            (
                ("a".to_string(), 1),
                Referenced {
                    schema: money.into(),
                    references: refs(&[("b", "b", 1)]),
                },
            ),
            (
                ("b".to_string(), 1),
                Referenced {
                    schema: line.into(),
                    references: refs(&[("a", "a", 1)]),
                },
            ),
        ]));
        let cycle = block_on(resolve(&looped, &refs(&[("a", "a", 1)]))).unwrap_err();
        assert!(cycle.contains("cycle"), "{cycle}");
    }
}
