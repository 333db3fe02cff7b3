//! `floe bench ingest`: HTTP ingestion against a running server — rows and MiB per second
//! (and per core of server CPU), freshness from a row's acknowledgement to its visibility in a
//! query, and data files written per commit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::client::Client;

#[derive(Args, Debug, Clone)]
pub struct IngestBenchArgs {
    #[command(flatten)]
    server: crate::client::ServerArgs,
    #[arg(long, default_value = "default")]
    warehouse: String,
    /// Namespace of the benchmark's table (created when missing; the table is recreated).
    #[arg(long, default_value = "bench_ingest")]
    namespace: String,
    /// Concurrent clients posting batches.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Rows per request.
    #[arg(long, default_value_t = 5_000)]
    batch_rows: usize,
    /// Seconds the throughput phase runs for.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Single-row requests whose freshness is measured.
    #[arg(long, default_value_t = 40)]
    probes: usize,
    /// Measure Kafka ingestion instead: a pipeline in this process reading librdkafka's mock
    /// cluster into an embedded catalog under `--dir` (no server needed).
    #[arg(long)]
    kafka: bool,
    /// Directory of the Kafka benchmark's embedded catalog (recreated).
    #[arg(long, default_value = "./floe-bench-kafka")]
    dir: std::path::PathBuf,
    /// Records the Kafka pipeline catches up with. Against the mock cluster a pipeline stalls
    /// after about 4.5 MiB per partition (not diagnosed yet): keep under ~30,000 records per
    /// partition.
    #[arg(long, default_value_t = 640_000)]
    kafka_records: usize,
    /// Partitions of the Kafka benchmark's topic.
    #[arg(long, default_value_t = 32)]
    kafka_partitions: i32,
    /// Partitions of the topic whose memory use is measured with all of them active.
    #[arg(long, default_value_t = 1000)]
    kafka_wide_partitions: i32,
}

/// One NDJSON request body of `rows` events starting at id `first`, about 150 bytes a row.
pub(super) fn events(first: u64, rows: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(rows * 160);
    const EVENTS: [&str; 4] = ["view", "click", "buy", "scroll"];
    for id in first..first + rows as u64 {
        let event = EVENTS[(id % 4) as usize];
        let line = json!({
            "id": id,
            "ts": format!("2026-11-30T{:02}:{:02}:{:02}.{:06}", (id / 3_600_000) % 24, (id / 60_000) % 60, (id / 1000) % 60, id % 1_000_000),
            "user": format!("user-{}", id % 9973),
            "event": event,
            "value": (id % 1000) as f64 / 7.0,
            "page": format!("/catalog/item/{}", id % 50_000),
        });
        serde_json::to_writer(&mut body, &line).expect("JSON to memory");
        body.push(b'\n');
    }
    body
}

pub(super) async fn server_cpu_seconds(client: &Client) -> Option<f64> {
    let text = client
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("process_cpu_seconds_total "))
        .and_then(|v| v.trim().parse().ok())
}

pub(super) async fn sql_count(client: &Client, warehouse: &str, sql: &str) -> anyhow::Result<i64> {
    let answer = client
        .call(
            reqwest::Method::POST,
            "/api/v1/sql",
            Some(json!({"sql": sql, "warehouse": warehouse})),
        )
        .await?;
    let row = &answer["rows"][0];
    let value = row
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(Value::as_i64)
        .context("a count")?;
    Ok(value)
}

