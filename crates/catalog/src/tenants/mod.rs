//! Tenants and their limits. A tenant is a warehouse: observability doors name it in the path
//! or in `X-Scope-OrgID`, `/ingest/v1` in the path, SQL by the session's warehouse; a
//! principal reaches a tenant only through its grants on that warehouse's objects.
//!
//! Limits are stored per warehouse ([`TenantStore`]), read by every node every
//! [`REFRESH`] (and at once on the node that sets them), and put in force without a restart
//! ([`Tenants`]). Every door that takes a tenant's work asks its [`Tenant`] first; a refusal
//! is a [`Refused`] that names the limit, its value, the tenant and, where waiting helps, when
//! to try again — the doors turn it into 429 + `Retry-After`, gRPC `RESOURCE_EXHAUSTED` with
//! `RetryInfo`, or an OTLP `partial_success`.

mod limits;
mod tenant;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use uuid::Uuid;

pub use limits::{Limit, Limits};
pub use tenant::{Counters, QueryPlace, Refused, SERIES_ACTIVE_MINUTES, Tenant};

use crate::Result;

/// How often a node reads every tenant's limits from the store.
pub const REFRESH: Duration = Duration::from_millis(500);

/// One warehouse's limits as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TenantLimitsRecord {
    pub warehouse: String,
    pub limits: serde_json::Value,
    pub updated_at_ms: i64,
}

/// Where limits are kept. Implementations live in `floe-store`.
#[async_trait]
pub trait TenantStore: Send + Sync + std::fmt::Debug {
    /// Sets (replaces) the limits of warehouse `warehouse_id`; `None` removes them.
    async fn set_tenant_limits(
        &self,
        warehouse_id: Uuid,
        limits: Option<&serde_json::Value>,
    ) -> Result<()>;
    /// Every warehouse's limits, by warehouse name.
    async fn list_tenant_limits(&self) -> Result<Vec<TenantLimitsRecord>>;
}

/// The tenants this node knows, with their limits in force.
#[derive(Debug, Default)]
pub struct Tenants {
    store: OnceLock<Arc<dyn TenantStore>>,
    tenants: RwLock<HashMap<String, Arc<Tenant>>>,
}

impl Tenants {
    /// Limits from now on come from `store` (once; a second store is ignored).
    pub fn attach(&self, store: Arc<dyn TenantStore>) {
        let _ = self.store.set(store);
    }

    pub fn store(&self) -> Option<&Arc<dyn TenantStore>> {
        self.store.get()
    }

    /// The tenant `name` (a warehouse the caller was shown to exist): its limits in force,
    /// none when none are set.
    pub fn get(&self, name: &str) -> Arc<Tenant> {
        if let Some(tenant) = self.tenants.read().expect("tenants").get(name) {
            return tenant.clone();
        }
        self.tenants
            .write()
            .expect("tenants")
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Tenant::new(name, Limits::default(), 0)))
            .clone()
    }

    /// The tenant `name` if this node has met it (no entry is made for a name a client
    /// sent unchecked).
    pub fn existing(&self, name: &str) -> Option<Arc<Tenant>> {
        self.tenants.read().expect("tenants").get(name).cloned()
    }

    /// Every tenant this node has met, by name.
    pub fn all(&self) -> Vec<Arc<Tenant>> {
        let mut all: Vec<_> = self
            .tenants
            .read()
            .expect("tenants")
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Puts `limits` in force for `name` now (the node that set them does not wait for
    /// its next refresh).
    pub fn apply(&self, name: &str, limits: Limits, updated_at_ms: i64) {
        self.get(name).apply(limits, updated_at_ms);
    }

    /// Reads every tenant's limits from the store and puts changed ones in force; a tenant
    /// whose limits were removed has none from now on. Limits the store holds that no
    /// longer parse (written by a newer node) are logged and left as they were.
    pub async fn refresh(&self) -> Result<()> {
        let Some(store) = self.store.get() else {
            return Ok(());
        };
        let stored = store.list_tenant_limits().await?;
        let mut named: HashMap<&str, &TenantLimitsRecord> = HashMap::new();
        for record in &stored {
            named.insert(&record.warehouse, record);
        }
        for record in &stored {
            let tenant = self.get(&record.warehouse);
            if tenant.updated_at_ms() == record.updated_at_ms {
                continue;
            }
            let parsed = serde_json::from_value::<Limits>(record.limits.clone())
                .map_err(|e| e.to_string())
                .and_then(|limits| limits.validate().map(|()| limits));
            match parsed {
                Ok(limits) => tenant.apply(limits, record.updated_at_ms),
                Err(e) => tracing::warn!(
                    tenant = %record.warehouse, error = %e,
                    "skip stored limits that do not parse or break a rule"
                ),
            }
        }
        for tenant in self.all() {
            if !named.contains_key(tenant.name.as_str()) && tenant.updated_at_ms() != 0 {
                tenant.apply(Limits::default(), 0);
            }
        }
        Ok(())
    }
}
