//! `floe bench upsert`: an upsert table against an append table over HTTP, on one running
//! server — rows per second (and per core of server CPU) loading the keys and then committing
//! batches where a tenth of the rows update keys the table holds, the first upsert after a
//! compaction (the key index caught up from the snapshot it described), and reads of the
//! upsert table after those commits against the same table compacted.

use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

use super::ingest::{server_cpu_seconds, sql_count};
use crate::client::Client;

#[derive(Args, Debug, Clone)]
pub struct UpsertBenchArgs {
    #[command(flatten)]
    server: crate::client::ServerArgs,
    #[arg(long, default_value = "default")]
    warehouse: String,
    /// Namespace of the benchmark's tables (created when missing; the tables are recreated).
    #[arg(long, default_value = "bench_upsert")]
    namespace: String,
    /// Keys the tables hold before the commits are measured.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Rows per request (and per commit in the measured phase).
    #[arg(long, default_value_t = 10_000)]
    batch_rows: u64,
    /// Commits measured, each of `batch-rows` rows.
    #[arg(long, default_value_t = 100)]
    commits: u64,
    /// Share of a commit's rows that update keys the table holds (the rest are new keys).
    #[arg(long, default_value_t = 0.1)]
    updates: f64,
    /// Times each read is run (the best is reported).
    #[arg(long, default_value_t = 5)]
    iterations: usize,
    /// The tables' Iceberg format version: 2 (position delete files) or 3 (deletion vectors).
    #[arg(long, default_value_t = 2)]
    format_version: u8,
}

/// An NDJSON body of rows for `ids`, at `version`.
fn rows(ids: impl Iterator<Item = u64>, version: u64) -> Vec<u8> {
    let mut body = Vec::new();
    for id in ids {
        let line = json!({
            "id": id,
            "version": version,
            "name": format!("user-{id}"),
            "score": (id % 1000) as f64 / 7.0,
        });
        serde_json::to_writer(&mut body, &line).expect("JSON to memory");
        body.push(b'\n');
    }
    body
}

/// The ids of commit `commit`: `updates` of them keys below `keys` spread by a fixed
/// stride, the rest new keys above every earlier commit's.
fn commit_ids(commit: u64, batch: u64, keys: u64, updates: f64) -> Vec<u64> {
    let updated = (batch as f64 * updates).round() as u64;
    let mut ids: Vec<u64> = (0..updated)
        .map(|i| 1 + (commit * 7_919 + i * 104_729) % keys)
        .collect();
    let first_new = keys + 1 + commit * batch;
    ids.extend(first_new..first_new + (batch - updated));
    ids
}

struct Phase {
    seconds: f64,
    cpu: Option<f64>,
    rows: u64,
}

impl Phase {
    fn rate(&self) -> f64 {
        self.rows as f64 / self.seconds
    }

    fn per_core(&self) -> Option<f64> {
        self.cpu.filter(|c| *c > 0.0).map(|c| self.rows as f64 / c)
    }
}

async fn post(client: &Client, path: &str, body: Vec<u8>) -> anyhow::Result<()> {
    let answer = client
        .request(reqwest::Method::POST, path)
        .header("Content-Type", "application/x-ndjson")
        .body(body)
        .send()
        .await?;
    if !answer.status().is_success() {
        bail!("{path}: {}", answer.text().await?);
    }
    Ok(())
}

