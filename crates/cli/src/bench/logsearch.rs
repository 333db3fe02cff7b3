//! `floe bench logsearch`: needle and term searches over a log table, Floe with its token
//! indexes beside Floe without them (a full scan of the searched column) and DuckDB on the
//! same Parquet files — all in one run on an embedded catalog under `--dir`.
//!
//! The table holds `--records` log records (100 M is the form; the default runs in a
//! minute) in files of `--records-per-file`, with the columns a log search reads
//! (`otel.logs`' `time`, `service_name`, `severity_number`, `severity_text`, `body`,
//! `trace_id`) and `body` indexed as `otel.logs` indexes it. Bodies follow the mix of
//! `floe bench otlp` (errors, slow requests, cache misses with session keys, requests served),
//! each naming its request id. The searches: one request id (a needle, one record) by
//! `matches` and by `LIKE` holding the id whole, a rare word (one record in 5 M) by `matches`,
//! and a common one (every tenth record), where the index cannot help and costs its reads.
//!
//! Reported per query: the median time of `--runs` runs for each side, the ratio, and the
//! bytes each Floe side read — the Parquet bytes its scans fetched (DataFusion's
//! `bytes_scanned`) plus, with the index, the index files read (measured on a first run with
//! no index kept in memory; later runs read none).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use datafusion::arrow::array::{
    Int32Array, RecordBatch, StringArray, StringViewArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::CreateTable;
use floe_sql::{EngineConfig, QueryOptions, Rewrites, SqlEngine};
use futures::TryStreamExt;
use iceberg::NamespaceIdent;
use iceberg::transaction::{ApplyTransactionAction, Transaction};

use super::duckdb::DuckDb;

#[derive(Args, Debug)]
pub struct LogsearchBenchArgs {
    /// Directory for the embedded catalog and the table (recreated on every run).
    #[arg(long, default_value = "./floe-bench-logsearch")]
    dir: PathBuf,
    /// Log records in the table.
    #[arg(long, default_value_t = 4_000_000)]
    records: u64,
    /// Records per data file (a compacted `otel.logs` file holds a few million).
    #[arg(long, default_value_t = 250_000)]
    records_per_file: u64,
    /// Timed runs of each query per side (after one untimed run); the median is reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// A Python with the `duckdb` module (default: the benchmark peer's venv, or the test
    /// venv's).
    #[arg(long)]
    duckdb_python: Option<PathBuf>,
}

const SERVICES: [&str; 8] = [
    "checkout",
    "cart",
    "payments",
    "search",
    "users",
    "inventory",
    "gateway",
    "ads",
];
/// One record in this many holds the rare word.
const RARE_EVERY: u64 = 5_000_000;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            false,
        ),
        Field::new("service_name", DataType::Utf8, false),
        Field::new("severity_number", DataType::Int32, true),
        Field::new("severity_text", DataType::Utf8, true),
        Field::new("body", DataType::Utf8, true),
        Field::new("trace_id", DataType::Utf8, true),
    ]))
}

/// splitmix64 of `n`: the same records on every run.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Record `n`'s request id.
fn request_id(n: u64) -> String {
    format!("{:016x}", mix(n ^ 0x5eed))
}

