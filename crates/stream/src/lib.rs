//! Stream-to-table: every source Floe turns into Iceberg tables, through one ingestion core
//! with thin adapters over it. A map of the crate:
//!
//! - [`core`]: the path every pushed request takes ([`core::Ingestor`]: tenant, the table made
//!   on first write, admission, evolution, conform, the durable log and its per-table
//!   committers, read-your-writes), the one error type [`core::IngestError`], and the append
//!   commit every source shares;
//! - [`decode`]: JSON rows and bounded Arrow IPC for `POST /ingest/v1`;
//! - [`otlp`]: OpenTelemetry logs, spans and metrics (and their exemplars) as rows of the
//!   tenant's `otel` tables, the tenant's per-record limits ([`otlp::screen`]);
//! - [`remote_write`]: Prometheus remote write 1.0 and 2.0, native histograms;
//! - [`kafka`]: pipelines from Kafka topics, and the supervisor that deals their partitions
//!   over the nodes; [`registry`] and the formats it serves (Avro, Protobuf, JSON Schema);
//! - `refusal`: why a decoder refused its input ([`Refusal`]: a record, a body, a schema),
//!   told apart by its kind.
//!
//! The public surface is what other crates call, and no more: floe-server's doors take
//! [`core::Ingestor`] and its [`core::Target`], [`decode`]'s bounded readers, [`otlp`]'s and
//! [`remote_write`]'s decoders, the [`registry::Registry`] and [`kafka::Pipelines`] (with
//! [`kafka::lag`] and [`kafka::redrive`]); the `floe` binary opens [`core::Ingest`] and
//! wires [`core::FreshRows`] into the SQL engine, and its benches (like this crate's
//! integration tests) run a [`kafka::Pipeline`] and build OTLP requests from
//! [`otlp::opentelemetry_proto`]. Everything else — the log, commits, upserts, dead
//! letters, the formats and schema references — is `pub(crate)`.
//!
//! A [`kafka::Pipeline`] reads its topics' partitions from the offsets the table says it has
//! committed, decodes JSON records against the table's schema, and appends them in one
//! snapshot per commit interval (or record limit). The snapshot's summary carries the next
//! offset of every partition (`floe.source.<pipeline>.<topic>.<partition>`), and the summary
//! is part of the table metadata the catalog swaps atomically: the offsets a snapshot covers
//! commit in the same store transaction as the snapshot. After any crash the pipeline resumes
//! exactly after the last committed offsets — records written but not committed are read
//! again, records committed are never read again.
//!
//! This crate isolates the Kafka client (librdkafka, built from source by `rdkafka-sys`).

mod avro_scan;
pub mod core;
pub mod decode;
pub mod events;
mod format;
pub mod kafka;
pub mod otlp;
pub(crate) mod references;
pub(crate) mod refusal;
pub mod registry;
pub mod remote_write;

pub use refusal::Refusal;

/// Why a pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Catalog(#[from] floe_catalog::CatalogError),
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("{what}: {message}")]
    Table { what: String, message: String },
    #[error("pipeline definition: {0}")]
    Invalid(String),
    /// Another node committed for this pipeline: this run must stop.
    #[error("pipeline {0} was taken over by another node")]
    Fenced(String),
    /// The ingestion core failed (its kind tells whether trying again helps).
    #[error(transparent)]
    Ingest(core::IngestError),
}

impl From<core::IngestError> for StreamError {
    fn from(e: core::IngestError) -> Self {
        match e {
            core::IngestError::Catalog(e) => StreamError::Catalog(e),
            core::IngestError::Fenced(pipeline) => StreamError::Fenced(pipeline),
            e => StreamError::Ingest(e),
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, StreamError>;

pub use avro_scan::bound_allocations as bound_avro_allocations;

pub(crate) fn table_error(what: impl Into<String>, e: impl std::fmt::Display) -> StreamError {
    StreamError::Table {
        what: what.into(),
        message: e.to_string(),
    }
}
