//! `floe bench catalog`: concurrent loadTable, commit, createTable and listing load against a
//! running server, with throughput, p50/p99 latency and the server's peak resident memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use hdrhistogram::Histogram;
use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::Mutex;

#[derive(Args, Debug, Clone)]
pub struct CatalogBenchArgs {
    #[command(flatten)]
    server: crate::client::ServerArgs,
    #[arg(long, default_value = "default")]
    warehouse: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Seconds each operation is driven for.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Tables the load and commit phases spread over.
    #[arg(long, default_value_t = 64)]
    tables: usize,
    /// Run as a new non-root principal holding this many grants, set up with the given
    /// (administrator) credentials, instead of as that administrator.
    #[arg(long)]
    principal_grants: Option<usize>,
    /// With `--principal-grants`: this many roles of the benchmark's principal each hold a row
    /// and column policy on every table it loads and queries (issue 41's bench: 10).
    #[arg(long, default_value_t = 0)]
    policies: usize,
    /// The row filter of policy number `{p}` (0, 1, …). The default holds for every row and
    /// the files' bounds prove it (no comparison per row); `id % 1000 >= -{p}` holds for every
    /// row too, but only a comparison of each row shows it.
    #[arg(long, default_value = "id >= -{p}")]
    policy_filter: String,
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    /// Sends a request and drains the body without parsing it: the load generator shares the
    /// machine with the server, so it spends no CPU it does not need.
    async fn status(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<u16> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        response.bytes().await?;
        Ok(status)
    }

    async fn json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)?
        };
        Ok((status, value))
    }
}

#[derive(Default)]
struct PhaseStats {
    ok: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
}

fn table_schema() -> Value {
    json!({
        "type": "struct", "schema-id": 0,
        "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "ts", "required": false, "type": "timestamptz"},
            {"id": 3, "name": "payload", "required": false, "type": "string"}
        ]
    })
}

