//! `floe bench otlp`: OpenTelemetry logs into a running server over OTLP/HTTP (protobuf) —
//! log records and MiB per second per core of server CPU, durable (acknowledged once in the
//! ingest log, counted until committed); bytes on disk per record against the raw OTLP JSON;
//! acknowledgement to queryable (Floe SQL on the node, and committed for every engine); and a
//! log search and aggregations over the table (10 M records by default) side by side with
//! DuckDB on the same Parquet files.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use floe_stream::otlp::opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use floe_stream::otlp::opentelemetry_proto::tonic::common::v1::{
    AnyValue, InstrumentationScope, KeyValue, any_value::Value as Any,
};
use floe_stream::otlp::opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use floe_stream::otlp::opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use serde_json::{Value, json};

use super::duckdb::DuckDb;
use super::ingest::{server_cpu_seconds, sql_count};
use crate::client::Client;

#[derive(Args, Debug, Clone)]
pub struct OtlpBenchArgs {
    #[command(flatten)]
    server: crate::client::ServerArgs,
    /// The tenant (warehouse) written to; its `otel.logs` is dropped first.
    #[arg(long, default_value = "default")]
    warehouse: String,
    /// Concurrent clients posting requests.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Log records per request (an OpenTelemetry Collector batches 8,192 by default).
    #[arg(long, default_value_t = 2_000)]
    batch_records: usize,
    /// Seconds the measured throughput phase runs for.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Services the records come from (each a resource of its own).
    #[arg(long, default_value_t = 8)]
    services: usize,
    /// Records the table holds before the queries run (more are sent, unmeasured, until it
    /// does); 0 skips the queries.
    #[arg(long, default_value_t = 10_000_000)]
    query_records: u64,
    /// Timed runs of each query per engine (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Single-record requests whose time to queryable is measured.
    #[arg(long, default_value_t = 100)]
    probes: usize,
    /// A Python with the `duckdb` module (default: the test venv's).
    #[arg(long)]
    duckdb_python: Option<PathBuf>,
}

/// Distinct requests the benchmark builds (and sends again and again).
const DISTINCT_REQUESTS: u64 = 128;

/// splitmix64: reproducible data without a dependency.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn text(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.into(),
        key_strindex: 0,
        value: Some(AnyValue {
            value: Some(Any::StringValue(value.into())),
        }),
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        key_strindex: 0,
        value: Some(AnyValue {
            value: Some(Any::IntValue(value)),
        }),
    }
}

fn double(key: &str, value: f64) -> KeyValue {
    KeyValue {
        key: key.into(),
        key_strindex: 0,
        value: Some(AnyValue {
            value: Some(Any::DoubleValue(value)),
        }),
    }
}

const ROUTES: [&str; 8] = [
    "/api/v1/orders/{id}",
    "/api/v1/cart",
    "/api/v1/users/{id}/profile",
    "/api/v1/search",
    "/api/v1/payments",
    "/health",
    "/api/v1/inventory/{sku}",
    "/api/v1/recommendations",
];
const METHODS: [&str; 4] = ["GET", "GET", "POST", "PUT"];

