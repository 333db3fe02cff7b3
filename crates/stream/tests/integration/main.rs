//! Pipelines against librdkafka's mock cluster (the Kafka protocol over TCP on loopback) and
//! an embedded catalog: records land exactly once across restarts, and the snapshot summary's
//! offsets match the broker's.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogConfig, CatalogService};
use floe_sql::{EngineConfig, QueryOptions, SqlEngine};
use floe_storage::StorageProfile;
use floe_store::{SqlStore, StoreOptions};
use floe_stream::kafka::{Pipeline, PipelineSpec, StartPosition};
use futures::TryStreamExt;
use iceberg::NamespaceIdent;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 3;

async fn embedded(dir: &std::path::Path) -> Arc<SqlEngine> {
    let url = format!("sqlite:{}", dir.join("catalog.db").display());
    let store = Arc::new(
        SqlStore::connect(&url, StoreOptions::default())
            .await
            .unwrap(),
    );
    let catalog = Arc::new(CatalogService::new(store, CatalogConfig::default()));
    let system = Caller::system();
    catalog
        .create_warehouse(
            &system,
            "wh",
            StorageProfile::Local {
                path: dir.join("warehouse").to_string_lossy().into_owned(),
            },
            Default::default(),
        )
        .await
        .unwrap();
    catalog
        .create_namespace(
            &system,
            "wh",
            &NamespaceIdent::new("raw".into()),
            Default::default(),
        )
        .await
        .unwrap();
    Arc::new(SqlEngine::new(catalog, EngineConfig::default()).unwrap())
}

async fn produce(bootstrap: &str, from: u64, to: u64, poison_every: Option<u64>) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    for id in from..to {
        let payload = match poison_every {
            Some(n) if id % n == 0 => "not json".to_string(),
            _ => format!(
                r#"{{"id": {id}, "name": "user-{id}", "score": {}.5}}"#,
                id % 10
            ),
        };
        let key = id.to_string();
        producer
            .send(
                FutureRecord::to("events")
                    .key(&key)
                    .payload(&payload)
                    .partition((id % PARTITIONS as u64) as i32),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
    }
}

async fn produce_raw(bootstrap: &str, records: &[impl AsRef<str>]) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    for record in records {
        producer
            .send(
                FutureRecord::<(), str>::to("events")
                    .payload(record.as_ref())
                    .partition(0),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
    }
}

async fn scalar(engine: &SqlEngine, sql: &str) -> i64 {
    let options = QueryOptions {
        warehouse: Some("wh".into()),
        ..Default::default()
    };
    let result = engine
        .query(&Caller::system(), sql, &options)
        .await
        .unwrap();
    let batches: Vec<datafusion::arrow::array::RecordBatch> =
        result.stream.try_collect().await.unwrap();
    batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .unwrap()
        .value(0)
}

async fn ids(engine: &SqlEngine) -> Vec<i64> {
    let options = QueryOptions {
        warehouse: Some("wh".into()),
        ..Default::default()
    };
    let Ok(result) = engine
        .query(
            &Caller::system(),
            "SELECT id FROM raw.events ORDER BY id",
            &options,
        )
        .await
    else {
        return Vec::new();
    };
    let batches: Vec<datafusion::arrow::array::RecordBatch> =
        result.stream.try_collect().await.unwrap();
    batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect()
}

/// (partition, offset, error) of every dead letter.
async fn dead_letters(engine: &SqlEngine) -> Vec<(i32, i64, String)> {
    use datafusion::arrow::array::{Int32Array, Int64Array};
    let options = QueryOptions {
        warehouse: Some("wh".into()),
        ..Default::default()
    };
    let sql = "SELECT \"partition\", \"offset\", reason FROM raw.events__dead_letters";
    let Ok(result) = engine.query(&Caller::system(), sql, &options).await else {
        return Vec::new();
    };
    let batches: Vec<datafusion::arrow::array::RecordBatch> =
        result.stream.try_collect().await.unwrap();
    let mut rows = Vec::new();
    for b in &batches {
        let partitions = b.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
        let offsets = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        let errors = datafusion::arrow::compute::cast(
            b.column(2),
            &datafusion::arrow::datatypes::DataType::Utf8,
        )
        .unwrap();
        let errors = errors
            .as_any()
            .downcast_ref::<datafusion::arrow::array::StringArray>()
            .unwrap();
        for i in 0..b.num_rows() {
            rows.push((
                partitions.value(i),
                offsets.value(i),
                errors.value(i).to_string(),
            ));
        }
    }
    rows
}