pub async fn run(args: UpsertBenchArgs) -> anyhow::Result<()> {
    let client = args.server.connect().await?;
    let (wh, ns) = (args.warehouse.clone(), args.namespace.clone());
    if args.batch_rows == 0 || args.keys < args.batch_rows {
        bail!("keys must be at least batch-rows, which must be above zero");
    }
    let _ = client
        .call(
            reqwest::Method::POST,
            &format!("/catalog/v1/{wh}/namespaces"),
            Some(json!({"namespace": [ns]})),
        )
        .await;
    for table in ["upserts", "appends"] {
        let _ = client
            .call(
                reqwest::Method::DELETE,
                &format!("/catalog/v1/{wh}/namespaces/{ns}/tables/{table}?purgeRequested=true"),
                None,
            )
            .await;
    }
    let path = |table: &str| format!("/ingest/v1/{wh}/{ns}/{table}");
    if !matches!(args.format_version, 2 | 3) {
        bail!("format-version must be 2 or 3");
    }
    // Both tables made through the catalog in the format asked for; the upsert table keyed.
    for (table, keyed) in [("upserts", true), ("appends", false)] {
        let mut properties = json!({"format-version": args.format_version.to_string()});
        if keyed {
            properties["write.upsert.enabled"] = json!("true");
        }
        let field = |id: i32, name: &str, kind: &str, required: bool| json!({"id": id, "name": name, "type": kind, "required": required});
        client
            .call(
                reqwest::Method::POST,
                &format!("/catalog/v1/{wh}/namespaces/{ns}/tables"),
                Some(json!({
                    "name": table,
                    "schema": {
                        "type": "struct",
                        "schema-id": 0,
                        "identifier-field-ids": if keyed { json!([1]) } else { json!([]) },
                        "fields": [
                            field(1, "id", "long", keyed),
                            field(2, "version", "long", false),
                            field(3, "name", "string", false),
                            field(4, "score", "double", false),
                        ],
                    },
                    "properties": properties,
                })),
            )
            .await?;
        post(
            &client,
            &format!("{}?wait=commit", path(table)),
            rows(0..1, 0),
        )
        .await?;
    }

    // The keys, loaded into both tables the same way (one commit per request).
    let mut load = Vec::new();
    for table in ["upserts", "appends"] {
        let cpu = server_cpu_seconds(&client).await;
        let started = Instant::now();
        let mut first = 1;
        while first <= args.keys {
            let last = (first + args.batch_rows).min(args.keys + 1);
            post(
                &client,
                &format!("{}?wait=commit", path(table)),
                rows(first..last, 0),
            )
            .await?;
            first = last;
        }
        load.push(phase(&client, started, cpu, args.keys).await);
    }

    // The measured commits: the same rows to each table, one table after the other.
    let mut measured = Vec::new();
    for table in ["upserts", "appends"] {
        let cpu = server_cpu_seconds(&client).await;
        let started = Instant::now();
        for commit in 0..args.commits {
            let ids = commit_ids(commit, args.batch_rows, args.keys, args.updates);
            post(
                &client,
                &format!("{}?wait=commit", path(table)),
                rows(ids.into_iter(), commit + 1),
            )
            .await?;
        }
        measured.push(phase(&client, started, cpu, args.commits * args.batch_rows).await);
    }
    let updated = (args.batch_rows as f64 * args.updates).round() as u64;
    let expected = 1 + args.keys + args.commits * (args.batch_rows - updated);
    let held = sql_count(&client, &wh, &format!("SELECT count(*) FROM {ns}.upserts")).await?;
    let distinct = sql_count(
        &client,
        &wh,
        &format!("SELECT count(DISTINCT id) FROM {ns}.upserts"),
    )
    .await?;
    if held as u64 != expected || distinct != held {
        bail!("the upsert table holds {held} rows of {distinct} keys, not {expected}");
    }

    // Reads of the upsert table with its position deletes, then compacted.
    let reads = [
        format!("SELECT count(*) FROM {ns}.upserts"),
        format!("SELECT sum(score), max(version) FROM {ns}.upserts"),
        format!("SELECT name FROM {ns}.upserts WHERE id = {}", args.keys / 2),
    ];
    let before = time_reads(&client, &wh, &reads, args.iterations).await?;
    let loaded = client
        .call(
            reqwest::Method::GET,
            &format!("/catalog/v1/{wh}/namespaces/{ns}/tables/upserts"),
            None,
        )
        .await?;
    let delete_files = current_summary(&loaded, "total-delete-files");
    let position_deletes = current_summary(&loaded, "total-position-deletes");
    let compacted = Instant::now();
    compact(&client, &wh, &ns, "upserts").await?;
    let compaction = compacted.elapsed().as_secs_f64();
    let after = time_reads(&client, &wh, &reads, args.iterations).await?;

    // The key index follows compaction by catching up (forgetting the files compaction
    // removed, reading the files it wrote): the first upsert after it pays.
    let rebuilt = Instant::now();
    let ids = commit_ids(args.commits, args.batch_rows, args.keys, args.updates);
    post(
        &client,
        &format!("{}?wait=commit", path("upserts")),
        rows(ids.into_iter(), 0),
    )
    .await?;
    let rebuild = rebuilt.elapsed().as_secs_f64();
    let steady = Instant::now();
    let ids = commit_ids(args.commits + 1, args.batch_rows, args.keys, args.updates);
    post(
        &client,
        &format!("{}?wait=commit", path("upserts")),
        rows(ids.into_iter(), 0),
    )
    .await?;
    let steady = steady.elapsed().as_secs_f64();

    println!(
        "floe bench upsert (format v{}): {} keys, {} commits of {} rows ({:.0}% updates)",
        args.format_version,
        args.keys,
        args.commits,
        args.batch_rows,
        args.updates * 100.0
    );
    for (what, phases) in [("load", &load), ("commits", &measured)] {
        let [upserts, appends] = [&phases[0], &phases[1]];
        println!(
            "  {what}: upsert {:.0} rows/s ({}), append {:.0} rows/s ({}); upsert/append time {:.2}",
            upserts.rate(),
            per_core(upserts),
            appends.rate(),
            per_core(appends),
            upserts.seconds / appends.seconds
        );
    }
    println!(
        "  the upsert table holds {held} keys once each; before compaction {delete_files} delete \
         files of {position_deletes} rows (compaction {compaction:.1} s)"
    );
    for (i, sql) in reads.iter().enumerate() {
        println!(
            "  read {sql}: {:.1} ms after the commits, {:.1} ms compacted ({:.2}x)",
            before[i],
            after[i],
            before[i] / after[i]
        );
    }
    println!(
        "  an upsert commit right after compaction (key index caught up): {:.0} ms; the next: {:.0} ms",
        rebuild * 1000.0,
        steady * 1000.0
    );
    Ok(())
}

