//! A query suite (TPC-H, TPC-DS) run side by side in one process: Floe over Iceberg tables,
//! DataFusion on the same data as plain Parquet files, and DuckDB on those files.
//!
//! Floe runs every query alone first (its answers, and its peak memory with no other engine's
//! in the process); then each query is timed engine after engine within each iteration, so
//! that the machine's drift (these shared cores speed up and slow down over minutes) falls on
//! all three alike. DuckDB's answer is the reference: every answer Floe gives is compared with
//! it value by value (as bags of rows: ties may come in any order; numbers within a small
//! tolerance, since DuckDB averages in doubles where DataFusion keeps decimals). With no
//! iterations only the answers are compared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::DataType;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use floe_catalog::governance::authz::Caller;
use floe_sql::{EngineConfig, QueryOptions, SqlEngine};
use futures::TryStreamExt;

use super::duckdb::DuckDb;
use super::process::{memory_mib, reset_peak_memory};

/// What one run compares.
pub(super) struct Suite<'a> {
    /// The suite's name as the output shows it (`tpch`, `tpcds`).
    pub name: &'a str,
    pub scale_factor: f64,
    pub engine: &'a SqlEngine,
    pub caller: &'a Caller,
    /// Where the queries' unqualified names resolve in Floe.
    pub options: QueryOptions,
    pub queries: &'a [(usize, String)],
    /// The tables, each in `parquet/<table>.parquet`.
    pub tables: Vec<String>,
    pub parquet: &'a Path,
    /// Where DuckDB writes its answers.
    pub answers: PathBuf,
    pub duckdb_python: Option<PathBuf>,
    /// Timed runs per query and engine after one warm-up (the best counts); 0 compares the
    /// answers only.
    pub iterations: usize,
    pub query_memory_limit_mb: usize,
    /// A run of one query by DataFusion on Parquet taking longer than this counts as failed.
    pub peer_timeout: Duration,
    /// Floe over the same tables with every rewrite off: each answer with the rewrites on
    /// must equal its answer.
    pub without_rewrites: Option<SqlEngine>,
}

/// How a run ended: the queries whose answers differ from DuckDB's (with why), and those Floe
/// could not answer.
pub(super) struct Outcome {
    pub wrong: BTreeMap<usize, String>,
    pub failed: BTreeMap<usize, String>,
}

