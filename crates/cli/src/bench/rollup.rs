//! `floe bench rollup`: a month of OpenTelemetry logs into a running server with rollups on;
//! the rollup jobs' time per raw row (as they run after each commit), and a month-long
//! dashboard query over the raw table beside the same question over the hourly rollup — its
//! time ratio and how far the rollup's answer is from the exact one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use prost::Message;
use reqwest::Method;
use serde_json::{Value, json};

use super::otlp::{Rng, request};
use crate::client::Client;

#[derive(Args, Debug, Clone)]
pub struct RollupBenchArgs {
    #[command(flatten)]
    server: crate::client::ServerArgs,
    /// The warehouse written to; its `otel` log tables are dropped first.
    #[arg(long, default_value = "default")]
    warehouse: String,
    /// Log records sent, spread over the last 30 days.
    #[arg(long, default_value_t = 3_000_000)]
    records: usize,
    /// Log records per request.
    #[arg(long, default_value_t = 2_000)]
    batch_records: usize,
    /// Timed runs of each query (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

const RAW: &str = "SELECT date_trunc('day', time) AS day, service_name, count(*) AS records, \
     count(DISTINCT trace_id) AS traces FROM otel.logs WHERE time >= now() - INTERVAL '31 days' \
     GROUP BY 1, 2 ORDER BY 1, 2";
const ROLLED: &str = "SELECT date_trunc('day', bucket) AS day, service_name, \
     sum(records) AS records, hll_estimate(hll_merge(trace_ids)) AS traces FROM otel.logs_1h \
     WHERE bucket >= now() - INTERVAL '31 days' GROUP BY 1, 2 ORDER BY 1, 2";

async fn sql(client: &Client, warehouse: &str, statement: &str) -> anyhow::Result<Vec<Value>> {
    let answer = client
        .call(
            Method::POST,
            "/api/v1/sql",
            Some(json!({"sql": statement, "warehouse": warehouse})),
        )
        .await?;
    Ok(answer["rows"].as_array().cloned().unwrap_or_default())
}

/// Median milliseconds of `runs` runs of `statement`, and its last answer.
async fn timed(
    client: &Client,
    warehouse: &str,
    statement: &str,
    runs: usize,
) -> anyhow::Result<(f64, Vec<Value>)> {
    let mut times = Vec::new();
    let mut answer = Vec::new();
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        answer = sql(client, warehouse, statement).await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok((times[times.len() / 2], answer))
}

fn number(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0.0)
}

pub async fn run(args: RollupBenchArgs) -> anyhow::Result<()> {
    let client = Arc::new(args.server.connect().await?);
    let wh = args.warehouse.clone();
    for table in ["logs", "logs_1m", "logs_1h"] {
        let _ = client
            .call(
                Method::DELETE,
                &format!("/catalog/v1/{wh}/namespaces/otel/tables/{table}?purgeRequested=true"),
                None,
            )
            .await;
    }
    client
        .call(
            Method::PUT,
            "/api/v1/maintenance/policies",
            Some(
                json!({"on": {"type": "warehouse", "warehouse": wh}, "policy": {"rollups": true}}),
            ),
        )
        .await?;
    let requests = args.records.div_ceil(args.batch_records);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64;
    let month = 30 * 86_400 * 1_000_000_000u64;
    let step = month / requests as u64;
    let mut rng = Rng(0xda7a);
    let path = format!("/otlp/{wh}/v1/logs");
    let started = Instant::now();
    for i in 0..requests {
        let body = request(
            &mut rng,
            args.batch_records,
            8,
            now - month + i as u64 * step,
        )
        .encode_to_vec();
        let answer = client
            .request(Method::POST, &path)
            .header("Content-Type", "application/x-protobuf")
            .body(body)
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("OTLP request: {}", answer.text().await?);
        }
    }
    let sent = requests * args.batch_records;
    let ingest_seconds = started.elapsed().as_secs_f64();
    // Everything committed, and the hourly rollup caught up with it.
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let raw = sql(&client, &wh, "SELECT count(*) AS n FROM otel.logs").await?;
        let rolled = sql(&client, &wh, "SELECT sum(records) AS n FROM otel.logs_1h")
            .await
            .unwrap_or_default();
        let raw = raw.first().map(|r| number(&r["n"])).unwrap_or(0.0) as usize;
        let rolled = rolled.first().map(|r| number(&r["n"])).unwrap_or(0.0) as usize;
        if raw == sent && rolled == sent {
            break;
        }
        if Instant::now() > deadline {
            bail!("the rollups did not catch up in 30 minutes ({rolled} of {sent} rows)");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let jobs = client
        .call(
            Method::GET,
            &format!("/api/v1/jobs?warehouse={wh}&kind=rollup&status=succeeded&limit=1000"),
            None,
        )
        .await?;
    let jobs = jobs["jobs"].as_array().cloned().unwrap_or_default();
    let job_ms: f64 = jobs
        .iter()
        .filter_map(|j| Some((j["finished-at-ms"].as_i64()? - j["started-at-ms"].as_i64()?) as f64))
        .sum();
    let rollup_rows: f64 = sql(&client, &wh, "SELECT count(*) AS n FROM otel.logs_1h")
        .await?
        .first()
        .map(|r| number(&r["n"]))
        .context("the rollup's rows")?;

    let (raw_ms, raw) = timed(&client, &wh, RAW, args.runs).await?;
    let (rolled_ms, rolled) = timed(&client, &wh, ROLLED, args.runs).await?;
    let mut worst = 0.0f64;
    let mut exact_counts = raw.len() == rolled.len();
    for (a, b) in raw.iter().zip(&rolled) {
        exact_counts &= number(&a["records"]) == number(&b["records"]);
        let (t, e) = (number(&a["traces"]), number(&b["traces"]));
        if t > 0.0 {
            worst = worst.max((e - t).abs() / t);
        }
    }
    println!(
        "floe bench rollup: {sent} log records over 30 days sent in {ingest_seconds:.1} s ({:.0} records/s); rollups per minute and per hour",
        sent as f64 / ingest_seconds
    );
    println!(
        "  rollup jobs: {} runs, {:.1} s in all = {:.2} µs per raw row for both rollups; the hourly rollup holds {rollup_rows} rows ({:.0} raw rows each)",
        jobs.len(),
        job_ms / 1000.0,
        job_ms * 1000.0 / sent as f64,
        sent as f64 / rollup_rows.max(1.0)
    );
    println!(
        "  month dashboard (records and distinct traces per day and service, {} groups), median of {} runs: raw {raw_ms:.1} ms, hourly rollup {rolled_ms:.1} ms = {:.3} of raw ({:.1}x faster); counts {}, distinct traces within {:.2} % of exact",
        raw.len(),
        args.runs,
        rolled_ms / raw_ms,
        raw_ms / rolled_ms,
        if exact_counts { "equal" } else { "DIFFER" },
        worst * 100.0
    );
    Ok(())
}
