//! Distributed SQL across processes: a coordinator (`floe serve --distributed`) and
//! `floe worker`s registered in its catalog database (SQLite, and PostgreSQL when the test
//! script started one). Workers join and leave; a worker killed with SIGKILL costs a query
//! nothing; a worker takes no call without the cluster's secret.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
use datafusion_distributed::{
    CoordinatorToWorkerMsg, GetWorkerInfoRequest, SetPlanRequest, TaskKey, WorkerChannel,
};
use floe_catalog::cluster::ClusterStore;
use serde_json::{Value, json};

use crate::harness::{Api, Floe, backends, free_port};

/// A `floe worker` process of the cluster whose catalog database is `catalog_db`.
pub(crate) struct Worker {
    child: Child,
    pub(crate) url: String,
    _dir: tempfile::TempDir,
}

impl Worker {
    pub(crate) fn start(catalog_db: &str) -> Worker {
        Self::start_with(catalog_db, None, None)
    }

    /// A worker in the network namespace `name`, listening at its `address` (in plain text).
    pub(crate) fn start_in(catalog_db: &str, name: &str, address: std::net::Ipv4Addr) -> Worker {
        Self::start_with(catalog_db, None, Some((name, address)))
    }

    /// A worker serving TLS with `tls`'s certificate and trusting its CA for other workers,
    /// in the network namespace `place` names at its address.
    fn start_with(
        catalog_db: &str,
        tls: Option<&Certificates>,
        place: Option<(&str, std::net::Ipv4Addr)>,
    ) -> Worker {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let host = place.map_or("127.0.0.1".to_string(), |(_, address)| address.to_string());
        let mut command = match place {
            // `ip netns exec` becomes the worker (it execs it).
            Some((name, _)) => {
                let mut command = Command::new("ip");
                command
                    .args(["netns", "exec", name, env!("CARGO_BIN_EXE_floe")])
                    .arg("worker")
                    .arg("--plaintext-cluster");
                command
            }
            None => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_floe"));
                command.arg("worker");
                command
            }
        };
        command
            .args(["--listen", &format!("{host}:{port}")])
            .args(["--catalog-db", catalog_db]);
        if let Some(tls) = tls {
            command
                .arg("--tls-cert")
                .arg(&tls.cert)
                .arg("--tls-key")
                .arg(&tls.key)
                .arg("--cluster-ca")
                .arg(&tls.ca);
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        let child = command
            .arg("--data-dir")
            .arg(dir.path())
            .env(
                "FLOE_LOG",
                std::env::var("FLOE_TEST_LOG").unwrap_or_else(|_| "warn".to_string()),
            )
            .stdin(Stdio::null())
            .spawn()
            .expect("start floe worker");
        Worker {
            child,
            url: format!("{scheme}://{host}:{port}/"),
            _dir: dir,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: no deregistration, no goodbye.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

pub(crate) async fn sql(api: &Api, statement: &str) -> Value {
    let answer = api.post("/api/v1/sql", json!({ "sql": statement })).await;
    assert_eq!(answer.status, 200, "{statement}: {}", answer.body);
    answer.body
}

/// The workers the server hands tasks to, by URL.
async fn live(api: &Api) -> Vec<String> {
    let answer = api.get("/api/v1/workers").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let mut urls: Vec<String> = answer.body["workers"]
        .as_array()
        .unwrap()
        .iter()
        // Routed means live as of the coordinator's last look (at most a second ago).
        .filter(|w| w["routed"] == json!(true))
        .map(|w| {
            let url = w["url"].as_str().unwrap();
            format!("{}/", url.trim_end_matches('/'))
        })
        .collect();
    urls.sort();
    urls
}

/// Waits until the server lists exactly `expected` as live (a worker's heartbeat is due every
/// 2 s; one silent for 10 s drops out).
pub(crate) async fn wait_live(api: &Api, expected: &[&Worker]) {
    let mut want: Vec<String> = expected.iter().map(|w| w.url.clone()).collect();
    want.sort();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = live(api).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "live workers {now:?}, expected {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The text of `EXPLAIN statement`.
pub(crate) async fn explain(api: &Api, statement: &str) -> String {
    let body = sql(api, &format!("EXPLAIN {statement}")).await;
    body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["plan"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) const TOTALS: &str =
    "SELECT count(*) AS n, sum(k) AS s, count(DISTINCT g) AS groups FROM d.t";
const GROUPED: &str = "SELECT g, count(*) AS n FROM d.t GROUP BY g ORDER BY n DESC, g LIMIT 3";

/// `d.t`: 60,000 rows in six files (six commits).
pub(crate) async fn make_table(api: &Api) {
    sql(api, "CREATE SCHEMA d").await;
    sql(api, "CREATE TABLE d.t (k BIGINT, g BIGINT)").await;
    for commit in 0..6 {
        sql(
            api,
            &format!(
                "INSERT INTO d.t SELECT value, value % 1000 FROM generate_series({}, {})",
                commit * 10_000 + 1,
                (commit + 1) * 10_000
            ),
        )
        .await;
    }
}

/// The answer every query over `d.t` must give, whatever ran it.
pub(crate) async fn check_answers(api: &Api) {
    let totals = sql(api, TOTALS).await;
    assert_eq!(
        totals["rows"],
        json!([{"n": 60000, "s": 1_800_030_000i64, "groups": 1000}]),
        "{totals}"
    );
    let grouped = sql(api, GROUPED).await;
    assert_eq!(
        grouped["rows"],
        json!([{"g": 0, "n": 60}, {"g": 1, "n": 60}, {"g": 2, "n": 60}]),
        "{grouped}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_join_leave_and_a_killed_worker_costs_a_query_nothing() {
    for backend in backends() {
        let floe = Floe::start_with(
            backend,
            &[
                ("FLOE_DISTRIBUTED", "true"),
                // Every file its own task: a few small files spread over all workers.
                ("FLOE_DISTRIBUTED_TASK_BYTES", "1"),
            ],
        )
        .await;
        let api = Api::new(&floe);
        make_table(&api).await;
        // No worker yet: the coordinator answers alone.
        assert!(!explain(&api, TOTALS).await.contains("Stage"));
        check_answers(&api).await;

        let mut workers: Vec<Worker> = (0..3).map(|_| Worker::start(&floe.catalog_db)).collect();
        wait_live(&api, &workers.iter().collect::<Vec<_>>()).await;
        let plan = explain(&api, TOTALS).await;
        assert!(plan.contains("DistributedExec"), "{plan}");
        assert!(plan.contains("tasks=3"), "{plan}");
        assert!(plan.contains("FloeScanExec"), "{plan}");
        check_answers(&api).await;
        metrics_agree_with_explain_analyze(&floe, &api).await;

        // Killed before the coordinator notices (its heartbeats would stop counting only
        // after 10 s): the next queries still route tasks to it, lose it, and run again on
        // the other two.
        workers[0].kill();
        check_answers(&api).await;
        // Then it drops out of the live list, and plans use the two left.
        wait_live(&api, &[&workers[1], &workers[2]]).await;
        let plan = explain(&api, TOTALS).await;
        assert!(plan.contains("tasks=2"), "{plan}");
        check_answers(&api).await;

        // A worker that joins is used by the next query.
        workers.push(Worker::start(&floe.catalog_db));
        wait_live(&api, &[&workers[1], &workers[2], &workers[3]]).await;
        let plan = explain(&api, TOTALS).await;
        assert!(plan.contains("tasks=3"), "{plan}");
        check_answers(&api).await;

        let metrics = floe.metrics().await;
        let counter = |name: &str| counter(&metrics, name);
        assert!(counter("floe_sql_distributed_queries_total") >= 8);
        assert!(counter("floe_sql_distributed_relaunches_total") >= 1);
        assert!(counter("floe_sql_distributed_lost_workers_total") >= 1);
        assert_eq!(counter("floe_cluster_routed_workers"), 3);

        forged_calls_are_refused(&floe, &workers[1]).await;
        // The worker that refused them still works for its cluster.
        check_answers(&api).await;
    }
}

/// The value of the unlabelled counter `name` in `metrics` (`/metrics`' text).
pub(crate) fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} missing from /metrics"))
        .parse()
        .unwrap()
}

/// A figure as `EXPLAIN ANALYZE` writes it: a count (`60000`, `60.00 K`) or, with `bytes`, a
/// size in binary units (`512.0 B`, `1.9 MB`).
fn figure(text: &str, bytes: bool) -> f64 {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let value: f64 = text[..split].parse().unwrap_or(0.0);
    let scale = match (text[split..].trim(), bytes) {
        ("KB", true) => 1024.0,
        ("MB", true) => 1024.0 * 1024.0,
        ("GB", true) => 1024.0 * 1024.0 * 1024.0,
        ("K", false) => 1e3,
        ("M", false) => 1e6,
        ("B", false) => 1e9,
        _ => 1.0,
    };
    value * scale
}

/// The rows and bytes the stage boundaries (`Network*Exec`) of an `EXPLAIN ANALYZE` handed on.
fn analyzed_exchanges(plan: &str) -> (f64, f64) {
    let mut rows = 0.0;
    let mut bytes = 0.0;
    for line in plan.lines().filter(|l| l.contains("Network")) {
        for (name, total, in_bytes) in [
            ("output_rows=", &mut rows, false),
            ("bytes_transferred=", &mut bytes, true),
        ] {
            for (at, _) in line.match_indices(name) {
                let rest = &line[at + name.len()..];
                let end = rest.find([',', ']']).unwrap_or(rest.len());
                *total += figure(&rest[..end], in_bytes);
            }
        }
    }
    (rows, bytes)
}

/// The stage rows and bytes `/metrics` counts once no finished query's figures are pending
/// (the coordinator adds a query's up after it has answered, and counts it pending from
/// before its client has the answer's end).
async fn settled_stage_figures(floe: &Floe) -> (f64, f64, u64) {
    for _ in 0..120 {
        let metrics = floe.metrics().await;
        let sum = |name: &str| -> f64 {
            metrics
                .lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        if counter(&metrics, "floe_sql_distributed_stage_metrics_pending") == 0 {
            return (
                sum("floe_sql_distributed_stage_rows_total"),
                sum("floe_sql_distributed_stage_bytes_total"),
                counter(&metrics, "floe_sql_distributed_stage_metrics_missing_total"),
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    panic!("stage metrics still pending after 30 s");
}

/// What `/metrics` adds up for one distributed query is what `EXPLAIN ANALYZE` shows for it:
/// the rows and bytes its stages handed on (issue 42: the bytes once read 0).
async fn metrics_agree_with_explain_analyze(floe: &Floe, api: &Api) {
    // Partial states of a fixed size, so that every run moves the same bytes however the
    // files fall to the tasks (a `count(DISTINCT …)`'s states depend on that).
    const SUMS: &str = "SELECT count(*) AS n, sum(k) AS s FROM d.t";
    let body = sql(api, &format!("EXPLAIN ANALYZE {SUMS}")).await;
    let plan: String = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["plan"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let (rows, bytes) = analyzed_exchanges(&plan);
    assert!(rows > 0.0 && bytes > 0.0, "{plan}");
    let before = settled_stage_figures(floe).await;
    sql(api, SUMS).await;
    let after = settled_stage_figures(floe).await;
    let (counted_rows, counted_bytes) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(before.2, after.2, "the query's stage metrics never arrived");
    // EXPLAIN ANALYZE rounds (sizes to a tenth of their unit); the same query moves the same
    // rows and, within that rounding, the same bytes.
    let close = |a: f64, b: f64| (a - b).abs() <= 0.05 * a.max(b);
    assert!(
        close(rows, counted_rows),
        "rows: EXPLAIN ANALYZE {rows}, /metrics {counted_rows}\n{plan}"
    );
    assert!(
        close(bytes, counted_bytes),
        "bytes: EXPLAIN ANALYZE {bytes}, /metrics {counted_bytes}\n{plan}"
    );
}

/// A client of `worker`'s service sending `secret` (none when `None`).
async fn client(worker: &Worker, secret: Option<&str>) -> Box<dyn WorkerChannel> {
    create_worker_client(channel_with_secret(&worker.url, secret).await)
}

/// A channel to the cluster node at `url` whose calls carry `secret` (none when `None`).
pub(crate) async fn channel_with_secret(url: &str, secret: Option<&str>) -> BoxCloneSyncChannel {
    let channel = tonic::transport::Channel::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let value = secret.map(|s| http::HeaderValue::from_str(s).unwrap());
    let with_secret = tower::ServiceBuilder::new()
        .map_request(move |mut request: http::Request<tonic::body::Body>| {
            if let Some(value) = &value {
                request
                    .headers_mut()
                    .insert("x-floe-cluster-secret", value.clone());
            }
            request
        })
        .service(channel);
    BoxCloneSyncChannel::new(with_secret)
}

/// A worker runs any plan it is sent, and a plan can read any file the worker can: without
/// the cluster's secret (or with another one) nothing is taken, not even a question.
async fn forged_calls_are_refused(floe: &Floe, worker: &Worker) {
    let store = floe_store::SqlStore::connect(&floe.catalog_db, Default::default())
        .await
        .unwrap();
    let secret = store.cluster_secret().await.unwrap();
    for offered in [None, Some("not-the-cluster-secret")] {
        let mut forger = client(worker, offered).await;
        let refused = forger
            .get_worker_info(GetWorkerInfoRequest {})
            .await
            .err()
            .unwrap_or_else(|| panic!("answered a caller offering {offered:?}"));
        assert!(
            refused.to_string().to_lowercase().contains("secret"),
            "{refused}"
        );
        // A plan (any bytes: nothing of it is decoded) is refused the same way.
        let plan = CoordinatorToWorkerMsg::SetPlanRequest(SetPlanRequest {
            task_key: TaskKey {
                query_id: uuid::Uuid::from_bytes([7; 16]),
                stage_id: 0,
                task_number: 0,
            },
            task_count: 1,
            plan_proto: b"a plan reading /etc/shadow".to_vec(),
            work_unit_feed_declarations: Vec::new(),
            target_worker_url: url::Url::parse(&worker.url).unwrap(),
            query_start_time_ns: 0,
        });
        let sent = forger
            .coordinator_channel(Default::default(), Box::pin(futures::stream::iter([plan])))
            .await;
        let refused = match sent {
            Err(e) => e.to_string(),
            Ok(mut answers) => {
                use futures::StreamExt;
                match answers.next().await {
                    Some(Err(e)) => e.to_string(),
                    other => panic!("a forged plan was taken: {:?}", other.map(|r| r.is_ok())),
                }
            }
        };
        assert!(refused.to_lowercase().contains("secret"), "{refused}");
    }
    // The cluster's own secret is answered.
    let mut member = client(worker, Some(&secret)).await;
    let info = member
        .get_worker_info(GetWorkerInfoRequest {})
        .await
        .unwrap();
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    store.close().await;
}

/// All 22 TPC-H queries (scale factor 0.1) over three worker processes give, row by row, the
/// answers Floe gives alone, and each of them runs in stages on the workers: with the data
/// and the workers registered in SQLite, and in PostgreSQL when the test script started one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_over_three_workers_answers_as_one_node_does() {
    for backend in backends() {
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_floe"));
        command.args([
            "bench",
            "tpch",
            "--sf",
            "0.1",
            "--workers",
            "3",
            "--iterations",
            "0",
        ]);
        if backend == "postgres" {
            command
                .arg("--catalog-db")
                .arg(crate::harness::fresh_postgres_database().await);
        }
        let out = command
            .arg("--dir")
            .arg(dir.path())
            .env("FLOE_LOG", "warn")
            .output()
            .expect("run floe bench tpch --workers 3");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{backend}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(
                "22 of 22 distributed answers identical to Floe alone's, row by row; 22 of them \
                 ran in stages on the workers"
            ),
            "{backend}: {stdout}"
        );
    }
}

/// A certificate authority and a certificate it signed for 127.0.0.1, as PEM files.
struct Certificates {
    ca: std::path::PathBuf,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Certificates {
    fn new() -> Certificates {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let mut authority = CertificateParams::new(Vec::new()).unwrap();
        authority.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let authority_key = KeyPair::generate().unwrap();
        let authority = authority.self_signed(&authority_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &authority, &authority_key)
            .unwrap();
        let write = |name: &str, pem: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        Certificates {
            ca: write("ca.pem", authority.pem()),
            cert: write("worker.pem", cert.pem()),
            key: write("worker.key", key.serialize_pem()),
            _dir: dir,
        }
    }
}

/// Workers serving TLS, trusted through the cluster's CA, run an aggregation grouped by the
/// sort key of a table written in its sort order. DataFusion-distributed's shuffle declares
/// its input's order while interleaving several tasks' streams, and an aggregation streaming
/// by that order answered some keys twice; the coordinator now plans such a query without
/// the files' order, and every key comes once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_workers_keep_a_sorted_tables_order() {
    let tls = Certificates::new();
    let ca = tls.ca.display().to_string();
    let floe = Floe::start_with(
        "sqlite",
        &[
            ("FLOE_DISTRIBUTED", "true"),
            ("FLOE_DISTRIBUTED_TASK_BYTES", "1"),
            ("FLOE_CLUSTER_CA", &ca),
        ],
    )
    .await;
    let api = Api::new(&floe);
    sql(&api, "CREATE SCHEMA d").await;
    let created = api
        .post(
            "/catalog/v1/default/namespaces/d/tables",
            json!({
                "name": "s",
                "schema": {"type": "struct", "schema-id": 0, "fields": [
                    {"id": 1, "name": "k", "required": false, "type": "long"},
                    {"id": 2, "name": "v", "required": false, "type": "long"},
                ]},
                "write-order": {"order-id": 1, "fields": [
                    {"source-id": 1, "transform": "identity", "direction": "asc",
                     "null-order": "nulls-last"},
                ]},
            }),
        )
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    // Six files of sorted rows, written highest range first: the files' order in the
    // snapshot is not their keys' order.
    for commit in (0..6).rev() {
        sql(
            &api,
            &format!(
                "INSERT INTO d.s SELECT value, value * 2 FROM generate_series({}, {}) ORDER BY value",
                commit * 1000 + 1,
                (commit + 1) * 1000
            ),
        )
        .await;
    }
    let ordered = "SELECT k, sum(v) AS v FROM d.s GROUP BY k ORDER BY k";

    let workers: Vec<Worker> = (0..3)
        .map(|_| Worker::start_with(&floe.catalog_db, Some(&tls), None))
        .collect();
    wait_live(&api, &workers.iter().collect::<Vec<_>>()).await;
    assert!(workers.iter().all(|w| w.url.starts_with("https://")));
    let plan = explain(&api, ordered).await;
    assert!(plan.contains("DistributedExec"), "{plan}");
    assert!(plan.contains("tasks=3"), "{plan}");
    assert!(plan.contains("NetworkShuffleExec"), "{plan}");
    assert!(!plan.contains("ordering_mode=Sorted"), "{plan}");
    let rows = sql(&api, ordered).await["rows"].clone();
    let keys: Vec<i64> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["k"].as_i64().unwrap())
        .collect();
    assert_eq!(keys, (1..=6000).collect::<Vec<i64>>());
    assert_eq!(rows[5999], json!({"k": 6000, "v": 12000}));

    // Audited once, on the coordinator, with its stages and the workers planned over.
    let statement = |r: &Value| -> Option<Value> {
        let details: Value = serde_json::from_str(r["details"].as_str()?).ok()?;
        (details["statement"] == json!(ordered)).then_some(details)
    };
    let mut records = Vec::new();
    for _ in 0..100 {
        let answer = api.get("/api/v1/audit?limit=1000").await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        records = answer.body["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(statement)
            .collect();
        if !records.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(records.len(), 1, "{records:?}");
    let distributed = &records[0]["distributed"];
    let stages = distributed["stages"].as_array().unwrap();
    assert!(stages.len() >= 2, "{distributed}");
    assert!(
        stages.iter().any(|s| s["tasks"] == json!(3)),
        "{distributed}"
    );
    let mut planned: Vec<&str> = distributed["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    planned.sort();
    let mut expected: Vec<&str> = workers.iter().map(|w| w.url.as_str()).collect();
    expected.sort();
    assert_eq!(planned, expected);
}

/// A worker service off loopback without TLS would carry the cluster secret in the clear:
/// refused at start unless asked for by name.
#[test]
fn plaintext_off_loopback_is_refused_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["worker", "--listen", "0.0.0.0:0"])
        .arg("--data-dir")
        .arg(dir.path())
        .env("FLOE_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run floe worker");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("without TLS") && stderr.contains("--plaintext-cluster"),
        "{stderr}"
    );
}