pub(super) async fn run(suite: Suite<'_>) -> anyhow::Result<Outcome> {
    let Suite {
        name,
        scale_factor,
        engine,
        caller,
        options,
        queries,
        tables,
        parquet,
        answers,
        duckdb_python,
        iterations,
        query_memory_limit_mb,
        peer_timeout,
        without_rewrites,
    } = suite;
    if iterations == 0 {
        println!("floe bench {name}: scale factor {scale_factor}, answers compared only");
    } else {
        println!(
            "floe bench {name}: scale factor {scale_factor}, {iterations} iteration(s) after a \
             warm-up, best time in ms"
        );
    }
    let floe_run = |sql: &str| {
        let (options, sql) = (&options, sql.to_string());
        async move {
            let result = engine.query(caller, &sql, options).await?;
            anyhow::Ok(result.stream.try_collect::<Vec<RecordBatch>>().await?)
        }
    };
    let mut floe_results: BTreeMap<usize, Vec<RecordBatch>> = BTreeMap::new();
    reset_peak_memory();
    let mut failed: BTreeMap<usize, String> = BTreeMap::new();
    for (q, sql) in queries {
        match floe_run(sql).await.map_err(|e| e.to_string()) {
            Ok(batches) => {
                floe_results.insert(*q, batches);
            }
            Err(e) => {
                // Reported in the table; the other queries still run.
                eprintln!("Q{q} failed in Floe: {e}");
                failed.insert(*q, e);
            }
        }
    }
    let floe_peak = memory_mib("VmHWM:");
    // The rewrites held to DataFusion's own plans, query by query.
    let mut unsound = BTreeMap::new();
    if let Some(plain) = &without_rewrites {
        for (q, sql) in queries {
            let Some(got) = floe_results.get(q) else {
                continue;
            };
            let plain_answer = async {
                let result = plain.query(caller, sql, &options).await?;
                anyhow::Ok(result.stream.try_collect::<Vec<RecordBatch>>().await?)
            }
            .await;
            let verdict = match plain_answer {
                Ok(expected) => same_answer(got, &expected, "Floe without rewrites"),
                Err(e) => Err(anyhow::anyhow!("fails without rewrites: {e:#}")),
            };
            if let Err(e) = verdict {
                eprintln!("Q{q}: the rewrites change the answer: {e:#}");
                unsound.insert(*q, format!("{e:#}"));
            }
        }
        println!(
            "{} of {} answers with every rewrite on equal those with every rewrite off{}",
            floe_results.len() - unsound.len(),
            floe_results.len(),
            list(&unsound)
        );
    }
    // The same memory budget as Floe's queries, so a runaway plan fails rather than taking
    // the machine down.
    let raw = SessionContext::new_with_config_rt(
        SessionConfig::new().with_target_partitions(EngineConfig::default().target_partitions),
        datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_memory_limit(query_memory_limit_mb << 20, 1.0)
            .build_arc()?,
    );
    for table in &tables {
        raw.register_parquet(
            table.as_str(),
            parquet
                .join(format!("{table}.parquet"))
                .to_string_lossy()
                .as_ref(),
            ParquetReadOptions::default(),
        )
        .await?;
    }
    std::fs::create_dir_all(&answers)?;
    let views: Vec<String> = tables
        .iter()
        .map(|t| {
            format!(
                "CREATE VIEW {t} AS SELECT * FROM read_parquet('{}/{t}.parquet')",
                parquet.display()
            )
        })
        .collect();
    let mut duckdb = DuckDb::start(duckdb_python, &views, &answers, false)?;
    if let Some(duck) = &duckdb {
        println!("peer: {}", duck.version());
    }

    let raw_run = |sql: &str| {
        let (raw, sql) = (raw.clone(), sql.to_string());
        async move {
            let run = async { raw.sql(&sql).await?.collect().await };
            let batches = tokio::time::timeout(peer_timeout, run)
                .await
                .map_err(|_| anyhow::anyhow!("no answer within {} s", peer_timeout.as_secs()))??;
            anyhow::Ok(batches.iter().map(|b| b.num_rows()).sum::<usize>())
        }
    };
    let mut floe_times = BTreeMap::new();
    let mut raw_times = BTreeMap::new();
    let mut duck_times = BTreeMap::new();
    let mut duck_rows_of = BTreeMap::new();
    for (q, sql) in queries {
        let Some(floe_rows) = floe_results
            .get(q)
            .map(|batches| batches.iter().map(|b| b.num_rows()).sum::<usize>())
        else {
            continue;
        };
        let duck_rows = match duckdb.as_mut() {
            Some(duck) => match duck.warm_up(*q, sql) {
                Ok(rows) => Some(rows),
                Err(e) => bail!("Q{q} failed in DuckDB: {e:#}"),
            },
            None => None,
        };
        if let Some(rows) = duck_rows {
            duck_rows_of.insert(*q, rows);
        }
        if iterations == 0 {
            continue;
        }
        let timed_floe = || async {
            let start = Instant::now();
            floe_run(sql).await.with_context(|| format!("Floe, Q{q}"))?;
            anyhow::Ok(start.elapsed().as_secs_f64() * 1000.0)
        };
        // Warm-ups: every engine's data in the page cache before its timed runs.
        timed_floe().await?;
        let mut raw_rows = match raw_run(sql).await {
            Ok(rows) => Some(rows),
            Err(e) => {
                eprintln!("Q{q} failed in DataFusion on Parquet: {e:#}");
                None
            }
        };
        let (mut floe_best, mut raw_best, mut duck_best) = (f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..iterations {
            floe_best = floe_best.min(timed_floe().await?);
            if raw_rows.is_some() {
                let start = Instant::now();
                match raw_run(sql).await {
                    Ok(_) => raw_best = raw_best.min(start.elapsed().as_secs_f64() * 1000.0),
                    Err(e) => {
                        eprintln!("Q{q} failed in DataFusion on Parquet: {e:#}");
                        raw_rows = None;
                    }
                }
            }
            if let Some(duck) = duckdb.as_mut() {
                duck_best = duck_best.min(duck.time(sql)?);
            }
        }
        eprintln!(
            "Q{q}: floe {floe_best:.1} ms, datafusion on parquet {}, duckdb {}",
            raw_rows.map_or("fails".to_string(), |_| format!("{raw_best:.1} ms")),
            duck_rows.map_or("-".to_string(), |_| format!("{duck_best:.1} ms")),
        );
        floe_times.insert(*q, (floe_best, floe_rows));
        if let Some(rows) = raw_rows {
            raw_times.insert(*q, (raw_best, rows));
        }
        if let Some(rows) = duck_rows {
            duck_times.insert(*q, (duck_best, rows));
        }
    }
    let compared = duckdb.is_some();
    let duck_peak = match duckdb {
        Some(duck) => duck.finish()?,
        None => None,
    };
    let mut wrong = BTreeMap::new();
    if compared {
        for (q, _) in queries {
            // A query Floe could not answer has no answer of DuckDB's written either.
            let Some(got) = floe_results.get(q) else {
                continue;
            };
            let expected = raw
                .read_parquet(
                    answers
                        .join(format!("q{q}.parquet"))
                        .to_string_lossy()
                        .as_ref(),
                    ParquetReadOptions::default(),
                )
                .await?
                .collect()
                .await?;
            if let Err(e) = same_answer(got, &expected, "DuckDB") {
                eprintln!("Q{q}: Floe's answer differs from DuckDB's: {e:#}");
                wrong.insert(*q, format!("{e:#}"));
            }
        }
    }

    if iterations > 0 {
        print_times(queries, &floe_times, &raw_times, &duck_times, compared);
    }
    let show = |mib: Option<f64>| mib.map_or("-".to_string(), |m| format!("{m:.0} MiB"));
    // Floe's peak is taken over its first runs, before DataFusion on Parquet (which runs in
    // this process) has run anything.
    println!(
        "\npeak resident memory: floe's queries {} (query memory limit {} MiB; includes data \
         generated in this run, if any), duckdb process {}",
        show(floe_peak),
        query_memory_limit_mb,
        show(duck_peak)
    );
    if compared {
        let right = floe_results.len() - wrong.len();
        println!(
            "{right} of {} answers equal DuckDB's, value by value; {} differ{}; {} of {} queries \
             failed in Floe{}",
            queries.len(),
            wrong.len(),
            list(&wrong),
            failed.len(),
            queries.len(),
            list(&failed),
        );
        let differ: Vec<String> = duck_rows_of
            .iter()
            .filter_map(|(q, rows)| {
                let floe = floe_results
                    .get(q)?
                    .iter()
                    .map(|b| b.num_rows())
                    .sum::<usize>();
                (floe != *rows).then(|| format!("Q{q} {floe} vs {rows}"))
            })
            .collect();
        if !differ.is_empty() {
            println!(
                "row counts that differ from DuckDB's: {}",
                differ.join(", ")
            );
        }
    }
    // A rewrite that changes an answer is as wrong as a wrong answer.
    for (q, why) in unsound {
        wrong
            .entry(q)
            .or_insert_with(|| format!("the rewrites change the answer: {why}"));
    }
    Ok(Outcome { wrong, failed })
}

fn list(queries: &BTreeMap<usize, String>) -> String {
    if queries.is_empty() {
        return String::new();
    }
    let names: Vec<String> = queries.keys().map(|q| format!("Q{q}")).collect();
    format!(" ({})", names.join(", "))
}

/// The per-query table, summed times and geometric means.
fn print_times(
    queries: &[(usize, String)],
    floe_times: &BTreeMap<usize, (f64, usize)>,
    raw_times: &BTreeMap<usize, (f64, usize)>,
    duck_times: &BTreeMap<usize, (f64, usize)>,
    compared: bool,
) {
    println!(
        "\n{:>5} {:>10} {:>14} {:>10} {:>13} {:>14}",
        "query", "floe", "df-parquet", "duckdb", "floe/duckdb", "floe/df-parq"
    );
    let (mut log_duck, mut log_raw, mut n_duck, mut n_raw) = (0.0, 0.0, 0, 0);
    // Summed times: of the queries every engine answered, and of those Floe and DuckDB did.
    let (mut sum_floe, mut sum_raw, mut sum_duck) = (0.0, 0.0, 0.0);
    let (mut pair_floe, mut pair_duck) = (0.0, 0.0);
    let mut worst: Vec<(f64, usize)> = Vec::new();
    for (q, _) in queries {
        let Some(&(floe_ms, floe_rows)) = floe_times.get(q) else {
            println!("{:>5} {:>10}", format!("Q{q}"), "fails");
            continue;
        };
        let raw_entry = raw_times.get(q).copied();
        let duck_entry = duck_times.get(q).copied();
        let raw_note = match raw_entry {
            Some((_, rows)) if rows != floe_rows => " (df-parquet's rows differ)",
            _ => "",
        };
        if let (Some((raw_ms, _)), Some((duck_ms, _))) = (raw_entry, duck_entry) {
            sum_floe += floe_ms;
            sum_raw += raw_ms;
            sum_duck += duck_ms;
        }
        let raw_text = match raw_entry {
            Some((ms, _)) => {
                log_raw += (floe_ms / ms).ln();
                n_raw += 1;
                (format!("{ms:.1}"), format!("{:.2}", floe_ms / ms))
            }
            None => ("fails".into(), "-".into()),
        };
        let duck_text = match duck_entry {
            Some((ms, _)) => {
                log_duck += (floe_ms / ms).ln();
                n_duck += 1;
                pair_floe += floe_ms;
                pair_duck += ms;
                worst.push((floe_ms / ms, *q));
                (format!("{ms:.1}"), format!("{:.2}", floe_ms / ms))
            }
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:>5} {:>10.1} {:>14} {:>10} {:>13} {:>14}{raw_note}",
            format!("Q{q}"),
            floe_ms,
            raw_text.0,
            duck_text.0,
            duck_text.1,
            raw_text.1
        );
    }
    if pair_duck > 0.0 {
        worst.sort_by(|a, b| b.0.total_cmp(&a.0));
        let worst: Vec<String> = worst
            .iter()
            .take(5)
            .map(|(ratio, q)| format!("Q{q} {ratio:.2}x"))
            .collect();
        println!(
            "\nsummed times of the queries Floe and DuckDB answered: floe {pair_floe:.0} ms, \
             duckdb {pair_duck:.0} ms (floe/duckdb {:.2}); slowest against DuckDB: {}",
            pair_floe / pair_duck,
            worst.join(", ")
        );
    }
    if sum_duck > 0.0 {
        println!(
            "summed times of the queries all three answered: floe {sum_floe:.0} ms, \
             datafusion on parquet {sum_raw:.0} ms, duckdb {sum_duck:.0} ms \
             (floe/duckdb {:.2}, floe/df-parquet {:.2})",
            sum_floe / sum_duck,
            sum_floe / sum_raw
        );
    }
    println!(
        "\ngeometric mean of ratios: floe/df-parquet {:.2} over {n_raw} queries{}",
        (log_raw / n_raw.max(1) as f64).exp(),
        if n_duck > 0 {
            format!(
                ", floe/duckdb {:.2} over {n_duck} queries",
                (log_duck / n_duck as f64).exp()
            )
        } else if compared {
            String::new()
        } else {
            " (DuckDB not run: no Python with the duckdb module)".into()
        }
    );
}

