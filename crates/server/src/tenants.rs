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
pub const STORAGE_EVERY: Duration = Duration::from_secs(30);

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
pub async fn measure_storage(catalog: &CatalogService) {
    for tenant in catalog.tenants().all() {
        if tenant.limits().storage_quota_bytes.is_some() {
            measure_tenant(catalog, &tenant).await;
        }
    }
}

/// The bytes of data and delete files in the current snapshots of `tenant`'s tables.
pub async fn measure_tenant(catalog: &CatalogService, tenant: &Tenant) {
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

/// Every tenant's counters, in Prometheus text (tenant-named: for privileged scrapers).
pub fn render_metrics(catalog: &CatalogService) -> String {
    let tenants = catalog.tenants().all();
    let mut text = String::new();
    let mut family = |name: &str, kind: &str, help: &str, lines: &mut dyn FnMut(&mut String)| {
        let _ = writeln!(text, "# HELP {name} {help}");
        let _ = writeln!(text, "# TYPE {name} {kind}");
        lines(&mut text);
    };
    family(
        "floe_tenant_accepted_records_total",
        "counter",
        "Records a tenant's requests had taken durably.",
        &mut |text| {
            for t in &tenants {
                let value = t.counters.accepted_records.load(Ordering::Relaxed);
                let _ = writeln!(
                    text,
                    "floe_tenant_accepted_records_total{{tenant={:?}}} {value}",
                    t.name
                );
            }
        },
    );
    family(
        "floe_tenant_accepted_bytes_total",
        "counter",
        "Bytes of a tenant's requests admitted (as received).",
        &mut |text| {
            for t in &tenants {
                let value = t.counters.accepted_bytes.load(Ordering::Relaxed);
                let _ = writeln!(
                    text,
                    "floe_tenant_accepted_bytes_total{{tenant={:?}}} {value}",
                    t.name
                );
            }
        },
    );
    family(
        "floe_tenant_refused_total",
        "counter",
        "Requests (or records, for per-record limits) refused, by the limit that refused them.",
        &mut |text| {
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
        },
    );
    family(
        "floe_tenant_queries_queued",
        "gauge",
        "A tenant's statements waiting in its line now.",
        &mut |text| {
            for t in &tenants {
                let value = t.counters.queued.load(Ordering::Relaxed);
                let _ = writeln!(
                    text,
                    "floe_tenant_queries_queued{{tenant={:?}}} {value}",
                    t.name
                );
            }
        },
    );
    family(
        "floe_tenant_query_queue_seconds",
        "summary",
        "Time a tenant's statements waited in its line.",
        &mut |text| {
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
        },
    );
    family(
        "floe_tenant_active_series",
        "gauge",
        "Metric series a tenant with a series limit wrote lately.",
        &mut |text| {
            for t in &tenants {
                let _ = writeln!(
                    text,
                    "floe_tenant_active_series{{tenant={:?}}} {}",
                    t.name,
                    t.active_series()
                );
            }
        },
    );
    family(
        "floe_tenant_storage_bytes",
        "gauge",
        "Bytes a tenant with a storage quota holds in its tables' current snapshots.",
        &mut |text| {
            for t in &tenants {
                let _ = writeln!(
                    text,
                    "floe_tenant_storage_bytes{{tenant={:?}}} {}",
                    t.name,
                    t.storage_bytes()
                );
            }
        },
    );
    text
}
