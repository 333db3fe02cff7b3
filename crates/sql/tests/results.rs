//! A statement whose client reads slowly: its answer past the memory it may hold waits in the
//! warehouse's storage (below `.floe/results`), the query ends and gives back its place in
//! line, and the client still reads every row, in order; nothing is left behind.

use std::time::{Duration, Instant};

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use floe_catalog::governance::authz::Caller;
use floe_sql::{EngineConfig, QueryOptions, ResultLimits, SPOOL_DIR};
use futures::StreamExt;

mod common;

fn files_below(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            if e.file_type().unwrap().is_dir() {
                files_below(&e.path())
            } else {
                1
            }
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_readers_answer_waits_in_the_warehouse_and_is_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig {
        results: ResultLimits {
            memory: 256 << 10,
            spool: 1 << 30,
        },
        // One statement at a time: the second below runs only once the first gave back its
        // place, which it does once it has run, not once it has been read.
        max_concurrent_queries: 1,
        ..EngineConfig::default()
    };
    let engine = common::engine_in(&dir, config).await;
    let spool = dir.path().join("warehouse").join(SPOOL_DIR);
    let statement = "SELECT value, repeat('x', 40) AS pad FROM generate_series(1, 400000) \
                     ORDER BY value";
    let mut slow = engine
        .query(&Caller::system(), statement, &QueryOptions::default())
        .await
        .unwrap();
    let first = slow.stream.next().await.unwrap().unwrap();

    // Nobody reads; the query still runs to its end, its answer written to the warehouse.
    let deadline = Instant::now() + Duration::from_secs(60);
    let other = loop {
        let asked = tokio::time::timeout(
            Duration::from_millis(500),
            engine.query(&Caller::system(), "SELECT 1", &QueryOptions::default()),
        )
        .await;
        if let Ok(other) = asked {
            break other.unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the slow reader's query never gave back its place"
        );
    };
    let answered: Vec<RecordBatch> = other.stream.map(|b| b.unwrap()).collect().await;
    assert_eq!(answered[0].num_rows(), 1);
    assert!(
        files_below(&spool) > 0,
        "nothing was spooled below {}",
        spool.display()
    );

    let mut next = 1;
    let mut check = |batch: &RecordBatch| {
        for value in batch.column(0).as_primitive::<Int64Type>().values() {
            assert_eq!(*value, next);
            next += 1;
        }
    };
    check(&first);
    while let Some(batch) = slow.stream.next().await {
        check(&batch.unwrap());
    }
    assert_eq!(next, 400_001);
    drop(slow);
    for _ in 0..100 {
        if files_below(&spool) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{} spooled files left behind", files_below(&spool));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_goes_away_leaves_nothing_in_the_warehouse() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig {
        results: ResultLimits {
            memory: 64 << 10,
            spool: 1 << 30,
        },
        ..EngineConfig::default()
    };
    let engine = common::engine_in(&dir, config).await;
    let spool = dir.path().join("warehouse").join(SPOOL_DIR);
    let mut result = engine
        .query(
            &Caller::system(),
            "SELECT value, repeat('y', 40) AS pad FROM generate_series(1, 400000)",
            &QueryOptions::default(),
        )
        .await
        .unwrap();
    result.stream.next().await.unwrap().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while files_below(&spool) == 0 {
        assert!(Instant::now() < deadline, "nothing was spooled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(result);
    let deadline = Instant::now() + Duration::from_secs(30);
    while files_below(&spool) > 0 {
        assert!(
            Instant::now() < deadline,
            "spooled files outlived their reader"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A client that reads a statement's end and sends its next at once finds its principal's
/// place free: the statement gives it back before its consumer hears the end (before, a
/// client running as many statements as its principal may hit "already runs 1 statements"
/// now and then, a 429 over HTTP).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_statement_after_an_answer_read_to_its_end_is_never_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig {
        max_queries_per_principal: 1,
        ..EngineConfig::default()
    };
    let engine = common::engine_in(&dir, config).await;
    let mut caller = Caller::system();
    caller.principal.id = uuid::Uuid::new_v4();
    caller.principal.name = "reader".into();
    for round in 0..200 {
        let result = engine
            .query(&caller, "SELECT 1 AS one", &QueryOptions::default())
            .await
            .unwrap_or_else(|e| panic!("statement {round}: {e}"));
        let batches: Vec<RecordBatch> = futures::TryStreamExt::try_collect(result.stream)
            .await
            .unwrap();
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 1);
    }
}
