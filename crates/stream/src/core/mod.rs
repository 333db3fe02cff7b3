//! The ingestion core: what every door that turns a source's records into table rows shares.
//! Kafka pipelines ([`crate::kafka`]), `POST /ingest/v1/…`, OTLP and Prometheus remote write
//! are thin adapters over it; a table gets the same column types, the same files and the same
//! guarantees whichever door its rows came through.
//!
//! - **Decode**: one decoder per format into Arrow ([`crate::decode`]: JSON rows, bounded
//!   Arrow IPC, OTLP, remote write).
//! - **Infer** ([`infer`]): one schema inference from JSON rows, which makes text that always
//!   reads as a timestamp or a date a timestamp or a date.
//! - **Evolve** ([`evolve`]): one evolution step: fields the table lacks become optional
//!   columns, columns whose values carry more (nested fields, wider types) are widened.
//! - **Write and commit** ([`commit`]): the rows sorted by the table's sort order, written as
//!   data files of its partitioning, and appended in one snapshot whose summary carries the
//!   source's positions — the positions commit in the same catalog transaction as the rows.
//! - **Log** ([`log`]): one durable log for sources that cannot replay (HTTP, OTLP, remote
//!   write): a request's rows are acknowledged once synced to it, and a committer per table
//!   commits what it holds, exactly once. Reads on the same node see what it acknowledged
//!   before it is committed ([`fresh`]), counted once.
//!
//! - **Replay** ([`replay`]): committed entries are kept a while, dead letters until removed;
//!   either can be taken again after a bad deploy, never twice.
//! - **Admit** ([`admit`]): before a push door decodes a request, the server's overload guard
//!   and the tenant's limits decide whether it is taken.
//!
//! Every failure is an [`IngestError`], told apart by its kind, never by its words.

pub(crate) mod admit;
pub(crate) mod commit;
mod conform;
pub mod dead_letter;
pub(crate) mod evolve;
mod fresh;
pub(crate) mod infer;
mod ingestor;
pub(crate) mod log;
pub(crate) mod replay;
pub(crate) mod target;
pub mod upsert;

pub(crate) use conform::{Match, conform, leaf_count};
pub use fresh::FreshRows;
pub use ingestor::{Ingestor, Opened, Target};
pub use log::{Ingest, IngestConfig, Receipt};
pub use target::Layout;

use datafusion::error::DataFusionError;
use floe_catalog::{CatalogError, ErrorCode};

/// Why rows could not be taken or committed.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// Another commit changed the table first: worth trying again at once.
    #[error("commit conflict: {0}")]
    Conflict(String),
    /// Another writer owns the source's positions (a pipeline another node took over): this
    /// one must stop.
    #[error("{0}")]
    Fenced(String),
    /// The rows or the table cannot be written as they are; trying again does not help.
    #[error("{0}")]
    Invalid(String),
    /// Storage or the catalog failed for now: worth trying again later.
    #[error("{0}")]
    Storage(String),
    /// The catalog refused (no such table, no privilege, a tenant's limit): its code decides
    /// the answer.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The tenant a request names is no warehouse the caller can see; `refused` is the
    /// catalog's own answer (hidden or missing, which an HTTP door audits as it is).
    #[error("unknown tenant {name:?}: no such warehouse")]
    UnknownTenant { name: String, refused: CatalogError },
    /// The request's body is not what its door takes (not the protocol's message, not
    /// compressed as it says).
    #[error("{0}")]
    Malformed(String),
    /// The request would decode to more than it may.
    #[error("{0}")]
    TooLarge(String),
}

impl IngestError {
    /// Whether the same operation may succeed when tried again unchanged.
    pub fn retryable(&self) -> bool {
        match self {
            IngestError::Conflict(_) | IngestError::Storage(_) => true,
            IngestError::Fenced(_)
            | IngestError::Invalid(_)
            | IngestError::UnknownTenant { .. }
            | IngestError::Malformed(_)
            | IngestError::TooLarge(_) => false,
            IngestError::Catalog(e) => matches!(
                e.code(),
                ErrorCode::Conflict
                    | ErrorCode::TooManyRequests
                    | ErrorCode::Timeout
                    | ErrorCode::Unavailable
                    | ErrorCode::CommitStateUnknown
                    | ErrorCode::Internal
            ),
        }
    }

    /// A catalog error by its code: a lost race is a conflict, a failure of the store or
    /// storage is [`IngestError::Storage`], the rest stays the catalog's.
    pub(crate) fn of_catalog(e: CatalogError) -> Self {
        match e.code() {
            ErrorCode::Conflict => IngestError::Conflict(e.to_string()),
            ErrorCode::Timeout
            | ErrorCode::Unavailable
            | ErrorCode::CommitStateUnknown
            | ErrorCode::Internal => IngestError::Storage(e.to_string()),
            _ => IngestError::Catalog(e),
        }
    }

    /// A writer's or committer's error: the catalog's own where it carries one (a commit
    /// that lost its race carries the catalog's conflict), else a storage failure.
    pub(crate) fn of_write(e: &DataFusionError) -> Self {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(error) = source {
            if let Some(catalog) = error.downcast_ref::<CatalogError>() {
                return Self::of_catalog(catalog.copied());
            }
            source = error.source();
        }
        IngestError::Storage(e.to_string())
    }

    /// An SQL engine error (the engine reaches a warehouse's storage for writes).
    pub(crate) fn of_sql(e: &floe_sql::SqlError) -> Self {
        use floe_sql::SqlErrorKind;
        match e.kind {
            SqlErrorKind::PermissionDenied => {
                IngestError::Catalog(CatalogError::PermissionDenied(e.message.clone()))
            }
            SqlErrorKind::Invalid => IngestError::Invalid(e.message.clone()),
            _ => IngestError::Storage(e.message.clone()),
        }
    }
}

impl From<floe_catalog::tenants::Refused> for IngestError {
    fn from(refused: floe_catalog::tenants::Refused) -> Self {
        IngestError::Catalog(CatalogError::Limited(refused))
    }
}

impl From<IngestError> for CatalogError {
    fn from(e: IngestError) -> Self {
        match e {
            IngestError::Catalog(e) => e,
            IngestError::Conflict(message) => CatalogError::CommitFailed(message),
            IngestError::Invalid(message)
            | IngestError::Fenced(message)
            | IngestError::Malformed(message) => CatalogError::BadRequest { message },
            IngestError::TooLarge(message) => CatalogError::PayloadTooLarge(message),
            IngestError::UnknownTenant { refused, .. } => refused,
            IngestError::Storage(message) => CatalogError::Unavailable(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_told_apart_by_their_code_not_their_words() {
        let dropped = CatalogError::NotFound {
            error_type: "NoSuchTableException",
            message: "Table does not exist: conflict".into(),
        };
        assert!(!IngestError::of_catalog(dropped).retryable());
        let raced = CatalogError::CommitFailed("requirement failed: not found".into());
        assert!(matches!(
            IngestError::of_catalog(raced),
            IngestError::Conflict(_)
        ));
        // Through the writer's error, as a failed commit reports it.
        let written = DataFusionError::External(Box::new(CatalogError::PermissionDenied(
            "no write-data".into(),
        )));
        assert!(!IngestError::of_write(&written).retryable());
        let storage = DataFusionError::Execution("connection reset".into());
        assert!(IngestError::of_write(&storage).retryable());
    }
}
