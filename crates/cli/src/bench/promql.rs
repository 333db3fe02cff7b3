//! `floe bench promql`: PromQL latency against Prometheus holding the same samples.
//!
//! A Prometheus (Debian's 2.42 by default) is started with its remote-write receiver on and
//! an empty TSDB; the same generated series — counters, a classic histogram and gauges, with
//! `service` and `instance` labels, one sample every `--interval-secs` over the last
//! `--hours` — are remote-written to it and to a running Floe, in time order (as a Prometheus
//! sends them). Then the same `query_range` calls go to both, in alternating order: the query
//! set (the functions, aggregations and operators of the differential test, over these
//! series) one at a time, and a dashboard of 20 panels all at once as Grafana loads one. Each
//! answer is compared between the two (series by series, values within 1e-6), and the
//! median latencies and their ratio are reported.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

use super::ingest::sql_count;
use crate::client::Client;

#[derive(Args, Debug, Clone)]
pub struct PromqlBenchArgs {
    #[command(flatten)]
    server: crate::client::ServerArgs,
    /// The tenant (warehouse) written to; its `otel.metrics` is dropped first.
    #[arg(long, default_value = "default")]
    warehouse: String,
    /// The Prometheus binary to compare with.
    #[arg(long, default_value = "/usr/bin/prometheus")]
    prometheus: PathBuf,
    /// Series generated (the full form: 1,000,000).
    #[arg(long, default_value_t = 2_000)]
    series: usize,
    /// Hours of samples (the full form: 24).
    #[arg(long, default_value_t = 2)]
    hours: u64,
    /// Seconds between two samples of a series.
    #[arg(long, default_value_t = 30)]
    interval_secs: u64,
    /// Timed runs of each query per engine (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Points per series of a `query_range` (Grafana asks for about a panel's width).
    #[arg(long, default_value_t = 250)]
    points: u64,
}

/// The query set: the differential test's functions and operators over the generated series.
const QUERIES: &[&str] = &[
    "bench_requests_total",
    "rate(bench_requests_total[5m])",
    "sum by (service) (rate(bench_requests_total[5m]))",
    "sum without (instance) (increase(bench_requests_total[10m]))",
    "topk(5, rate(bench_requests_total[5m]))",
    "quantile(0.9, rate(bench_requests_total[5m]))",
    "histogram_quantile(0.99, sum by (le) (rate(bench_latency_seconds_bucket[5m])))",
    "histogram_quantile(0.5, sum by (service, le) (rate(bench_latency_seconds_bucket[5m])))",
    "avg_over_time(bench_memory_bytes[10m])",
    "max_over_time(bench_memory_bytes[10m]) - min_over_time(bench_memory_bytes[10m])",
    "deriv(bench_memory_bytes[10m])",
    "predict_linear(bench_memory_bytes[30m], 3600)",
    "bench_memory_bytes / on(service, instance) group_left sum by (service, instance) (rate(bench_requests_total[5m]))",
    "count by (service) (bench_memory_bytes > 5e8)",
    "irate(bench_requests_total[5m])",
    "changes(bench_memory_bytes[15m])",
    "max_over_time(rate(bench_requests_total[5m])[30m:1m])",
    "label_replace(sum by (service) (rate(bench_requests_total[5m])), \"svc\", \"$1\", \"service\", \"(.*)\")",
];

