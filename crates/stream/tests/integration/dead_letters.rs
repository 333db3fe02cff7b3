//! The one dead-letter form from a Kafka pipeline: a dead-letter table of the earlier form is
//! upgraded in place (old rows read under the new names), and a table of that name that is
//! not Floe's is never written.

use std::time::Duration;

use floe_catalog::governance::authz::Caller;
use floe_sql::{QueryOptions, SqlEngine};
use floe_stream::kafka::{Pipeline, PipelineSpec, StartPosition};
use futures::TryStreamExt;
use rdkafka::mocking::MockCluster;
use tokio_util::sync::CancellationToken;

use super::formats::text_rows as text;
use super::{PARTITIONS, embedded, produce, run_until};

/// Runs `sql`, which must succeed.
async fn execute(engine: &SqlEngine, sql: &str) {
    let options = QueryOptions {
        warehouse: Some("wh".into()),
        ..Default::default()
    };
    let result = engine
        .query(&Caller::system(), sql, &options)
        .await
        .unwrap();
    let _: Vec<datafusion::arrow::array::RecordBatch> = result.stream.try_collect().await.unwrap();
}

fn spec(bootstrap: &str, table: &str) -> PipelineSpec {
    PipelineSpec {
        name: format!("{table}-json"),
        warehouse: "wh".into(),
        namespace: vec!["raw".into()],
        table: table.into(),
        bootstrap_servers: bootstrap.into(),
        topics: vec!["events".into()],
        start: StartPosition::Earliest,
        commit_interval_ms: 200,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_table_of_the_earlier_form_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path()).await;
    // The table an earlier Floe made, with one letter in it.
    execute(
        &engine,
        "CREATE TABLE raw.events__dead_letters (pipeline VARCHAR NOT NULL, topic VARCHAR NOT NULL, \
         \"partition\" INT NOT NULL, \"offset\" BIGINT NOT NULL, \"timestamp\" TIMESTAMP, \
         \"key\" BYTEA, value BYTEA NOT NULL, error VARCHAR NOT NULL)",
    )
    .await;
    execute(
        &engine,
        "INSERT INTO raw.events__dead_letters VALUES ('events-json', 'events', 0, 5, NULL, NULL, \
         CAST('old bytes' AS BYTEA), 'an earlier refusal')",
    )
    .await;

    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("events", PARTITIONS, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    // ids 0 and 3 are not JSON: two letters.
    produce(&bootstrap, 0, 6, Some(3)).await;
    run_until(&engine, &spec(&bootstrap, "events"), 4).await;

    let letters = text(
        &engine,
        "SELECT door, pipeline, source, \"partition\", \"offset\", reason, CAST(record AS VARCHAR), \
         received_at IS NOT NULL FROM raw.events__dead_letters ORDER BY door NULLS FIRST, \"offset\"",
    )
    .await;
    assert_eq!(letters.len(), 3, "{letters:?}");
    assert_eq!(
        letters[0],
        "null|events-json|events|0|5|an earlier refusal|old bytes|false"
    );
    for letter in &letters[1..] {
        assert!(
            letter.starts_with("kafka|events-json|events|0|")
                && letter.contains("not JSON")
                && letter.ends_with("|not json|true"),
            "{letter}"
        );
    }
    // Letters are found across files written before and after the upgrade (old files read
    // the added columns as nulls): a dry redrive counts all three as the pipeline's.
    let counted =
        floe_stream::kafka::redrive(&spec(&bootstrap, "events"), engine.catalog(), &engine, true)
            .await
            .unwrap();
    assert_eq!((counted.letters, counted.sent), (3, 0), "{counted:?}");
    let loaded = engine
        .catalog()
        .load_table(
            &Caller::system(),
            "wh",
            &iceberg::TableIdent::from_strs(["raw", "events__dead_letters"]).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        loaded
            .metadata
            .properties()
            .get(floe_stream::core::dead_letter::OF_PROPERTY)
            .map(String::as_str),
        Some("events")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_named_like_dead_letters_that_is_not_floes_is_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let engine = embedded(dir.path()).await;
    // Someone's own table, whose name a pipeline into raw.victim would give its letters.
    execute(
        &engine,
        "CREATE TABLE raw.victim__dead_letters (reason VARCHAR, record BYTEA)",
    )
    .await;
    execute(
        &engine,
        "INSERT INTO raw.victim__dead_letters VALUES ('mine', CAST('x' AS BYTEA))",
    )
    .await;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("events", PARTITIONS, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    produce(&bootstrap, 0, 6, Some(3)).await;

    let pipeline = Pipeline::new(
        spec(&bootstrap, "victim"),
        engine.catalog().clone(),
        engine.clone(),
    )
    .unwrap();
    let stopped = tokio::time::timeout(
        Duration::from_secs(60),
        pipeline.run(CancellationToken::new()),
    )
    .await
    .expect("the pipeline stops with an error");
    let error = stopped.expect_err("letters have nowhere to go").to_string();
    assert!(
        error.contains("raw.victim__dead_letters") && error.contains("floe.dead-letters-of"),
        "{error}"
    );
    assert_eq!(
        text(&engine, "SELECT reason FROM raw.victim__dead_letters").await,
        ["mine"]
    );
}