/// Runs the pipeline until the table holds `expected` rows (or 60 s pass), then stops it.
async fn run_until(engine: &Arc<SqlEngine>, spec: &PipelineSpec, expected: usize) {
    let pipeline = Pipeline::new(spec.clone(), engine.catalog().clone(), engine.clone()).unwrap();
    let stop = CancellationToken::new();
    let running = {
        let stop = stop.clone();
        tokio::spawn(async move { pipeline.run(stop).await })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while ids(engine).await.len() < expected && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_topic_lands_exactly_once_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path()).await;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("events", PARTITIONS, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let spec = PipelineSpec {
        name: "events-json".into(),
        warehouse: "wh".into(),
        namespace: vec!["raw".into()],
        table: "events".into(),
        bootstrap_servers: bootstrap.clone(),
        topics: vec!["events".into()],
        start: StartPosition::Earliest,
        properties: Default::default(),
        commit_interval_ms: 200,
        max_records: 50,
        ..Default::default()
    };

    // Poison records (not JSON) are skipped and counted; everything else lands once.
    produce(&bootstrap, 0, 300, Some(97)).await;
    let poisoned: HashSet<i64> = [0, 97, 194, 291].into();
    let first: Vec<i64> = (0..300).filter(|i| !poisoned.contains(i)).collect();
    run_until(&engine, &spec, first.len()).await;
    assert_eq!(ids(&engine).await, first);
    let dead = dead_letters(&engine).await;
    assert_eq!(dead.len(), 4, "{dead:?}");
    assert!(
        dead.iter().all(|(_, _, error)| error.contains("not JSON")),
        "{dead:?}"
    );
    let mut dead_offsets: Vec<(i32, i64)> = dead.iter().map(|(p, o, _)| (*p, *o)).collect();
    dead_offsets.sort();
    // ids 0, 97, 194, 291 went to partitions id % 3 at offsets id / 3.
    assert_eq!(dead_offsets, vec![(0, 0), (0, 97), (1, 32), (2, 64)]);

    // A restart resumes after the committed offsets: nothing is read twice. Mid-stream the
    // records gain a field (the table gains a column) and one record's id is text (it does
    // not fit: dead letter, the rest flows).
    produce(&bootstrap, 300, 400, None).await;
    produce_raw(&bootstrap, &[r#"{"id": "four hundred", "name": "misfit"}"#]).await;
    produce_raw(
        &bootstrap,
        &(400..500)
            .map(|i| format!(r#"{{"id": {i}, "name": "user-{i}", "country": "nl"}}"#))
            .collect::<Vec<_>>(),
    )
    .await;
    let all: Vec<i64> = first.iter().copied().chain(300..500).collect();
    run_until(&engine, &spec, all.len()).await;
    assert_eq!(ids(&engine).await, all);
    assert_eq!(
        scalar(
            &engine,
            "SELECT count(*) FROM raw.events WHERE country = 'nl'"
        )
        .await,
        100
    );
    let dead = dead_letters(&engine).await;
    assert_eq!(dead.len(), 5, "{dead:?}");
    assert!(
        dead.iter().any(|(_, _, e)| e.contains("does not fit")),
        "{dead:?}"
    );

    // Stopped and started again with nothing new: still no duplicates.
    let pipeline = Pipeline::new(spec.clone(), engine.catalog().clone(), engine.clone()).unwrap();
    let stop = CancellationToken::new();
    let quiet = {
        let stop = stop.clone();
        tokio::spawn(async move { pipeline.run(stop).await })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.cancel();
    let stats = quiet.await.unwrap().unwrap();
    assert_eq!(stats.commits, 0);
    assert_eq!(ids(&engine).await, all);
    assert_eq!(
        dead_letters(&engine).await.len(),
        5,
        "dead letters are not written twice"
    );

    // The newest snapshot's offsets are the broker's high watermarks.
    let loaded = engine
        .catalog()
        .load_table(
            &Caller::system(),
            "wh",
            &iceberg::TableIdent::new(NamespaceIdent::new("raw".into()), "events".into()),
        )
        .await
        .unwrap();
    let committed = spec.committed_offsets(&loaded.metadata);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "check")
        .create()
        .unwrap();
    for partition in 0..PARTITIONS {
        let (_, high) = consumer
            .fetch_watermarks("events", partition, Duration::from_secs(5))
            .unwrap();
        assert_eq!(committed[&("events".to_string(), partition)], high);
    }
    let summary = &loaded
        .metadata
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert_eq!(
        summary["floe.source.events-json.events.0"],
        committed[&("events".to_string(), 0)].to_string()
    );
}

mod dead_letters;
mod formats;