/// A dashboard: 20 panels loaded at once.
const DASHBOARD: &[&str] = &[
    "sum(rate(bench_requests_total[5m]))",
    "sum by (service) (rate(bench_requests_total[5m]))",
    "sum by (code) (rate(bench_requests_total[5m]))",
    "sum by (service) (rate(bench_requests_total{code=\"500\"}[5m])) / sum by (service) (rate(bench_requests_total[5m]))",
    "histogram_quantile(0.5, sum by (le) (rate(bench_latency_seconds_bucket[5m])))",
    "histogram_quantile(0.9, sum by (le) (rate(bench_latency_seconds_bucket[5m])))",
    "histogram_quantile(0.99, sum by (le) (rate(bench_latency_seconds_bucket[5m])))",
    "histogram_quantile(0.99, sum by (service, le) (rate(bench_latency_seconds_bucket[5m])))",
    "avg(bench_memory_bytes)",
    "max by (service) (bench_memory_bytes)",
    "min by (service) (bench_memory_bytes)",
    "topk(10, bench_memory_bytes)",
    "count(bench_memory_bytes)",
    "sum by (service) (increase(bench_requests_total[1h]))",
    "avg_over_time(bench_memory_bytes{service=\"svc-1\"}[10m])",
    "rate(bench_requests_total{service=\"svc-2\"}[5m])",
    "sum(rate(bench_latency_seconds_count[5m])) by (service)",
    "sum(rate(bench_latency_seconds_sum[5m])) by (service) / sum(rate(bench_latency_seconds_count[5m])) by (service)",
    "stddev by (service) (bench_memory_bytes)",
    "count(count by (instance) (bench_requests_total))",
];

const SERVICES: usize = 20;
const BUCKETS: [&str; 6] = ["0.05", "0.1", "0.25", "0.5", "1", "+Inf"];

/// One generated series: its labels and how its value moves.
struct Generated {
    labels: Vec<(String, String)>,
    kind: Kind,
    seed: u64,
}

enum Kind {
    Counter,
    /// A classic histogram bucket: cumulative, so higher bounds count more.
    Bucket(usize),
    Gauge,
}

fn generate(count: usize) -> Vec<Generated> {
    let mut out = Vec::with_capacity(count);
    let mut i = 0usize;
    while out.len() < count {
        let service = format!("svc-{}", i % SERVICES);
        let instance = format!("10.0.{}.{}:9100", i / 250, i % 250);
        let base = |name: &str| {
            vec![
                ("__name__".to_string(), name.to_string()),
                ("job".to_string(), "bench".to_string()),
                ("service".to_string(), service.clone()),
                ("instance".to_string(), instance.clone()),
            ]
        };
        for code in ["200", "500"] {
            let mut labels = base("bench_requests_total");
            labels.push(("code".into(), code.into()));
            out.push(Generated {
                labels,
                kind: Kind::Counter,
                seed: out.len() as u64,
            });
        }
        for (b, le) in BUCKETS.iter().enumerate() {
            let mut labels = base("bench_latency_seconds_bucket");
            labels.push(("le".into(), le.to_string()));
            out.push(Generated {
                labels,
                kind: Kind::Bucket(b),
                seed: i as u64,
            });
        }
        out.push(Generated {
            labels: base("bench_latency_seconds_count"),
            kind: Kind::Bucket(BUCKETS.len() - 1),
            seed: i as u64,
        });
        out.push(Generated {
            labels: base("bench_latency_seconds_sum"),
            kind: Kind::Counter,
            seed: i as u64 + 7,
        });
        out.push(Generated {
            labels: base("bench_memory_bytes"),
            kind: Kind::Gauge,
            seed: i as u64,
        });
        i += 1;
    }
    out.truncate(count);
    out
}