/// One realistic log record (about 300 bytes of protobuf, 10 attributes) at `time` (ns).
fn record(rng: &mut Rng, time: u64) -> LogRecord {
    let route = ROUTES[rng.below(ROUTES.len() as u64) as usize];
    let method = METHODS[rng.below(METHODS.len() as u64) as usize];
    let id = rng.below(1_000_000);
    let duration = (rng.below(250_000) as f64) / 100.0;
    let roll = rng.below(100);
    let (severity, severity_text, status, body) = match roll {
        0..=1 => (
            17,
            "ERROR",
            503,
            format!(
                "timeout calling payment-gateway after {duration:.0} ms (attempt {}); giving up",
                rng.below(3) + 1
            ),
        ),
        2..=9 => (
            13,
            "WARN",
            429,
            format!("slow request {method} {route} took {duration:.1} ms, over the 500 ms budget"),
        ),
        10..=29 => (
            5,
            "DEBUG",
            200,
            format!(
                "cache miss for key session:{:016x}, loading from store",
                rng.next()
            ),
        ),
        _ => (
            9,
            "INFO",
            200,
            format!("{method} {route} completed with 200 in {duration:.1} ms for user {id}"),
        ),
    };
    let traced = rng.below(10) < 9;
    LogRecord {
        time_unix_nano: time,
        observed_time_unix_nano: time + rng.below(2_000_000),
        severity_number: severity,
        severity_text: severity_text.into(),
        body: Some(AnyValue {
            value: Some(Any::StringValue(body)),
        }),
        attributes: vec![
            text("http.request.method", method),
            text("http.route", route),
            int("http.response.status_code", status),
            text(
                "url.path",
                route
                    .replace("{id}", &id.to_string())
                    .replace("{sku}", "A-1042"),
            ),
            text("user.id", format!("u{}", rng.below(50_000))),
            text(
                "client.address",
                format!("10.{}.{}.{}", rng.below(16), rng.below(256), rng.below(256)),
            ),
            double("duration_ms", duration),
            text("thread.name", format!("worker-{}", rng.below(32))),
            text("code.function", "handle_request"),
            text("request.id", format!("{:016x}", rng.next())),
        ],
        dropped_attributes_count: 0,
        flags: if traced { 1 } else { 0 },
        trace_id: if traced { rng.bytes(16) } else { Vec::new() },
        span_id: if traced { rng.bytes(8) } else { Vec::new() },
        event_name: String::new(),
    }
}

fn service_resource(service: &str, pod: u64) -> Resource {
    Resource {
        attributes: vec![
            text("service.name", service),
            text("service.version", "2.14.1"),
            text("deployment.environment", "production"),
            text("host.name", format!("node-{pod:03}")),
            text("k8s.pod.name", format!("{service}-7d9f8-{pod:05x}")),
            text("cloud.region", "eu-west-1"),
        ],
        dropped_attributes_count: 0,
        entity_refs: Vec::new(),
    }
}

