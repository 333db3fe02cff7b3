//! Floe's catalog: namespaces, tables and views, and the Iceberg commit protocol.
//!
//! The crate has no HTTP and no SQL driver. It defines:
//! - [`store::CatalogStore`], the transactional metadata store the catalog runs on (SQLite
//!   and PostgreSQL implementations live in `floe-store`);
//! - [`commit`], pure functions that check commit requirements and apply updates;
//! - [`service::CatalogService`], every catalog operation: it reads metadata through a cache,
//!   writes new metadata files through the warehouse's object store, and makes them current
//!   by compare-and-swap in the store, re-applying a commit on a new base when it loses a race.

pub mod clock;
pub mod cluster;
pub mod commit;
mod error;
pub mod events;
pub mod governance;
pub mod ident;
pub mod jobs;
pub mod manifests;
pub mod metadata;
pub mod migrations;
pub mod model;
pub mod paths;
pub mod pipelines;
pub mod registry;
pub mod service;
pub mod soft_delete;
pub mod store;
pub mod tenants;

pub use error::{CatalogError, ErrorCode, Result};
