//! Work stealing across processes: a coordinator hands the files of a distributed scan to
//! its tasks one at a time, and the tasks of fast workers take the files of a worker slowed
//! on purpose; the coordinator's work units answer no one without the cluster's secret.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use floe_catalog::cluster::ClusterStore;

use crate::distributed::{
    TOTALS, Worker, channel_with_secret, check_answers, counter, explain, sql, wait_live,
};
use crate::harness::{Api, Floe, free_port};

#[derive(Clone, PartialEq, prost::Message)]
struct NextUnit {
    #[prost(bytes = "vec", tag = "1")]
    feed: Vec<u8>,
    #[prost(uint32, tag = "2")]
    task: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Handout {
    #[prost(bool, tag = "1")]
    done: bool,
    #[prost(uint32, tag = "2")]
    unit: u32,
    #[prost(bool, tag = "3")]
    stolen: bool,
}

/// Stops the process `pid` 30 ms of every 40 until dropped; leaves it running.
struct Throttle(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Throttle {
    fn start(pid: u32) -> Self {
        let pid = Pid::from_raw(pid as i32);
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                let _ = kill(pid, Signal::SIGSTOP);
                std::thread::sleep(Duration::from_millis(30));
                let _ = kill(pid, Signal::SIGCONT);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Self(stop, Some(thread))
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(thread) = self.1.take() {
            let _ = thread.join();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slowed_workers_files_are_taken_by_the_others() {
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
    sql(&api, "CREATE TABLE d.t (k BIGINT, g BIGINT)").await;
    // Twelve commits, twelve files: four per worker.
    for commit in 0..12 {
        sql(
            &api,
            &format!(
                "INSERT INTO d.t SELECT value, value % 1000 FROM generate_series({}, {})",
                commit * 5_000 + 1,
                (commit + 1) * 5_000
            ),
        )
        .await;
    }
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&floe.catalog_db)).collect();
    wait_live(&api, &workers.iter().collect::<Vec<_>>()).await;
    let plan = explain(&api, TOTALS).await;
    assert!(plan.contains("work units of task"), "{plan}");
    check_answers(&api).await;

    // One worker runs a quarter of the time: the others take the files placed with it.
    let throttle = Throttle::start(workers[0].pid());
    let mut stolen = 0;
    for _ in 0..10 {
        check_answers(&api).await;
        stolen = counter(
            &floe.metrics().await,
            "floe_sql_distributed_stolen_work_units_total",
        );
        if stolen > 0 {
            break;
        }
    }
    drop(throttle);
    assert!(
        stolen > 0,
        "no file of the slowed worker was taken by another"
    );
    let metrics = floe.metrics().await;
    assert!(counter(&metrics, "floe_sql_distributed_work_units_total") >= 12 * 3);
    check_answers(&api).await;

    forged_unit_calls_are_refused(&floe, &flight).await;
    check_answers(&api).await;
}

/// Asks the coordinator at `flight` for a unit, sending `secret`.
async fn ask(flight: &str, secret: Option<&str>, feed: Vec<u8>) -> Result<Handout, tonic::Status> {
    let with_secret = channel_with_secret(&format!("http://{flight}"), secret).await;
    let mut grpc = tonic::client::Grpc::new(with_secret);
    grpc.ready().await.unwrap();
    grpc.unary(
        tonic::Request::new(NextUnit { feed, task: 0 }),
        http::uri::PathAndQuery::from_static("/floe.cluster.v1.WorkUnits/Next"),
        tonic_prost::ProstCodec::<NextUnit, Handout>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

/// Work units tell a caller which files a query reads next: without the cluster's secret
/// (or with another) nothing is answered; with it, a feed no query opened is not found.
async fn forged_unit_calls_are_refused(floe: &Floe, flight: &str) {
    let store = floe_store::SqlStore::connect(&floe.catalog_db, Default::default())
        .await
        .unwrap();
    let secret = store.cluster_secret().await.unwrap();
    let feed = uuid::Uuid::new_v4().as_bytes().to_vec();
    for offered in [None, Some("not-the-cluster-secret")] {
        let refused = ask(flight, offered, feed.clone()).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused}");
    }
    let unknown = ask(flight, Some(&secret), feed).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown}");
    let malformed = ask(flight, Some(&secret), vec![1, 2, 3]).await.unwrap_err();
    assert_eq!(
        malformed.code(),
        tonic::Code::InvalidArgument,
        "{malformed}"
    );
    store.close().await;
}
