//! `SchemaRegistryStore` over SQL. Ids and versions are the next free numbers, taken inside
//! the write transaction; a race on PostgreSQL (two nodes taking the same number) loses to
//! the primary key and is tried again.

use async_trait::async_trait;
use floe_catalog::Result;
use floe_catalog::registry::{SchemaRegistryStore, SchemaType, StoredSchema, SubjectVersion};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::error::{is_unique_violation, query_error};
use crate::{SqlStore, StoreError};

/// A stable 64-bit FNV-1a hash of a schema's identity, to find it by index; equal
/// fingerprints are confirmed by comparing the text.
fn fingerprint(schema_type: SchemaType, canonical: &str, references: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in schema_type
        .as_str()
        .bytes()
        .chain([0])
        .chain(canonical.bytes())
        .chain([0])
        .chain(references.bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

fn stored(row: &AnyRow) -> Result<StoredSchema> {
    let kind: String = row.get("schema_type");
    Ok(StoredSchema {
        id: row.get("id"),
        schema_type: SchemaType::parse(&kind).ok_or_else(|| StoreError::Corrupt {
            what: "schema type",
            detail: kind.clone(),
        })?,
        schema: row.get("schema_text"),
        canonical: row.get("canonical"),
        references: row.get("refs"),
    })
}

const ATTEMPTS: usize = 5;

#[async_trait]
impl SchemaRegistryStore for SqlStore {
    async fn schema_id(
        &self,
        schema_type: SchemaType,
        canonical: &str,
        schema: &str,
        references: &str,
    ) -> Result<i64> {
        let print = fingerprint(schema_type, canonical, references);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut tx = self.write().await.map_err(query_error)?;
            let found = sqlx::query(
                "SELECT id, canonical, refs FROM registry_schemas \
                 WHERE fingerprint = $1 AND schema_type = $2 ORDER BY id",
            )
            .bind(&print)
            .bind(schema_type.as_str())
            .fetch_all(&mut *tx)
            .await
            .map_err(query_error)?;
            if let Some(row) = found.iter().find(|row| {
                row.get::<String, _>("canonical") == canonical
                    && row.get::<String, _>("refs") == references
            }) {
                return Ok(row.get("id"));
            }
            let id: i64 =
                sqlx::query("SELECT COALESCE(MAX(id), 0) + 1 AS id FROM registry_schemas")
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(query_error)?
                    .get("id");
            let inserted = sqlx::query(
                "INSERT INTO registry_schemas \
                 (id, schema_type, fingerprint, canonical, schema_text, refs) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(id)
            .bind(schema_type.as_str())
            .bind(&print)
            .bind(canonical)
            .bind(schema)
            .bind(references)
            .execute(&mut *tx)
            .await;
            match inserted {
                Ok(_) => {
                    tx.commit().await.map_err(query_error)?;
                    return Ok(id);
                }
                Err(e) if attempt < ATTEMPTS && is_unique_violation(&e) => continue,
                Err(e) => return Err(query_error(e)),
            }
        }
    }

    async fn schema_by_id(&self, id: i64) -> Result<Option<StoredSchema>> {
        sqlx::query("SELECT id, schema_type, schema_text, canonical, refs FROM registry_schemas WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?
            .as_ref()
            .map(stored)
            .transpose()
    }

    async fn add_version(&self, subject: &str, id: i64) -> Result<i64> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut tx = self.write().await.map_err(query_error)?;
            let version: i64 = sqlx::query(
                "SELECT COALESCE(MAX(version), 0) + 1 AS version FROM registry_versions \
                 WHERE subject = $1",
            )
            .bind(subject)
            .fetch_one(&mut *tx)
            .await
            .map_err(query_error)?
            .get("version");
            let inserted = sqlx::query(
                "INSERT INTO registry_versions (subject, version, schema_id, deleted) \
                 VALUES ($1, $2, $3, 0)",
            )
            .bind(subject)
            .bind(version)
            .bind(id)
            .execute(&mut *tx)
            .await;
            match inserted {
                Ok(_) => {
                    tx.commit().await.map_err(query_error)?;
                    return Ok(version);
                }
                Err(e) if attempt < ATTEMPTS && is_unique_violation(&e) => continue,
                Err(e) => return Err(query_error(e)),
            }
        }
    }

    async fn versions(&self, subject: &str, include_deleted: bool) -> Result<Vec<SubjectVersion>> {
        let rows = sqlx::query(
            "SELECT v.subject, v.version, v.deleted, s.id, s.schema_type, s.schema_text, s.canonical, s.refs \
             FROM registry_versions v JOIN registry_schemas s ON s.id = v.schema_id \
             WHERE v.subject = $1 AND (v.deleted = 0 OR $2 = 1) ORDER BY v.version",
        )
        .bind(subject)
        .bind(i64::from(include_deleted))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?;
        rows.iter()
            .map(|row| {
                Ok(SubjectVersion {
                    subject: row.get("subject"),
                    version: row.get("version"),
                    deleted: row.get::<i64, _>("deleted") != 0,
                    schema: stored(row)?,
                })
            })
            .collect()
    }

    async fn subjects(&self, include_deleted: bool) -> Result<Vec<String>> {
        Ok(sqlx::query(
            "SELECT DISTINCT subject FROM registry_versions WHERE deleted = 0 OR $1 = 1 \
             ORDER BY subject",
        )
        .bind(i64::from(include_deleted))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?
        .iter()
        .map(|row| row.get("subject"))
        .collect())
    }

    async fn delete_versions(
        &self,
        subject: &str,
        version: Option<i64>,
        permanent: bool,
    ) -> Result<Vec<i64>> {
        let mut tx = self.write().await.map_err(query_error)?;
        // A permanent delete takes soft-deleted versions; a soft delete takes live ones.
        let wanted = i64::from(permanent);
        let affected: Vec<i64> = sqlx::query(
            "SELECT version FROM registry_versions WHERE subject = $1 AND deleted = $2 \
             AND ($3 < 0 OR version = $3) ORDER BY version",
        )
        .bind(subject)
        .bind(wanted)
        .bind(version.unwrap_or(-1))
        .fetch_all(&mut *tx)
        .await
        .map_err(query_error)?
        .iter()
        .map(|row| row.get("version"))
        .collect();
        for version in &affected {
            let statement = if permanent {
                "DELETE FROM registry_versions WHERE subject = $1 AND version = $2"
            } else {
                "UPDATE registry_versions SET deleted = 1 WHERE subject = $1 AND version = $2"
            };
            sqlx::query(statement)
                .bind(subject)
                .bind(version)
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        if permanent
            && sqlx::query("SELECT 1 AS one FROM registry_versions WHERE subject = $1")
                .bind(subject)
                .fetch_optional(&mut *tx)
                .await
                .map_err(query_error)?
                .is_none()
        {
            sqlx::query("DELETE FROM registry_config WHERE subject = $1")
                .bind(subject)
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        tx.commit().await.map_err(query_error)?;
        Ok(affected)
    }

    async fn usages(&self, id: i64) -> Result<Vec<(String, i64)>> {
        Ok(sqlx::query(
            "SELECT subject, version FROM registry_versions WHERE schema_id = $1 AND deleted = 0 \
             ORDER BY subject, version",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error)?
        .iter()
        .map(|row| (row.get("subject"), row.get("version")))
        .collect())
    }

    async fn compatibility(&self, subject: Option<&str>) -> Result<Option<String>> {
        Ok(
            sqlx::query("SELECT compatibility FROM registry_config WHERE subject = $1")
                .bind(subject.unwrap_or(""))
                .fetch_optional(&self.pool)
                .await
                .map_err(query_error)?
                .map(|row| row.get("compatibility")),
        )
    }

    async fn set_compatibility(&self, subject: Option<&str>, level: Option<&str>) -> Result<()> {
        let mut tx = self.write().await.map_err(query_error)?;
        sqlx::query("DELETE FROM registry_config WHERE subject = $1")
            .bind(subject.unwrap_or(""))
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        if let Some(level) = level {
            sqlx::query("INSERT INTO registry_config (subject, compatibility) VALUES ($1, $2)")
                .bind(subject.unwrap_or(""))
                .bind(level)
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        tx.commit().await.map_err(query_error)?;
        Ok(())
    }
}
