//! A statement's deadline seen from its consumer: a result cut short by the timeout ends with
//! the timeout's error after the rows already handed over — also when the consumer reads so
//! slowly that the deadline passes while a batch waits to be handed over.

use std::time::Duration;

use floe_catalog::governance::authz::Caller;
use floe_sql::{EngineConfig, QueryOptions, SqlEngine};
use futures::StreamExt;

mod common;

async fn engine(dir: &tempfile::TempDir, timeout: Duration) -> SqlEngine {
    let config = EngineConfig {
        statement_timeout: Some(timeout),
        // Answers wait in memory only: the query waits for its slow reader.
        results: floe_sql::ResultLimits {
            memory: 1 << 20,
            spool: 0,
        },
        ..EngineConfig::default()
    };
    common::engine_in(dir, config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_cut_short_by_the_timeout_ends_with_its_error_for_a_slow_reader() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough to plan on a machine busy with the cross join beside it.
    let engine = engine(&dir, Duration::from_secs(2)).await;
    let mut result = engine
        .query(
            &Caller::system(),
            "SELECT * FROM generate_series(1, 10000000000)",
            &QueryOptions::default(),
        )
        .await
        .unwrap();
    let first = result.stream.next().await.unwrap().unwrap();
    assert!(first.num_rows() > 0);
    // The reader stalls past the deadline, while the query waits to hand over more rows.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let mut rows = first.num_rows();
    let mut ended_with = None;
    while let Some(batch) = result.stream.next().await {
        match batch {
            Ok(batch) => rows += batch.num_rows(),
            Err(e) => {
                ended_with = Some(e.to_string());
                break;
            }
        }
    }
    let error = ended_with.unwrap_or_else(|| panic!("{rows} rows read as a complete result"));
    assert!(error.contains("timeout"), "{error}");
    assert!(
        result.stream.next().await.is_none(),
        "nothing follows the error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_join_counted_in_one_poll_is_stopped_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(&dir, Duration::from_millis(500)).await;
    let outcome = tokio::time::timeout(Duration::from_secs(60), async {
        let result = engine
            .query(
                &Caller::system(),
                "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b",
                &QueryOptions::default(),
            )
            .await?;
        futures::TryStreamExt::try_collect::<Vec<_>>(result.stream)
            .await
            .map_err(floe_sql::SqlError::from)
    })
    .await
    .expect("the join ran on past the deadline (no answer within 60 s)");
    let error = outcome.expect_err("10^12 rows counted within half a second");
    assert!(error.to_string().contains("timeout"), "{error}");
}