pub async fn run(args: CatalogBenchArgs) -> anyhow::Result<()> {
    let admin = args.server.connect().await?;
    let mut principal = None;
    let mut connected = args.server.connect().await?;
    if let Some(grants) = args.principal_grants {
        let (name, client) = bench_principal(&admin, &args.warehouse, grants).await?;
        connected = client;
        principal = Some(name);
    } else if args.policies > 0 {
        bail!("--policies needs --principal-grants: root reads under no policy");
    }
    let client = Arc::new(Client {
        http: connected.http,
        base: connected.base,
        token: connected.token,
    });
    let (status, config) = client
        .json(
            reqwest::Method::GET,
            &format!("/catalog/v1/config?warehouse={}", args.warehouse),
            None,
        )
        .await
        .with_context(|| format!("reach Floe at {}", args.server.server))?;
    if status != 200 {
        bail!("GET /v1/config answered {status}: {config}");
    }
    let prefix = config["overrides"]["prefix"]
        .as_str()
        .unwrap_or(&args.warehouse)
        .to_string();
    let ns = format!("bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let base = format!("/catalog/v1/{prefix}/namespaces");
    let (status, body) = client
        .json(
            reqwest::Method::POST,
            &base,
            Some(json!({"namespace": [ns]})),
        )
        .await?;
    if status != 200 {
        bail!("create namespace answered {status}: {body}");
    }
    let tables_path = format!("{base}/{ns}/tables");
    for i in 0..args.tables {
        let (status, body) = client
            .json(
                reqwest::Method::POST,
                &tables_path,
                Some(json!({"name": format!("t{i}"), "schema": table_schema()})),
            )
            .await?;
        if status != 200 {
            bail!("create table answered {status}: {body}");
        }
    }
    // A table with rows for the SQL phase (the others' commits name files that are not there).
    let (status, body) = client
        .json(
            reqwest::Method::POST,
            "/api/v1/sql",
            Some(json!({
                "sql": format!("CREATE TABLE {ns}.q AS SELECT value AS id, value % 10 AS region, \
                                'p' || CAST(value AS VARCHAR) AS payload FROM generate_series(1, 100000)"),
                "warehouse": args.warehouse,
            })),
        )
        .await?;
    if status != 200 {
        bail!("create the SQL phase's table answered {status}: {body}");
    }
    if let Some(principal) = &principal
        && args.policies > 0
    {
        set_policies(
            &admin,
            principal,
            &args.warehouse,
            &ns,
            args.tables,
            args.policies,
            &args.policy_filter,
        )
        .await?;
    }
    println!(
        "floe bench catalog: server {} warehouse {} namespace {ns}, {} clients, {} s per operation, {} tables, {} policies on each{}",
        args.server.server,
        args.warehouse,
        args.concurrency,
        args.seconds,
        args.tables,
        args.policies,
        if args.policies > 0 {
            format!(" (row filters {})", args.policy_filter)
        } else {
            String::new()
        }
    );
    let events_before = delivered_events(&client).await;

    let peak_rss = Arc::new(AtomicU64::new(0));
    let sampler = tokio::spawn(sample_rss(client.clone(), peak_rss.clone()));
    let duration = Duration::from_secs(args.seconds);
    let mut rows = Vec::new();

    let tables = args.tables;
    let tp = tables_path.clone();
    rows.push(
        phase(
            "loadTable",
            &args,
            duration,
            client.clone(),
            move |client, stats| {
                let tp = tp.clone();
                async move {
                    let t = rand::rng().random_range(0..tables);
                    let status = client
                        .status(reqwest::Method::GET, &format!("{tp}/t{t}"), None)
                        .await?;
                    record(&stats, status);
                    Ok(())
                }
            },
        )
        .await,
    );

    let warehouse = args.warehouse.clone();
    let query = format!("SELECT count(*), sum(id) FROM {ns}.q WHERE region = 3");
    // A principal runs 4 statements at once by default (`--sql-max-queries-per-principal`).
    let sql_args = CatalogBenchArgs {
        concurrency: args.concurrency.min(4),
        ..args.clone()
    };
    rows.push(
        phase(
            "SQL (filtered count)",
            &sql_args,
            duration,
            client.clone(),
            move |client, stats| {
                let body = json!({"sql": query.clone(), "warehouse": warehouse.clone()});
                async move {
                    let status = client
                        .status(reqwest::Method::POST, "/api/v1/sql", Some(body))
                        .await?;
                    record(&stats, status);
                    Ok(())
                }
            },
        )
        .await,
    );

    let tp = tables_path.clone();
    let events_start = delivered_events(&client).await;
    let commit_start = Instant::now();
    rows.push(
        phase(
            "commit (append)",
            &args,
            duration,
            client.clone(),
            move |client, stats| {
                let tp = tp.clone();
                async move {
                    let t = rand::rng().random_range(0..tables);
                    append_commit(&client, &format!("{tp}/t{t}"), &stats).await
                }
            },
        )
        .await,
    );

    let commit_secs = commit_start.elapsed().as_secs_f64();
    let events_end = delivered_events(&client).await;
    let drain_start = Instant::now();
    let mut drained = None;
    if let (Some(_), Some(_)) = (events_before, events_end) {
        // The backlog at the phase's end: wait for the sinks to catch up with the commits.
        while drain_start.elapsed() < Duration::from_secs(30) {
            let now = delivered_events(&client).await;
            let committed = rows.last().map_or(0, |r: &Row| r.ok);
            if now
                .zip(events_start)
                .is_some_and(|(n, s)| n - s >= committed)
            {
                drained = Some(drain_start.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let counter = Arc::new(AtomicUsize::new(0));
    let tp = tables_path.clone();
    rows.push(
        phase(
            "createTable",
            &args,
            duration,
            client.clone(),
            move |client, stats| {
                let tp = tp.clone();
                let n = counter.fetch_add(1, Ordering::Relaxed);
                async move {
                    let body = json!({"name": format!("c{n}"), "schema": table_schema()});
                    let status = client
                        .status(reqwest::Method::POST, &tp, Some(body))
                        .await?;
                    record(&stats, status);
                    Ok(())
                }
            },
        )
        .await,
    );

    let tp = tables_path.clone();
    rows.push(
        phase(
            "listTables (page 100)",
            &args,
            duration,
            client.clone(),
            move |client, stats| {
                let tp = tp.clone();
                async move {
                    let status = client
                        .status(reqwest::Method::GET, &format!("{tp}?page-size=100"), None)
                        .await?;
                    record(&stats, status);
                    Ok(())
                }
            },
        )
        .await,
    );

    sampler.abort();
    if let (Some(start), Some(end)) = (events_start, events_end) {
        let committed = rows.get(2).map_or(0, |r| r.ok);
        println!(
            "\nchange events: {} commits at {:.0}/s; sinks acknowledged {:.0} events/s during \
             the phase; backlog at its end {} events, {}",
            committed,
            committed as f64 / commit_secs,
            (end - start) as f64 / commit_secs,
            committed.saturating_sub(end - start),
            match drained {
                Some(d) => format!("drained {} ms later", d.as_millis()),
                None => "not drained within 30 s".to_string(),
            }
        );
    }
    println!();
    println!(
        "{:<24} {:>9} {:>10} {:>9} {:>9} {:>10} {:>7}",
        "operation", "ok", "ops/s", "p50 ms", "p99 ms", "conflicts", "errors"
    );
    for row in &rows {
        println!("{row}");
    }
    let rss = peak_rss.load(Ordering::Relaxed);
    if rss > 0 {
        println!(
            "\nserver peak resident memory: {:.1} MiB",
            rss as f64 / (1024.0 * 1024.0)
        );
    } else {
        println!("\nserver resident memory: not reported by /metrics");
    }
    Ok(())
}

/// Creates a principal whose role holds what the benchmark needs on the warehouse plus
/// filler grants (read-metadata on namespaces made for them) up to `grants` in all, and
/// returns a client acting as it.
async fn bench_principal(
    admin: &crate::client::Client,
    warehouse: &str,
    grants: usize,
) -> anyhow::Result<(String, crate::client::Client)> {
    use reqwest::Method;
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let name = format!("bench-{tag}");
    let created = admin
        .call(
            Method::POST,
            "/api/v1/principals",
            Some(json!({"name": name, "kind": "service"})),
        )
        .await?;
    admin
        .call(Method::POST, "/api/v1/roles", Some(json!({"name": name})))
        .await?;
    admin
        .call(
            Method::POST,
            &format!("/api/v1/roles/{name}/members"),
            Some(json!({"principal": name})),
        )
        .await?;
    let on_warehouse = json!({"type": "warehouse", "warehouse": warehouse});
    let needed = [
        "create-namespace",
        "list-namespaces",
        "create-table",
        "list-tables",
        "write-data",
    ];
    for privilege in needed {
        admin
            .call(
                Method::POST,
                "/api/v1/grants",
                Some(json!({"role": name, "privilege": privilege, "on": on_warehouse})),
            )
            .await?;
    }
    let filler = grants.saturating_sub(needed.len());
    let parent = format!("benchgrants_{tag}");
    let namespaces = format!("/catalog/v1/{warehouse}/namespaces");
    admin
        .call(
            Method::POST,
            &namespaces,
            Some(json!({"namespace": [parent]})),
        )
        .await?;
    println!(
        "setting up principal {name} with {} grants ...",
        filler + needed.len()
    );
    let admin = Arc::new(admin.clone());
    let mut workers = Vec::new();
    for w in 0..16 {
        let (admin, parent, name, namespaces) = (
            admin.clone(),
            parent.clone(),
            name.clone(),
            namespaces.clone(),
        );
        let warehouse = warehouse.to_string();
        workers.push(tokio::spawn(async move {
            for i in (w..filler).step_by(16) {
                let child = format!("g{i}");
                admin
                    .call(Method::POST, &namespaces, Some(json!({"namespace": [&parent, &child]})))
                    .await?;
                let on = json!({"type": "namespace", "warehouse": warehouse, "namespace": [&parent, &child]});
                admin
                    .call(
                        Method::POST,
                        "/api/v1/grants",
                        Some(json!({"role": name, "privilege": "read-metadata", "on": on})),
                    )
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let credentials = &created["credentials"];
    let args = crate::client::ServerArgs {
        server: admin.base.clone(),
        client_id: credentials["client-id"].as_str().map(str::to_string),
        client_secret: credentials["client-secret"].as_str().map(str::to_string),
        credentials_file: Default::default(),
    };
    Ok((name, args.connect().await?))
}

/// Gives principal `principal` `count` roles, each with a row and column policy on every
/// table of namespace `ns` (`t0`… and `q`): row filter `filter` with `{p}` the policy's number.
async fn set_policies(
    admin: &crate::client::Client,
    principal: &str,
    warehouse: &str,
    ns: &str,
    tables: usize,
    count: usize,
    filter: &str,
) -> anyhow::Result<()> {
    use reqwest::Method;
    println!(
        "setting {count} policies on each of {} tables ...",
        tables + 1
    );
    let names: Vec<String> = (0..tables)
        .map(|i| format!("t{i}"))
        .chain(["q".to_string()])
        .collect();
    for p in 0..count {
        let role = format!("{principal}-policy-{p}");
        admin
            .call(Method::POST, "/api/v1/roles", Some(json!({"name": role})))
            .await?;
        admin
            .call(
                Method::POST,
                &format!("/api/v1/roles/{role}/members"),
                Some(json!({"principal": principal})),
            )
            .await?;
        for name in &names {
            let table =
                json!({"type": "table", "warehouse": warehouse, "namespace": [ns], "name": name});
            admin
                .call(
                    Method::PUT,
                    "/api/v1/policies",
                    Some(json!({
                        "role": role, "table": table, "row-filter": filter.replace("{p}", &p.to_string()),
                        "masks": [{"column": "payload", "mask": "null"}],
                    })),
                )
                .await?;
        }
    }
    Ok(())
}

/// The change events the server's sinks have acknowledged so far (None when it publishes
/// none).
async fn delivered_events(client: &Client) -> Option<u64> {
    let response = client
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .ok()?;
    let text = response.text().await.ok()?;
    let mut found = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("floe_change_events_delivered_total{") {
            let value: u64 = rest.rsplit(' ').next()?.parse().ok()?;
            // With both sinks, the slower one.
            found = Some(found.map_or(value, |f: u64| f.min(value)));
        }
    }
    found
}

fn record(stats: &PhaseStats, status: u16) {
    match status {
        200..=299 => stats.ok.fetch_add(1, Ordering::Relaxed),
        409 => stats.conflicts.fetch_add(1, Ordering::Relaxed),
        _ => stats.errors.fetch_add(1, Ordering::Relaxed),
    };
}

/// Loads the table and commits one small append snapshot on top of its current one.
async fn append_commit(client: &Client, path: &str, stats: &PhaseStats) -> anyhow::Result<()> {
    let (status, loaded) = client.json(reqwest::Method::GET, path, None).await?;
    if status != 200 {
        record(stats, status);
        return Ok(());
    }
    let metadata = &loaded["metadata"];
    let parent = metadata["current-snapshot-id"]
        .as_i64()
        .filter(|id| *id >= 0);
    let sequence = metadata["last-sequence-number"].as_i64().unwrap_or(0) + 1;
    let location = metadata["location"].as_str().unwrap_or_default();
    let snapshot_id: i64 = rand::rng().random_range(1..i64::MAX);
    let now = chrono_ms();
    let mut snapshot = json!({
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": now,
        "manifest-list": format!("{location}/metadata/snap-{snapshot_id}-bench.avro"),
        "summary": {"operation": "append", "added-records": "10", "added-data-files": "1"},
        "schema-id": 0
    });
    if let Some(parent) = parent {
        snapshot["parent-snapshot-id"] = json!(parent);
    }
    let body = json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent}],
        "updates": [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id}
        ]
    });
    let status = client
        .status(reqwest::Method::POST, path, Some(body))
        .await?;
    record(stats, status);
    Ok(())
}

fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

struct Row {
    name: &'static str,
    ok: u64,
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    conflicts: u64,
    errors: u64,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<24} {:>9} {:>10.1} {:>9.2} {:>9.2} {:>10} {:>7}",
            self.name, self.ok, self.per_sec, self.p50_ms, self.p99_ms, self.conflicts, self.errors
        )
    }
}

/// Drives `op` from `concurrency` clients for `duration`, timing each call.
async fn phase<F, Fut>(
    name: &'static str,
    args: &CatalogBenchArgs,
    duration: Duration,
    client: Arc<Client>,
    op: F,
) -> Row
where
    F: Fn(Arc<Client>, Arc<PhaseStats>) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let stats = Arc::new(PhaseStats::default());
    let histogram = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds"),
    ));
    let started = Instant::now();
    let deadline = started + duration;
    let mut workers = Vec::new();
    for _ in 0..args.concurrency {
        let (client, stats, histogram, op) =
            (client.clone(), stats.clone(), histogram.clone(), op.clone());
        workers.push(tokio::spawn(async move {
            let mut local =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
            while Instant::now() < deadline {
                let t = Instant::now();
                if op(client.clone(), stats.clone()).await.is_err() {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                }
                let _ = local.record(t.elapsed().as_micros().max(1) as u64);
            }
            histogram.lock().await.add(&local).expect("same bounds");
        }));
    }
    for worker in workers {
        let _ = worker.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let histogram = histogram.lock().await;
    let ok = stats.ok.load(Ordering::Relaxed);
    Row {
        name,
        ok,
        per_sec: ok as f64 / elapsed,
        p50_ms: histogram.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: histogram.value_at_quantile(0.99) as f64 / 1000.0,
        conflicts: stats.conflicts.load(Ordering::Relaxed),
        errors: stats.errors.load(Ordering::Relaxed),
    }
}

/// Polls the server's `process_resident_memory_bytes` and keeps the largest value seen.
async fn sample_rss(client: Arc<Client>, peak: Arc<AtomicU64>) {
    loop {
        if let Ok(response) = client
            .request(reqwest::Method::GET, "/metrics")
            .send()
            .await
            && let Ok(text) = response.text().await
        {
            for line in text.lines() {
                if let Some(value) = line.strip_prefix("process_resident_memory_bytes ")
                    && let Ok(bytes) = value.trim().parse::<f64>()
                {
                    peak.fetch_max(bytes as u64, Ordering::Relaxed);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
