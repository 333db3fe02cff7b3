//! Table maintenance planners: what to compact, which snapshots to expire and which files
//! that frees, which unreferenced files are orphans. Each is a pure function over facts read
//! from table metadata and storage listings, so it can be tested without either; executors
//! (which read manifests, write files and commit) are separate.

pub mod compaction;
pub mod expiry;
pub mod orphans;
pub mod policy;
pub mod rollup;

pub mod exec;
pub mod scheduler;
