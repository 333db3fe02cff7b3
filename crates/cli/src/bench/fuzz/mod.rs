//! `floe bench fuzz`: randomized differential testing of Floe's SQL, in the manner of
//! SQLancer.
//!
//! From one seed it generates tables ([`data`]: NULLs in every column, repeated rows, an
//! empty table, one written in many commits, every type Floe maps) and writes them with
//! Floe's own writer as Iceberg tables and as Parquet files for DuckDB. Then statement after
//! statement ([`generate`]: joins of every kind, `IN`/`NOT IN`/`EXISTS` over NULLs, CTEs used
//! twice, windows, grouping sets, set operations, scalar subqueries, `LIMIT` over a total
//! order) is judged by the oracles ([`oracles`]): DuckDB's answer, Floe's own answer with its
//! rewrites off, ternary logic partitioning and NoREC. Each failure is shrunk ([`shrink`]) to
//! a small statement and printed with the tables it reads. Statement `i` of seed `s` is the
//! same on every run, so `--seed s --statements n` is reproducible (and CI runs it).

mod ast;
mod blame;
mod data;
mod duck;
mod generate;
mod oracles;
mod shrink;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::CatalogService;
use floe_sql::{EngineConfig, SqlEngine};
use rand::SeedableRng;
use rand::rngs::StdRng;

use oracles::{Checker, Oracle, Verdict};

#[derive(Args, Debug)]
pub struct FuzzBenchArgs {
    /// Generate statements for this long (default 60 s unless `--statements` is given).
    #[arg(long)]
    seconds: Option<u64>,
    /// Stop after this many statements (a fixed, reproducible run with `--seed`).
    #[arg(long)]
    statements: Option<u64>,
    /// The seed of the tables and statements (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Run only statement number N of the seed (as a failure's report names it), printing it.
    #[arg(long)]
    only: Option<u64>,
    /// Directory for the tables (default: a fresh one under the system's temporary
    /// directory, removed afterwards); each seed gets `seed-<S>` inside it, recreated.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The oracles to judge by.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "duckdb,rewrites,tlp,norec"
    )]
    oracle: Vec<Oracle>,
    /// A Python with the `duckdb` module (default: `FLOE_DUCKDB_PYTHON`, the newest DuckDB's
    /// venv of `scripts/setup-duckdb.sh`, or the test venv's).
    #[arg(long)]
    duckdb_python: Option<PathBuf>,
    /// Fail rather than drop the `duckdb` oracle when no Python with DuckDB is found.
    #[arg(long)]
    require_duckdb: bool,
    /// Stop after this many distinct failures (an error seen before counts once).
    #[arg(long, default_value_t = 10)]
    max_failures: usize,
    /// Time spent shrinking each failure, at most (seconds).
    #[arg(long, default_value_t = 120)]
    shrink_seconds: u64,
    /// Instead of generating statements, run this one over the seed's tables: Floe's answer
    /// and plan with its rewrites on and off, and DuckDB's answer.
    #[arg(long)]
    sql: Option<String>,
    /// Print every statement as it runs.
    #[arg(long)]
    print: bool,
    /// Partitions of Floe's plans (more than the cores, to exercise repartitioning).
    #[arg(long, default_value_t = 4)]
    partitions: usize,
    /// Rows per batch in Floe (small, so operators see several batches).
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Add a rewrite that is wrong on purpose (it drops a filter) to Floe's rewrites, to
    /// show that the oracles catch a wrong rewrite.
    #[arg(long, hide = true)]
    break_a_rewrite: bool,
}

/// How often each oracle passed, skipped and failed.
#[derive(Default)]
struct Tally {
    pass: u64,
    skip: u64,
    fail: u64,
    unsupported: u64,
}

