//! Gray failures of distributed SQL: workers that stop without failing. A worker stopped
//! with SIGSTOP, and one whose network is cut (its namespace's cable down, while its
//! heartbeats still reach the catalog database on the shared disk), hold a query only for
//! the coordinator's stall time: the query is run again without them and answers exactly.
//! A worker that is only slow (stopped and continued by turns) keeps its tasks.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::distributed::{Worker, check_answers, counter, explain, make_table, wait_live};
use crate::harness::{Api, Floe};
use crate::netns::{Namespaces, skip};

/// The stall time the coordinators here run with.
const STALL_SECS: u64 = 4;

fn signal(worker: &Worker, signal: Signal) {
    kill(Pid::from_raw(worker.pid() as i32), signal).expect("signal a worker");
}

async fn coordinator() -> Floe {
    Floe::start_with(
        "sqlite",
        &[
            ("FLOE_DISTRIBUTED", "true"),
            ("FLOE_DISTRIBUTED_TASK_BYTES", "1"),
            ("FLOE_DISTRIBUTED_STALL_SECS", &STALL_SECS.to_string()),
            // Far beyond the bound asserted: a query that hangs fails the test by time.
            ("FLOE_SQL_STATEMENT_TIMEOUT_SECS", "300"),
        ],
    )
    .await
}

async fn relaunches(floe: &Floe) -> u64 {
    counter(
        &floe.metrics().await,
        "floe_sql_distributed_relaunches_total",
    )
}

/// The answers, checked, and how long they took.
async fn timed_answers(api: &Api) -> Duration {
    let started = Instant::now();
    check_answers(api).await;
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_worker_holds_a_query_for_its_stall_time_and_a_slow_one_keeps_its_tasks() {
    let floe = coordinator().await;
    let api = Api::new(&floe);
    make_table(&api).await;
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&floe.catalog_db)).collect();
    wait_live(&api, &workers.iter().collect::<Vec<_>>()).await;
    assert!(
        explain(&api, crate::distributed::TOTALS)
            .await
            .contains("tasks=3")
    );
    check_answers(&api).await;

    // Slow: stopped a quarter second in every half, it still answers every probe in time.
    let before = relaunches(&floe).await;
    let slow = workers[1].pid();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let turns = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = kill(Pid::from_raw(slow as i32), Signal::SIGSTOP);
                std::thread::sleep(Duration::from_millis(250));
                let _ = kill(Pid::from_raw(slow as i32), Signal::SIGCONT);
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    for _ in 0..3 {
        check_answers(&api).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    turns.join().unwrap();
    assert_eq!(
        relaunches(&floe).await,
        before,
        "a slow worker was taken for lost"
    );

    // Stopped, and still listed live (its last heartbeat is recent): the queries planned
    // over it are run again without it once it has answered no probe for the stall time.
    signal(&workers[0], Signal::SIGSTOP);
    let took = timed_answers(&api).await;
    assert!(
        took < Duration::from_secs(STALL_SECS + 20),
        "the answers took {took:?} with a worker stopped"
    );
    assert!(relaunches(&floe).await > before, "no query was run again");
    let metrics = floe.metrics().await;
    assert!(counter(&metrics, "floe_sql_distributed_lost_workers_total") >= 1);
    // Set aside, the stopped worker costs the next queries nothing.
    let after = relaunches(&floe).await;
    check_answers(&api).await;
    assert_eq!(
        relaunches(&floe).await,
        after,
        "planned over a worker set aside"
    );

    // Continued, it is live again.
    signal(&workers[0], Signal::SIGCONT);
    wait_live(&api, &workers.iter().collect::<Vec<_>>()).await;
    check_answers(&api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_cut_off_the_network_holds_a_query_for_its_stall_time() {
    let Some(namespaces) = Namespaces::make(2) else {
        skip("network namespaces cannot be made here (root and iproute2 are needed)");
        return;
    };
    let floe = coordinator().await;
    let api = Api::new(&floe);
    make_table(&api).await;
    // The catalog is SQLite on the shared disk: a cut-off worker still heartbeats, and stays
    // listed live. Only the coordinator's probes can tell.
    let workers: Vec<Worker> = (0..2)
        .map(|i| {
            Worker::start_in(
                &floe.catalog_db,
                &namespaces.names[i],
                namespaces.addresses[i],
            )
        })
        .collect();
    wait_live(&api, &workers.iter().collect::<Vec<_>>()).await;
    assert!(
        explain(&api, crate::distributed::TOTALS)
            .await
            .contains("tasks=2")
    );
    check_answers(&api).await;
    let before = relaunches(&floe).await;

    namespaces.cut(0, true);
    let took = timed_answers(&api).await;
    // Well within the 30 s a connection's unanswered ping takes to fail it.
    assert!(
        took < Duration::from_secs(STALL_SECS + 12),
        "the answers took {took:?} with a worker cut off"
    );
    assert!(relaunches(&floe).await > before, "no query was run again");
    wait_live(&api, &workers.iter().collect::<Vec<_>>()).await;

    namespaces.cut(0, false);
    check_answers(&api).await;
    drop(workers);
    drop(namespaces);
}
