//! `floe bench compaction`: bin-pack throughput, and queries on a table of many small files
//! before and after compaction, against the same rows written optimally — all in one run on
//! an embedded catalog under `--dir`.
//!
//! The small-file table gets `--files` files of `--rows-per-file` rows, committed in one
//! append (as a streaming writer would leave them, minus the snapshots); the optimal table
//! gets the same rows in one write at the target file size. Compaction runs on a runtime of
//! `--threads` threads; its throughput is input bytes per second of CPU the process used
//! (MiB/s per core), and its peak resident memory is measured from a reset just before it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use super::process::{cpu_seconds, memory_mib, reset_peak_memory};
use clap::Args;
use datafusion::arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::CreateTable;
use floe_maintenance::compaction::CompactionPolicy;
use floe_maintenance::exec::Maintainer;
use floe_maintenance::exec::compact::{CompactOptions, compact};
use floe_sql::{QueryOptions, SqlEngine};
use futures::TryStreamExt;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{NamespaceIdent, TableIdent};

#[derive(Args, Debug)]
pub struct CompactionBenchArgs {
    /// Directory for the embedded catalog and the tables (recreated on every run).
    #[arg(long, default_value = "./floe-bench-compaction")]
    dir: PathBuf,
    /// Small files in the table to compact.
    #[arg(long, default_value_t = 10_000)]
    files: usize,
    /// Rows per small file.
    #[arg(long, default_value_t = 2_000)]
    rows_per_file: usize,
    /// Compaction's target file size (MiB).
    #[arg(long, default_value_t = 512)]
    target_file_size_mb: u64,
    /// Threads compaction runs on.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Timed runs per query (after one warm-up); the best counts.
    #[arg(long, default_value_t = 5)]
    iterations: usize,
}

const QUERIES: [(&str, &str); 3] = [
    (
        "full scan",
        "SELECT count(*) AS n, sum(value) AS total, max(payload) AS last FROM {t}",
    ),
    (
        "group by",
        "SELECT category, count(*) AS n, avg(value) AS mean FROM {t} WHERE id % 7 = 0 GROUP BY category ORDER BY category",
    ),
    (
        "point range",
        "SELECT id, payload FROM {t} WHERE id BETWEEN 1234567 AND 1236567 ORDER BY id",
    ),
];

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("category", DataType::Utf8, false),
        Field::new("value", DataType::Float64, false),
        Field::new("payload", DataType::Utf8, false),
    ]))
}

/// Rows `start..start + n`: ids in order (as an event stream writes them), a few categories,
/// a value and a payload of some 40 bytes.
fn batch(start: usize, n: usize) -> anyhow::Result<RecordBatch> {
    let ids: Vec<i64> = (start..start + n).map(|i| i as i64).collect();
    let categories: Vec<String> = ids.iter().map(|i| format!("cat-{}", i % 16)).collect();
    let values: Vec<f64> = ids.iter().map(|i| (*i as f64) * 0.25).collect();
    let payloads: Vec<String> = ids
        .iter()
        .map(|i| {
            format!(
                "event {i:012} from device {:08x}",
                i.wrapping_mul(2654435761) % (1 << 32)
            )
        })
        .collect();
    Ok(RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(categories)),
            Arc::new(Float64Array::from(values)),
            Arc::new(StringArray::from(payloads)),
        ],
    )?)
}

