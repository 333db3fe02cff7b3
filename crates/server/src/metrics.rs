//! Prometheus metrics of the server itself, served at `/metrics`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

use crate::AppState;

#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new("floe_http_requests_total", "HTTP requests answered"),
            &["method", "route", "status"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new("floe_http_request_duration_seconds", "HTTP request latency")
                .buckets(vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
                ]),
            &["method", "route"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(requests.clone()))
            .expect("register metric");
        registry
            .register(Box::new(latency.clone()))
            .expect("register metric");
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("register process metrics");
        Self {
            registry,
            requests,
            latency,
        }
    }

    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .expect("text encoding never fails");
        String::from_utf8(buffer).expect("prometheus text is UTF-8")
    }
}

/// Counts and times every request by its route template (never by raw path).
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = request.method().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    let metrics = &state.metrics;
    metrics
        .latency
        .with_label_values(&[&method, &route])
        .observe(started.elapsed().as_secs_f64());
    metrics
        .requests
        .with_label_values(&[&method, &route, response.status().as_str()])
        .inc();
    response
}

/// `/metrics` answers anyone with the server-wide series; the series labelled with pipeline,
/// topic and table names only a caller whose bearer token (or Basic client id and secret)
/// names a principal holding
/// `manage-pipelines` on the server (who may see every pipeline and the ingest status anyway):
/// a scraper without one learns nothing of what is in the warehouses.
pub async fn serve_metrics(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Response {
    let mut text = state.metrics.render();
    text.push_str(&format!(
        "# HELP floe_http_requests_detached Requests that change state still running on their \
         own tasks (some after their clients hung up)\n\
         # TYPE floe_http_requests_detached gauge\nfloe_http_requests_detached {}\n",
        state.detached.running()
    ));
    text.push_str(&sql_metrics(&state.sql));
    if let Some(scheduler) = &state.scheduler {
        text.push_str(&scheduler.render_metrics());
    }
    text.push_str(&change_event_metrics(&state.change_events));
    if sees_named_series(&state, &headers).await {
        if let Some(pipelines) = &state.pipelines {
            text.push_str(&pipelines.render_metrics());
        }
        if let Some(ingest) = &state.ingest {
            text.push_str(&ingest.render_metrics().await);
        }
        text.push_str(&crate::tenants::render_metrics(&state.catalog));
        text.push_str(&cache_tenant_metrics(&state.sql));
    }
    ([("content-type", "text/plain; version=0.0.4")], text).into_response()
}

async fn sees_named_series(state: &AppState, headers: &axum::http::HeaderMap) -> bool {
    // Prometheus's `basic_auth` with a client id and secret works too.
    let Ok(token) = crate::auth::presented_token(state, headers).await else {
        return false;
    };
    let Ok(principal) = state.auth.authenticate(&token).await else {
        return false;
    };
    let Ok(grants) = state.authz.grants(&principal).await else {
        return false;
    };
    grants.allows(
        floe_catalog::governance::authz::Privilege::ManagePipelines,
        &floe_catalog::governance::authz::Scope::server(),
    )
}

/// The SQL engine's cache and queue, in Prometheus text.
fn sql_metrics(engine: &floe_sql::SqlEngine) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let mut text = format!(
        "# HELP floe_sql_queries_waiting SQL queries waiting for a slot\n\
         # TYPE floe_sql_queries_waiting gauge\nfloe_sql_queries_waiting {}\n",
        engine.queued()
    );
    text.push_str(&format!(
        "# HELP floe_sql_delete_files_read_total Position delete files and deletion vector \
         files read by SQL scans (queries, compactions); plans from them are kept across scans\n\
         # TYPE floe_sql_delete_files_read_total counter\nfloe_sql_delete_files_read_total {}\n",
        floe_sql::scan::delete_files_read()
    ));
    let index = floe_sql::token_index::stats();
    text.push_str(&format!(
        "# HELP floe_sql_files_pruned_total Data files SQL scans skipped, by what proved no row \
         could match\n# TYPE floe_sql_files_pruned_total counter\n\
         floe_sql_files_pruned_total{{by=\"token-index\"}} {}\n\
         # HELP floe_sql_token_index_reads_total Token index files read from storage, by outcome\n\
         # TYPE floe_sql_token_index_reads_total counter\n\
         floe_sql_token_index_reads_total{{outcome=\"usable\"}} {}\n\
         floe_sql_token_index_reads_total{{outcome=\"unusable\"}} {}\n\
         # HELP floe_sql_token_index_read_bytes_total Bytes of token index files read from storage\n\
         # TYPE floe_sql_token_index_read_bytes_total counter\n\
         floe_sql_token_index_read_bytes_total {}\n",
        index.files_pruned,
        index.indexes_read.saturating_sub(index.indexes_unusable),
        index.indexes_unusable,
        index.index_bytes_read,
    ));
    let cluster = floe_sql::distributed::stats();
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    for (name, help, value) in [
        (
            "floe_sql_distributed_queries_total",
            "Query plans this node cut into stages over workers (a rerun after losing workers counts again)",
            load(&cluster.queries),
        ),
        (
            "floe_sql_distributed_relaunches_total",
            "Distributed queries run again after losing workers",
            load(&cluster.relaunches),
        ),
        (
            "floe_sql_distributed_lost_workers_total",
            "Workers distributed queries found lost",
            load(&cluster.lost_workers),
        ),
        (
            "floe_sql_distributed_work_units_total",
            "Files of distributed scans handed to tasks as work units",
            load(&cluster.units),
        ),
        (
            "floe_sql_distributed_stolen_work_units_total",
            "Work units handed to a task other than the one their file was placed with",
            load(&cluster.stolen_units),
        ),
    ] {
        text.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"
        ));
    }
    text.push_str(&format!(
        "# HELP floe_sql_distributed_runtime_filters_total Joins' runtime filters passed to \
         scans in other stages\n# TYPE floe_sql_distributed_runtime_filters_total counter\n\
         floe_sql_distributed_runtime_filters_total {}\n",
        load(&cluster.runtime_filters)
    ));
    for (name, help, read) in [
        (
            "floe_sql_distributed_stages_total",
            "Stages of finished distributed queries, by how their output reached the next stage",
            (|t| &t.stages)
                as fn(&floe_sql::distributed::ExchangeTotals) -> &std::sync::atomic::AtomicU64,
        ),
        (
            "floe_sql_distributed_stage_rows_total",
            "Rows those stages handed to the next stage",
            |t| &t.rows,
        ),
        (
            "floe_sql_distributed_stage_bytes_total",
            "Bytes those stages' output took between nodes",
            |t| &t.bytes,
        ),
        (
            "floe_sql_distributed_stage_compute_seconds_total",
            "Compute time of those stages' operators, all tasks together",
            |t| &t.compute_nanos,
        ),
    ] {
        text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n"));
        for exchange in floe_sql::distributed::Exchange::ALL {
            let value = load(read(cluster.stages.of(exchange)));
            let value = if name.ends_with("_seconds_total") {
                format!("{:.6}", value as f64 / 1e9)
            } else {
                value.to_string()
            };
            text.push_str(&format!(
                "{name}{{exchange=\"{}\"}} {value}\n",
                exchange.label()
            ));
        }
    }
    text.push_str(&format!(
        "# HELP floe_sql_distributed_stage_metrics_pending Finished distributed queries whose \
         task metrics are not yet added to the stage totals\n\
         # TYPE floe_sql_distributed_stage_metrics_pending gauge\n\
         floe_sql_distributed_stage_metrics_pending {}\n\
         # HELP floe_sql_distributed_stage_metrics_missing_total Finished distributed queries \
         whose task metrics never arrived (missing from the stage totals)\n\
         # TYPE floe_sql_distributed_stage_metrics_missing_total counter\n\
         floe_sql_distributed_stage_metrics_missing_total {}\n",
        load(&cluster.stages.pending),
        load(&cluster.stages.unmeasured)
    ));
    if let Some(workers) = engine.routed_workers() {
        text.push_str(&format!(
            "# HELP floe_cluster_routed_workers Workers this coordinator hands tasks to\n\
             # TYPE floe_cluster_routed_workers gauge\nfloe_cluster_routed_workers {}\n",
            workers.len()
        ));
    }
    if let Some(stats) = engine.cache_stats() {
        text.push_str(&format!(
            "# HELP floe_sql_cache_hits_total Byte ranges served by the query cache\n\
             # TYPE floe_sql_cache_hits_total counter\n\
             floe_sql_cache_hits_total{{tier=\"memory\"}} {}\n\
             floe_sql_cache_hits_total{{tier=\"hot\"}} {}\n\
             floe_sql_cache_hits_total{{tier=\"disk\"}} {}\n\
             # HELP floe_sql_cache_misses_total Byte ranges the query cache fetched from storage\n\
             # TYPE floe_sql_cache_misses_total counter\n\
             floe_sql_cache_misses_total {}\n\
             # HELP floe_sql_cache_fetched_bytes_total Bytes the query cache fetched from storage\n\
             # TYPE floe_sql_cache_fetched_bytes_total counter\n\
             floe_sql_cache_fetched_bytes_total {}\n",
            stats.memory_hits.load(Relaxed),
            stats.hot_hits.load(Relaxed),
            stats.disk_hits.load(Relaxed),
            stats.misses.load(Relaxed),
            stats.bytes_read_from_store.load(Relaxed),
        ));
    }
    if let Some(cache) = engine.cache() {
        text.push_str(&format!(
            "# HELP floe_cache_disk_bytes Bytes of blocks in the ordinary disk tier of the cache\n\
             # TYPE floe_cache_disk_bytes gauge\nfloe_cache_disk_bytes {}\n",
            cache.disk_bytes()
        ));
    }
    text
}