/// Records `start..start + count`, in time order.
fn batch(start: u64, count: u64) -> anyhow::Result<RecordBatch> {
    let base = 1_780_000_000_000_000i64; // 2026-05-28, in microseconds
    let mut times = Vec::with_capacity(count as usize);
    let mut services = Vec::with_capacity(count as usize);
    let (mut numbers, mut texts) = (Vec::new(), Vec::new());
    let mut bodies = Vec::with_capacity(count as usize);
    let mut traces = Vec::with_capacity(count as usize);
    for n in start..start + count {
        let r = mix(n);
        times.push(base + n as i64 * 100);
        services.push(SERVICES[(r % 8) as usize]);
        let id = request_id(n);
        let ms = (r >> 8) % 2500;
        let (number, text, body) = match (r >> 20) % 100 {
            0..=1 => (
                17,
                "ERROR",
                format!(
                    "timeout calling payment-gateway after {ms} ms (attempt {}); giving up, \
                     request_id={id};",
                    (r >> 40) % 3 + 1
                ),
            ),
            2..=9 => (
                13,
                "WARN",
                format!(
                    "slow request GET /api/v1/cart took {ms} ms, over the 500 ms budget, request_id={id};"
                ),
            ),
            10..=29 => (
                5,
                "DEBUG",
                format!(
                    "cache miss for key session:{:016x}, loading from store, request_id={id};",
                    mix(r)
                ),
            ),
            30..=39 => (
                9,
                "INFO",
                format!(
                    "GET /api/v1/orders/{} completed with 200 in {ms} ms after a retry timeout, request_id={id};",
                    r % 1_000_000
                ),
            ),
            _ => (
                9,
                "INFO",
                format!(
                    "GET /api/v1/orders/{} completed with 200 in {ms} ms for user u{}, request_id={id};",
                    r % 1_000_000,
                    (r >> 24) % 50_000
                ),
            ),
        };
        let body = if n % RARE_EVERY == RARE_EVERY / 3 {
            format!("worker crashed with a segfault in libssl, request_id={id};")
        } else {
            body
        };
        numbers.push(number);
        texts.push(text);
        bodies.push(body);
        traces.push(format!("{:016x}{:016x}", mix(r), mix(r ^ 1)));
    }
    Ok(RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(TimestampMicrosecondArray::from(times).with_timezone("+00:00")),
            Arc::new(StringArray::from(services)),
            Arc::new(Int32Array::from(numbers)),
            Arc::new(StringArray::from(texts)),
            Arc::new(StringArray::from(bodies)),
            Arc::new(StringArray::from(traces)),
        ],
    )?)
}