pub async fn run(args: CompactionBenchArgs) -> anyhow::Result<()> {
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)
            .with_context(|| format!("clear {}", args.dir.display()))?;
    }
    std::fs::create_dir_all(&args.dir)?;
    let engine = Arc::new(super::embedded_engine(&args.dir).await?);
    let caller = Caller::system();
    let catalog = engine.catalog().clone();
    let ns = NamespaceIdent::new("bench".into());
    catalog
        .create_namespace(&caller, "bench", &ns, Default::default())
        .await?;
    let target = (args.target_file_size_mb << 20) as usize;

    // The small-file table: one file per batch, one append.
    let started = Instant::now();
    let small = create(&engine, &ns, "small").await?;
    let mut files = Vec::with_capacity(args.files);
    let mut input_bytes = 0u64;
    for i in 0..args.files {
        let rows = batch(i * args.rows_per_file, args.rows_per_file)?;
        let stream = RecordBatchStreamAdapter::new(schema(), futures::stream::iter([Ok(rows)]));
        let (written, _) =
            floe_sql::write::write_data_files(&small, Box::pin(stream), Some(target)).await?;
        input_bytes += written.iter().map(|f| f.file_size_in_bytes()).sum::<u64>();
        files.extend(written);
    }
    let transaction = Transaction::new(&small);
    let transaction = transaction
        .fast_append()
        .add_data_files(files)
        .apply(transaction)?;
    commit(&engine, transaction).await?;
    println!(
        "wrote {} small files ({:.1} MiB, {} rows) in {:.1} s",
        args.files,
        input_bytes as f64 / 1048576.0,
        args.files * args.rows_per_file,
        started.elapsed().as_secs_f64()
    );

    // The same rows written optimally.
    let optimal = create(&engine, &ns, "optimal").await?;
    let (rows_per_file, file_count) = (args.rows_per_file, args.files);
    let batches = futures::stream::iter((0..file_count).map(move |i| {
        batch(i * rows_per_file, rows_per_file)
            .map_err(|e| datafusion::error::DataFusionError::External(e.into()))
    }));
    let stream = RecordBatchStreamAdapter::new(schema(), batches);
    let (written, _) =
        floe_sql::write::write_data_files(&optimal, Box::pin(stream), Some(target)).await?;
    let optimal_files = written.len();
    let transaction = Transaction::new(&optimal);
    let transaction = transaction
        .fast_append()
        .add_data_files(written)
        .apply(transaction)?;
    commit(&engine, transaction).await?;
    println!("wrote the optimal table: {optimal_files} files");

    let before = time_queries(&engine, "bench.small", args.iterations).await?;
    let reference = time_queries(&engine, "bench.optimal", args.iterations).await?;

    // Compaction on a runtime of its own, as the scheduler runs it.
    let maintainer = Maintainer::new(catalog.clone(), engine.clone());
    let options = CompactOptions {
        policy: CompactionPolicy {
            target_size_bytes: target as u64,
            small_file_bytes: target as u64 / 4 * 3,
            min_input_files: 2,
        },
        partitions: args.threads.max(1),
        ..Default::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    reset_peak_memory();
    let resident_before = memory_mib("VmRSS:");
    let cpu_before = cpu_seconds();
    let wall = Instant::now();
    let report = runtime
        .spawn(async move {
            let ident = TableIdent::new(NamespaceIdent::new("bench".into()), "small".into());
            compact(&maintainer, "bench", &ident, &options).await
        })
        .await??;
    let wall = wall.elapsed().as_secs_f64();
    let cpu = cpu_before
        .zip(cpu_seconds())
        .map(|(before, after)| after - before);
    let peak = memory_mib("VmHWM:");
    runtime.shutdown_background();
    anyhow::ensure!(
        report.rewritten_files == args.files,
        "compaction rewrote {} of {} files: {report:?}",
        report.rewritten_files,
        args.files
    );
    let after = time_queries(&engine, "bench.small", args.iterations).await?;
    for (q, (_, answer)) in before.iter().enumerate() {
        anyhow::ensure!(
            *answer == after[q].1 && *answer == reference[q].1,
            "query {} answered differently before compaction:\n{answer}\nafter:\n{}\nand on the optimal table:\n{}",
            QUERIES[q].0,
            after[q].1,
            reference[q].1
        );
    }

    let mib = input_bytes as f64 / 1048576.0;
    println!();
    println!(
        "compaction: {} files ({mib:.1} MiB) -> {} files in {wall:.2} s wall on {} thread(s)",
        report.rewritten_files,
        report.added_files,
        args.threads.max(1)
    );
    println!("  throughput: {:.1} MiB/s wall", mib / wall);
    if let Some(cpu) = cpu {
        println!(
            "  throughput: {:.1} MiB/s per core ({cpu:.2} CPU seconds)",
            mib / cpu.max(1e-9)
        );
    }
    if let (Some(peak), Some(before)) = (peak, resident_before) {
        println!(
            "  peak resident memory: {peak:.0} MiB, {:.0} MiB above the {before:.0} MiB resident \
             before it (target file size {} MiB)",
            peak - before,
            args.target_file_size_mb
        );
    }
    println!();
    println!(
        "{:<12} {:>12} {:>12} {:>12} {:>14} {:>14}",
        "query", "before ms", "after ms", "optimal ms", "before/optimal", "after/optimal"
    );
    for (q, (name, _)) in QUERIES.iter().enumerate() {
        println!(
            "{:<12} {:>12.1} {:>12.1} {:>12.1} {:>14.2} {:>14.2}",
            name,
            before[q].0,
            after[q].0,
            reference[q].0,
            before[q].0 / reference[q].0,
            after[q].0 / reference[q].0
        );
    }
    let total = |t: &[(f64, String)]| t.iter().map(|(ms, _)| ms).sum::<f64>();
    println!(
        "{:<12} {:>12.1} {:>12.1} {:>12.1} {:>14.2} {:>14.2}",
        "total",
        total(&before),
        total(&after),
        total(&reference),
        total(&before) / total(&reference),
        total(&after) / total(&reference)
    );
    Ok(())
}

async fn create(
    engine: &SqlEngine,
    ns: &NamespaceIdent,
    name: &str,
) -> anyhow::Result<iceberg::table::Table> {
    let caller = Caller::system();
    let loaded = engine
        .catalog()
        .create_table(
            &caller,
            "bench",
            ns,
            CreateTable {
                name: name.into(),
                location: None,
                schema: floe_sql::write::iceberg_schema(&schema())?,
                partition_spec: None,
                write_order: None,
                stage_create: false,
                properties: Default::default(),
            },
        )
        .await?;
    let access = engine.access(&caller, "bench").await?;
    Ok(floe_sql::write::table_of(&access, loaded)?)
}

/// Commits an iceberg transaction through the embedded catalog.
async fn commit(engine: &SqlEngine, transaction: Transaction) -> anyhow::Result<()> {
    let access = engine.access(&Caller::system(), "bench").await?;
    floe_sql::write::commit_transaction(&access, transaction).await?;
    Ok(())
}

/// Best time (ms) and printed answer of each query.
async fn time_queries(
    engine: &SqlEngine,
    table: &str,
    iterations: usize,
) -> anyhow::Result<Vec<(f64, String)>> {
    let caller = Caller::system();
    let options = QueryOptions {
        warehouse: Some("bench".into()),
        ..Default::default()
    };
    let mut times = Vec::new();
    for (name, sql) in QUERIES {
        let sql = sql.replace("{t}", table);
        let mut best = f64::MAX;
        let mut answer = String::new();
        for i in 0..=iterations.max(1) {
            let started = Instant::now();
            let result = engine.query(&caller, &sql, &options).await?;
            let batches: Vec<RecordBatch> = result
                .stream
                .try_collect()
                .await
                .with_context(|| format!("{name} on {table}"))?;
            answer = datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string();
            if i > 0 {
                best = best.min(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
        times.push((best, answer));
    }
    Ok(times)
}
