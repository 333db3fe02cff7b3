//! The one path a pushed request takes, whichever door it came through (`/ingest/v1`, OTLP
//! over HTTP and gRPC, remote write): the doors decode and answer in their protocol's form;
//! everything between is here, in this order.
//!
//! 1. [`Ingestor::open`], before a byte of the body is decoded: the tenant is a warehouse the
//!    caller can see; the caller may write the target table, which is made on first write
//!    when the target says how ([`Target`]); the server's overload guard and the tenant's
//!    limits admit the request's bytes.
//! 2. The door decodes, within its budget.
//! 3. [`Opened::count`]: the request's records fit the tenant's records bucket, all or none.
//! 4. [`Opened::evolve`], when the rows carry fields the table lacks.
//! 5. [`Opened::take`]: the rows conformed to the table's columns and appended to the durable
//!    log — the answer may be given once this returns — and rows for the tenant's other
//!    `otel` tables (dead letters, exemplars) with them ([`Opened::take_otel`]).
//! 6. The log's committer commits them, exactly once.
//!
//! Every failure is an [`IngestError`]; a door chooses its answer by the error's kind.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, SchemaRef};
use floe_catalog::ErrorCode;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::CatalogService;
use floe_catalog::tenants::Tenant;
use iceberg::TableIdent;

use super::admit::{Admitted, admit};
use super::dead_letter::{self, Door, Letter};
use super::log::{Ingest, Receipt, table_arrow_schema};
use super::target::{Creation, Layout, ensure, ensure_loaded};
use super::{IngestError, Match, conform, upsert};
use crate::otlp;

/// Where a request's rows go.
pub enum Target<'a> {
    /// A table the request names. It must exist, unless `create` is given: then a missing
    /// table is made with the layout it returns (from the request's rows), once the caller
    /// may create it.
    Named {
        ident: TableIdent,
        create: Option<&'a mut (dyn FnMut() -> Result<Layout, IngestError> + Send)>,
    },
    /// The table `name` of the tenant's `otel` namespace, made with its layout (and the
    /// namespace with it) on first write.
    Otel(&'static str),
}

/// The ingestion core as a door sees it: the durable log and the catalog.
#[derive(Clone, Copy)]
pub struct Ingestor<'a> {
    log: &'a Arc<Ingest>,
    catalog: &'a CatalogService,
    /// The door the requests come through (their dead letters say so).
    door: Door,
}

impl<'a> Ingestor<'a> {
    pub fn new(log: &'a Arc<Ingest>, catalog: &'a CatalogService, door: Door) -> Self {
        Self { log, catalog, door }
    }

    /// The largest body a request may send (`--ingest-max-body-mb`).
    pub fn max_body_bytes(&self) -> usize {
        self.log.config.max_body_bytes
    }

    /// A request of `bytes` from `caller` to `target` of `warehouse`, checked and admitted
    /// before its body is decoded (steps 1 above).
    pub async fn open(
        self,
        caller: &'a Caller,
        warehouse: &'a str,
        target: Target<'_>,
        bytes: u64,
    ) -> Result<Opened<'a>, IngestError> {
        match self.catalog.visible_warehouse(caller, warehouse).await {
            Ok(_) => {}
            Err(refused) if refused.code() == ErrorCode::NotFound => {
                return Err(IngestError::UnknownTenant {
                    name: warehouse.to_string(),
                    refused,
                });
            }
            // The catalog's own error (its code decides the answer; an internal one shows
            // the client no more than the catalog would).
            Err(e) => return Err(IngestError::Catalog(e)),
        }
        let mut key = None;
        let (ident, schema) = match target {
            Target::Named { ident, create } => {
                let creation = match create {
                    Some(infer) => Creation::Inferred(infer),
                    None => Creation::Never,
                };
                let loaded =
                    ensure_loaded(self.catalog, caller, warehouse, &ident, creation).await?;
                let metadata = &loaded.metadata;
                key = upsert::key_of(metadata)?.map(|ids| upsert::key_names(metadata, &ids));
                let schema = table_arrow_schema(metadata.current_schema())?;
                (ident, schema)
            }
            Target::Otel(name) => {
                let ident = otlp::table_ident(name);
                let layout = otlp::layout::layout(name);
                let schema = ensure(
                    self.catalog,
                    caller,
                    warehouse,
                    &ident,
                    Creation::Layout(&layout),
                )
                .await?;
                (ident, schema)
            }
        };
        if schema.fields().is_empty() {
            return Err(IngestError::Invalid(format!(
                "table {ident} has no columns: there is nothing rows could be written to"
            )));
        }
        let admitted = admit(self.log, self.catalog.tenants().get(warehouse), bytes)?;
        Ok(Opened {
            ingestor: self,
            caller,
            warehouse,
            ident,
            schema,
            key,
            admitted,
        })
    }
}

/// A request admitted to its table: what is left of its way.
pub struct Opened<'a> {
    ingestor: Ingestor<'a>,
    caller: &'a Caller,
    warehouse: &'a str,
    ident: TableIdent,
    schema: SchemaRef,
    /// The key columns of an upsert table.
    key: Option<Vec<String>>,
    admitted: Admitted,
}

