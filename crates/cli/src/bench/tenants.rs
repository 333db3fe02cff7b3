//! `floe bench tenants`: noisy-neighbour isolation on a running server. Tenant B sends OTLP
//! log requests at a steady pace and queries its logs; alone, then while tenant A sends at
//! ten times its `ingest-records-per-second` limit, then alone again (its table grows, so the
//! two alone phases bracket the other). Reported: B's ingest and query latency
//! (p50, p99) alone and beside A with their ratios, B's refusals (expected none), and A's
//! offered, accepted and refused load.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use hdrhistogram::Histogram;
use prost::Message;
use reqwest::Method;
use serde_json::json;

use super::otlp::{Rng, request};
use crate::client::Client;

#[derive(Args, Debug, Clone)]
pub struct TenantsBenchArgs {
    #[command(flatten)]
    server: crate::client::ServerArgs,
    /// Where the benchmark's two warehouses (`bench-noisy`, `bench-quiet`) keep their files
    /// when it creates them (a directory the server can write).
    #[arg(long, default_value = "./floe-bench-tenants")]
    dir: PathBuf,
    /// Tenant A's `ingest-records-per-second` limit (its burst is one second's worth);
    /// by default what B sends.
    #[arg(long, default_value_t = 10_000)]
    noisy_limit: u64,
    /// Tenant B's requests per second.
    #[arg(long, default_value_t = 20)]
    quiet_rate: u64,
    /// Log records per request (both tenants).
    #[arg(long, default_value_t = 500)]
    batch_records: usize,
    /// Seconds each phase runs.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Concurrent clients of tenant A.
    #[arg(long, default_value_t = 4)]
    noisy_clients: usize,
}

const NOISY: &str = "bench-noisy";
const QUIET: &str = "bench-quiet";

/// Latencies in microseconds.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

/// What one tenant's load saw in one phase.
#[derive(Default)]
struct Seen {
    ingest: Option<Histogram<u64>>,
    query: Option<Histogram<u64>>,
    sent: u64,
    accepted: u64,
    refused: u64,
    failed: u64,
}

fn ms(h: &Option<Histogram<u64>>, q: f64) -> f64 {
    h.as_ref()
        .map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1000.0)
}

async fn ensure_warehouse(
    client: &Client,
    name: &str,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::create_dir_all(&path)?;
    let path = std::fs::canonicalize(&path)?;
    let answer = client
        .request(Method::POST, "/api/v1/warehouses")
        .json(&json!({"name": name, "storage": {"type": "local", "path": path}}))
        .send()
        .await?;
    if !(answer.status().is_success() || answer.status() == reqwest::StatusCode::CONFLICT) {
        bail!("create warehouse {name}: {}", answer.text().await?);
    }
    Ok(())
}

/// Sends `bodies` for `tenant` at `per_second` requests per second from `clients`
/// clients for `seconds`, timing each request.
async fn paced(
    client: &Arc<Client>,
    tenant: &str,
    bodies: &Arc<Vec<Vec<u8>>>,
    records: u64,
    per_second: f64,
    clients: usize,
    seconds: u64,
) -> Seen {
    let path = format!("/otlp/{tenant}/v1/logs");
    let interval = Duration::from_secs_f64(clients as f64 / per_second);
    let until = Instant::now() + Duration::from_secs(seconds);
    let counters = Arc::new([
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    ]);
    let mut workers = Vec::new();
    for worker in 0..clients {
        let (client, bodies, path, counters) = (
            client.clone(),
            bodies.clone(),
            path.clone(),
            counters.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut latencies = histogram();
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n = worker;
            while Instant::now() < until {
                ticks.tick().await;
                let body = bodies[n % bodies.len()].clone();
                n += clients;
                let started = Instant::now();
                let answer = client
                    .request(Method::POST, &path)
                    .header("Content-Type", "application/x-protobuf")
                    .body(body)
                    .send()
                    .await;
                counters[0].fetch_add(records, Ordering::Relaxed);
                match answer.map(|a| a.status()) {
                    Ok(status) if status.is_success() => {
                        let _ = latencies.record(started.elapsed().as_micros() as u64);
                        counters[1].fetch_add(records, Ordering::Relaxed);
                    }
                    Ok(status) if status.as_u16() == 429 => {
                        counters[2].fetch_add(records, Ordering::Relaxed);
                    }
                    _ => {
                        counters[3].fetch_add(records, Ordering::Relaxed);
                    }
                }
            }
            latencies
        }));
    }
    let mut all = histogram();
    for worker in workers {
        if let Ok(h) = worker.await {
            let _ = all.add(h);
        }
    }
    Seen {
        ingest: Some(all),
        query: None,
        sent: counters[0].load(Ordering::Relaxed),
        accepted: counters[1].load(Ordering::Relaxed),
        refused: counters[2].load(Ordering::Relaxed),
        failed: counters[3].load(Ordering::Relaxed),
    }
}