pub async fn run(args: IngestBenchArgs) -> anyhow::Result<()> {
    if args.kafka {
        return super::kafka::run(super::kafka::KafkaBench {
            dir: args.dir,
            records: args.kafka_records,
            partitions: args.kafka_partitions,
            wide_partitions: args.kafka_wide_partitions,
            probes: args.probes,
        })
        .await;
    }
    let client = Arc::new(args.server.connect().await?);
    let (wh, ns) = (args.warehouse.clone(), args.namespace.clone());
    let table = "events";
    let _ = client
        .call(
            reqwest::Method::POST,
            &format!("/catalog/v1/{wh}/namespaces"),
            Some(json!({"namespace": [ns]})),
        )
        .await;
    let _ = client
        .call(
            reqwest::Method::DELETE,
            &format!("/catalog/v1/{wh}/namespaces/{ns}/tables/{table}"),
            None,
        )
        .await;
    let path = format!("/ingest/v1/{wh}/{ns}/{table}");
    let created = client
        .request(
            reqwest::Method::POST,
            &format!("{path}?create=true&wait=commit"),
        )
        .header("Content-Type", "application/x-ndjson")
        .body(events(0, 1))
        .send()
        .await?;
    if !created.status().is_success() {
        bail!("create the table: {}", created.text().await?);
    }

    // Throughput: concurrent clients post pre-built bodies for the duration.
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..args.concurrency.max(1) * 2)
            .map(|i| {
                events(
                    1_000_000_000 + (i * args.batch_rows) as u64,
                    args.batch_rows,
                )
            })
            .collect(),
    );
    let rows = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let cpu_before = server_cpu_seconds(&client).await;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);
    let mut workers = Vec::new();
    for worker in 0..args.concurrency.max(1) {
        let (client, bodies, rows, bytes, failures, path) = (
            client.clone(),
            bodies.clone(),
            rows.clone(),
            bytes.clone(),
            failures.clone(),
            path.clone(),
        );
        let batch_rows = args.batch_rows as u64;
        workers.push(tokio::spawn(async move {
            let mut n = worker;
            while Instant::now() < deadline {
                let body = bodies[n % bodies.len()].clone();
                n += 1;
                let size = body.len() as u64;
                let answer = client
                    .request(reqwest::Method::POST, &path)
                    .header("Content-Type", "application/x-ndjson")
                    .body(body)
                    .send()
                    .await;
                match answer {
                    Ok(a) if a.status().is_success() => {
                        rows.fetch_add(batch_rows, Ordering::Relaxed);
                        bytes.fetch_add(size, Ordering::Relaxed);
                    }
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Everything acknowledged, committed: one more row, waited for.
    let flushed = Instant::now();
    client
        .request(reqwest::Method::POST, &format!("{path}?wait=commit"))
        .header("Content-Type", "application/x-ndjson")
        .body(events(1, 1))
        .send()
        .await?;
    let drain = flushed.elapsed().as_secs_f64();
    let cpu = match (cpu_before, server_cpu_seconds(&client).await) {
        (Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    let total_rows = rows.load(Ordering::Relaxed);
    let total_mib = bytes.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0);

    // Freshness: a row's acknowledgement to its first sight in a query.
    let mut freshness = Vec::new();
    for probe in 0..args.probes {
        let id = 2_000_000_000u64 + probe as u64;
        let sent = Instant::now();
        let answer = client
            .request(reqwest::Method::POST, &path)
            .header("Content-Type", "application/x-ndjson")
            .body(events(id, 1))
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("probe {probe}: {}", answer.text().await?);
        }
        let sql = format!("SELECT count(*) FROM {ns}.{table} WHERE id = {id}");
        loop {
            if sql_count(&client, &wh, &sql).await? > 0 {
                break;
            }
            if sent.elapsed() > Duration::from_secs(60) {
                bail!("probe {probe} not visible after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        freshness.push(sent.elapsed().as_secs_f64() * 1000.0);
    }
    freshness.sort_by(|a, b| a.total_cmp(b));
    let quantile = |q: f64| {
        freshness
            .get(((freshness.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };

    let snapshots = sql_count(
        &client,
        &wh,
        &format!("SELECT count(*) FROM {ns}.\"{table}$snapshots\""),
    )
    .await?;
    let files = sql_count(
        &client,
        &wh,
        &format!("SELECT count(*) FROM {ns}.\"{table}$files\""),
    )
    .await?;

    println!(
        "floe bench ingest (HTTP, NDJSON): {} clients, {} rows a request, {:.1} s",
        args.concurrency, args.batch_rows, elapsed
    );
    println!(
        "  throughput: {:.0} rows/s, {:.1} MiB/s ({} requests failed); last rows committed {:.2} s after the phase ended",
        total_rows as f64 / elapsed,
        total_mib / elapsed,
        failures.load(Ordering::Relaxed),
        drain
    );
    match cpu {
        Some(cpu) if cpu > 0.0 => println!(
            "  server CPU: {:.1} s, so {:.1} MiB/s and {:.0} rows/s per core",
            cpu,
            total_mib / cpu,
            total_rows as f64 / cpu
        ),
        _ => println!("  server CPU: not reported by /metrics"),
    }
    println!(
        "  freshness (acknowledged → visible to a query), {} probes: p50 {:.0} ms, p99 {:.0} ms",
        freshness.len(),
        quantile(0.5),
        quantile(0.99)
    );
    println!(
        "  table: {snapshots} snapshots, {files} data files ({:.2} files per commit)",
        files as f64 / snapshots.max(1) as f64
    );
    Ok(())
}
