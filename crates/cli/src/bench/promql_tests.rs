//! `floe bench promql-tests`: Prometheus's own PromQL test scripts through Floe's HTTP API.
//!
//! Each group of a script (up to a `clear`) gets a warehouse of its own; its `load`ed series
//! are remote-written to it (stale markers as Prometheus sends them), then every `eval` is
//! asked of `/prometheus/{warehouse}/api/v1/query` or `query_range` and judged as
//! Prometheus's runner judges it (`floe_promql::testscript::judge`). So the whole path is
//! under test — remote write, the rows of `otel.metrics`, the selectors read back through
//! Floe SQL, the evaluation and the JSON — not the evaluator alone (which
//! `crates/promql/tests/promqltest.rs` runs in memory). Statements that can read a native
//! histogram are skipped here: remote write's native histograms are written and read by other tests,
//! and the scripts' exact histogram layouts do not survive OTLP's dense buckets.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use floe_promql::testscript::{self, Command, Eval};
use floe_promql::{Labels, QueryValue};
use serde_json::{Value, json};

use crate::client::Client;

#[derive(Args, Debug, Clone)]
pub struct PromqlTestsArgs {
    #[command(flatten)]
    server: crate::client::ServerArgs,
    /// The directory of `.test` files (scripts/setup-promql-tests.sh prints it).
    #[arg(long, env = "FLOE_PROMQL_TESTDATA")]
    dir: PathBuf,
    /// A directory the server can write, where each group's warehouse is created.
    #[arg(long)]
    warehouse_dir: PathBuf,
    /// Only these files (names without `.test`, comma-separated); all by default.
    #[arg(long, value_delimiter = ',')]
    files: Vec<String>,
    /// Print each failing statement.
    #[arg(long)]
    verbose: bool,
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
}

pub async fn run(args: PromqlTestsArgs) -> anyhow::Result<()> {
    let client = args.server.connect().await?;
    let mut names: Vec<PathBuf> = std::fs::read_dir(&args.dir)
        .with_context(|| format!("read {}", args.dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "test"))
        .filter(|p| {
            args.files.is_empty()
                || p.file_stem()
                    .is_some_and(|s| args.files.iter().any(|f| f.as_str() == s))
        })
        .collect();
    names.sort();
    let mut total = Tally::default();
    let run_id = std::process::id();
    for path in &names {
        let stem = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let text = std::fs::read_to_string(path)?;
        let commands = match testscript::parse(&text) {
            Ok(c) => c,
            Err(e) => {
                println!("{stem}: does not parse ({e})");
                continue;
            }
        };
        let mut tally = Tally::default();
        let mut group = 0usize;
        let mut warehouse: Option<String> = None;
        // The group's series of native histograms (not written: see the module's doc).
        let mut histograms: Vec<Labels> = Vec::new();
        for command in commands {
            match command {
                Command::Clear => {
                    warehouse = None;
                    histograms.clear();
                }
                Command::Load {
                    interval_ms,
                    series,
                    with_nhcb,
                } => {
                    let name = match &warehouse {
                        Some(w) => w.clone(),
                        None => {
                            group += 1;
                            let w = format!("pt{run_id}-{}-{group}", stem.replace('_', "-"));
                            create_warehouse(&client, &w, &args.warehouse_dir).await?;
                            warehouse = Some(w.clone());
                            w
                        }
                    };
                    let points = testscript::load_points(interval_ms, &series, with_nhcb);
                    histograms.extend(
                        points
                            .iter()
                            .filter(|(_, p)| p.iter().any(|p| p.s.histogram().is_some()))
                            .map(|(l, _)| l.clone()),
                    );
                    write(&client, &name, &points).await?;
                }
                Command::Eval(ev) => {
                    let Some(w) = &warehouse else {
                        // Statements before any load (literals) run against an empty tenant.
                        group += 1;
                        let w = format!("pt{run_id}-{}-{group}", stem.replace('_', "-"));
                        create_warehouse(&client, &w, &args.warehouse_dir).await?;
                        warehouse = Some(w);
                        tally.record(
                            judge(&client, warehouse.as_deref().unwrap_or_default(), &ev).await,
                            &stem,
                            &ev,
                            args.verbose,
                        );
                        continue;
                    };
                    // A statement that can read a native histogram is left to the in-memory run.
                    let reads_histograms = floe_promql::selectors_of(&ev.expr).is_ok_and(|sets| {
                        sets.iter().any(|m| {
                            histograms
                                .iter()
                                .any(|l| m.iter().all(|m| m.matches_labels(l)))
                        })
                    });
                    if reads_histograms {
                        tally.skipped += 1;
                        continue;
                    }
                    tally.record(judge(&client, w, &ev).await, &stem, &ev, args.verbose);
                }
            }
        }
        println!(
            "{stem}: {} passed, {} failed, {} skipped (native histograms)",
            tally.passed, tally.failed, tally.skipped
        );
        total.passed += tally.passed;
        total.failed += tally.failed;
        total.skipped += tally.skipped;
    }
    let run = total.passed + total.failed;
    println!(
        "PromQL test scripts through the HTTP API: {} of {} run pass ({:.1} %), {} skipped",
        total.passed,
        run,
        100.0 * total.passed as f64 / run.max(1) as f64,
        total.skipped
    );
    println!(
        "{}",
        json!({"passed": total.passed, "failed": total.failed, "skipped": total.skipped})
    );
    Ok(())
}

