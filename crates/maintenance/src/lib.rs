//! Table maintenance: compaction, snapshot expiry, orphan cleanup, retention, rollups, and
//! table check and repair, run as leased jobs on every node (docs/maintenance.md).
//!
//! - The planners decide, as pure functions over facts read from table metadata and storage
//!   listings, so they are tested without either: [`compaction`] (what to rewrite together),
//!   [`expiry`] (which snapshots go and which files that frees), [`orphans`] (which
//!   unreferenced files are orphans), [`rollup`] (what a tenant's observability rollups hold);
//!   [`policy`] is the inherited settings they follow.
//! - [`exec`] does the IO around them: reads manifests as the system, writes files, and commits
//!   through Floe's own catalog (compaction's `replace` snapshot through floe-sql's snapshot
//!   writer), so each change is a normal audited commit; `check` and `repair` read a table's
//!   metadata tree and mend what is broken.
//! - [`scheduler`] runs jobs: claimed under a lease in the catalog database, renewed while they
//!   work, claimed again when a node dies, retried with backoff, fair across warehouses.

pub mod compaction;
pub mod expiry;
pub mod orphans;
pub mod policy;
pub mod rollup;

pub mod exec;
pub mod scheduler;
