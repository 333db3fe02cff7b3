//! `floe bench history`: how a statement's latency grows with a table's history — the curve
//! of a one-row `INSERT`, a `count(*)` and a filtered count (`WHERE id = …`, planned from the
//! files' statistics) at 10, 100 and 1,000 commits (or whatever
//! `--commits` reaches), with no compaction in between, on an embedded catalog under `--dir`.
//!
//! Each commit of a one-row insert adds one manifest to the table's next snapshot. Planning
//! reads the snapshot's manifests for statistics; Floe keeps what it read per manifest file
//! (manifests never change), so a statement after a commit reads only the new one. The same
//! run repeats the series on a second table with that cache emptied before every statement
//! — each statement then reads every manifest, as Floe did before — and prints both side by
//! side with their ratio.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use datafusion::arrow::array::RecordBatch;
use floe_catalog::governance::authz::Caller;
use floe_sql::{QueryOptions, SqlEngine};
use futures::TryStreamExt;

#[derive(Args, Debug)]
pub struct HistoryBenchArgs {
    /// Directory for the embedded catalog and the tables (recreated on every run).
    #[arg(long, default_value = "./floe-bench-history")]
    dir: PathBuf,
    /// Commits each table reaches; latency is measured at 10, 100, 1,000, … up to it.
    #[arg(long, default_value_t = 1_000)]
    commits: usize,
    /// Statements of each kind timed at each point (the median counts).
    #[arg(long, default_value_t = 7)]
    samples: usize,
}

/// Median `INSERT`, `count(*)` and filtered-count milliseconds at each measured commit count.
type Curve = Vec<(usize, f64, f64, f64)>;

pub async fn run(args: HistoryBenchArgs) -> anyhow::Result<()> {
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)
            .with_context(|| format!("clear {}", args.dir.display()))?;
    }
    std::fs::create_dir_all(&args.dir)?;
    let engine = super::embedded_engine(&args.dir).await?;
    run_sql(&engine, "CREATE SCHEMA bench.history").await?;

    let points: Vec<usize> = std::iter::successors(Some(10usize), |p| p.checked_mul(10))
        .take_while(|p| *p <= args.commits.max(10))
        .collect();
    println!(
        "statement latency by commits in the table (median of {} each, ms)",
        args.samples
    );
    let cached = curve(&engine, "cached", &points, args.samples, false).await?;
    let uncached = curve(&engine, "uncached", &points, args.samples, true).await?;
    println!(
        "\n{:>8} | {:>12} {:>14} {:>7} | {:>12} {:>14} {:>7} | {:>12} {:>14} {:>7}",
        "commits",
        "INSERT",
        "INSERT, before",
        "ratio",
        "count(*)",
        "count, before",
        "ratio",
        "filtered",
        "filtered, before",
        "ratio"
    );
    for ((at, insert, count, filtered), (_, insert_before, count_before, filtered_before)) in
        cached.iter().zip(&uncached)
    {
        println!(
            "{at:>8} | {insert:>12.1} {insert_before:>14.1} {:>7.2} | {count:>12.1} {count_before:>14.1} {:>7.2} | {filtered:>12.1} {filtered_before:>14.1} {:>7.2}",
            insert / insert_before,
            count / count_before,
            filtered / filtered_before
        );
    }
    Ok(())
}

/// The latency curve of one table, its manifests cache emptied before every statement when
/// `forget` is set.
async fn curve(
    engine: &SqlEngine,
    name: &str,
    points: &[usize],
    samples: usize,
    forget: bool,
) -> anyhow::Result<Curve> {
    let table = format!("bench.history.{name}");
    run_sql(
        engine,
        &format!("CREATE TABLE {table} (id BIGINT, v VARCHAR)"),
    )
    .await?;
    let mut commits = 0usize;
    let mut out = Vec::new();
    let statement = |n: usize| format!("INSERT INTO {table} VALUES ({n}, 'row {n}')");
    for &point in points {
        while commits + samples < point {
            if forget {
                floe_sql::scan::forget_manifests();
            }
            run_sql(engine, &statement(commits)).await?;
            commits += 1;
        }
        let mut inserts = Vec::with_capacity(samples);
        let mut counts = Vec::with_capacity(samples);
        let mut filtered = Vec::with_capacity(samples);
        for _ in 0..samples.max(1) {
            if forget {
                floe_sql::scan::forget_manifests();
            }
            let started = Instant::now();
            run_sql(engine, &statement(commits)).await?;
            inserts.push(started.elapsed().as_secs_f64() * 1000.0);
            commits += 1;
            if forget {
                floe_sql::scan::forget_manifests();
            }
            let started = Instant::now();
            let batches = run_sql(engine, &format!("SELECT count(*) FROM {table}")).await?;
            counts.push(started.elapsed().as_secs_f64() * 1000.0);
            let rows = batches
                .first()
                .and_then(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<datafusion::arrow::array::Int64Array>()
                })
                .map(|c| c.value(0));
            anyhow::ensure!(
                rows == Some(commits as i64),
                "{table} counts {rows:?} rows after {commits} inserts"
            );
            if forget {
                floe_sql::scan::forget_manifests();
            }
            let started = Instant::now();
            let sql = format!("SELECT count(*) FROM {table} WHERE id = {}", commits / 2);
            let batches = run_sql(engine, &sql).await?;
            filtered.push(started.elapsed().as_secs_f64() * 1000.0);
            let found = batches
                .first()
                .and_then(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<datafusion::arrow::array::Int64Array>()
                })
                .map(|c| c.value(0));
            anyhow::ensure!(found == Some(1), "{sql} counted {found:?} rows, not 1");
        }
        let (insert, count, filter) = (
            median(&mut inserts),
            median(&mut counts),
            median(&mut filtered),
        );
        println!(
            "{name:>8}: {commits:>6} commits: INSERT {insert:.1} ms, count(*) {count:.1} ms, \
             filtered count {filter:.1} ms"
        );
        out.push((commits, insert, count, filter));
    }
    Ok(out)
}

async fn run_sql(engine: &SqlEngine, sql: &str) -> anyhow::Result<Vec<RecordBatch>> {
    let options = QueryOptions {
        warehouse: Some("bench".into()),
        ..Default::default()
    };
    let result = engine
        .query(&Caller::system(), sql, &options)
        .await
        .with_context(|| sql.to_string())?;
    Ok(result.stream.try_collect().await?)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