impl Generated {
    /// The value at step `k`: counters grow by a seeded amount each step (reset now and then),
    /// buckets by a share of the count, gauges wander.
    fn value(&self, k: u64) -> f64 {
        let wobble = |x: u64| ((x.wrapping_mul(2_654_435_761) >> 7) % 1000) as f64 / 1000.0;
        match self.kind {
            Kind::Counter => {
                let k = k % 720; // a restart every 720 steps: a counter reset
                // Slopes distinct per series, so that `topk` has no near-ties to break.
                let slope = 1.0 + (self.seed % 13) as f64 + self.seed as f64 * 0.001;
                (k as f64) * slope + wobble(self.seed + k)
            }
            Kind::Bucket(b) => {
                let share = [0.2, 0.45, 0.7, 0.9, 0.97, 1.0][b];
                ((k as f64) * (3.0 + (self.seed % 5) as f64) * share).floor()
            }
            Kind::Gauge => {
                4e8 + 2e8 * ((k as f64 / 40.0) + self.seed as f64).sin()
                    + 1e6 * wobble(self.seed ^ k)
            }
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

struct Prometheus {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_prometheus(binary: &PathBuf, http: &reqwest::Client) -> anyhow::Result<Prometheus> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 1h\n")?;
    let port = free_port()?;
    let child = Command::new(binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--web.enable-remote-write-receiver")
        .arg("--storage.tsdb.retention.time=30d")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("start {}", binary.display()))?;
    let base = format!("http://127.0.0.1:{port}");
    let prometheus = Prometheus {
        child,
        base,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = http
            .get(format!("{}/-/ready", prometheus.base))
            .send()
            .await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            break;
        }

        if Instant::now() > deadline {
            bail!("Prometheus is not ready after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(prometheus)
}

async fn post_write(request: reqwest::RequestBuilder, body: Vec<u8>) -> anyhow::Result<()> {
    let answer = request
        .header("Content-Type", "application/x-protobuf")
        .header("Content-Encoding", "snappy")
        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
        .body(body)
        .send()
        .await?;
    if !answer.status().is_success() {
        bail!(
            "remote write refused: {} {}",
            answer.status(),
            answer.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

/// The same samples into both, step block by step block (time order, as a sender writes).
async fn load(
    args: &PromqlBenchArgs,
    floe: &Client,
    prometheus: &Prometheus,
    series: &[Generated],
    start_ms: i64,
    steps: u64,
) -> anyhow::Result<u64> {
    let interval_ms = args.interval_secs as i64 * 1000;
    // At most 2,000 samples a request, Prometheus's own `max_samples_per_send`: whole steps
    // of as many series as fit.
    const PER_REQUEST: usize = 2_000;
    let steps_per_request = (PER_REQUEST / series.len().max(1)).clamp(1, 60) as u64;
    let series_per_request = PER_REQUEST.min(series.len()).max(1);
    let mut sent = 0u64;
    let mut k = 0u64;
    while k < steps {
        let upto = (k + steps_per_request).min(steps);
        for chunk in series.chunks(series_per_request) {
            let samples: Vec<Vec<(i64, f64)>> = chunk
                .iter()
                .map(|g| {
                    (k..upto)
                        .map(|s| (start_ms + s as i64 * interval_ms, g.value(s)))
                        .collect()
                })
                .collect();
            let body = floe_stream::remote_write::v1::encode_samples(
                chunk
                    .iter()
                    .zip(&samples)
                    .map(|(g, s)| (g.labels.as_slice(), s.as_slice())),
            );
            sent += samples.iter().map(|s| s.len() as u64).sum::<u64>();
            let to_floe = post_write(
                floe.request(
                    reqwest::Method::POST,
                    &format!("/prometheus/{}/api/v1/write", args.warehouse),
                ),
                body.clone(),
            );
            let to_prometheus = post_write(
                floe.http.post(format!("{}/api/v1/write", prometheus.base)),
                body,
            );
            let (a, b) = tokio::join!(to_floe, to_prometheus);
            a.context("Floe")?;
            b.context("Prometheus")?;
        }
        k = upto;
    }
    Ok(sent)
}

/// One `query_range` answer's `data`, and how long it took.
async fn range_query(
    request: reqwest::RequestBuilder,
    query: &str,
    start: f64,
    end: f64,
    step: f64,
) -> anyhow::Result<(Value, Duration)> {
    let began = Instant::now();
    let answer = request
        .form(&[
            ("query", query.to_string()),
            ("start", start.to_string()),
            ("end", end.to_string()),
            ("step", step.to_string()),
        ])
        .send()
        .await?;
    let status = answer.status();
    let body: Value = answer.json().await?;
    let took = began.elapsed();
    if !status.is_success() || body["status"] != "success" {
        bail!("{query}: {status} {body}");
    }
    Ok((body["data"].clone(), took))
}

/// Where two answers differ (series matched by labels, values within 1e-6), if they do.
fn difference(a: &Value, b: &Value) -> Option<String> {
    type Points = std::collections::BTreeMap<String, Vec<Value>>;
    let index = |v: &Value| -> Points {
        v["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                (
                    s["metric"].to_string(),
                    s["values"].as_array().cloned().unwrap_or_default(),
                )
            })
            .collect()
    };
    let (x, y) = (index(a), index(b));
    let value = |v: &Value| {
        v[1].as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    for (k, xs) in &x {
        let Some(ys) = y.get(k) else {
            return Some(format!("{k} only in Floe's answer"));
        };
        for (p, q) in xs.iter().zip(ys) {
            let (u, w) = (value(p), value(q));
            let close = u == w
                || (u.is_nan() && w.is_nan())
                || (u - w).abs() <= 1e-6 * u.abs().max(w.abs());
            if p[0] != q[0] || !close {
                return Some(format!("{k}: Floe {p}, Prometheus {q}"));
            }
        }
        if xs.len() != ys.len() {
            return Some(format!(
                "{k}: {} points in Floe's answer, {} in Prometheus's",
                xs.len(),
                ys.len()
            ));
        }
    }
    y.keys()
        .find(|k| !x.contains_key(*k))
        .map(|k| format!("{k} only in Prometheus's answer"))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub async fn run(args: PromqlBenchArgs) -> anyhow::Result<()> {
    let floe = args.server.connect().await?;
    let _ = floe
        .call(
            reqwest::Method::POST,
            "/api/v1/sql",
            Some(json!({"sql": "DROP TABLE IF EXISTS otel.metrics", "warehouse": args.warehouse})),
        )
        .await;
    let prometheus = start_prometheus(&args.prometheus, &floe.http).await?;
    let series = generate(args.series);
    let steps = args.hours * 3600 / args.interval_secs;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let interval_ms = args.interval_secs as i64 * 1000;
    // Samples 37 ms off the second: subqueries evaluate on whole multiples of their step, so
    // samples on that grid would sit on window edges (see `end` below).
    let start_ms = (now_ms - steps as i64 * interval_ms) / interval_ms * interval_ms + 37;
    println!(
        "loading {} series × {} steps into Floe and Prometheus …",
        series.len(),
        steps
    );
    let began = Instant::now();
    let sent = load(&args, &floe, &prometheus, &series, start_ms, steps).await?;
    println!("  {sent} samples in {:.1} s", began.elapsed().as_secs_f64());
    // Every sample committed, so that the timings read Floe's table as any query would.
    let deadline = Instant::now() + Duration::from_secs(600);
    while (sql_count(&floe, &args.warehouse, "SELECT count(*) FROM otel.metrics")
        .await
        .unwrap_or(0) as u64)
        < sent
    {
        if Instant::now() > deadline {
            bail!("Floe has not committed {sent} samples after 10 minutes");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Evaluation times off the samples' grid by an odd number of milliseconds: Prometheus 2.42
    // closes a range on the left where 3.x (and Floe) open it, so a sample exactly on a
    // window's edge would count in one and not the other.
    let end = (start_ms + (steps as i64 - 1) * interval_ms) as f64 / 1000.0 - 0.0137;
    let start = start_ms as f64 / 1000.0 + 3600.0_f64.min(args.hours as f64 * 1800.0) + 0.0137;
    let step = ((end - start) / args.points as f64)
        .max(args.interval_secs as f64)
        .round();
    let floe_query = || {
        floe.request(
            reqwest::Method::POST,
            &format!("/prometheus/{}/api/v1/query_range", args.warehouse),
        )
    };
    let prom_query = || {
        floe.http
            .post(format!("{}/api/v1/query_range", prometheus.base))
    };

    println!(
        "\nquery_range over {:.1} h at a {step} s step ({} runs each, alternating):",
        (end - start) / 3600.0,
        args.runs
    );
    println!(
        "{:<100} {:>10} {:>12} {:>7} {:>6}",
        "query", "Floe ms", "Prometheus ms", "ratio", "same"
    );
    let (mut floe_total, mut prom_total, mut disagreements) = (Duration::ZERO, Duration::ZERO, 0);
    let mut rows = Vec::new();
    for q in QUERIES {
        let (mut f, mut p) = (Vec::new(), Vec::new());
        let mut same = true;
        for run in 0..args.runs {
            let (fa, pa) = if run % 2 == 0 {
                let a = range_query(floe_query(), q, start, end, step).await?;
                (a, range_query(prom_query(), q, start, end, step).await?)
            } else {
                let b = range_query(prom_query(), q, start, end, step).await?;
                (range_query(floe_query(), q, start, end, step).await?, b)
            };
            if let Some(why) = difference(&fa.0, &pa.0) {
                if same {
                    eprintln!("  {q}: {why}");
                }
                same = false;
            }
            f.push(fa.1);
            p.push(pa.1);
        }
        let (fm, pm) = (median(f), median(p));
        floe_total += fm;
        prom_total += pm;
        if !same {
            disagreements += 1;
        }
        let ratio = fm.as_secs_f64() / pm.as_secs_f64().max(1e-9);
        println!(
            "{:<100} {:>10.1} {:>12.1} {:>7.2} {:>6}",
            q,
            fm.as_secs_f64() * 1e3,
            pm.as_secs_f64() * 1e3,
            ratio,
            if same { "yes" } else { "NO" }
        );
        rows.push(json!({"query": q, "floe_ms": fm.as_secs_f64() * 1e3, "prometheus_ms": pm.as_secs_f64() * 1e3, "same": same}));
    }
    // The dashboard: every panel at once, as Grafana loads one.
    let (mut fd, mut pd) = (Vec::new(), Vec::new());
    for run in 0..args.runs {
        for engine in if run % 2 == 0 { [0, 1] } else { [1, 0] } {
            let began = Instant::now();
            let calls = DASHBOARD.iter().map(|q| {
                range_query(
                    if engine == 0 {
                        floe_query()
                    } else {
                        prom_query()
                    },
                    q,
                    start,
                    end,
                    step,
                )
            });
            for answer in futures::future::join_all(calls).await {
                answer?;
            }
            if engine == 0 {
                fd.push(began.elapsed())
            } else {
                pd.push(began.elapsed())
            }
        }
    }
    let (fd, pd) = (median(fd), median(pd));
    println!(
        "\nquery set, summed medians: Floe {:.0} ms, Prometheus {:.0} ms, ratio {:.2}; answers differing: {disagreements} of {}",
        floe_total.as_secs_f64() * 1e3,
        prom_total.as_secs_f64() * 1e3,
        floe_total.as_secs_f64() / prom_total.as_secs_f64().max(1e-9),
        QUERIES.len()
    );
    println!(
        "dashboard of {} panels at once: Floe {:.0} ms, Prometheus {:.0} ms, ratio {:.2}",
        DASHBOARD.len(),
        fd.as_secs_f64() * 1e3,
        pd.as_secs_f64() * 1e3,
        fd.as_secs_f64() / pd.as_secs_f64().max(1e-9)
    );
    let summary = json!({
        "series": series.len(), "hours": args.hours, "samples": sent, "step_s": step,
        "queries": rows, "dashboard_floe_ms": fd.as_secs_f64() * 1e3, "dashboard_prometheus_ms": pd.as_secs_f64() * 1e3,
        "disagreements": disagreements,
    });
    println!("{summary}");
    Ok(())
}