pub async fn run(args: FuzzBenchArgs) -> anyhow::Result<()> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 % 1_000_000_000)
            .unwrap_or(1)
    });
    let (root, temporary) = match &args.dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!("floe-fuzz-{}", std::process::id())),
            true,
        ),
    };
    let dir = root.join(format!("seed-{seed}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let dir = std::fs::canonicalize(&dir)?;
    let outcome = fuzz(&args, seed, &dir).await;
    if temporary {
        let _ = std::fs::remove_dir_all(&root);
    }
    outcome
}

async fn fuzz(args: &FuzzBenchArgs, seed: u64, dir: &std::path::Path) -> anyhow::Result<()> {
    let mut oracles = args.oracle.clone();
    oracles.sort();
    oracles.dedup();
    let (catalog, base) = catalog(args, dir).await?;
    let (on, off) =
        super::rewrites_on_and_off(catalog.clone(), base.clone(), args.break_a_rewrite)?;
    let caller = Caller::system();
    let tables = data::tables(&mut StdRng::seed_from_u64(seed));
    data::write(&tables, &on, &caller, &dir.join("parquet")).await?;
    let mut duck = None;
    if oracles.contains(&Oracle::DuckDb) {
        let names: Vec<&str> = tables.iter().map(|t| t.name).collect();
        duck = duck::Duck::start(
            args.duckdb_python.clone(),
            &names,
            &dir.join("parquet"),
            &dir.join("duckdb"),
        )?;
        if duck.is_none() {
            if args.require_duckdb {
                bail!("no Python with the duckdb module (run scripts/setup-duckdb.sh)");
            }
            println!("no Python with the duckdb module: the duckdb oracle is left out");
            oracles.retain(|o| *o != Oracle::DuckDb);
        }
    }
    let names: Vec<&str> = oracles.iter().map(|o| o.name()).collect();
    println!(
        "floe bench fuzz: seed {seed}, oracles {}{}",
        names.join(","),
        duck.as_ref()
            .map(|d| format!(", peer {}", d.version()))
            .unwrap_or_default()
    );
    let shapes: Vec<String> = tables
        .iter()
        .map(|t| {
            format!(
                "{} {} rows in {} commit(s)",
                t.name,
                t.rows(),
                t.commits.len()
            )
        })
        .collect();
    println!("tables: {}", shapes.join(", "));

    if let Some(sql) = &args.sql {
        return show_one(sql, &on, &off, duck.as_mut()).await;
    }
    let mut checker = Checker::new(on, off, duck);
    let mut tallies: Vec<(Oracle, Tally)> =
        oracles.iter().map(|&o| (o, Tally::default())).collect();
    let budget = match (args.seconds, args.statements) {
        (None, None) => Some(Duration::from_secs(60)),
        (seconds, _) => seconds.map(Duration::from_secs),
    };
    let started = Instant::now();
    // Time spent shrinking and blaming, left out of the statements' rate.
    let mut shrinking = Duration::ZERO;
    let mut failures = 0;
    let mut seen: HashMap<(Oracle, String), usize> = HashMap::new();
    // Statements Floe refuses, rewrites or not, while DuckDB answers them (not failures).
    let mut unsupported = 0;
    let mut seen_unsupported: HashMap<String, usize> = HashMap::new();
    let mut statements = 0u64;
    let range = match args.only {
        Some(n) => n..n + 1,
        None => 0..args.statements.unwrap_or(u64::MAX),
    };
    for n in range {
        if budget.is_some_and(|b| started.elapsed() >= b) || seen.len() >= args.max_failures {
            break;
        }
        let case = generate::case(statement_seed(seed, n), &tables);
        if args.print || args.only.is_some() {
            println!("#{n}: {}", case.query.sql());
        }
        statements += 1;
        checker.forget();
        for (oracle, tally) in &mut tallies {
            match checker.check(*oracle, &case).await? {
                Verdict::Pass => tally.pass += 1,
                Verdict::Skip => tally.skip += 1,
                Verdict::Unsupported(failure) => {
                    tally.unsupported += 1;
                    unsupported += 1;
                    let key = failure.signature.clone();
                    if let Some(first) = seen_unsupported.get(&key) {
                        println!(
                            "\nUNSUPPORTED {unsupported}: as unsupported {first}, statement #{n}"
                        );
                        break;
                    }
                    seen_unsupported.insert(key, unsupported);
                    let shrink_started = Instant::now();
                    let before = case.query.sql().len();
                    let (small, failure, steps) = shrink::shrink(
                        &mut checker,
                        case.clone(),
                        failure,
                        Duration::from_secs(args.shrink_seconds),
                    )
                    .await?;
                    let shrunk = Shrunk {
                        failure: &failure,
                        before,
                        steps,
                        case: &small,
                        needs: "with every rewrite off too: DataFusion does not plan it".into(),
                    };
                    report("UNSUPPORTED", unsupported, seed, n, &shrunk, &tables);
                    shrinking += shrink_started.elapsed();
                    break;
                }
                Verdict::Fail(failure) => {
                    tally.fail += 1;
                    failures += 1;
                    let key = (failure.oracle, failure.signature.clone());
                    // An error seen before is the same fault again; wrong answers are always
                    // shrunk, since two of them may have different causes.
                    if failure.signature != "differs"
                        && let Some(first) = seen.get(&key)
                    {
                        println!(
                            "\nFAILURE {failures}: as failure {first} ({}, {}), statement #{n}",
                            failure.oracle.name(),
                            failure.signature
                        );
                        break;
                    }
                    seen.insert(key, failures);
                    let shrink_started = Instant::now();
                    let shrink_budget = Duration::from_secs(args.shrink_seconds);
                    let before = case.query.sql().len();
                    let (small, failure, steps) =
                        shrink::shrink(&mut checker, case.clone(), failure, shrink_budget).await?;
                    let needs =
                        blame::blame(&mut checker, &catalog, &base, &small, &failure).await?;
                    let shrunk = Shrunk {
                        failure: &failure,
                        before,
                        steps,
                        case: &small,
                        needs,
                    };
                    report("FAILURE", failures, seed, n, &shrunk, &tables);
                    shrinking += shrink_started.elapsed();
                    // One failure per statement: the other oracles would shrink it again.
                    break;
                }
            }
        }
        if statements.is_multiple_of(100) {
            eprintln!(
                "{statements} statements in {:.0} s, {failures} failure(s)",
                started.elapsed().as_secs_f64()
            );
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let judging = elapsed - shrinking.as_secs_f64();
    let per_oracle: Vec<String> = tallies
        .iter()
        .map(|(o, t)| {
            let unsupported = format!(", {} unsupported", t.unsupported);
            format!(
                "{} {} passed, {} skipped, {} failed{unsupported}",
                o.name(),
                t.pass,
                t.skip,
                t.fail
            )
        })
        .collect();
    println!(
        "{statements} statements in {elapsed:.1} s ({:.1} statements/s; {:.1} s of it shrinking \
         failures); {}",
        statements as f64 / judging.max(1e-9),
        shrinking.as_secs_f64(),
        per_oracle.join("; ")
    );
    println!(
        "unsupported (refused by Floe with and without its rewrites, answered by DuckDB): \
         {unsupported} statement(s) of {} kind(s)",
        seen_unsupported.len()
    );
    println!("failures found: {failures}");
    if failures > 0 {
        bail!("{failures} failure(s) found (seed {seed})");
    }
    Ok(())
}

/// An embedded catalog in `dir` with the warehouse the tables go in, and the settings of
/// the engines over it (but their rewrites).
async fn catalog(
    args: &FuzzBenchArgs,
    dir: &std::path::Path,
) -> anyhow::Result<(Arc<CatalogService>, EngineConfig)> {
    let catalog = super::embedded_catalog(dir, data::WAREHOUSE).await?;
    let config = EngineConfig {
        target_partitions: args.partitions,
        batch_size: args.batch_size,
        cpu_threads: 2,
        statement_timeout: Some(Duration::from_secs(60)),
        query_memory_limit: 512 << 20,
        ..EngineConfig::default()
    };
    Ok((catalog, config))
}

/// `sql` answered and planned by Floe with its rewrites on and off, and answered by DuckDB.
async fn show_one(
    sql: &str,
    on: &Arc<SqlEngine>,
    off: &Arc<SqlEngine>,
    duck: Option<&mut duck::Duck>,
) -> anyhow::Result<()> {
    for (name, engine) in [("rewrites on", on), ("rewrites off", off)] {
        for statement in [sql.to_string(), format!("EXPLAIN {sql}")] {
            let answer = match oracles::run(engine, &statement).await {
                oracles::Answer::Rows(rows) => oracles::show(&rows),
                oracles::Answer::Refused(e) => format!("  refused: {e}"),
                oracles::Answer::Fault(e) => format!("  fault: {e}"),
            };
            println!("Floe, {name}, {statement}:\n{answer}");
        }
    }
    if let Some(duck) = duck {
        let answer = match duck.run(sql)? {
            Ok(rows) => oracles::show(&rows),
            Err(e) => format!("  refused: {e}"),
        };
        println!("{}:\n{answer}", duck.version());
    }
    Ok(())
}

/// The seed of statement `n`: SplitMix64 of the run's seed and `n`.
fn statement_seed(seed: u64, n: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(n.wrapping_add(1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A failure after shrinking.
struct Shrunk<'a> {
    failure: &'a oracles::Failure,
    /// The statement's length before.
    before: usize,
    steps: usize,
    case: &'a generate::Case,
    /// What it needs of the rewrites ([`blame::blame`]).
    needs: String,
}

fn report(
    label: &str,
    number: usize,
    seed: u64,
    statement: u64,
    shrunk: &Shrunk,
    tables: &[data::Table],
) {
    let Shrunk {
        failure,
        before,
        steps,
        case,
        needs,
    } = shrunk;
    let sql = case.query.sql();
    println!(
        "\n{label} {number}: oracle {}, {} — seed {seed}, statement #{statement} (rerun: floe \
         bench fuzz --seed {seed} --only {statement} --oracle {})",
        failure.oracle.name(),
        failure.signature,
        failure.oracle.name()
    );
    println!(
        "shrunk from {before} to {} characters in {steps} step(s); fails {needs}",
        sql.len()
    );
    if matches!(failure.oracle, Oracle::Tlp | Oracle::NoRec) {
        println!("predicate: {}", case.pred.sql());
    }
    println!("{}", failure.detail);
    println!("tables it reads:");
    let everything = format!("{sql} {}", case.pred.sql());
    for table in tables {
        if everything.contains(&format!("{} AS ", table.name)) {
            println!("{}", table.ddl());
        }
    }
}
