//! `floe bench tpch --workers K --slow-worker`: the TPC-H queries with one worker slowed on
//! purpose, once with scans' files handed out as work units (a task done with its own takes
//! a straggler's) and once with each task reading only the files placed with it.
//!
//! The first worker is slowed by stopping it (SIGSTOP) for 30 ms of every 40: it runs at a
//! quarter of its speed, like a worker on an overloaded or throttled machine, and still
//! answers its heartbeats in time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use floe_sql::SqlEngine;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::suite::same_answer;
use super::tpch::{Prepared, TpchBenchArgs};
use super::tpch_workers::{Workers, answer, timed};

/// Stops and continues a process in turns until dropped (and leaves it running).
struct Throttle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Throttle {
    fn start(pid: u32) -> anyhow::Result<Self> {
        let pid = Pid::from_raw(i32::try_from(pid).context("a process id")?);
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
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Every query with the first of `workers` slowed: over `stealing` (a coordinator handing
/// out work units) and `fixed` (one that does not), answers checked against Floe alone.
pub(super) async fn slowed(
    args: &TpchBenchArgs,
    prepared: &Prepared,
    workers: &Workers,
    stealing: &SqlEngine,
    fixed: &SqlEngine,
    stolen_before: u64,
) -> anyhow::Result<()> {
    let options = prepared.options();
    let pid = workers.pid(0).context("no worker to slow")?;
    let _throttle = Throttle::start(pid)?;
    println!(
        "\nwith one of {} workers stopped 30 ms of every 40 (best of {}, ms):",
        args.workers, args.iterations
    );
    println!(
        "{:>5} {:>12} {:>12} {:>16}",
        "query", "work units", "placed only", "units/placed"
    );
    let (mut sum_units, mut sum_fixed) = (0.0, 0.0);
    for (q, sql) in &prepared.queries {
        let alone = answer(&prepared.engine, prepared, &options, sql).await?;
        for (engine, how) in [(stealing, "with work units"), (fixed, "placed only")] {
            let got = answer(engine, prepared, &options, sql)
                .await
                .with_context(|| format!("Q{q} {how}, a worker slowed"))?;
            same_answer(&got, &alone, "Floe alone")
                .with_context(|| format!("Q{q} {how}: the answer differs"))?;
        }
        let (mut best_units, mut best_fixed) = (f64::MAX, f64::MAX);
        for _ in 0..args.iterations.max(1) {
            best_units = best_units.min(timed(stealing, prepared, &options, sql).await?);
            best_fixed = best_fixed.min(timed(fixed, prepared, &options, sql).await?);
        }
        sum_units += best_units;
        sum_fixed += best_fixed;
        println!(
            "{:>5} {best_units:>12.1} {best_fixed:>12.1} {:>16.2}",
            format!("Q{q}"),
            best_units / best_fixed
        );
    }
    let stolen = floe_sql::distributed::stats()
        .stolen_units
        .load(Ordering::Relaxed)
        - stolen_before;
    println!(
        "\nsummed with a worker slowed: work units {sum_units:.0} ms, placed only {sum_fixed:.0} \
         ms (units/placed {:.2}); {stolen} work units taken from a straggler",
        sum_units / sum_fixed
    );
    Ok(())
}
