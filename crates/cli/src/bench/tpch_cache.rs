//! What routing by affinity is worth to the workers' caches: every TPC-H query run twice over
//! fresh workers with small caches, once with each data file sent to the same worker every
//! time (rendezvous hashing over the live workers) and once to a worker chosen afresh per
//! query, and the workers' block hit rates compared.

use std::time::Duration;

use anyhow::Context;
use floe_catalog::cluster::{CacheCounts, ClusterStore};
use floe_sql::distributed::{Cluster, ClusterSecret, LiveWorkers};
use floe_sql::{EngineConfig, SqlEngine};
use floe_store::SqlStore;

use super::tpch::{Prepared, TpchBenchArgs};
use super::tpch_workers::{Workers, answer, wait_for};

/// Runs of every query per placement.
const PASSES: usize = 2;

/// The counts the live workers last reported, summed.
async fn counts(store: &SqlStore) -> anyhow::Result<CacheCounts> {
    let mut sum = CacheCounts::default();
    for worker in store.list_workers().await? {
        sum.memory_hits += worker.cache.memory_hits;
        sum.disk_hits += worker.cache.disk_hits;
        sum.misses += worker.cache.misses;
    }
    Ok(sum)
}

pub(super) async fn hit_rates(
    args: &TpchBenchArgs,
    prepared: &Prepared,
    store: &SqlStore,
    secret: &ClusterSecret,
    live: &LiveWorkers,
) -> anyhow::Result<()> {
    let options = prepared.options();
    println!(
        "\ncache hit rates: each query {PASSES} times over {} fresh workers with {} MiB of \
         cache each (memory only), blocks of {} KiB",
        args.workers,
        args.worker_cache_mb,
        floe_storage::cache::BLOCK_BYTES / 1024
    );
    println!(
        "{:>22} {:>12} {:>12} {:>10}",
        "placement", "block hits", "misses", "hit rate"
    );
    for (affinity, name) in [
        (true, "affinity (rendezvous)"),
        (false, "a worker per query"),
    ] {
        wait_for(live, 0, &prepared.dir).await?;
        for worker in store.list_workers().await? {
            store.remove_worker(worker.id).await?;
        }
        let flags = [
            "--cache-memory-mb".to_string(),
            args.worker_cache_mb.to_string(),
            "--cache-disk-mb".to_string(),
            "0".to_string(),
        ];
        let workers = Workers::start_as(
            args.workers,
            prepared,
            "cache-worker",
            args.query_memory_limit_mb,
            &flags,
            &[],
        )?;
        wait_for(live, args.workers, &prepared.dir).await?;
        let coordinator = SqlEngine::new(
            prepared.engine.catalog().clone(),
            EngineConfig {
                query_memory_limit: args.query_memory_limit_mb << 20,
                ..EngineConfig::default()
            },
        )?
        .with_cluster(
            Cluster::new(live.clone(), secret.clone())
                .with_task_bytes(args.task_bytes)
                .with_affinity(affinity),
        );
        for _ in 0..PASSES {
            for (q, sql) in &prepared.queries {
                answer(&coordinator, prepared, &options, sql)
                    .await
                    .with_context(|| format!("Q{q} with {name}"))?;
            }
        }
        // Each worker reports its counts with its heartbeat.
        tokio::time::sleep(floe_server::cluster::HEARTBEAT_EVERY + Duration::from_millis(800))
            .await;
        let counts = counts(store).await?;
        drop(workers);
        let hits = counts.memory_hits + counts.disk_hits;
        let rate = hits as f64 / (hits + counts.misses).max(1) as f64;
        println!(
            "{name:>22} {hits:>12} {:>12} {:>9.1}%",
            counts.misses,
            rate * 100.0
        );
    }
    Ok(())
}
