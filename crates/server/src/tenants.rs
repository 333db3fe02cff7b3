//! Tenants on this node: their limits kept current from the store, their storage measured
//! for quotas, and their counters in `/metrics`.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use floe_catalog::governance::authz::Caller;
use floe_catalog::service::CatalogService;
use floe_catalog::tenants::{Limit, REFRESH, Tenant};
use tokio_util::sync::CancellationToken;

/// How often the storage of tenants with a quota is measured.
pub(crate) const STORAGE_EVERY: Duration = Duration::from_secs(30);

/// Keeps every tenant's limits current (every [`REFRESH`]) and measures the storage of
/// those with a quota (every [`STORAGE_EVERY`]) until `shutdown`.
pub async fn watch(catalog: Arc<CatalogService>, shutdown: CancellationToken) {
    let mut refresh = tokio::time::interval(REFRESH);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut measure = tokio::time::interval(STORAGE_EVERY);
    measure.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = refresh.tick() => {
                if let Err(e) = catalog.tenants().refresh().await {
                    tracing::warn!(error = %e, "read tenant limits");
                }
            }
            _ = measure.tick() => measure_storage(&catalog).await,
        }
    }
}

/// Measures the storage of every tenant with a storage quota.
pub(crate) async fn measure_storage(catalog: &CatalogService) {
    for tenant in catalog.tenants().all() {
        if tenant.limits().storage_quota_bytes.is_some() {
            measure_tenant(catalog, &tenant).await;
        }
    }
}

/// The bytes of data and delete files in the current snapshots of `tenant`'s tables.
pub(crate) async fn measure_tenant(catalog: &CatalogService, tenant: &Tenant) {
    let system = Caller::system();
    let tables = match catalog.all_tables(&tenant.name).await {
        Ok(tables) => tables,
        Err(e) => {
            tracing::warn!(tenant = %tenant.name, error = %e, "list a tenant's tables");
            return;
        }
    };
    let mut bytes = 0u64;
    for ident in tables {
        let Ok(loaded) = catalog.load_table(&system, &tenant.name, &ident).await else {
            continue;
        };
        if let Some(snapshot) = loaded.metadata.current_snapshot() {
            let summary = &snapshot.summary().additional_properties;
            for key in ["total-files-size", "total-delete-files-size"] {
                bytes += summary
                    .get(key)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    tenant.set_storage_bytes(bytes);
}

/// A series' `# HELP` and `# TYPE` lines.
fn header(text: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(text, "# HELP {name} {help}");
    let _ = writeln!(text, "# TYPE {name} {kind}");
}

/// A per-tenant series: its name, kind, help, and its value for a tenant.
type Series = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Tenant) -> String,
);

/// The series with one value per tenant.
const PER_TENANT: [Series; 5] = [
    (
        "floe_tenant_accepted_records_total",
        "counter",
        "Records a tenant's requests had taken durably.",
        |t| {
            t.counters
                .accepted_records
                .load(Ordering::Relaxed)
                .to_string()
        },
    ),
    (
        "floe_tenant_accepted_bytes_total",
        "counter",
        "Bytes of a tenant's requests admitted (as received).",
        |t| {
            t.counters
                .accepted_bytes
                .load(Ordering::Relaxed)
                .to_string()
        },
    ),
    (
        "floe_tenant_queries_queued",
        "gauge",
        "A tenant's statements waiting in its line now.",
        |t| t.counters.queued.load(Ordering::Relaxed).to_string(),
    ),
    (
        "floe_tenant_active_series",
        "gauge",
        "Metric series a tenant with a series limit wrote lately.",
        |t| t.active_series().to_string(),
    ),
    (
        "floe_tenant_storage_bytes",
        "gauge",
        "Bytes a tenant with a storage quota holds in its tables' current snapshots.",
        |t| t.storage_bytes().to_string(),
    ),
];

/// Every tenant's counters, in Prometheus text (tenant-named: for privileged scrapers).
pub(crate) fn render_metrics(catalog: &CatalogService) -> String {
    let tenants = catalog.tenants().all();
    let mut text = String::new();
    for (name, kind, about, value) in PER_TENANT {
        header(&mut text, name, kind, about);
        for t in &tenants {
            let _ = writeln!(text, "{name}{{tenant={:?}}} {}", t.name, value(t));
        }
    }
    header(
        &mut text,
        "floe_tenant_refused_total",
        "counter",
        "Requests (or records, for per-record limits) refused, by the limit that refused them.",
    );
    for t in &tenants {
        for limit in Limit::ALL {
            let value = t.counters.refused(limit);
            if value > 0 {
                let _ = writeln!(
                    text,
                    "floe_tenant_refused_total{{tenant={:?},limit={:?}}} {value}",
                    t.name,
                    limit.name()
                );
            }
        }
    }
    header(
        &mut text,
        "floe_tenant_query_queue_seconds",
        "summary",
        "Time a tenant's statements waited in its line.",
    );
    for t in &tenants {
        let waits = t.counters.queue_waits.load(Ordering::Relaxed);
        let micros = t.counters.queue_micros.load(Ordering::Relaxed);
        let _ = writeln!(
            text,
            "floe_tenant_query_queue_seconds_sum{{tenant={:?}}} {}",
            t.name,
            micros as f64 / 1e6
        );
        let _ = writeln!(
            text,
            "floe_tenant_query_queue_seconds_count{{tenant={:?}}} {waits}",
            t.name
        );
    }
    text
}
