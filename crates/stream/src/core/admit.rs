//! Admission: every push door (`/ingest/v1`, OTLP over HTTP and gRPC, remote write) asks
//! here before it decodes a request, and again once it knows how many records the request
//! holds. The server's overload guard comes first (503 + `Retry-After` while the log's
//! backlog or the bytes in flight are past their bounds), then the tenant's limits on the
//! request's size, its storage quota and its bytes bucket, then its records bucket.

use std::sync::Arc;

use floe_catalog::tenants::{Refused, Tenant};

use super::log::{InFlight, Ingest};

/// A request admitted for its tenant; its bytes count as in flight until it is dropped.
pub struct Admitted {
    tenant: Arc<Tenant>,
    _inflight: InFlight,
}

/// Admits a request of `bytes` (its body as received) for `tenant`, or says which limit
/// refused it.
pub fn admit(log: &Ingest, tenant: Arc<Tenant>, bytes: u64) -> Result<Admitted, Refused> {
    let inflight = log.admit(bytes, &tenant.name).inspect_err(|refused| {
        tenant.count_refusal(refused.limit);
    })?;
    tenant.admit_request(bytes)?;
    Ok(Admitted {
        tenant,
        _inflight: inflight,
    })
}

impl Admitted {
    pub fn tenant(&self) -> &Arc<Tenant> {
        &self.tenant
    }

    /// The request holds `records`: all of them fit the tenant's records bucket, or the
    /// request is refused whole (a rate refusal is retried by the client; a part taken and
    /// a part refused would not be).
    pub fn records(&self, records: u64) -> Result<(), Refused> {
        self.tenant.admit_records(records)
    }

    /// `records` were taken durably.
    pub fn taken(&self, records: u64) {
        self.tenant.accepted(records);
    }
}
