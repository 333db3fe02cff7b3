//! `floe bench tpch --workers K` (and `floe bench tpcds --workers K`): the queries
//! distributed over K `floe worker` processes on this machine against Floe alone on the same
//! data, side by side in one run, every distributed answer compared row by row with the
//! single-node one.
//!
//! The workers register in the benchmark's catalog database, as a cluster's do; this process
//! coordinates. On one machine the workers share its cores, so the ratio measures what
//! distribution costs (planning, encoding, shuffles over loopback), not what it gains.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use datafusion::arrow::array::RecordBatch;
use floe_catalog::cluster::ClusterStore;
use floe_sql::distributed::{Cluster, ClusterSecret, LiveWorkers};
use floe_sql::{EngineConfig, QueryOptions, SqlEngine};
use floe_store::{SqlStore, StoreOptions};
use futures::TryStreamExt;
use tokio_util::sync::CancellationToken;

use super::suite::same_answer;
use super::tpch::{Prepared, TpchBenchArgs, prepare};

/// How a suite is run distributed, from its command line.
pub(super) struct Distribution {
    /// The suite's name, for the header.
    pub suite: &'static str,
    pub sf: f64,
    pub workers: usize,
    pub task_bytes: usize,
    pub query_memory_limit_mb: usize,
    pub iterations: usize,
    pub worker_netns: Vec<String>,
    pub coordinator_ip: Option<String>,
}

impl Distribution {
    fn of_tpch(args: &TpchBenchArgs) -> Self {
        Self {
            suite: "tpch",
            sf: args.sf,
            workers: args.workers,
            task_bytes: args.task_bytes,
            query_memory_limit_mb: args.query_memory_limit_mb,
            iterations: args.iterations,
            worker_netns: args.worker_netns.clone(),
            coordinator_ip: args.coordinator_ip.clone(),
        }
    }
}

/// `floe worker` processes, stopped (SIGTERM, so they deregister) when dropped.
pub(super) struct Workers(Vec<Child>);

impl Workers {
    fn start(dist: &Distribution, prepared: &Prepared) -> anyhow::Result<Self> {
        let places = netns_places(dist)?;
        Self::start_as(
            dist.workers,
            prepared,
            "worker",
            dist.query_memory_limit_mb,
            &[],
            &places,
        )
    }

    /// `count` workers in `<data dir>/<name>-i`, registered in the data's catalog database,
    /// started with `extra` flags too; worker i in network namespace `places[i].0` on
    /// address `places[i].1` when given (on loopback otherwise).
    pub(super) fn start_as(
        count: usize,
        prepared: &Prepared,
        name: &str,
        memory_mb: usize,
        extra: &[String],
        places: &[(String, String)],
    ) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("find this floe binary")?;
        let dir = &prepared.dir;
        let db = &prepared.catalog_db;
        let mut children = Vec::new();
        for i in 0..count {
            let own = dir.join(format!("{name}-{i}"));
            std::fs::create_dir_all(&own)?;
            let log = std::fs::File::create(own.join("worker.log"))?;
            let mut command = match places.get(i) {
                Some((netns, ip)) => {
                    let mut command = Command::new("ip");
                    command
                        .args(["netns", "exec", netns])
                        .arg(&exe)
                        .args(["worker", "--plaintext-cluster", "--listen"])
                        .arg(format!("{ip}:0"));
                    command
                }
                None => {
                    let mut command = Command::new(&exe);
                    command.args(["worker", "--listen", "127.0.0.1:0"]);
                    command
                }
            };
            let child = command
                .args(["--catalog-db", db])
                .arg("--data-dir")
                .arg(&own)
                .args(["--query-memory-limit-mb", &memory_mb.to_string()])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("start a floe worker")?;
            children.push(child);
        }
        Ok(Self(children))
    }
}

impl Workers {
    /// The process id of the `i`-th worker.
    pub(super) fn pid(&self, i: usize) -> Option<u32> {
        self.0.get(i).map(Child::id)
    }
}

/// The namespace and address of each worker, from `--worker-netns`.
fn netns_places(args: &Distribution) -> anyhow::Result<Vec<(String, String)>> {
    let places: Vec<(String, String)> = args
        .worker_netns
        .iter()
        .map(|place| {
            place
                .split_once('=')
                .map(|(ns, ip)| (ns.to_string(), ip.to_string()))
                .with_context(|| format!("--worker-netns {place:?} is not NAME=IP"))
        })
        .collect::<anyhow::Result<_>>()?;
    if !places.is_empty() && places.len() != args.workers {
        bail!(
            "--worker-netns names {} places for {} workers",
            places.len(),
            args.workers
        );
    }
    Ok(places)
}

