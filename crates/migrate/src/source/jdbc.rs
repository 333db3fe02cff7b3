//! An Iceberg JDBC catalog: the `iceberg_tables` table that Java's `JdbcCatalog` and
//! PyIceberg's `SqlCatalog` keep (`catalog_name`, `table_namespace`, `table_name`,
//! `metadata_location`, and in Java's newer schema `iceberg_type`), on SQLite or PostgreSQL.
//! Read only; a cut-over leaves it as it is.

use anyhow::{Context, bail};
use async_trait::async_trait;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{AnyPool, Row};

use super::{Source, SourceTable, split};
use crate::plan::SourceConfig;

pub struct JdbcSource {
    pool: AnyPool,
    catalog: String,
}

/// sqlx's spelling of a SQLAlchemy or JDBC database URL.
fn database_url(uri: &str) -> String {
    let uri = uri.strip_prefix("jdbc:").unwrap_or(uri);
    if let Some(rest) = uri.strip_prefix("postgresql+")
        && let Some((_, rest)) = rest.split_once("://")
    {
        return format!("postgres://{rest}");
    }
    if let Some(rest) = uri.strip_prefix("postgresql://") {
        return format!("postgres://{rest}");
    }
    // SQLAlchemy writes an absolute SQLite path as sqlite:////abs/path.
    if let Some(rest) = uri.strip_prefix("sqlite:///") {
        return format!("sqlite:/{}?mode=ro", rest.trim_start_matches('/'));
    }
    if uri.starts_with("sqlite:") && !uri.contains('?') {
        return format!("{uri}?mode=ro");
    }
    uri.to_string()
}

impl JdbcSource {
    pub async fn connect(config: &SourceConfig) -> anyhow::Result<Self> {
        install_default_drivers();
        let url = database_url(&config.uri);
        let pool = AnyPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await
            .with_context(|| "cannot open the JDBC catalog's database (source uri)")?;
        Ok(Self {
            pool,
            catalog: config.catalog.clone().unwrap_or_else(|| "default".into()),
        })
    }

    async fn rows(&self) -> anyhow::Result<Vec<(String, String, String)>> {
        // Java's newer schema also keeps views in the table; they are not tables.
        let typed = sqlx::query(
            "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables \
             WHERE catalog_name = $1 AND (iceberg_type IS NULL OR iceberg_type = 'TABLE') \
             ORDER BY table_namespace, table_name",
        )
        .bind(&self.catalog)
        .fetch_all(&self.pool)
        .await;
        let rows = match typed {
            Ok(rows) => rows,
            Err(_) => sqlx::query(
                "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables \
                 WHERE catalog_name = $1 ORDER BY table_namespace, table_name",
            )
            .bind(&self.catalog)
            .fetch_all(&self.pool)
            .await
            .context("the source database has no readable iceberg_tables table")?,
        };
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<String, _>(0)?,
                    row.try_get::<String, _>(1)?,
                    row.try_get::<Option<String>, _>(2)?.unwrap_or_default(),
                ))
            })
            .collect()
    }
}

#[async_trait]
impl Source for JdbcSource {
    async fn list(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .rows()
            .await?
            .into_iter()
            .map(|(ns, name, _)| format!("{ns}.{name}"))
            .collect())
    }

    async fn describe(&self, table: &str) -> anyhow::Result<SourceTable> {
        let (ns, name) = split(table)?;
        let found = sqlx::query(
            "SELECT metadata_location FROM iceberg_tables \
             WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3",
        )
        .bind(&self.catalog)
        .bind(ns)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        match found {
            Some(row) => match row.try_get::<Option<String>, _>(0)? {
                Some(location) => Ok(SourceTable::Iceberg {
                    metadata_location: location,
                }),
                None => bail!("{table} has no metadata location in the source"),
            },
            None => bail!("{table} is not in the source catalog {}", self.catalog),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::database_url;

    #[test]
    fn sqlalchemy_urls_become_sqlx_urls() {
        assert_eq!(
            database_url("sqlite:////tmp/c.db"),
            "sqlite:/tmp/c.db?mode=ro"
        );
        assert_eq!(
            database_url("postgresql+psycopg2://u:p@h:5432/db"),
            "postgres://u:p@h:5432/db"
        );
        assert_eq!(database_url("jdbc:postgresql://h/db"), "postgres://h/db");
    }
}
