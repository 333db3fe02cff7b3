//! Where tables come from. Every source lists its tables as `database.table` and describes
//! each as an Iceberg table (a metadata file Floe registers) or a Hive table of Parquet files
//! (which Floe converts in place).

mod directory;
mod hive;
mod jdbc;
mod rest;

pub use hive::iceberg_schema as hive_schema;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plan::{SourceConfig, SourceKind};

/// A table as the source holds it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SourceTable {
    Iceberg {
        #[serde(rename = "metadata-location")]
        metadata_location: String,
    },
    Hive(HiveTable),
    /// Not migrated (a view, another format); why.
    Unsupported {
        reason: String,
    },
}

/// A Hive table of Parquet files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct HiveTable {
    pub location: String,
    /// `(name, Hive type)`, the partition columns not among them.
    pub columns: Vec<(String, String)>,
    pub partition_keys: Vec<(String, String)>,
    pub partitions: Vec<HivePartition>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct HivePartition {
    pub values: Vec<String>,
    pub location: String,
}

/// What a cut-over changed in the source, to be put back by a rollback.
pub type Saved = Value;

#[async_trait]
pub trait Source: Send + Sync {
    /// Every table, as `database.table` (a nested namespace joined by dots).
    async fn list(&self) -> anyhow::Result<Vec<String>>;
    async fn describe(&self, table: &str) -> anyhow::Result<SourceTable>;
    /// Points the source's readers at Floe (`floe_table` is `warehouse.namespace.table`,
    /// `metadata_location` Floe's current metadata file); returns what it changed.
    async fn cut_over(
        &self,
        table: &str,
        _floe_table: &str,
        _metadata_location: &str,
    ) -> anyhow::Result<Option<Saved>> {
        let _ = table;
        Ok(None)
    }
    /// Puts back what [`Source::cut_over`] changed.
    async fn restore(&self, table: &str, _saved: &Saved) -> anyhow::Result<()> {
        let _ = table;
        Ok(())
    }
}

/// Opens the source a plan names.
pub async fn open(config: &SourceConfig) -> anyhow::Result<Box<dyn Source>> {
    Ok(match config.kind {
        SourceKind::Hive => Box::new(hive::HiveSource::connect(&config.uri).await?),
        SourceKind::Jdbc => Box::new(jdbc::JdbcSource::connect(config).await?),
        SourceKind::Rest => Box::new(rest::RestSource::connect(config).await?),
        SourceKind::Directory => Box::new(directory::DirectorySource::open(&config.uri)?),
    })
}

/// Splits `database.table` at its last dot.
pub fn split(table: &str) -> anyhow::Result<(&str, &str)> {
    table
        .rsplit_once('.')
        .ok_or_else(|| anyhow::anyhow!("{table:?} is not database.table"))
}