/// A coordinating engine over `live`'s workers, passing runtime filters between stages (and,
/// with `units`, handing scans' files out as work units) through a service on a loopback
/// port of its own, until `stop`.
pub(super) async fn coordinator(
    prepared: &Prepared,
    args: &Distribution,
    live: &LiveWorkers,
    secret: &ClusterSecret,
    units: bool,
    stop: &CancellationToken,
) -> anyhow::Result<SqlEngine> {
    let host = args.coordinator_ip.as_deref().unwrap_or("127.0.0.1");
    let listener = tokio::net::TcpListener::bind((host, 0)).await?;
    let url = url::Url::parse(&format!("http://{}", listener.local_addr()?))?;
    let mut cluster = Cluster::new(live.clone(), secret.clone())
        .with_task_bytes(args.task_bytes)
        .with_runtime_filters(url.clone());
    if units {
        cluster = cluster.with_work_units(url);
    }
    let engine = SqlEngine::new(
        prepared.engine.catalog().clone(),
        EngineConfig {
            query_memory_limit: args.query_memory_limit_mb << 20,
            ..EngineConfig::default()
        },
    )?
    .with_cluster(cluster);
    let mut routes = tonic::service::RoutesBuilder::default();
    if let Some(service) = engine.unit_service() {
        routes.add_service(service);
    }
    if let Some(service) = engine.filter_service() {
        routes.add_service(service);
    }
    tokio::spawn(floe_server::cluster::serve_worker(
        listener,
        routes.routes(),
        stop.clone(),
        None,
    ));
    Ok(engine)
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
        }
        for child in &mut self.0 {
            let _ = child.wait();
        }
    }
}

pub(super) async fn answer(
    engine: &SqlEngine,
    prepared: &Prepared,
    options: &QueryOptions,
    sql: &str,
) -> anyhow::Result<Vec<RecordBatch>> {
    let result = engine.query(&prepared.caller, sql, options).await?;
    Ok(result.stream.try_collect().await?)
}

/// The plan text `explain` (an `EXPLAIN` statement) gives.
async fn plan_text(
    engine: &SqlEngine,
    prepared: &Prepared,
    options: &QueryOptions,
    explain: &str,
) -> anyhow::Result<String> {
    let mut text = String::new();
    for batch in &answer(engine, prepared, options, explain).await? {
        let plans = datafusion::arrow::util::display::ArrayFormatter::try_new(
            batch.column(1).as_ref(),
            &Default::default(),
        )?;
        for row in 0..batch.num_rows() {
            text.push_str(&plans.value(row).to_string());
            text.push('\n');
        }
    }
    Ok(text)
}

/// The sum of the `bytes_transferred=<n> <unit>` metrics in a plan's text.
fn transferred(plan: &str) -> f64 {
    plan.split("bytes_transferred=")
        .skip(1)
        .filter_map(|rest| {
            let mut words = rest.split([' ', ',', ']']);
            let number: f64 = words.next()?.parse().ok()?;
            let scale = match words.next()? {
                "B" => 1.0,
                "KB" => 1024.0,
                "MB" => 1024.0 * 1024.0,
                "GB" => 1024.0 * 1024.0 * 1024.0,
                _ => return None,
            };
            Some(number * scale)
        })
        .sum()
}

