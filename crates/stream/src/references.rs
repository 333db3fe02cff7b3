//! Confluent schema references: a schema that names types defined in other subjects' schemas
//! (Avro named types, Protobuf imports) lists them as `{"name", "subject", "version"}`; the
//! schema is read together with every schema it references, directly or through others.
//!
//! [`resolve`] gathers those schemas from a [`ReferenceSource`] (Floe's registry store, or an
//! external registry over HTTP), each once, those referenced before those that reference
//! them, within bounds a registered schema cannot exceed by accident: [`MOST_SCHEMAS`] in all
//! and [`MOST_DEPTH`] levels; a cycle is refused by name. [`avro`] and [`protobuf`] then parse a
//! schema with them. What cannot be read is a [`Refusal`]; a source that cannot be asked is
//! its own error, kept apart (it stops a pipeline, where a refusal makes a record a dead
//! letter).

use std::collections::HashSet;

use apache_avro::Schema as AvroSchema;
use async_trait::async_trait;
use serde::Deserialize;

use crate::Refusal;

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
    /// Version `version` of `subject`; `Ok(None)` when there is no such version, `Err` when
    /// the source cannot be asked.
    async fn referenced(&self, subject: &str, version: i64) -> crate::Result<Option<Referenced>>;
}

/// The references a registry's JSON array text lists (`[]`, empty or absent: none).
pub fn parse(references: &str) -> Result<Vec<Reference>, Refusal> {
    let text = references.trim();
    if text.is_empty() || text == "null" {
        return Ok(Vec::new());
    }
    serde_json::from_str(text).map_err(|e| Refusal::malformed(format!("references: {e}")))
}

/// Every schema `references` (JSON array text) reaches, each once, referenced ones first;
/// `Ok(Err)` when they cannot be read (a cycle, a reference the source does not hold), `Err`
/// when the source cannot be asked.
pub async fn resolve(
    source: &dyn ReferenceSource,
    references: &str,
) -> crate::Result<Result<Vec<Dependency>, Refusal>> {
    let references = match parse(references) {
        Ok(references) => references,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let mut found = Vec::new();
    let mut done = HashSet::new();
    let mut path = Vec::new();
    let visited = visit(source, &references, &mut found, &mut done, &mut path).await?;
    Ok(visited.map(|()| found))
}

/// Depth first: a reference's own references before it; `path` holds the chain being
/// resolved, for cycles and depth.
async fn visit(
    source: &dyn ReferenceSource,
    references: &[Reference],
    found: &mut Vec<Dependency>,
    done: &mut HashSet<(String, i64)>,
    path: &mut Vec<(String, i64)>,
) -> crate::Result<Result<(), Refusal>> {
    for reference in references {
        let key = (reference.subject.clone(), reference.version);
        if done.contains(&key) {
            continue;
        }
        if path.contains(&key) {
            return Ok(Err(Refusal::malformed(format!(
                "the references form a cycle through {} version {}",
                reference.subject, reference.version
            ))));
        }
        if path.len() >= MOST_DEPTH {
            return Ok(Err(Refusal::unsupported(format!(
                "references nest deeper than {MOST_DEPTH} levels"
            ))));
        }
        if found.len() >= MOST_SCHEMAS {
            return Ok(Err(Refusal::unsupported(format!(
                "more than {MOST_SCHEMAS} referenced schemas"
            ))));
        }
        let Some(referenced) = source
            .referenced(&reference.subject, reference.version)
            .await?
        else {
            return Ok(Err(Refusal::unsupported(format!(
                "the reference {:?} names {} version {}, which the registry does not hold",
                reference.name, reference.subject, reference.version
            ))));
        };
        path.push(key.clone());
        let nested = match parse(&referenced.references) {
            Ok(nested) => nested,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if let Err(refusal) = Box::pin(visit(source, &nested, found, done, path)).await? {
            return Ok(Err(refusal));
        }
        path.pop();
        done.insert(key);
        found.push(Dependency {
            name: reference.name.clone(),
            schema: referenced.schema,
        });
    }
    Ok(Ok(()))
}

/// An Avro schema whose named types may be defined in `dependencies`.
pub fn avro(text: &str, dependencies: &[Dependency]) -> Result<AvroSchema, Refusal> {
    if dependencies.is_empty() {
        return AvroSchema::parse_str(text)
            .map_err(|e| Refusal::malformed(format!("not an Avro schema: {e}")));
    }
    AvroSchema::parse_str_with_list(text, dependencies.iter().map(|d| d.schema.as_str()))
        .map(|(schema, _)| schema)
        .map_err(|e| Refusal::malformed(format!("not an Avro schema with its references: {e}")))
}

/// The named types `dependencies` define (what a schema parsed with them may refer to).
pub fn avro_dependencies(dependencies: &[Dependency]) -> Result<Vec<AvroSchema>, Refusal> {
    if dependencies.is_empty() {
        return Ok(Vec::new());
    }
    AvroSchema::parse_list(dependencies.iter().map(|d| d.schema.as_str()))
        .map_err(|e| Refusal::malformed(format!("a referenced Avro schema: {e}")))
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
        ) -> crate::Result<Option<Referenced>> {
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
        .unwrap()
        .unwrap();
        let names: Vec<&str> = found.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["shop.Money", "shop.Line"]);
        let schema = avro(order, &found).unwrap();
        assert!(matches!(schema, AvroSchema::Record(_)));
        assert!(avro(order, &[]).is_err());

        let missing = block_on(resolve(&store, &refs(&[("x", "nope", 3)])))
            .unwrap()
            .unwrap_err()
            .to_string();
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
        let cycle = block_on(resolve(&looped, &refs(&[("a", "a", 1)])))
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(cycle.contains("cycle"), "{cycle}");
    }

    /// A registry that cannot be asked.
    struct Down;

    #[async_trait]
    impl ReferenceSource for Down {
        async fn referenced(&self, _: &str, _: i64) -> crate::Result<Option<Referenced>> {
            Err(crate::StreamError::Invalid("registry down".into()))
        }
    }

    #[test]
    fn a_source_that_cannot_be_asked_is_not_a_refusal() {
        assert!(block_on(resolve(&Down, &refs(&[("a", "a", 1)]))).is_err());
        assert_eq!(block_on(resolve(&Down, "[]")).unwrap(), Ok(Vec::new()));
        let refused = block_on(resolve(&Down, "{")).unwrap().unwrap_err();
        assert_eq!(refused.kind(), crate::refusal::Kind::Malformed);
    }
}