/// Each tenant's hot-tier files, and its reads by the tier that served them (a hit rate per
/// tenant is hits over hits and misses), in Prometheus text (tenant-named: for privileged
/// scrapers). Tenants are warehouses: few per node.
fn cache_tenant_metrics(engine: &floe_sql::SqlEngine) -> String {
    use std::fmt::Write;
    use std::sync::atomic::Ordering::Relaxed;
    let Some(cache) = engine.cache() else {
        return String::new();
    };
    let mut text = String::new();
    let hot = cache.hot_usage();
    let reads = cache.tenant_reads();
    let _ = writeln!(
        text,
        "# HELP floe_cache_hot_bytes Bytes of a tenant's committed files pinned in this node's \
         hot tier\n# TYPE floe_cache_hot_bytes gauge"
    );
    for (tenant, usage) in &hot {
        let _ = writeln!(
            text,
            "floe_cache_hot_bytes{{tenant={tenant:?}}} {}",
            usage.bytes
        );
    }
    let _ = writeln!(
        text,
        "# HELP floe_cache_hot_files A tenant's committed files pinned in this node's hot tier\n\
         # TYPE floe_cache_hot_files gauge"
    );
    for (tenant, usage) in &hot {
        let _ = writeln!(
            text,
            "floe_cache_hot_files{{tenant={tenant:?}}} {}",
            usage.files
        );
    }
    let _ = writeln!(
        text,
        "# HELP floe_cache_tenant_hits_total Blocks of a tenant's files served by the cache, \
         by tier\n# TYPE floe_cache_tenant_hits_total counter"
    );
    for (tenant, stats) in &reads {
        for (tier, value) in [
            ("memory", &stats.memory_hits),
            ("hot", &stats.hot_hits),
            ("disk", &stats.disk_hits),
        ] {
            let _ = writeln!(
                text,
                "floe_cache_tenant_hits_total{{tenant={tenant:?},tier={tier:?}}} {}",
                value.load(Relaxed)
            );
        }
    }
    let _ = writeln!(
        text,
        "# HELP floe_cache_tenant_misses_total Blocks of a tenant's files the cache fetched \
         from object storage\n# TYPE floe_cache_tenant_misses_total counter"
    );
    for (tenant, stats) in &reads {
        let _ = writeln!(
            text,
            "floe_cache_tenant_misses_total{{tenant={tenant:?}}} {}",
            stats.misses.load(Relaxed)
        );
    }
    text
}

/// What each change-event sink delivered.
fn change_event_metrics(sinks: &floe_stream::events::Stats) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    if sinks.is_empty() {
        return String::new();
    }
    let mut text = String::new();
    for (name, help, kind, read) in [
        (
            "floe_change_events_delivered_total",
            "Change events a sink acknowledged",
            "counter",
            (|s| s.delivered.load(Relaxed) as i64) as fn(&floe_stream::events::SinkStats) -> i64,
        ),
        (
            "floe_change_events_failures_total",
            "Failed deliveries to a sink (each retried)",
            "counter",
            |s| s.failures.load(Relaxed) as i64,
        ),
        (
            "floe_change_events_delivered_seq",
            "The last change event a sink acknowledged, by sequence number",
            "gauge",
            |s| s.delivered_seq.load(Relaxed),
        ),
    ] {
        text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (sink, stats) in sinks {
            text.push_str(&format!("{name}{{sink=\"{sink}\"}} {}\n", read(stats)));
        }
    }
    text
}
