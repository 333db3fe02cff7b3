//! Runtime filters across stages, across processes: a join's filter, made by its task on one
//! worker, reaches the scan below its probe side in another stage on other workers, so the
//! aggregation there sees only the keys the join can match; `/metrics` counts the filter and
//! the stages' rows and bytes. The coordinator's board of filters answers no one without the
//! cluster's secret.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::distributed::{Worker, channel_with_secret, explain, sql, wait_live};
use crate::harness::{Api, Floe, free_port};

/// Each of 5,000 keys 24 times in `d.facts` (six files); 5 of the 5,000 keys tagged `x` in
/// `d.dims`.
const JOINED: &str = "SELECT count(*) AS n, sum(f.a) AS total FROM d.dims \
     JOIN (SELECT k, avg(v) AS a FROM d.facts GROUP BY k) f ON d.dims.k = f.k \
     WHERE d.dims.tag = 'x'";

/// TPC-H Q20's shape: a key of two columns, the probe side aggregated by it. 5 of the 15,000
/// pairs tagged `x`; each pair 8 times in `d.lines` (six files).
const PAIRED: &str = "SELECT count(*) AS n, sum(l.a) AS total FROM d.pairs \
     JOIN (SELECT k, k2, avg(v) AS a FROM d.lines GROUP BY k, k2) l \
     ON d.pairs.k = l.k AND d.pairs.k2 = l.k2 WHERE d.pairs.tag = 'x'";

/// The `runtime_filters_dropped` figures of the scans in `analyzed`: each must be 0.
fn dropped_filters(analyzed: &str) -> Vec<&str> {
    analyzed
        .split("runtime_filters_dropped=")
        .skip(1)
        .map(|rest| rest.split([',', ']']).next().unwrap_or_default())
        .collect()
}

fn gauge(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{series} ")))
        .unwrap_or_else(|| panic!("{series} missing from /metrics"))
        .parse()
        .unwrap()
}