fn per_core(phase: &Phase) -> String {
    match phase.per_core() {
        Some(rate) => format!("{rate:.0} per core"),
        None => "server CPU not reported".into(),
    }
}

async fn phase(client: &Client, started: Instant, cpu: Option<f64>, rows: u64) -> Phase {
    let seconds = started.elapsed().as_secs_f64();
    let cpu = match (cpu, server_cpu_seconds(client).await) {
        (Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    Phase { seconds, cpu, rows }
}

/// The best time of each statement over `iterations` runs, in ms.
async fn time_reads(
    client: &Client,
    wh: &str,
    reads: &[String],
    iterations: usize,
) -> anyhow::Result<Vec<f64>> {
    let mut best = Vec::new();
    for sql in reads {
        let mut fastest = f64::INFINITY;
        for _ in 0..iterations.max(1) {
            let started = Instant::now();
            client
                .call(
                    reqwest::Method::POST,
                    "/api/v1/sql",
                    Some(json!({"sql": sql, "warehouse": wh})),
                )
                .await?;
            fastest = fastest.min(started.elapsed().as_secs_f64() * 1000.0);
        }
        best.push(fastest);
    }
    Ok(best)
}

/// Runs a compaction job on the table and waits for it.
async fn compact(client: &Client, wh: &str, ns: &str, table: &str) -> anyhow::Result<()> {
    let queued = client
        .call(
            reqwest::Method::POST,
            "/api/v1/jobs",
            Some(json!({"warehouse": wh, "namespace": [ns], "table": table, "kind": "compact", "options": {}})),
        )
        .await?;
    let id = queued["job"]["id"]
        .as_str()
        .map(str::to_string)
        .or_else(|| queued["job"]["id"].as_i64().map(|i| i.to_string()))
        .context("a job id")?;
    loop {
        let job: Value = client
            .call(reqwest::Method::GET, &format!("/api/v1/jobs/{id}"), None)
            .await?;
        match job["status"].as_str() {
            Some("succeeded") => return Ok(()),
            Some("failed") => bail!("compaction failed: {job}"),
            _ => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}

/// A total of the current snapshot's summary in a REST load-table answer.
fn current_summary(loaded: &Value, key: &str) -> String {
    let metadata = &loaded["metadata"];
    let current = metadata["current-snapshot-id"].as_i64();
    metadata["snapshots"]
        .as_array()
        .and_then(|snapshots| {
            snapshots
                .iter()
                .find(|s| s["snapshot-id"].as_i64() == current)
        })
        .and_then(|s| s["summary"][key].as_str())
        .unwrap_or("?")
        .to_string()
}
