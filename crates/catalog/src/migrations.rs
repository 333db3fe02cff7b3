//! What a migration onto Floe has done, table by table, kept in the catalog database so a
//! `floe migrate` killed at any point goes on where it stopped.
//!
//! A record is one source table of one migration (the plan's name): its wave, and a JSON
//! state that `floe migrate` owns (the step it reached, what the source and Floe held then,
//! what a cut-over changed in the source). The server stores and lists records; every write
//! goes through the management API and so lands in the audit trail as one step.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::Result;

/// Longest migration or source-table name kept.
pub const MAX_NAME_BYTES: usize = 512;
/// Largest state document kept for one table.
pub const MAX_STATE_BYTES: usize = 256 * 1024;

/// One source table of one migration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MigrationTable {
    pub migration: String,
    /// The source table, as the plan names it (`database.table`).
    pub source: String,
    pub wave: i64,
    pub state: serde_json::Value,
    #[serde(default)]
    pub updated_at_ms: i64,
}

/// A migration and how many tables it has records for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MigrationSummary {
    pub migration: String,
    pub tables: i64,
    pub updated_at_ms: i64,
}

/// Where migration records are kept. Implementations live in `floe-store`.
#[async_trait]
pub trait MigrationStore: Send + Sync + std::fmt::Debug {
    /// Creates or replaces the record of `record.source` in `record.migration`.
    async fn put_migration_table(&self, record: &MigrationTable) -> Result<()>;
    /// The records of `migration`, by wave then source.
    async fn migration_tables(&self, migration: &str) -> Result<Vec<MigrationTable>>;
    /// Every migration with records.
    async fn migrations(&self) -> Result<Vec<MigrationSummary>>;
    /// Removes every record of `migration`; how many there were.
    async fn forget_migration(&self, migration: &str) -> Result<u64>;
}