/// A request of `records` log records spread over `services`, as a collector batches them,
/// timed from `start` (ns).
pub(super) fn request(
    rng: &mut Rng,
    records: usize,
    services: usize,
    start: u64,
) -> ExportLogsServiceRequest {
    let services = services.max(1);
    let per = records.div_ceil(services);
    let mut resource_logs = Vec::new();
    let mut made = 0;
    for s in 0..services {
        let n = per.min(records - made);
        if n == 0 {
            break;
        }
        made += n;
        let service = format!("svc-{s:02}");
        let log_records = (0..n)
            .map(|i| {
                let at = start + (i as u64) * 50_000 + rng.below(50_000);
                record(rng, at)
            })
            .collect();
        resource_logs.push(ResourceLogs {
            resource: Some(service_resource(&service, rng.below(12))),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: format!("com.example.{service}"),
                    version: "1.4.2".into(),
                    attributes: Vec::new(),
                    dropped_attributes_count: 0,
                }),
                log_records,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    ExportLogsServiceRequest { resource_logs }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default()
}

/// The log table's entry in the server's ingest status.
async fn log_status(client: &Client, warehouse: &str) -> anyhow::Result<Option<Value>> {
    let status = client
        .call(reqwest::Method::GET, "/api/v1/ingest/status", None)
        .await?;
    Ok(status["tables"].as_array().and_then(|tables| {
        tables
            .iter()
            .find(|t| {
                t["warehouse"] == warehouse
                    && t["table"] == "logs"
                    && t["namespace"] == json!(["otel"])
            })
            .cloned()
    }))
}

/// Waits until the log table has nothing uncommitted.
async fn drained(client: &Client, warehouse: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if let Some(status) = log_status(client, warehouse).await?
            && status["pending-entries"] == 0
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the ingest log did not drain in 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Posts bodies round-robin from `concurrency` clients until `until` says stop; records
/// and bytes acknowledged, and requests refused.
async fn send_while(
    client: &Arc<Client>,
    path: &str,
    bodies: &Arc<Vec<(Vec<u8>, u64)>>,
    concurrency: usize,
    until: Arc<dyn Fn(u64) -> bool + Send + Sync>,
) -> anyhow::Result<(u64, u64, u64)> {
    let records = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 0..concurrency.max(1) {
        let (client, bodies, records, bytes, failures, until, path) = (
            client.clone(),
            bodies.clone(),
            records.clone(),
            bytes.clone(),
            failures.clone(),
            until.clone(),
            path.to_string(),
        );
        workers.push(tokio::spawn(async move {
            let mut n = worker;
            while !until(records.load(Ordering::Relaxed)) {
                let (body, count) = &bodies[n % bodies.len()];
                n += concurrency.max(1);
                let answer = client
                    .request(reqwest::Method::POST, &path)
                    .header("Content-Type", "application/x-protobuf")
                    .body(body.clone())
                    .send()
                    .await;
                match answer {
                    Ok(a) if a.status().is_success() => {
                        records.fetch_add(*count, Ordering::Relaxed);
                        bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                    }
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    Ok((
        records.load(Ordering::Relaxed),
        bytes.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
    ))
}

pub async fn run(args: OtlpBenchArgs) -> anyhow::Result<()> {
    let client = Arc::new(args.server.connect().await?);
    let wh = args.warehouse.clone();
    let _ = client
        .call(
            reqwest::Method::DELETE,
            &format!("/catalog/v1/{wh}/namespaces/otel/tables/logs?purgeRequested=true"),
            None,
        )
        .await;
    let path = format!("/otlp/{wh}/v1/logs");

    // Distinct requests, built before the clock starts; the raw OTLP JSON of the same records
    // is the size baseline.
    let mut rng = Rng(0x5eed);
    let start = now_ns() - 3_600_000_000_000;
    let mut json_bytes = 0u64;
    let mut json_records = 0u64;
    let bodies: Vec<(Vec<u8>, u64)> = (0..DISTINCT_REQUESTS)
        .map(|i| {
            let request = request(
                &mut rng,
                args.batch_records,
                args.services,
                start + i * 100_000_000_000,
            );
            if i < 4 {
                json_bytes += serde_json::to_vec(&request).map(|j| j.len()).unwrap_or(0) as u64;
                json_records += args.batch_records as u64;
            }
            (request.encode_to_vec(), args.batch_records as u64)
        })
        .collect();
    let bodies = Arc::new(bodies);
    let protobuf_per_record = bodies.iter().map(|(b, _)| b.len() as f64).sum::<f64>()
        / (DISTINCT_REQUESTS as usize * args.batch_records) as f64;
    let json_per_record = json_bytes as f64 / json_records.max(1) as f64;

    // The table is created by the first request.
    let first = client
        .request(reqwest::Method::POST, &path)
        .header("Content-Type", "application/x-protobuf")
        .body(bodies[0].0.clone())
        .send()
        .await?;
    if !first.status().is_success() {
        bail!("first OTLP request: {}", first.text().await?);
    }
    // Bytes on disk, from every distinct record sent once (the phases after this one send
    // them again, which would compress unrealistically well).
    for (body, _) in &bodies[1..] {
        let answer = client
            .request(reqwest::Method::POST, &path)
            .header("Content-Type", "application/x-protobuf")
            .body(body.clone())
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("OTLP request: {}", answer.text().await?);
        }
    }
    drained(&client, &wh).await?;
    let files = data_files(&client, &wh).await?;
    let on_disk: i64 = files
        .iter()
        .filter_map(|f| f["file_size_in_bytes"].as_i64())
        .sum();
    let stored: i64 = files
        .iter()
        .filter_map(|f| f["record_count"].as_i64())
        .sum();
    let per_record = on_disk as f64 / stored.max(1) as f64;
    let size_line = format!(
        "  on disk: {stored} distinct records in {} data files, {:.1} B a record = {:.1} % of the raw OTLP JSON ({:.1} % of the protobuf)",
        files.len(),
        per_record,
        100.0 * per_record / json_per_record,
        100.0 * per_record / protobuf_per_record,
    );

    // Throughput: durable acknowledgements for the phase, then the CPU of committing them.
    let cpu_before = server_cpu_seconds(&client).await;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);
    let (records, bytes, failures) = send_while(
        &client,
        &path,
        &bodies,
        args.concurrency,
        Arc::new(move |_| Instant::now() >= deadline),
    )
    .await?;
    let elapsed = started.elapsed().as_secs_f64();
    let flushed = Instant::now();
    drained(&client, &wh).await?;
    let drain = flushed.elapsed().as_secs_f64();
    let cpu = match (cpu_before, server_cpu_seconds(&client).await) {
        (Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    let mib = bytes as f64 / (1024.0 * 1024.0);
    println!(
        "floe bench otlp: {} clients, {} records a request ({:.0} B protobuf, {:.0} B OTLP JSON a record), {:.1} s",
        args.concurrency, args.batch_records, protobuf_per_record, json_per_record, elapsed
    );
    println!(
        "  throughput: {:.0} records/s, {:.1} MiB/s of OTLP protobuf ({failures} requests refused); all committed {drain:.2} s after the phase",
        records as f64 / elapsed,
        mib / elapsed,
    );
    match cpu {
        Some(cpu) if cpu > 0.0 => println!(
            "  server CPU {cpu:.1} s (acknowledging and committing): {:.0} records/s and {:.1} MiB/s per core",
            records as f64 / cpu,
            mib / cpu
        ),
        _ => println!("  server CPU: not reported by /metrics"),
    }

    // More records, unmeasured, until the table holds what the queries read.
    let mut total = sql_count(&client, &wh, "SELECT count(*) FROM otel.logs").await? as u64;
    if args.query_records > total {
        let missing = args.query_records - total;
        let filled = send_while(
            &client,
            &path,
            &bodies,
            args.concurrency,
            Arc::new(move |sent| sent >= missing),
        )
        .await?;
        drained(&client, &wh).await?;
        total += filled.0;
    }

    // Freshness: a probe's acknowledgement to its first sight in a Floe SQL query, and to its
    // commit (when every engine sees it).
    let mut visible = Vec::new();
    let mut committed = Vec::new();
    for probe in 0..args.probes {
        let mut request = request(&mut rng, 1, 1, now_ns());
        let resource = &mut request.resource_logs[0];
        resource.resource = Some(service_resource("bench-probe", 0));
        let marker = format!("probe-{probe}-{:08x}", rng.next() as u32);
        resource.scope_logs[0].log_records[0].attributes[9] = text("request.id", marker.clone());
        let sent = Instant::now();
        let answer = client
            .request(reqwest::Method::POST, &path)
            .header("Content-Type", "application/x-protobuf")
            .body(request.encode_to_vec())
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("probe {probe}: {}", answer.text().await?);
        }
        let acknowledged = Instant::now();
        let sql = format!(
            "SELECT count(*) FROM otel.logs WHERE service_name = 'bench-probe' AND attributes['request.id'] = '{marker}'"
        );
        while sql_count(&client, &wh, &sql).await? == 0 {
            if sent.elapsed() > Duration::from_secs(60) {
                bail!("probe {probe} not visible after 60 s");
            }
        }
        visible.push(acknowledged.elapsed().as_secs_f64() * 1000.0);
        drained(&client, &wh).await?;
        committed.push(acknowledged.elapsed().as_secs_f64() * 1000.0);
    }
    let quantile = |values: &mut Vec<f64>, q: f64| {
        values.sort_by(|a, b| a.total_cmp(b));
        values
            .get(((values.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    println!(
        "  acknowledged → queryable by Floe SQL on the node, {} probes: p50 {:.0} ms, p99 {:.0} ms; → committed (every engine): p50 {:.0} ms, p99 {:.0} ms",
        visible.len(),
        quantile(&mut visible, 0.5),
        quantile(&mut visible, 0.99),
        quantile(&mut committed, 0.5),
        quantile(&mut committed, 0.99),
    );

    println!("{size_line}");
    let files = data_files(&client, &wh).await?;

    if args.query_records == 0 {
        return Ok(());
    }
    queries(&args, &client, &files, total).await
}

/// The table's data files: path, records, bytes.
async fn data_files(client: &Client, warehouse: &str) -> anyhow::Result<Vec<Value>> {
    let files = client
        .call(
            reqwest::Method::POST,
            "/api/v1/sql",
            Some(json!({
                "sql": "SELECT file_path, record_count, file_size_in_bytes FROM otel.\"logs$files\" WHERE content = 0",
                "warehouse": warehouse,
            })),
        )
        .await?;
    Ok(files["rows"].as_array().cloned().unwrap_or_default())
}

/// A log search and aggregations over the table, Floe (over its HTTP SQL API) beside DuckDB
/// on the same Parquet files.
async fn queries(
    args: &OtlpBenchArgs,
    client: &Client,
    files: &[Value],
    records: u64,
) -> anyhow::Result<()> {
    let wh = &args.warehouse;
    let paths: Vec<String> = files
        .iter()
        .filter_map(|f| f["file_path"].as_str())
        .map(|p| p.strip_prefix("file://").unwrap_or(p).to_string())
        .collect();
    if paths.iter().any(|p| p.contains("://")) {
        bail!("the DuckDB side reads local files only; use a warehouse on local storage");
    }
    let list = paths
        .iter()
        .map(|p| format!("'{}'", p.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(",");
    let setup = vec![
        "CREATE SCHEMA otel".to_string(),
        format!("CREATE VIEW otel.logs AS SELECT * FROM read_parquet([{list}])"),
    ];
    let answers = std::env::temp_dir().join(format!("floe-bench-otlp-{}", std::process::id()));
    std::fs::create_dir_all(&answers)?;
    let duck = DuckDb::start(args.duckdb_python.clone(), &setup, &answers, true)?;
    let Some(mut duck) = duck else {
        bail!("no Python with the duckdb module (--duckdb-python)");
    };
    // A trace id that is in the table, for the needle search.
    let needle = client
        .call(
            reqwest::Method::POST,
            "/api/v1/sql",
            Some(json!({
                "sql": "SELECT trace_id FROM otel.logs WHERE trace_id IS NOT NULL LIMIT 1",
                "warehouse": wh,
            })),
        )
        .await?;
    let trace = needle["rows"][0]["trace_id"]
        .as_str()
        .context("a trace id")?
        .to_string();
    let statements = [
        (
            "search: errors mentioning a timeout, newest 100",
            "SELECT time, service_name, body FROM otel.logs WHERE severity_number >= 17 \
             AND body LIKE '%timeout%' ORDER BY time DESC LIMIT 100"
                .to_string(),
        ),
        (
            "search: one trace's records",
            format!("SELECT time, service_name, body FROM otel.logs WHERE trace_id = '{trace}'"),
        ),
        (
            "aggregate: records and mean duration by service and severity",
            "SELECT service_name, severity_text, count(*) AS n, \
             avg(CAST(attributes['duration_ms'] AS DOUBLE)) AS mean_ms FROM otel.logs \
             GROUP BY service_name, severity_text ORDER BY service_name, severity_text"
                .to_string(),
        ),
        (
            "aggregate: warnings and errors per minute",
            "SELECT date_trunc('minute', time) AS minute, count(*) AS n FROM otel.logs \
             WHERE severity_number >= 13 GROUP BY 1 ORDER BY 1"
                .to_string(),
        ),
    ];
    println!(
        "  queries over {records} records in {} files: median of {} runs, Floe (HTTP SQL API) beside DuckDB (Python module) on the same Parquet files",
        paths.len(),
        args.runs,
    );
    let mut ratios = Vec::new();
    for (i, (name, sql)) in statements.iter().enumerate() {
        let floe_rows = floe_query(client, wh, sql).await?.1;
        let duck_rows = duck.warm_up(i, sql)?;
        if floe_rows != duck_rows {
            bail!("{name}: Floe answers {floe_rows} rows, DuckDB {duck_rows}");
        }
        let (mut floe, mut duckdb) = (Vec::new(), Vec::new());
        for _ in 0..args.runs.max(1) {
            floe.push(floe_query(client, wh, sql).await?.0);
            duckdb.push(duck.time(sql)?);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let (f, d) = (median(&mut floe), median(&mut duckdb));
        ratios.push(f / d);
        println!(
            "    {name}: Floe {f:.0} ms, DuckDB {d:.0} ms (floe/duckdb {:.2}), {floe_rows} rows",
            f / d
        );
    }
    let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
    println!("    geometric mean floe/duckdb {geo:.2}");
    duck.finish()?;
    let _ = std::fs::remove_dir_all(&answers);
    Ok(())
}

/// One Floe query's time (ms, as the client sees it) and row count.
async fn floe_query(client: &Client, warehouse: &str, sql: &str) -> anyhow::Result<(f64, usize)> {
    let started = Instant::now();
    let answer = client
        .call(
            reqwest::Method::POST,
            "/api/v1/sql",
            Some(json!({"sql": sql, "warehouse": warehouse})),
        )
        .await?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let rows = answer["rows"].as_array().map(Vec::len).unwrap_or(0);
    Ok((ms, rows))
}