pub async fn run(args: LogsearchBenchArgs) -> anyhow::Result<()> {
    if args.records == 0 || args.records_per_file == 0 {
        bail!("--records and --records-per-file must be positive");
    }
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)
            .with_context(|| format!("clear {}", args.dir.display()))?;
    }
    std::fs::create_dir_all(&args.dir)?;
    let engine = Arc::new(super::embedded_engine(&args.dir).await?);
    let caller = Caller::system();
    let catalog = engine.catalog().clone();
    let ns = NamespaceIdent::new("otel".into());
    catalog
        .create_namespace(&caller, "bench", &ns, Default::default())
        .await?;
    let table = {
        let loaded = catalog
            .create_table(
                &caller,
                "bench",
                &ns,
                CreateTable {
                    name: "logs".into(),
                    location: None,
                    schema: floe_sql::write::iceberg_schema(&schema())?,
                    partition_spec: None,
                    write_order: None,
                    stage_create: false,
                    properties: [
                        ("write.parquet.compression-codec", "zstd"),
                        (floe_sql::token_index::COLUMNS_PROPERTY, "body"),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                },
            )
            .await?;
        let access = engine.access(&caller, "bench").await?;
        floe_sql::write::table_of(&access, loaded)?
    };

    // The files, one write each, committed in one append.
    let started = Instant::now();
    let (mut files, mut data_bytes) = (Vec::new(), 0u64);
    let mut start = 0u64;
    while start < args.records {
        let count = args.records_per_file.min(args.records - start);
        let chunks = (0..count.div_ceil(100_000)).map(move |i| {
            let from = start + i * 100_000;
            batch(from, 100_000.min(start + count - from))
                .map_err(|e| datafusion::error::DataFusionError::External(e.into()))
        });
        let stream = RecordBatchStreamAdapter::new(schema(), futures::stream::iter(chunks));
        let (written, _) =
            floe_sql::write::write_data_files(&table, Box::pin(stream), Some(usize::MAX)).await?;
        data_bytes += written.iter().map(|f| f.file_size_in_bytes()).sum::<u64>();
        files.extend(written);
        start += count;
    }
    let paths: Vec<String> = files
        .iter()
        .map(|f| f.file_path().trim_start_matches("file://").to_string())
        .collect();
    let index_bytes: u64 = paths
        .iter()
        .filter_map(|p| std::fs::metadata(floe_sql::token_index::index_location(p)).ok())
        .map(|m| m.len())
        .sum();
    let transaction = Transaction::new(&table);
    let transaction = transaction
        .fast_append()
        .add_data_files(files)
        .apply(transaction)?;
    let access = engine.access(&caller, "bench").await?;
    floe_sql::write::commit_transaction(&access, transaction).await?;
    println!(
        "wrote {} records in {} files ({:.1} MiB of Parquet, {:.1} MiB of token indexes, {:.1}%) in {:.1} s",
        args.records,
        paths.len(),
        data_bytes as f64 / 1048576.0,
        index_bytes as f64 / 1048576.0,
        100.0 * index_bytes as f64 / data_bytes.max(1) as f64,
        started.elapsed().as_secs_f64()
    );

    let without = SqlEngine::new(
        catalog.clone(),
        EngineConfig {
            rewrites: Rewrites {
                token_index: false,
                ..Rewrites::default()
            },
            ..EngineConfig::default()
        },
    )?;
    let list = paths
        .iter()
        .map(|p| format!("'{}'", p.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(",");
    let setup = vec![
        "CREATE SCHEMA otel".to_string(),
        format!("CREATE VIEW otel.logs AS SELECT * FROM read_parquet([{list}])"),
    ];
    let answers = args.dir.join("duckdb-answers");
    std::fs::create_dir_all(&answers)?;
    let Some(mut duck) = DuckDb::start(args.duckdb_python.clone(), &setup, &answers, true)? else {
        bail!("no Python with the duckdb module (--duckdb-python)");
    };

    let needle = request_id(args.records / 2 + 17);
    let queries: Vec<(&str, String, String)> = vec![
        (
            "needle: one request id, matches()",
            format!(
                "SELECT time, service_name, body FROM otel.logs WHERE matches(body, '{needle}')"
            ),
            format!("SELECT time, service_name, body FROM otel.logs WHERE body LIKE '%{needle}%'"),
        ),
        (
            "needle: one request id, LIKE holding it whole",
            format!(
                "SELECT time, service_name, body FROM otel.logs WHERE body LIKE '%request_id={needle};%'"
            ),
            format!(
                "SELECT time, service_name, body FROM otel.logs WHERE body LIKE '%request_id={needle};%'"
            ),
        ),
        (
            "term: a rare word, matches()",
            "SELECT time, service_name, body FROM otel.logs WHERE matches(body, 'segfault')".into(),
            "SELECT time, service_name, body FROM otel.logs WHERE body LIKE '%segfault%'".into(),
        ),
        (
            "term: a common word, matches(), counted",
            "SELECT count(*) AS n FROM otel.logs WHERE matches(body, 'retry')".into(),
            "SELECT count(*) AS n FROM otel.logs WHERE regexp_matches(body, '\\bretry\\b')".into(),
        ),
    ];
    println!(
        "  median of {} runs each: Floe with its token index, Floe without (FLOE_SQL_TOKEN_INDEX=off), {} on the same files",
        args.runs,
        duck.version()
    );
    for (q, (name, floe_sql, duck_sql)) in queries.iter().enumerate() {
        // First runs: answers compared, bytes measured with nothing kept in memory.
        floe_sql::token_index::forget_indexes();
        let before = floe_sql::token_index::stats();
        let with_rows = rows(&engine, floe_sql).await?;
        let after = floe_sql::token_index::stats();
        let index_read = after.index_bytes_read - before.index_bytes_read;
        // A statement may plan its scan more than once: the share of files skipped.
        let (pruned, kept) = (
            after.files_pruned - before.files_pruned,
            after.files_kept - before.files_kept,
        );
        let skipped = (paths.len() as u64 * pruned).div_ceil((pruned + kept).max(1));
        let with_bytes = bytes_read(&engine, floe_sql).await?;
        let without_rows = rows(&without, floe_sql).await?;
        let without_bytes = bytes_read(&without, floe_sql).await?;
        let duck_rows = duck.warm_up(q, duck_sql)?;
        if with_rows != without_rows || with_rows.len() != duck_rows {
            bail!(
                "{name}: Floe answers {} rows with its index, {} without, DuckDB {duck_rows}",
                with_rows.len(),
                without_rows.len()
            );
        }
        let (mut with, mut plain, mut peer) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.runs.max(1) {
            with.push(time(&engine, floe_sql).await?);
            plain.push(time(&without, floe_sql).await?);
            peer.push(duck.time(duck_sql)?);
        }
        let (w, p, d) = (median(&mut with), median(&mut plain), median(&mut peer));
        println!("    {name}: {} row(s)", answer_rows(&with_rows));
        println!(
            "      Floe with index {w:.1} ms, without {p:.1} ms (without/with {:.1}×), DuckDB {d:.1} ms (DuckDB/with {:.1}×)",
            p / w,
            d / w
        );
        println!(
            "      bytes read: with index {:.2} MiB ({:.2} MiB Parquet + {:.2} MiB of indexes; {skipped} of {} files skipped), without {:.2} MiB ({:.0}× more)",
            (with_bytes + index_read) as f64 / 1048576.0,
            with_bytes as f64 / 1048576.0,
            index_read as f64 / 1048576.0,
            paths.len(),
            without_bytes as f64 / 1048576.0,
            without_bytes as f64 / (with_bytes + index_read).max(1) as f64
        );
    }
    duck.finish()?;
    Ok(())
}

/// What a query's rows say, for the report: their count, or the count a `count(*)` gives.
fn answer_rows(rows: &[String]) -> String {
    match rows {
        [one] if one.starts_with("n=") => one.trim_start_matches("n=").to_string(),
        _ => rows.len().to_string(),
    }
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

fn options() -> QueryOptions {
    QueryOptions {
        warehouse: Some("bench".into()),
        ..Default::default()
    }
}

/// One run's time (ms), rows collected.
async fn time(engine: &SqlEngine, sql: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    let result = engine.query(&Caller::system(), sql, &options()).await?;
    let _: Vec<RecordBatch> = result.stream.try_collect().await?;
    Ok(started.elapsed().as_secs_f64() * 1000.0)
}

/// The query's rows as sorted text.
async fn rows(engine: &SqlEngine, sql: &str) -> anyhow::Result<Vec<String>> {
    let result = engine.query(&Caller::system(), sql, &options()).await?;
    let batches: Vec<RecordBatch> = result.stream.try_collect().await?;
    let mut rows = Vec::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            let mut text = Vec::new();
            for (i, field) in batch.schema().fields().iter().enumerate() {
                let value =
                    datafusion::arrow::util::display::array_value_to_string(batch.column(i), row)?;
                text.push(format!("{}={value}", field.name()));
            }
            rows.push(text.join(" "));
        }
    }
    rows.sort();
    Ok(rows)
}

/// The Parquet bytes the query's scans read: the sum of `bytes_scanned` in its `EXPLAIN
/// ANALYZE`.
async fn bytes_read(engine: &SqlEngine, sql: &str) -> anyhow::Result<u64> {
    let explained = engine
        .query(
            &Caller::system(),
            &format!("EXPLAIN ANALYZE {sql}"),
            &options(),
        )
        .await?;
    let batches: Vec<RecordBatch> = explained.stream.try_collect().await?;
    let mut bytes = 0u64;
    for batch in &batches {
        for column in batch.columns() {
            let texts: Vec<String> = if let Some(a) = column.as_any().downcast_ref::<StringArray>()
            {
                a.iter().flatten().map(str::to_string).collect()
            } else if let Some(a) = column.as_any().downcast_ref::<StringViewArray>() {
                a.iter().flatten().map(str::to_string).collect()
            } else {
                Vec::new()
            };
            for text in texts {
                bytes += bytes_scanned(&text);
            }
        }
    }
    Ok(bytes)
}

/// The sum of the `bytes_scanned=…` metrics in a plan's text. DataFusion 54 writes the
/// counter as a count — `1234`, `12.34 K`, `4.56 M`, `2.43 B` (thousands, millions,
/// billions) — and sizes as `3.0 KB`/`MB`/`GB` (powers of 1,024).
fn bytes_scanned(plan: &str) -> u64 {
    let mut total = 0.0;
    for part in plan.split("bytes_scanned=").skip(1) {
        let value: String = part
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ' ' || c.is_ascii_alphabetic())
            .collect();
        let mut words = value.split_whitespace();
        let Some(number) = words.next() else { continue };
        let (digits, suffix): (String, String) = number
            .chars()
            .partition(|c| c.is_ascii_digit() || *c == '.');
        let unit = if suffix.is_empty() {
            words.next().unwrap_or("")
        } else {
            &suffix
        };
        let scale = match unit {
            "K" => 1e3,
            "M" => 1e6,
            "B" => 1e9,
            "T" => 1e12,
            "KB" => 1024.0,
            "MB" => 1048576.0,
            "GB" => 1073741824.0,
            "TB" => 1099511627776.0,
            _ => 1.0,
        };
        total += digits.parse::<f64>().unwrap_or(0.0) * scale;
    }
    total as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn bytes_scanned_is_read_in_every_unit() {
        assert_eq!(super::bytes_scanned("x bytes_scanned=1234, y"), 1234);
        assert_eq!(
            super::bytes_scanned("bytes_scanned=2.0 K, a bytes_scanned=1 M"),
            2_000 + 1_000_000
        );
        // A count past a billion is written with DataFusion's `B`: billions, not bytes.
        assert_eq!(
            super::bytes_scanned("bytes_scanned=2.43 B, x"),
            2_430_000_000
        );
        assert_eq!(super::bytes_scanned("bytes_scanned=3.0 MB]"), 3 * 1048576);
    }
}