impl Tally {
    fn record(&mut self, verdict: Option<String>, file: &str, ev: &Eval, verbose: bool) {
        match verdict {
            None => self.passed += 1,
            Some(why) => {
                self.failed += 1;
                if verbose {
                    println!("  {file}:{} {} — {why}", ev.line, ev.expr);
                }
            }
        }
    }
}

async fn create_warehouse(
    client: &Client,
    name: &str,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::create_dir_all(&path)?;
    client
        .call(
            reqwest::Method::POST,
            "/api/v1/warehouses",
            Some(json!({"name": name, "storage": {"type": "local", "path": path}})),
        )
        .await
        .with_context(|| format!("create warehouse {name}"))?;
    Ok(())
}

type LabelPairs = Vec<(String, String)>;
type Samples = Vec<(i64, f64)>;
/// A request's series: their labels and the part of their samples it carries.
type Request<'a> = Vec<(&'a [(String, String)], &'a [(i64, f64)])>;

/// The float samples (stale markers included) of a group, remote-written.
async fn write(
    client: &Client,
    warehouse: &str,
    points: &[(Labels, Vec<floe_promql::Point>)],
) -> anyhow::Result<()> {
    let series: Vec<(LabelPairs, Samples)> = points
        .iter()
        .map(|(labels, points)| {
            let pairs = labels
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            let samples = points
                .iter()
                .filter_map(|p| p.s.float().map(|f| (p.t, f)))
                .collect();
            (pairs, samples)
        })
        .filter(|(_, s): &(LabelPairs, Samples)| !s.is_empty())
        .collect();
    // Requests of at most 2,000 samples, as Prometheus sends them (its
    // `max_samples_per_send`), a long series over several requests in time order.
    let mut requests: Vec<Request> = vec![Vec::new()];
    let mut in_request = 0usize;
    for (labels, samples) in &series {
        for part in samples.chunks(2_000) {
            if in_request + part.len() > 2_000 {
                requests.push(Vec::new());
                in_request = 0;
            }
            requests
                .last_mut()
                .expect("one request at least")
                .push((labels.as_slice(), part));
            in_request += part.len();
        }
    }
    for request in requests.into_iter().filter(|r| !r.is_empty()) {
        let body = floe_stream::remote_write::v1::encode_samples(request);
        let answer = client
            .request(
                reqwest::Method::POST,
                &format!("/prometheus/{warehouse}/api/v1/write"),
            )
            .header("Content-Type", "application/x-protobuf")
            .header("Content-Encoding", "snappy")
            .body(body)
            .send()
            .await?;
        // A series the door refuses alone (no name) is a dead letter, not a failed request.
        if !answer.status().is_success() && answer.status().as_u16() != 400 {
            anyhow::bail!(
                "remote write to {warehouse}: {} {}",
                answer.status(),
                answer.text().await.unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// One `eval` asked over HTTP and judged.
async fn judge(client: &Client, warehouse: &str, ev: &Eval) -> Option<String> {
    let seconds = |ms: i64| format!("{}", ms as f64 / 1000.0);
    let (path, params) = if ev.range {
        (
            "query_range",
            vec![
                ("query", ev.expr.clone()),
                ("start", seconds(ev.start)),
                ("end", seconds(ev.end)),
                ("step", seconds(ev.step)),
            ],
        )
    } else {
        (
            "query",
            vec![("query", ev.expr.clone()), ("time", seconds(ev.start))],
        )
    };
    let answer = client
        .request(
            reqwest::Method::POST,
            &format!("/prometheus/{warehouse}/api/v1/{path}"),
        )
        .form(&params)
        .send()
        .await;
    let body: Value = match answer {
        Ok(r) => match r.json().await {
            Ok(v) => v,
            Err(e) => return Some(format!("not JSON: {e}")),
        },
        Err(e) => return Some(format!("request failed: {e}")),
    };
    if body["status"] != "success" {
        let error = body["error"].as_str().unwrap_or_default().to_string();
        return testscript::judge(ev, Err(error));
    }
    let Some(value) = QueryValue::from_json(&body["data"]) else {
        return Some(format!(
            "an answer this runner cannot read: {}",
            body["data"]
        ));
    };
    let mut notes: Vec<String> = Vec::new();
    for key in ["warnings", "infos"] {
        notes.extend(
            body[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string)),
        );
    }
    testscript::judge(ev, Ok((&value, &notes)))
}
