//! `floe migrate`: moving tables onto Floe from a Hive Metastore, an Iceberg JDBC catalog,
//! another Iceberg REST catalog or a directory of metadata files, in waves, verified,
//! resumable and reversible. See `docs/migration.md`.
//!
//! The tool talks to the source directly and to Floe only through Floe's public APIs, as the
//! operator's principal; its record of each table lives in Floe's catalog database
//! (`/api/v1/migrations`), so a run killed at any point continues where it stopped.

pub mod engine;
pub mod floe;
pub mod plan;
pub mod source;
pub mod verify;

pub use engine::{Migration, Outcome};
pub use floe::Floe;
pub use plan::Plan;