/// Runs `statement` in `tenant` twice a second for `seconds`, timing each.
async fn querying(client: Arc<Client>, tenant: &str, seconds: u64) -> (Histogram<u64>, u64) {
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut latencies = histogram();
    let mut failed = 0;
    let statement = "SELECT severity_text, count(*) AS n FROM otel.logs \
                     WHERE time > now() - INTERVAL '1 hour' GROUP BY severity_text";
    while Instant::now() < until {
        let started = Instant::now();
        let answer = client
            .request(Method::POST, "/api/v1/sql")
            .json(&json!({"sql": statement, "warehouse": tenant}))
            .send()
            .await;
        match answer {
            Ok(a) if a.status().is_success() => {
                let _ = a.bytes().await;
                let _ = latencies.record(started.elapsed().as_micros() as u64);
            }
            _ => failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    (latencies, failed)
}

/// One phase: B's paced ingest and queries, and A's noise when `noisy` is on.
async fn phase(
    client: &Arc<Client>,
    args: &TenantsBenchArgs,
    bodies: &Arc<Vec<Vec<u8>>>,
    noisy: bool,
) -> (Seen, Option<Seen>) {
    let records = args.batch_records as u64;
    let noise = noisy.then(|| {
        let (client, bodies) = (client.clone(), bodies.clone());
        let rate = 10.0 * args.noisy_limit as f64 / records as f64;
        let (clients, seconds) = (args.noisy_clients.max(1), args.seconds);
        tokio::spawn(async move {
            paced(&client, NOISY, &bodies, records, rate, clients, seconds).await
        })
    });
    let queries = tokio::spawn(querying(client.clone(), QUIET, args.seconds));
    let mut quiet = paced(
        client,
        QUIET,
        bodies,
        records,
        args.quiet_rate as f64,
        2,
        args.seconds,
    )
    .await;
    if let Ok((latencies, failed)) = queries.await {
        quiet.query = Some(latencies);
        quiet.failed += failed;
    }
    let noise = match noise {
        Some(task) => task.await.ok(),
        None => None,
    };
    (quiet, noise)
}

pub async fn run(args: TenantsBenchArgs) -> anyhow::Result<()> {
    let client = Arc::new(args.server.connect().await?);
    ensure_warehouse(&client, NOISY, &args.dir).await?;
    ensure_warehouse(&client, QUIET, &args.dir).await?;
    let limits = json!({
        "ingest-records-per-second": args.noisy_limit,
    });
    client
        .call(
            Method::PUT,
            &format!("/api/v1/tenants/{NOISY}/limits"),
            Some(limits),
        )
        .await?;
    let mut rng = Rng(0x7e4a);
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64
        - 600_000_000_000;
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..64u64)
            .map(|i| {
                request(&mut rng, args.batch_records, 4, start + i * 1_000_000_000).encode_to_vec()
            })
            .collect(),
    );
    // Warm up: both tenants' tables exist and the server's caches are warm.
    for tenant in [NOISY, QUIET] {
        let answer = client
            .request(Method::POST, &format!("/otlp/{tenant}/v1/logs"))
            .header("Content-Type", "application/x-protobuf")
            .body(bodies[0].clone())
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("first request of {tenant}: {}", answer.text().await?);
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    println!(
        "floe bench tenants: B at {} requests/s of {} records, queried twice a second; A at 10 x its limit of {} records/s; {} s per phase",
        args.quiet_rate, args.batch_records, args.noisy_limit, args.seconds
    );
    let (alone, _) = phase(&client, &args, &bodies, false).await;
    // Let the first phase's commits settle before the second.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (beside, noise) = phase(&client, &args, &bodies, true).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // B alone again: its table grew meanwhile, so "alone" brackets "beside A" in time.
    let (after, _) = phase(&client, &args, &bodies, false).await;

    let row = |name: &str, seen: &Seen| {
        println!(
            "  B {name:<12} ingest p50 {:>7.1} ms  p99 {:>7.1} ms | query p50 {:>7.1} ms  p99 {:>7.1} ms | refused {} failed {}",
            ms(&seen.ingest, 0.5),
            ms(&seen.ingest, 0.99),
            ms(&seen.query, 0.5),
            ms(&seen.query, 0.99),
            seen.refused,
            seen.failed
        );
    };
    row("alone", &alone);
    row("beside A", &beside);
    row("alone again", &after);
    let ratio = |q: f64, f: fn(&Seen) -> &Option<Histogram<u64>>| {
        let alone = (ms(f(&alone), q) + ms(f(&after), q)) / 2.0;
        ms(f(&beside), q) / alone.max(0.001)
    };
    println!(
        "  B beside A / alone (mean of before and after): ingest p50 {:.2}, p99 {:.2}; query p50 {:.2}, p99 {:.2}",
        ratio(0.5, |s| &s.ingest),
        ratio(0.99, |s| &s.ingest),
        ratio(0.5, |s| &s.query),
        ratio(0.99, |s| &s.query)
    );
    if let Some(noise) = noise {
        let secs = args.seconds.max(1) as f64;
        println!(
            "  A offered {:.0} records/s, accepted {:.0} records/s (limit {}), refused {:.0}% of its records with 429",
            noise.sent as f64 / secs,
            noise.accepted as f64 / secs,
            args.noisy_limit,
            100.0 * noise.refused as f64 / noise.sent.max(1) as f64
        );
    }
    if alone.refused + beside.refused + after.refused > 0 {
        bail!("tenant B was refused: its isolation failed");
    }
    Ok(())
}