impl Opened<'_> {
    /// The table's columns as they are now, field ids kept.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn ident(&self) -> &TableIdent {
        &self.ident
    }

    /// The tenant the request counts against (its per-record limits screen the rows).
    pub fn tenant(&self) -> &Arc<Tenant> {
        self.admitted.tenant()
    }

    /// The request holds `records`: all fit the tenant's records bucket, or none is taken.
    pub fn count(&self, records: u64) -> Result<(), IngestError> {
        Ok(self.admitted.records(records)?)
    }

    /// The table evolved, as the caller, to take rows of the `seen` fields (those it lacks
    /// added, those whose values carry more widened).
    pub async fn evolve(&mut self, seen: &[Field]) -> Result<(), IngestError> {
        let loaded = super::evolve::evolve(
            self.ingestor.catalog,
            self.caller,
            self.warehouse,
            &self.ident,
            seen,
        )
        .await?;
        self.schema = table_arrow_schema(loaded.metadata.current_schema())?;
        Ok(())
    }

    /// `batches` — rows of the table, their columns found by name — taken durably; the
    /// answer may be given once this returns.
    pub async fn take(&self, batches: &[RecordBatch]) -> Result<Receipt, IngestError> {
        self.log_as(batches, &self.schema, "rows").await
    }

    /// `batches` conformed to `schema` (their columns found by name; its metadata kept, the
    /// door added) and appended to the durable log; `what` they are, for the error.
    async fn log_as(
        &self,
        batches: &[RecordBatch],
        schema: &SchemaRef,
        what: &str,
    ) -> Result<Receipt, IngestError> {
        let mut metadata = schema.metadata().clone();
        metadata.insert(
            dead_letter::DOOR_KEY.to_string(),
            self.ingestor.door.as_str().to_string(),
        );
        let schema = Arc::new(schema.as_ref().clone().with_metadata(metadata));
        let rows = batches
            .iter()
            .map(|b| conform(b, &schema, Match::Name))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                IngestError::from(e.context(format!(
                    "table {}.{} cannot take the {what} as they are",
                    self.warehouse, self.ident
                )))
            })?;
        self.ingestor
            .log
            .append(self.warehouse, &self.ident, &rows)
            .await
    }

    /// The key columns when the table is an upsert table ([`super::upsert`]).
    pub fn key(&self) -> Option<&[String]> {
        self.key.as_deref()
    }

    /// The columns a delete of an upsert table's rows names: its key columns.
    pub fn key_schema(&self) -> Option<SchemaRef> {
        Some(upsert::key_schema(&self.schema, self.key.as_ref()?))
    }

    /// `batches` — keys of an upsert table, their columns found by name — taken durably as
    /// deletes of those keys' rows; the answer may be given once this returns.
    pub async fn take_deletes(&self, batches: &[RecordBatch]) -> Result<Receipt, IngestError> {
        let Some(keys) = self.key_schema() else {
            return Err(IngestError::Invalid(format!(
                "table {}.{} is not an upsert table: it has no key to delete by",
                self.warehouse, self.ident
            )));
        };
        // The entry's schema says its rows are keys to delete.
        let marked = upsert::marked_for_deletes(&keys);
        self.log_as(batches, &marked, "keys").await
    }

    /// Records of the request the table cannot take, kept durably as rows of its dead-letter
    /// table ([`dead_letter`]), made on first use as the caller (who needs `write-data` on
    /// it, and `create-table` on the namespace the first time).
    pub(crate) async fn take_dead_letters(
        &self,
        letters: &[Letter],
    ) -> Result<Receipt, IngestError> {
        let (ident, schema) = dead_letter::ready(
            self.ingestor.catalog,
            self.caller,
            self.warehouse,
            &self.ident,
        )
        .await?;
        let rows = dead_letter::batch(letters, floe_catalog::clock::now_micros());
        self.append_to(&ident, &schema, &rows).await
    }

    /// `batch` conformed to `schema`, the columns of another table `ident` of the tenant (its
    /// dead letters, `otel.exemplars`), and appended to that table's log.
    async fn append_to(
        &self,
        ident: &TableIdent,
        schema: &SchemaRef,
        batch: &RecordBatch,
    ) -> Result<Receipt, IngestError> {
        let rows = conform(batch, schema, Match::Name).map_err(|e| {
            IngestError::from(e.context(format!(
                "table {}.{ident} cannot take the rows as they are",
                self.warehouse
            )))
        })?;
        self.ingestor
            .log
            .append(self.warehouse, ident, &[rows])
            .await
    }

    /// The door the request came through.
    pub(crate) fn door(&self) -> Door {
        self.ingestor.door
    }

    /// `batch`, rows of the tenant's `otel.<name>` (exemplars: what a request brings beside
    /// its table's rows), taken durably; the table is made with its layout on
    /// first write, as the caller.
    pub(crate) async fn take_otel(
        &self,
        name: &'static str,
        batch: &RecordBatch,
    ) -> Result<Receipt, IngestError> {
        let ident = otlp::table_ident(name);
        let layout = otlp::layout::layout(name);
        let schema = ensure(
            self.ingestor.catalog,
            self.caller,
            self.warehouse,
            &ident,
            Creation::Layout(&layout),
        )
        .await?;
        self.append_to(&ident, &schema, batch).await
    }

    /// `records` were taken durably (the tenant's counters).
    pub fn taken(&self, records: u64) {
        self.admitted.taken(records);
    }
}