/// One value of an answer, for comparing engines: numbers of any type as `f64`, the rest as
/// text.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Null,
    Number(f64),
    Text(String),
}

impl Cell {
    /// A sort key that ignores the last digits of floating-point noise.
    fn key(&self) -> String {
        match self {
            Cell::Null => "\u{0}".into(),
            Cell::Number(n) => format!("{n:.2}"),
            Cell::Text(t) => t.clone(),
        }
    }

    fn matches(&self, other: &Cell) -> bool {
        match (self, other) {
            (Cell::Number(a), Cell::Number(b)) => {
                (a - b).abs() <= 1e-4 + 1e-9 * a.abs().max(b.abs())
            }
            (a, b) => a == b,
        }
    }
}

fn cells(batches: &[RecordBatch]) -> anyhow::Result<Vec<Vec<Cell>>> {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::Float64Type;
    let mut rows = Vec::new();
    for batch in batches {
        let mut columns = Vec::new();
        for column in batch.columns() {
            let numeric = column.data_type().is_numeric();
            let target = if numeric {
                DataType::Float64
            } else {
                DataType::Utf8
            };
            columns.push((numeric, datafusion::arrow::compute::cast(column, &target)?));
        }
        for row in 0..batch.num_rows() {
            rows.push(
                columns
                    .iter()
                    .map(|(numeric, c)| {
                        if c.is_null(row) {
                            Cell::Null
                        } else if *numeric {
                            Cell::Number(c.as_primitive::<Float64Type>().value(row))
                        } else {
                            Cell::Text(c.as_string::<i32>().value(row).to_string())
                        }
                    })
                    .collect(),
            );
        }
    }
    Ok(rows)
}

/// Compares two answers as bags of rows (ties may come in any order), numbers within a
/// small tolerance (DuckDB averages in doubles where DataFusion keeps decimals).
pub(super) fn same_answer(
    got: &[RecordBatch],
    expected: &[RecordBatch],
    peer: &str,
) -> anyhow::Result<()> {
    let mut got = cells(got)?;
    let mut expected = cells(expected)?;
    if got.len() != expected.len() {
        bail!("{} rows where {peer} has {}", got.len(), expected.len());
    }
    let by_key = |a: &Vec<Cell>, b: &Vec<Cell>| {
        let ka: Vec<String> = a.iter().map(Cell::key).collect();
        let kb: Vec<String> = b.iter().map(Cell::key).collect();
        ka.cmp(&kb)
    };
    got.sort_by(by_key);
    expected.sort_by(by_key);
    for (g, e) in got.iter().zip(&expected) {
        if g.len() != e.len() || !g.iter().zip(e).all(|(a, b)| a.matches(b)) {
            bail!("row {g:?} where {peer} has {e:?}");
        }
    }
    Ok(())
}