/// The rows the partial aggregation over `d.facts` handed on, from `EXPLAIN ANALYZE`.
fn partial_aggregate_rows(analyzed: &str) -> u64 {
    let line = analyzed
        .lines()
        .find(|l| l.contains("AggregateExec: mode=Partial, gby=[k@"))
        .unwrap_or_else(|| panic!("no partial aggregation over facts in\n{analyzed}"));
    let rows = line
        .split("output_rows=")
        .nth(1)
        .and_then(|rest| rest.split([',', ']']).next())
        .unwrap_or_else(|| panic!("no output_rows in {line}"));
    let (number, scale) = match rows.strip_suffix(" K") {
        Some(thousands) => (thousands, 1000.0),
        None => (rows, 1.0),
    };
    (number.trim().parse::<f64>().unwrap() * scale) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_joins_filter_reaches_a_scan_in_another_stage() {
    let flight = format!("127.0.0.1:{}", free_port());
    let floe = Floe::start_with(
        "sqlite",
        &[
            ("FLOE_DISTRIBUTED", "true"),
            ("FLOE_DISTRIBUTED_TASK_BYTES", "1"),
            ("FLOE_FLIGHT_LISTEN", &flight),
        ],
    )
    .await;
    let api = Api::new(&floe);
    sql(&api, "CREATE SCHEMA d").await;
    sql(&api, "CREATE TABLE d.facts (k BIGINT, v BIGINT)").await;
    sql(&api, "CREATE TABLE d.dims (k BIGINT, tag VARCHAR)").await;
    for commit in 0..6 {
        sql(
            &api,
            &format!(
                "INSERT INTO d.facts SELECT value % 5000, value FROM generate_series({}, {})",
                commit * 20_000,
                (commit + 1) * 20_000 - 1
            ),
        )
        .await;
    }
    sql(
        &api,
        "INSERT INTO d.dims SELECT value, CASE WHEN value % 1000 = 0 THEN 'x' ELSE 'y' END \
         FROM generate_series(0, 4999)",
    )
    .await;
    let alone = sql(&api, JOINED).await["rows"].clone();
    assert_eq!(alone[0]["n"], json!(5), "{alone}");
    sql(&api, "CREATE TABLE d.lines (k BIGINT, k2 BIGINT, v BIGINT)").await;
    sql(
        &api,
        "CREATE TABLE d.pairs (k BIGINT, k2 BIGINT, tag VARCHAR)",
    )
    .await;
    for commit in 0..6 {
        sql(
            &api,
            &format!(
                "INSERT INTO d.lines SELECT value % 5000, value % 3, value \
                 FROM generate_series({}, {})",
                commit * 20_000,
                (commit + 1) * 20_000 - 1
            ),
        )
        .await;
    }
    sql(
        &api,
        "INSERT INTO d.pairs SELECT value % 5000, value % 3, \
         CASE WHEN value % 3000 = 0 THEN 'x' ELSE 'y' END FROM generate_series(0, 14999)",
    )
    .await;
    let paired_alone = sql(&api, PAIRED).await["rows"].clone();
    assert_eq!(paired_alone[0]["n"], json!(5), "{paired_alone}");
    // Joins that match null keys: their filters must not drop the nulls they need.
    sql(&api, "CREATE TABLE d.nulls (k BIGINT)").await;
    sql(&api, "INSERT INTO d.nulls VALUES (1), (NULL), (4000)").await;
    let null_keyed = [
        (
            "SELECT count(*) AS n FROM d.dims WHERE k NOT IN (SELECT k FROM d.nulls)",
            json!([{"n": 0}]),
        ),
        (
            "SELECT k FROM d.nulls INTERSECT SELECT CASE WHEN k = 2 THEN NULL ELSE k END FROM d.dims ORDER BY k",
            json!([{"k": 1}, {"k": 4000}, {"k": null}]),
        ),
    ];
    for (statement, expected) in &null_keyed {
        assert_eq!(&sql(&api, statement).await["rows"], expected, "{statement}");
    }

    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&floe.catalog_db)).collect();
    wait_live(&api, &workers.iter().collect::<Vec<_>>()).await;
    let plan = explain(&api, JOINED).await;
    assert!(plan.contains("NetworkShuffleExec"), "{plan}");
    assert!(plan.contains("Runtime filters across stages: 1"), "{plan}");
    assert_eq!(sql(&api, JOINED).await["rows"], alone);
    for (statement, expected) in &null_keyed {
        assert_eq!(&sql(&api, statement).await["rows"], expected, "{statement}");
    }

    // Without the filter each task's partial aggregation hands on every key it read (5,000
    // per task); with it, at most the 5 the join can match, per partition.
    let analyzed = explain(&api, &format!("ANALYZE {JOINED}")).await;
    let rows = partial_aggregate_rows(&analyzed);
    assert!(
        rows <= 100,
        "{rows} rows left the partial aggregation\n{analyzed}"
    );
    // The scans that wait for it report none of their filters dropped.
    let dropped = dropped_filters(&analyzed);
    assert!(
        !dropped.is_empty() && dropped.iter().all(|n| *n == "0"),
        "{dropped:?}\n{analyzed}"
    );

    // A key of two columns (Q20's): its filter travels too (a struct of the columns, which
    // the workers once could not decode and dropped) and prunes the rows the partial
    // aggregation hands on from 15,000 pairs per task to the 5 the join can match.
    let plan = explain(&api, PAIRED).await;
    assert!(plan.contains("Runtime filters across stages: 1"), "{plan}");
    assert_eq!(sql(&api, PAIRED).await["rows"], paired_alone);
    let analyzed = explain(&api, &format!("ANALYZE {PAIRED}")).await;
    let rows = partial_aggregate_rows(&analyzed);
    assert!(
        rows <= 100,
        "{rows} rows left the partial aggregation\n{analyzed}"
    );
    let dropped = dropped_filters(&analyzed);
    assert!(
        !dropped.is_empty() && dropped.iter().all(|n| *n == "0"),
        "{dropped:?}\n{analyzed}"
    );

    // Counted, and the stages' figures added up once the queries finished.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = floe.metrics().await;
        let filters = gauge(&metrics, "floe_sql_distributed_runtime_filters_total");
        let shuffled = gauge(
            &metrics,
            "floe_sql_distributed_stage_rows_total{exchange=\"shuffle\"}",
        );
        let stages = gauge(
            &metrics,
            "floe_sql_distributed_stages_total{exchange=\"broadcast\"}",
        );
        if filters >= 1.0 && shuffled > 0.0 && stages > 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    board_refuses_strangers(&flight).await;
    assert_eq!(sql(&api, JOINED).await["rows"], alone);
}

#[derive(Clone, PartialEq, prost::Message)]
struct Publish {
    #[prost(bytes = "vec", tag = "1")]
    board: Vec<u8>,
    #[prost(message, optional, tag = "2")]
    filter: Option<FilterNode>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FilterNode {
    #[prost(uint64, tag = "1")]
    filter: u64,
    #[prost(bytes = "vec", tag = "2")]
    schema: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    expr: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Published {
    #[prost(bool, tag = "1")]
    kept: bool,
}

/// A filter forged by a caller without the cluster's secret (or with another) is refused
/// before it is read; one for a board that does not exist is refused too.
async fn board_refuses_strangers(flight: &str) {
    let url = format!("http://{flight}");
    let forged = Publish {
        board: uuid::Uuid::new_v4().as_bytes().to_vec(),
        filter: Some(FilterNode {
            filter: 1,
            schema: b"forged".to_vec(),
            expr: b"forged".to_vec(),
        }),
    };
    for secret in [None, Some("not-the-cluster-secret")] {
        let channel = channel_with_secret(&url, secret).await;
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.unwrap();
        let refused = grpc
            .unary(
                tonic::Request::new(forged.clone()),
                http::uri::PathAndQuery::from_static("/floe.cluster.v1.RuntimeFilters/Publish"),
                tonic_prost::ProstCodec::<Publish, Published>::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused}");
    }
}