/// Waits until `live` lists `count` workers.
pub(super) async fn wait_for(live: &LiveWorkers, count: usize, dir: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    while live.get().len() != count {
        if started.elapsed() > Duration::from_secs(60) {
            bail!(
                "{} of {count} workers registered within a minute (their logs are in {}/worker-*)",
                live.get().len(),
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

pub(super) async fn timed(
    engine: &SqlEngine,
    prepared: &Prepared,
    options: &QueryOptions,
    sql: &str,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    answer(engine, prepared, options, sql).await?;
    Ok(start.elapsed().as_secs_f64() * 1000.0)
}

/// A cluster on this machine for a benchmark: its workers, the coordinator over them, and
/// what watches them, kept while it lives.
pub(super) struct BenchCluster {
    pub store: SqlStore,
    pub secret: ClusterSecret,
    pub workers: Workers,
    pub live: LiveWorkers,
    pub coordinator: SqlEngine,
    /// Serves the coordinator's work units and runtime filters (stopped when dropped).
    pub stop_units: CancellationToken,
    _stop_watching: tokio_util::sync::DropGuard,
    _stop_units: tokio_util::sync::DropGuard,
}

impl BenchCluster {
    pub(super) async fn start(prepared: &Prepared, dist: &Distribution) -> anyhow::Result<Self> {
        let store = SqlStore::connect(&prepared.catalog_db, StoreOptions::default()).await?;
        let secret = ClusterSecret::new(store.cluster_secret().await?);
        // Workers of an earlier run that was killed are not this run's.
        for worker in store.list_workers().await? {
            store.remove_worker(worker.id).await?;
        }
        let workers = Workers::start(dist, prepared)?;
        let live = LiveWorkers::default();
        let stop = CancellationToken::new();
        let stop_watching = stop.clone().drop_guard();
        tokio::spawn(floe_server::cluster::watch_workers(
            Arc::new(store.clone()),
            live.clone(),
            stop,
        ));
        wait_for(&live, dist.workers, &prepared.dir).await?;
        let stop_units = CancellationToken::new();
        let coordinator = coordinator(prepared, dist, &live, &secret, true, &stop_units).await?;
        Ok(Self {
            store,
            secret,
            workers,
            live,
            coordinator,
            _stop_units: stop_units.clone().drop_guard(),
            stop_units,
            _stop_watching: stop_watching,
        })
    }
}

pub(super) async fn run(args: TpchBenchArgs) -> anyhow::Result<()> {
    let prepared = prepare(&args).await?;
    let dist = Distribution::of_tpch(&args);
    let cluster = BenchCluster::start(&prepared, &dist).await?;
    compare(&prepared, &dist, &cluster.coordinator).await?;
    if args.iterations == 0 {
        return Ok(());
    }
    if args.slow_worker {
        let stolen_before = floe_sql::distributed::stats()
            .stolen_units
            .load(std::sync::atomic::Ordering::Relaxed);
        let fixed = self::coordinator(
            &prepared,
            &dist,
            &cluster.live,
            &cluster.secret,
            false,
            &cluster.stop_units,
        )
        .await?;
        super::tpch_steal::slowed(
            &args,
            &prepared,
            &cluster.workers,
            &cluster.coordinator,
            &fixed,
            stolen_before,
        )
        .await?;
    }
    if args.worker_cache_mb > 0 {
        let BenchCluster {
            store,
            secret,
            workers,
            live,
            coordinator,
            _stop_units,
            _stop_watching,
            ..
        } = cluster;
        drop(workers);
        super::tpch_cache::hit_rates(&args, &prepared, &store, &secret, &live).await?;
        drop((coordinator, _stop_units, _stop_watching));
    }
    Ok(())
}

/// Every query of `prepared` alone and over `coordinator`'s workers: answers compared row by
/// row, and (with timed runs) the times side by side with the bytes moved between stages.
/// Fails after the table when any answer differs or fails.
pub(super) async fn compare(
    prepared: &Prepared,
    dist: &Distribution,
    coordinator: &SqlEngine,
) -> anyhow::Result<()> {
    let options = prepared.options();
    println!(
        "floe bench {} --workers {}: scale factor {}, {} iteration(s) after a warm-up, best \
         time in ms; scan tasks of about {} bytes",
        dist.suite, dist.workers, dist.sf, dist.iterations, dist.task_bytes
    );
    let mut identical = 0;
    let mut distributed_queries = 0;
    let mut wrong: Vec<String> = Vec::new();
    let mut times: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    let mut moved: BTreeMap<usize, f64> = BTreeMap::new();
    for (q, sql) in &prepared.queries {
        // Stages apart from the coordinator's (none: it runs on the coordinator alone).
        let stages =
            match plan_text(coordinator, prepared, &options, &format!("EXPLAIN {sql}")).await {
                Ok(plan) => plan.matches("── tasks=").count(),
                Err(e) => {
                    wrong.push(format!("Q{q}: EXPLAIN fails distributed: {e:#}"));
                    continue;
                }
            };
        if stages > 0 {
            distributed_queries += 1;
        }
        let alone = answer(&prepared.engine, prepared, &options, sql)
            .await
            .with_context(|| format!("Q{q} alone"))?;
        let checked = match answer(coordinator, prepared, &options, sql).await {
            Ok(distributed) => same_answer(&distributed, &alone, "Floe alone"),
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            eprintln!("Q{q}: distributed: {e:#}");
            wrong.push(format!("Q{q}: {e:#}"));
            continue;
        }
        identical += 1;
        if dist.iterations == 0 {
            continue;
        }
        let (mut best_alone, mut best_distributed) = (f64::MAX, f64::MAX);
        for _ in 0..dist.iterations {
            best_alone = best_alone.min(timed(&prepared.engine, prepared, &options, sql).await?);
            best_distributed =
                best_distributed.min(timed(coordinator, prepared, &options, sql).await?);
        }
        // The bytes the run moves between stages: every network boundary's, in its
        // `EXPLAIN ANALYZE`.
        let analyzed = plan_text(
            coordinator,
            prepared,
            &options,
            &format!("EXPLAIN ANALYZE {sql}"),
        )
        .await?;
        moved.insert(*q, transferred(&analyzed));
        eprintln!("Q{q}: alone {best_alone:.1} ms, distributed {best_distributed:.1} ms");
        times.insert(*q, (best_alone, best_distributed));
    }
    println!(
        "{identical} of {} distributed answers identical to Floe alone's, row by row; \
         {distributed_queries} of them ran in stages on the workers",
        prepared.queries.len()
    );
    if !times.is_empty() {
        print_times(dist, &times, &moved);
    }
    if !wrong.is_empty() {
        bail!(
            "{} distributed answer(s) differ or fail:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    }
    Ok(())
}

fn print_times(
    dist: &Distribution,
    times: &BTreeMap<usize, (f64, f64)>,
    moved: &BTreeMap<usize, f64>,
) {
    println!(
        "\n{:>5} {:>10} {:>13} {:>18} {:>14}",
        "query", "alone", "distributed", "distributed/alone", "shuffled MiB"
    );
    let (mut sum_alone, mut sum_distributed, mut log) = (0.0, 0.0, 0.0);
    for (q, (alone, distributed)) in times {
        sum_alone += alone;
        sum_distributed += distributed;
        log += (distributed / alone).ln();
        println!(
            "{:>5} {alone:>10.1} {distributed:>13.1} {:>18.2} {:>14.1}",
            format!("Q{q}"),
            distributed / alone,
            moved.get(q).copied().unwrap_or_default() / (1024.0 * 1024.0)
        );
    }
    println!(
        "\nsummed: alone {sum_alone:.0} ms, distributed over {} workers {sum_distributed:.0} ms \
         (distributed/alone {:.2}); geometric mean of ratios {:.2}; {:.1} MiB moved between \
         stages",
        dist.workers,
        sum_distributed / sum_alone,
        (log / times.len() as f64).exp(),
        moved.values().sum::<f64>() / (1024.0 * 1024.0)
    );
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn bytes_moved_are_read_from_every_network_boundary() {
        let plan = "NetworkCoalesceExec: metrics=[bytes_transferred=2.5 KB, msg_count=8]\n\
                    NetworkShuffleExec: metrics=[output_rows=4, bytes_transferred=1.5 MB]\n\
                    NetworkShuffleExec: metrics=[bytes_transferred=12 B]";
        assert_eq!(
            transferred(plan),
            2.5 * 1024.0 + 1.5 * 1024.0 * 1024.0 + 12.0
        );
        assert_eq!(transferred("ProjectionExec: metrics=[output_rows=1]"), 0.0);
    }

    #[derive(Parser)]
    struct Bench {
        #[command(flatten)]
        args: TpchBenchArgs,
    }

    /// Every TPC-H query's plan, as a coordinator makes it before cutting stages, comes back
    /// from its trip to a worker the same (scans' access plans, adapter and reader included).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_tpch_plan_travels_intact() {
        let dir = tempfile::tempdir().unwrap();
        let bench = Bench::parse_from([
            "tpch",
            "--sf",
            "0.01",
            "--dir",
            dir.path().to_str().unwrap(),
        ]);
        let prepared = prepare(&bench.args).await.unwrap();
        let options = prepared.options();
        assert_eq!(prepared.queries.len(), 22);
        for (q, sql) in &prepared.queries {
            let plan = prepared
                .engine
                .distributable_plan(&prepared.caller, sql, &options)
                .await
                .unwrap_or_else(|e| panic!("Q{q} plans: {e}"));
            floe_sql::distributed::round_trip(&prepared.engine, plan)
                .await
                .unwrap_or_else(|e| panic!("Q{q}: {e}"));
        }
    }
}
