//! `floe bench tpch`: TPC-H over Iceberg tables in Floe's SQL engine, side by side in one run
//! with DataFusion on the same data as plain Parquet files and with DuckDB on those files.
//!
//! Data comes from `tpchgen` (the TPC-H generator), is written once as Parquet (one file per
//! table) and as Iceberg tables in namespace `tpch_sf<N>` of a `tpch` warehouse of an embedded
//! Floe catalog under `--dir`; later runs reuse it. Every query runs `--iterations` times per engine after one
//! warm-up; the best time counts. Every Floe result is checked value by value against DuckDB's
//! (and row counts against plain DataFusion's); peak resident memory is reported per engine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::duckdb::DuckDb;
use super::process::{memory_mib, reset_peak_memory};
use anyhow::{Context, bail};
use clap::Args;
use datafusion::arrow::array::{
    ArrayRef, Date32Builder, Decimal128Builder, Int32Builder, Int64Builder, RecordBatch,
    StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogConfig, CatalogService, CreateTable};
use floe_sql::{EngineConfig, QueryOptions, SqlEngine};
use floe_storage::StorageProfile;
use floe_store::{SqlStore, StoreOptions};
use futures::TryStreamExt;
use iceberg::NamespaceIdent;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};

#[derive(Args, Debug)]
pub struct TpchBenchArgs {
    /// TPC-H scale factor (1 = 6 million lineitem rows).
    #[arg(long, default_value_t = 1.0)]
    pub(super) sf: f64,
    /// Directory holding the generated data (reused when present).
    #[arg(long, default_value = "./floe-bench-tpch")]
    pub(super) dir: PathBuf,
    /// Timed runs per query and engine (after one warm-up); the best counts. With
    /// `--workers`, 0 only compares the answers.
    #[arg(long, default_value_t = 3)]
    pub(super) iterations: usize,
    /// Only these queries (e.g. `1,3,6`).
    #[arg(long, value_delimiter = ',')]
    pub(super) queries: Vec<usize>,
    /// Instead of the peers: Floe distributed over this many `floe worker` processes on this
    /// machine against Floe alone, answers compared row by row.
    #[arg(long, default_value_t = 0)]
    pub(super) workers: usize,
    /// With `--workers`: bytes of data one scan task reads, about.
    #[arg(long, default_value_t = 1 << 20)]
    pub(super) task_bytes: usize,
    /// With `--workers` and timed runs: afterwards, every query twice over fresh workers
    /// whose caches hold this many MiB each (in memory, no disk tier), with files placed by
    /// affinity and then without, and the workers' cache hit rates reported (0: skipped).
    #[arg(long, default_value_t = 96)]
    pub(super) worker_cache_mb: u64,
    /// With `--workers` and timed runs: afterwards, every query with the first worker slowed
    /// on purpose (stopped three quarters of the time), once with scans' files handed out as
    /// work units (the default) and once with each task reading the files placed with it.
    #[arg(long)]
    pub(super) slow_worker: bool,
    /// The catalog database the data is registered in (and, with `--workers`, the workers
    /// register in): `sqlite:PATH` or `postgres://…` (default: SQLite in the data directory).
    #[arg(long)]
    pub(super) catalog_db: Option<String>,
    /// Keep the tables in this bucket of an S3-compatible server instead of the data
    /// directory (with `--s3-endpoint`; keys from `FLOE_BENCH_S3_ACCESS_KEY` and
    /// `FLOE_BENCH_S3_SECRET_KEY`).
    #[arg(long)]
    pub(super) s3_bucket: Option<String>,
    /// The endpoint of `--s3-bucket`'s server, e.g. `http://10.0.0.1:9000`.
    #[arg(long)]
    pub(super) s3_endpoint: Option<String>,
    /// With `--workers`: run worker i in network namespace NAME, listening on address IP
    /// (`NAME=IP`, one per worker, comma-separated); they reach this process at
    /// `--coordinator-ip` and its catalog and warehouse at the addresses given for them.
    #[arg(long, value_delimiter = ',')]
    pub(super) worker_netns: Vec<String>,
    /// With `--worker-netns`: this process's address the workers reach it at.
    #[arg(long)]
    pub(super) coordinator_ip: Option<String>,
    /// A Python with the `duckdb` module, for the DuckDB column (default: the test venv's).
    #[arg(long)]
    duckdb_python: Option<PathBuf>,
    /// Memory budget (MiB) of each Floe query; the peers run without one.
    #[arg(long, default_value_t = 16_384)]
    pub(super) query_memory_limit_mb: usize,
    /// A run of one query by DataFusion on Parquet taking longer than this (seconds) counts
    /// as failed, so a peer that stalls does not stall the benchmark.
    #[arg(long, default_value_t = 900)]
    peer_timeout_secs: u64,
}

const TABLES: [&str; 8] = [
    "region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem",
];

/// The generated data of a run: where it is, and Floe's engine over it.
pub(super) struct Prepared {
    pub dir: PathBuf,
    /// The catalog database (`sqlite:…` or `postgres://…`).
    pub catalog_db: String,
    pub parquet: PathBuf,
    pub engine: SqlEngine,
    pub caller: Caller,
    pub namespace: String,
    /// The queries asked for, with their SQL.
    pub queries: Vec<(usize, String)>,
}

impl Prepared {
    /// Where the queries' unqualified names resolve.
    pub fn options(&self) -> QueryOptions {
        QueryOptions {
            warehouse: Some("tpch".into()),
            namespace: Some(self.namespace.clone()),
            ..Default::default()
        }
    }
}

/// The data of `args`' scale factor, generated unless it is there already.
pub(super) async fn prepare(args: &TpchBenchArgs) -> anyhow::Result<Prepared> {
    let dir = args.dir.join(format!("sf{}", args.sf));
    std::fs::create_dir_all(&dir)?;
    let dir = std::fs::canonicalize(&dir)?;
    let parquet = dir.join("parquet");
    let catalog_db = args
        .catalog_db
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", dir.join("catalog.db").display()));
    let (engine, caller) = iceberg_side(&dir, &catalog_db, args).await?;
    let namespace = namespace_of(args.sf);
    // The marker names the namespace (and a catalog other than the directory's own), so data
    // generated under another name, or registered elsewhere, is not taken for this one.
    let ready = match &args.catalog_db {
        None => dir.join(format!("{namespace}.ready")),
        Some(db) => {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::hash::DefaultHasher::new();
            db.hash(&mut hasher);
            dir.join(format!("{namespace}.{:016x}.ready", hasher.finish()))
        }
    };
    if !ready.exists() {
        generate(&parquet, args.sf, &namespace, &engine, &caller).await?;
        std::fs::write(&ready, "")?;
    }
    let queries: Vec<(usize, String)> = (1..=22)
        .filter(|q| args.queries.is_empty() || args.queries.contains(q))
        .map(|q| (q, query(q, args.sf)))
        .collect();
    Ok(Prepared {
        dir,
        catalog_db,
        parquet,
        engine,
        caller,
        namespace,
        queries,
    })
}

pub async fn run(args: TpchBenchArgs) -> anyhow::Result<()> {
    if args.workers > 0 {
        return super::tpch_workers::run(args).await;
    }
    let prepared = prepare(&args).await?;
    let options = prepared.options();
    let Prepared {
        dir,
        parquet,
        engine,
        caller,
        queries,
        ..
    } = prepared;

    println!(
        "floe bench tpch: scale factor {}, {} iteration(s) after a warm-up, best time in ms",
        args.sf, args.iterations
    );
    // First Floe alone, one run per query: its answers, and its peak resident memory with no
    // other engine's memory in the process.
    let floe_run = |sql: &str| {
        let (engine, caller, options, sql) = (&engine, &caller, &options, sql.to_string());
        async move {
            let result = engine.query(caller, &sql, options).await?;
            anyhow::Ok(result.stream.try_collect::<Vec<RecordBatch>>().await?)
        }
    };
    let mut floe_results: BTreeMap<usize, Vec<RecordBatch>> = BTreeMap::new();
    reset_peak_memory();
    let mut floe_failures: BTreeMap<usize, String> = BTreeMap::new();
    for (q, sql) in &queries {
        match floe_run(sql).await.map_err(|e| e.to_string()) {
            Ok(batches) => {
                floe_results.insert(*q, batches);
            }
            Err(e) => {
                // Reported in the table; the other queries still run.
                eprintln!("Q{q} failed in Floe: {e}");
                floe_failures.insert(*q, e);
            }
        }
    }
    let floe_peak = memory_mib("VmHWM:");
    // The same memory budget as Floe's queries, so a runaway plan fails rather than taking
    // the machine down.
    let raw = SessionContext::new_with_config_rt(
        SessionConfig::new().with_target_partitions(EngineConfig::default().target_partitions),
        datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_memory_limit(args.query_memory_limit_mb << 20, 1.0)
            .build_arc()?,
    );
    for table in TABLES {
        raw.register_parquet(
            table,
            parquet
                .join(format!("{table}.parquet"))
                .to_string_lossy()
                .as_ref(),
            ParquetReadOptions::default(),
        )
        .await?;
    }
    let answers = dir.join("duckdb-answers");
    std::fs::create_dir_all(&answers)?;
    let views: Vec<String> = TABLES
        .iter()
        .map(|t| {
            format!(
                "CREATE VIEW {t} AS SELECT * FROM read_parquet('{}/{t}.parquet')",
                parquet.display()
            )
        })
        .collect();
    let mut duckdb = DuckDb::start(args.duckdb_python.clone(), &views, &answers, false)?;

    // Then the timed runs, engine after engine within each iteration of each query, so that
    // the machine's drift (these shared cores speed up and slow down over minutes) falls on
    // all three alike.
    let limit = std::time::Duration::from_secs(args.peer_timeout_secs);
    let raw_run = |sql: &str| {
        let (raw, sql) = (raw.clone(), sql.to_string());
        async move {
            let run = async { raw.sql(&sql).await?.collect().await };
            let batches = tokio::time::timeout(limit, run)
                .await
                .map_err(|_| anyhow::anyhow!("no answer within {} s", limit.as_secs()))??;
            anyhow::Ok(batches.iter().map(|b| b.num_rows()).sum::<usize>())
        }
    };
    let mut floe_times = BTreeMap::new();
    let mut raw_times = BTreeMap::new();
    let mut duck_times = BTreeMap::new();
    for (q, sql) in &queries {
        let Some(floe_rows) = floe_results
            .get(q)
            .map(|batches| batches.iter().map(|b| b.num_rows()).sum::<usize>())
        else {
            continue;
        };
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
        let duck_rows = match duckdb.as_mut() {
            Some(duck) => Some(duck.warm_up(*q, sql)?),
            None => None,
        };
        let (mut floe_best, mut raw_best, mut duck_best) = (f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..args.iterations.max(1) {
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
    let duck = duckdb.is_some().then_some(duck_times);
    let duck_peak = match duckdb {
        Some(duck) => duck.finish()?,
        None => None,
    };
    if duck.is_some() {
        for (q, _) in &queries {
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
            same_answer(got, &expected, "DuckDB")
                .with_context(|| format!("Q{q}: Floe's answer differs from DuckDB's"))?;
        }
    }

    println!(
        "\n{:>5} {:>10} {:>14} {:>10} {:>13} {:>14}",
        "query", "floe", "df-parquet", "duckdb", "floe/duckdb", "floe/df-parq"
    );
    let (mut log_duck, mut log_raw, mut n_duck, mut n_raw) = (0.0, 0.0, 0, 0);
    // Summed times of the queries every engine answered.
    let (mut sum_floe, mut sum_raw, mut sum_duck) = (0.0, 0.0, 0.0);
    for (q, _) in &queries {
        let Some(&(floe_ms, floe_rows)) = floe_times.get(q) else {
            println!("{:>5} {:>10}", format!("Q{q}"), "fails");
            continue;
        };
        let raw_entry = raw_times.get(q).copied();
        let duck_entry = duck.as_ref().and_then(|d| d.get(q)).copied();
        if raw_entry.is_some_and(|(_, rows)| rows != floe_rows)
            || duck_entry.is_some_and(|(_, rows)| rows != floe_rows)
        {
            bail!(
                "Q{q}: engines disagree on the row count (floe {floe_rows}, datafusion {:?}, duckdb {:?})",
                raw_entry.map(|d| d.1),
                duck_entry.map(|d| d.1)
            );
        }
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
                (format!("{ms:.1}"), format!("{:.2}", floe_ms / ms))
            }
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:>5} {:>10.1} {:>14} {:>10} {:>13} {:>14}",
            format!("Q{q}"),
            floe_ms,
            raw_text.0,
            duck_text.0,
            duck_text.1,
            raw_text.1
        );
    }
    let show = |mib: Option<f64>| mib.map_or("-".to_string(), |m| format!("{m:.0} MiB"));
    // Floe's peak is taken over its first runs, before DataFusion on Parquet (which runs in
    // this process) has run anything.
    println!(
        "\npeak resident memory: floe's queries {} (query memory limit {} MiB; includes data \
         generated in this run, if any), duckdb process {}",
        show(floe_peak),
        args.query_memory_limit_mb,
        show(duck_peak)
    );
    if duck.is_some() {
        println!(
            "every answer Floe gave matches DuckDB's, value by value; {} of {} queries failed in Floe",
            floe_failures.len(),
            queries.len()
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
        } else {
            " (DuckDB not run: no Python with the duckdb module)".into()
        }
    );
    Ok(())
}

/// The namespace holding scale factor `sf`'s tables: `tpch_sf1`, `tpch_sf10`, and for a
/// fractional scale factor `tpch_sf0_1` (a dot would split the name in SQL).
fn namespace_of(sf: f64) -> String {
    format!("tpch_sf{sf}").replace('.', "_")
}

/// The catalog at `catalog_db` with its `tpch` warehouse (in `dir`, or the bucket of
/// `--s3-bucket`), and a root caller.
async fn iceberg_side(
    dir: &Path,
    catalog_db: &str,
    args: &TpchBenchArgs,
) -> anyhow::Result<(SqlEngine, Caller)> {
    let store = Arc::new(SqlStore::connect(catalog_db, StoreOptions::default()).await?);
    let catalog = Arc::new(CatalogService::new(store, CatalogConfig::default()));
    let caller = Caller::system();
    if catalog.warehouse("tpch").await.is_err() {
        let profile = match &args.s3_bucket {
            None => StorageProfile::Local {
                path: dir.join("warehouse").to_string_lossy().into_owned(),
            },
            Some(bucket) => {
                let key = |name: &str| std::env::var(name).ok();
                StorageProfile::S3(floe_storage::S3Profile {
                    bucket: bucket.clone(),
                    key_prefix: Some(format!("tpch-{}", uuid::Uuid::new_v4().simple())),
                    region: "us-east-1".into(),
                    endpoint: args.s3_endpoint.clone(),
                    path_style_access: true,
                    access_key_id: key("FLOE_BENCH_S3_ACCESS_KEY"),
                    secret_access_key: key("FLOE_BENCH_S3_SECRET_KEY"),
                    sts_role_arn: None,
                })
            }
        };
        catalog
            .create_warehouse(&caller, "tpch", profile, Default::default())
            .await?;
    }
    let engine = SqlEngine::new(
        catalog,
        EngineConfig {
            query_memory_limit: args.query_memory_limit_mb << 20,
            ..EngineConfig::default()
        },
    )?;
    Ok((engine, caller))
}

/// Generates every table into Parquet and into Iceberg.
async fn generate(
    parquet: &Path,
    sf: f64,
    namespace: &str,
    engine: &SqlEngine,
    caller: &Caller,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(parquet)?;
    let catalog = engine.catalog();
    let ns = NamespaceIdent::new(namespace.into());
    if catalog.load_namespace(caller, "tpch", &ns).await.is_err() {
        catalog
            .create_namespace(caller, "tpch", &ns, Default::default())
            .await?;
    }
    for table in TABLES {
        let started = Instant::now();
        let batches = table_batches(table, sf);
        let schema = batches[0].schema();
        let file = std::fs::File::create(parquet.join(format!("{table}.parquet")))?;
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None)?;
        for batch in &batches {
            writer.write(batch)?;
        }
        writer.close()?;
        let access = engine.access(caller, "tpch").await?;
        let iceberg_schema = floe_sql::write::iceberg_schema(&schema)?;
        let write_order = sorted_by(table, &iceberg_schema)?;
        let loaded = catalog
            .create_table(
                caller,
                "tpch",
                &ns,
                CreateTable {
                    name: table.into(),
                    location: None,
                    schema: iceberg_schema,
                    partition_spec: None,
                    write_order: Some(write_order),
                    stage_create: false,
                    properties: Default::default(),
                },
            )
            .await?;
        let iceberg_table = floe_sql::write::table_of(&access, loaded)?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let stream = RecordBatchStreamAdapter::new(
            schema.clone(),
            futures::stream::iter(batches.into_iter().map(Ok)),
        );
        floe_sql::write::IcebergSink::new(access, iceberg_table, schema)
            .write_all(Box::pin(stream), &Arc::new(TaskContext::default()))
            .await?;
        println!(
            "generated {table}: {rows} rows in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The column each table's rows are generated in ascending order of: its sort order, which
/// Floe's writer finds the rows in and records on the files.
fn sorted_by(
    table: &str,
    schema: &iceberg::spec::Schema,
) -> anyhow::Result<iceberg::spec::SortOrder> {
    use iceberg::spec::{NullOrder, SortDirection, SortField, SortOrder, Transform};
    let column = match table {
        "region" => "r_regionkey",
        "nation" => "n_nationkey",
        "supplier" => "s_suppkey",
        "customer" => "c_custkey",
        "part" => "p_partkey",
        "partsupp" => "ps_partkey",
        "orders" => "o_orderkey",
        "lineitem" => "l_orderkey",
        other => bail!("no sort column for table {other}"),
    };
    let field = schema
        .field_by_name(column)
        .with_context(|| format!("{table} has no column {column}"))?;
    Ok(SortOrder::builder()
        .with_order_id(1)
        .with_sort_field(
            SortField::builder()
                .source_id(field.id)
                .transform(Transform::Identity)
                .direction(SortDirection::Ascending)
                .null_order(NullOrder::First)
                .build(),
        )
        .build(schema)?)
}

fn decimal() -> DataType {
    DataType::Decimal128(15, 2)
}

fn schema_of(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|(n, t)| Field::new(*n, t.clone(), false))
            .collect::<Vec<_>>(),
    ))
}

/// Days since 1970-01-01 of a generated date.
fn days(date: tpchgen::dates::TPCHDate) -> i32 {
    date.into_inner() + tpchgen::dates::TPCHDate::UNIX_EPOCH_OFFSET
}

/// One table's rows as Arrow batches of up to 65,536 rows.
fn table_batches(table: &str, sf: f64) -> Vec<RecordBatch> {
    const BATCH: usize = 65_536;
    macro_rules! collect {
        ($iter:expr, $schema:expr, [$(($builder:ident, $ty:ty, $value:expr)),* $(,)?]) => {{
            let schema = $schema;
            let mut batches = Vec::new();
            let mut iter = $iter.peekable();
            while iter.peek().is_some() {
                $(let mut $builder = <$ty>::new();)*
                for row in iter.by_ref().take(BATCH) {
                    #[allow(clippy::redundant_closure_call)]
                    {
                        $( ($value)(&mut $builder, &row); )*
                    }
                }
                let columns: Vec<ArrayRef> = vec![$(Arc::new(finish(&mut $builder, &schema, stringify!($builder)))),*];
                batches.push(RecordBatch::try_new(schema.clone(), columns).expect("generated columns"));
            }
            batches
        }};
    }
    let s = |b: &mut StringBuilder, v: &dyn std::fmt::Display| b.append_value(v.to_string());
    match table {
        "region" => collect!(
            RegionGenerator::default().iter(),
            schema_of(&[
                ("r_regionkey", DataType::Int64),
                ("r_name", DataType::Utf8),
                ("r_comment", DataType::Utf8)
            ]),
            [
                (
                    r_regionkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::Region| b
                        .append_value(r.r_regionkey)
                ),
                (
                    r_name,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Region| s(b, &r.r_name)
                ),
                (
                    r_comment,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Region| s(b, &r.r_comment)
                ),
            ]
        ),
        "nation" => collect!(
            NationGenerator::default().iter(),
            schema_of(&[
                ("n_nationkey", DataType::Int64),
                ("n_name", DataType::Utf8),
                ("n_regionkey", DataType::Int64),
                ("n_comment", DataType::Utf8)
            ]),
            [
                (
                    n_nationkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::Nation| b
                        .append_value(r.n_nationkey)
                ),
                (
                    n_name,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Nation| s(b, &r.n_name)
                ),
                (
                    n_regionkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::Nation| b
                        .append_value(r.n_regionkey)
                ),
                (
                    n_comment,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Nation| s(b, &r.n_comment)
                ),
            ]
        ),
        "supplier" => collect!(
            SupplierGenerator::new(sf, 1, 1).iter(),
            schema_of(&[
                ("s_suppkey", DataType::Int64),
                ("s_name", DataType::Utf8),
                ("s_address", DataType::Utf8),
                ("s_nationkey", DataType::Int64),
                ("s_phone", DataType::Utf8),
                ("s_acctbal", decimal()),
                ("s_comment", DataType::Utf8)
            ]),
            [
                (
                    s_suppkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::Supplier| b
                        .append_value(r.s_suppkey)
                ),
                (
                    s_name,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Supplier| s(b, &r.s_name)
                ),
                (
                    s_address,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Supplier| s(b, &r.s_address)
                ),
                (
                    s_nationkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::Supplier| b
                        .append_value(r.s_nationkey)
                ),
                (
                    s_phone,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Supplier| s(b, &r.s_phone)
                ),
                (
                    s_acctbal,
                    Decimal128Builder,
                    |b: &mut Decimal128Builder, r: &tpchgen::generators::Supplier| b
                        .append_value(r.s_acctbal.0 as i128)
                ),
                (
                    s_comment,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Supplier| s(b, &r.s_comment)
                ),
            ]
        ),
        "customer" => collect!(
            CustomerGenerator::new(sf, 1, 1).iter(),
            schema_of(&[
                ("c_custkey", DataType::Int64),
                ("c_name", DataType::Utf8),
                ("c_address", DataType::Utf8),
                ("c_nationkey", DataType::Int64),
                ("c_phone", DataType::Utf8),
                ("c_acctbal", decimal()),
                ("c_mktsegment", DataType::Utf8),
                ("c_comment", DataType::Utf8)
            ]),
            [
                (
                    c_custkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::Customer| b
                        .append_value(r.c_custkey)
                ),
                (
                    c_name,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Customer| s(b, &r.c_name)
                ),
                (
                    c_address,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Customer| s(b, &r.c_address)
                ),
                (
                    c_nationkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::Customer| b
                        .append_value(r.c_nationkey)
                ),
                (
                    c_phone,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Customer| s(b, &r.c_phone)
                ),
                (
                    c_acctbal,
                    Decimal128Builder,
                    |b: &mut Decimal128Builder, r: &tpchgen::generators::Customer| b
                        .append_value(r.c_acctbal.0 as i128)
                ),
                (
                    c_mktsegment,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Customer| s(
                        b,
                        &r.c_mktsegment
                    )
                ),
                (
                    c_comment,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Customer| s(b, &r.c_comment)
                ),
            ]
        ),
        "part" => collect!(
            PartGenerator::new(sf, 1, 1).iter(),
            schema_of(&[
                ("p_partkey", DataType::Int64),
                ("p_name", DataType::Utf8),
                ("p_mfgr", DataType::Utf8),
                ("p_brand", DataType::Utf8),
                ("p_type", DataType::Utf8),
                ("p_size", DataType::Int32),
                ("p_container", DataType::Utf8),
                ("p_retailprice", decimal()),
                ("p_comment", DataType::Utf8)
            ]),
            [
                (
                    p_partkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::Part| b
                        .append_value(r.p_partkey)
                ),
                (
                    p_name,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Part| s(b, &r.p_name)
                ),
                (
                    p_mfgr,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Part| s(b, &r.p_mfgr)
                ),
                (
                    p_brand,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Part| s(b, &r.p_brand)
                ),
                (
                    p_type,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Part| s(b, &r.p_type)
                ),
                (
                    p_size,
                    Int32Builder,
                    |b: &mut Int32Builder, r: &tpchgen::generators::Part| b.append_value(r.p_size)
                ),
                (
                    p_container,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Part| s(b, &r.p_container)
                ),
                (
                    p_retailprice,
                    Decimal128Builder,
                    |b: &mut Decimal128Builder, r: &tpchgen::generators::Part| b
                        .append_value(r.p_retailprice.0 as i128)
                ),
                (
                    p_comment,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Part| s(b, &r.p_comment)
                ),
            ]
        ),
        "partsupp" => collect!(
            PartSuppGenerator::new(sf, 1, 1).iter(),
            schema_of(&[
                ("ps_partkey", DataType::Int64),
                ("ps_suppkey", DataType::Int64),
                ("ps_availqty", DataType::Int32),
                ("ps_supplycost", decimal()),
                ("ps_comment", DataType::Utf8)
            ]),
            [
                (
                    ps_partkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::PartSupp| b
                        .append_value(r.ps_partkey)
                ),
                (
                    ps_suppkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::PartSupp| b
                        .append_value(r.ps_suppkey)
                ),
                (
                    ps_availqty,
                    Int32Builder,
                    |b: &mut Int32Builder, r: &tpchgen::generators::PartSupp| b
                        .append_value(r.ps_availqty)
                ),
                (
                    ps_supplycost,
                    Decimal128Builder,
                    |b: &mut Decimal128Builder, r: &tpchgen::generators::PartSupp| b
                        .append_value(r.ps_supplycost.0 as i128)
                ),
                (
                    ps_comment,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::PartSupp| s(b, &r.ps_comment)
                ),
            ]
        ),
        "orders" => collect!(
            OrderGenerator::new(sf, 1, 1).iter(),
            schema_of(&[
                ("o_orderkey", DataType::Int64),
                ("o_custkey", DataType::Int64),
                ("o_orderstatus", DataType::Utf8),
                ("o_totalprice", decimal()),
                ("o_orderdate", DataType::Date32),
                ("o_orderpriority", DataType::Utf8),
                ("o_clerk", DataType::Utf8),
                ("o_shippriority", DataType::Int32),
                ("o_comment", DataType::Utf8)
            ]),
            [
                (
                    o_orderkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::Order| b
                        .append_value(r.o_orderkey)
                ),
                (
                    o_custkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::Order| b
                        .append_value(r.o_custkey)
                ),
                (
                    o_orderstatus,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Order| s(b, &r.o_orderstatus)
                ),
                (
                    o_totalprice,
                    Decimal128Builder,
                    |b: &mut Decimal128Builder, r: &tpchgen::generators::Order| b
                        .append_value(r.o_totalprice.0 as i128)
                ),
                (
                    o_orderdate,
                    Date32Builder,
                    |b: &mut Date32Builder, r: &tpchgen::generators::Order| b
                        .append_value(days(r.o_orderdate))
                ),
                (
                    o_orderpriority,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Order| s(
                        b,
                        &r.o_orderpriority
                    )
                ),
                (
                    o_clerk,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Order| s(b, &r.o_clerk)
                ),
                (
                    o_shippriority,
                    Int32Builder,
                    |b: &mut Int32Builder, r: &tpchgen::generators::Order| b
                        .append_value(r.o_shippriority)
                ),
                (
                    o_comment,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::Order| s(b, &r.o_comment)
                ),
            ]
        ),
        _ => collect!(
            LineItemGenerator::new(sf, 1, 1).iter(),
            schema_of(&[
                ("l_orderkey", DataType::Int64),
                ("l_partkey", DataType::Int64),
                ("l_suppkey", DataType::Int64),
                ("l_linenumber", DataType::Int32),
                ("l_quantity", decimal()),
                ("l_extendedprice", decimal()),
                ("l_discount", decimal()),
                ("l_tax", decimal()),
                ("l_returnflag", DataType::Utf8),
                ("l_linestatus", DataType::Utf8),
                ("l_shipdate", DataType::Date32),
                ("l_commitdate", DataType::Date32),
                ("l_receiptdate", DataType::Date32),
                ("l_shipinstruct", DataType::Utf8),
                ("l_shipmode", DataType::Utf8),
                ("l_comment", DataType::Utf8)
            ]),
            [
                (
                    l_orderkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(r.l_orderkey)
                ),
                (
                    l_partkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(r.l_partkey)
                ),
                (
                    l_suppkey,
                    Int64Builder,
                    |b: &mut Int64Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(r.l_suppkey)
                ),
                (
                    l_linenumber,
                    Int32Builder,
                    |b: &mut Int32Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(r.l_linenumber)
                ),
                (
                    l_quantity,
                    Decimal128Builder,
                    |b: &mut Decimal128Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(r.l_quantity as i128 * 100)
                ),
                (
                    l_extendedprice,
                    Decimal128Builder,
                    |b: &mut Decimal128Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(r.l_extendedprice.0 as i128)
                ),
                (
                    l_discount,
                    Decimal128Builder,
                    |b: &mut Decimal128Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(r.l_discount.0 as i128)
                ),
                (
                    l_tax,
                    Decimal128Builder,
                    |b: &mut Decimal128Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(r.l_tax.0 as i128)
                ),
                (
                    l_returnflag,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::LineItem| s(
                        b,
                        &r.l_returnflag
                    )
                ),
                (
                    l_linestatus,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::LineItem| s(
                        b,
                        &r.l_linestatus
                    )
                ),
                (
                    l_shipdate,
                    Date32Builder,
                    |b: &mut Date32Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(days(r.l_shipdate))
                ),
                (
                    l_commitdate,
                    Date32Builder,
                    |b: &mut Date32Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(days(r.l_commitdate))
                ),
                (
                    l_receiptdate,
                    Date32Builder,
                    |b: &mut Date32Builder, r: &tpchgen::generators::LineItem| b
                        .append_value(days(r.l_receiptdate))
                ),
                (
                    l_shipinstruct,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::LineItem| s(
                        b,
                        &r.l_shipinstruct
                    )
                ),
                (
                    l_shipmode,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::LineItem| s(b, &r.l_shipmode)
                ),
                (
                    l_comment,
                    StringBuilder,
                    |b: &mut StringBuilder, r: &tpchgen::generators::LineItem| s(b, &r.l_comment)
                ),
            ]
        ),
    }
}

/// Finishes a column builder, with the decimal precision of its field.
fn finish<B: ColumnBuilder>(builder: &mut B, schema: &SchemaRef, name: &str) -> B::Array {
    builder.finish_as(
        schema
            .field_with_name(name)
            .expect("known column")
            .data_type(),
    )
}

trait ColumnBuilder {
    type Array: datafusion::arrow::array::Array + 'static;
    fn finish_as(&mut self, data_type: &DataType) -> Self::Array;
}

macro_rules! plain_builder {
    ($builder:ty, $array:ty) => {
        impl ColumnBuilder for $builder {
            type Array = $array;
            fn finish_as(&mut self, _data_type: &DataType) -> $array {
                self.finish()
            }
        }
    };
}

plain_builder!(Int64Builder, datafusion::arrow::array::Int64Array);
plain_builder!(Int32Builder, datafusion::arrow::array::Int32Array);
plain_builder!(Date32Builder, datafusion::arrow::array::Date32Array);
plain_builder!(StringBuilder, datafusion::arrow::array::StringArray);

impl ColumnBuilder for Decimal128Builder {
    type Array = datafusion::arrow::array::Decimal128Array;
    fn finish_as(&mut self, data_type: &DataType) -> Self::Array {
        let DataType::Decimal128(precision, scale) = data_type else {
            unreachable!("decimal columns are Decimal128")
        };
        self.finish()
            .with_precision_and_scale(*precision, *scale)
            .expect("valid decimal precision")
    }
}

/// TPC-H query `q` with the specification's validation parameters, from `tpchgen`'s templates
/// (Q15's view becomes a common table expression; row limits as the specification sets them).
fn query(q: usize, sf: f64) -> String {
    let fraction = format!("{}", 0.0001 / sf);
    let params: &[&str] = match q {
        1 => &["90"],
        2 => &["15", "BRASS", "EUROPE"],
        3 => &["BUILDING", "1995-03-15"],
        4 => &["1993-07-01"],
        5 => &["ASIA", "1994-01-01"],
        6 => &["1994-01-01", "0.06", "24"],
        7 => &["FRANCE", "GERMANY"],
        8 => &["BRAZIL", "AMERICA", "ECONOMY ANODIZED STEEL"],
        9 => &["green"],
        10 => &["1993-10-01"],
        11 => &["GERMANY", fraction.as_str()],
        12 => &["MAIL", "SHIP", "1994-01-01"],
        13 => &["special", "requests"],
        14 => &["1995-09-01"],
        15 => &["1996-01-01"],
        16 => &[
            "Brand#45",
            "MEDIUM POLISHED",
            "49",
            "14",
            "23",
            "45",
            "19",
            "3",
            "36",
            "9",
        ],
        17 => &["Brand#23", "MED BOX"],
        18 => &["300"],
        19 => &["Brand#12", "Brand#23", "Brand#34", "1", "10", "20"],
        20 => &["forest", "1994-01-01", "CANADA"],
        21 => &["SAUDI ARABIA"],
        _ => &["13", "31", "23", "29", "30", "18", "17"],
    };
    let mut text = tpchgen::q_and_a::queries::query(q as i32)
        .expect("queries 1 to 22")
        .to_string();
    // Substitute the highest-numbered parameters first (`:10` before `:1`).
    for (i, value) in params.iter().enumerate().rev() {
        text = text.replace(&format!(":{}", i + 1), value);
    }
    text = text.replace("day (3)", "day");
    if q == 15 {
        let create = text.split(';').next().expect("the view");
        let body = create.split_once(" as").map(|(_, b)| b).expect("view body");
        let select = text.split(';').nth(1).expect("the query");
        return format!(
            "with revenue0 (supplier_no, total_revenue) as ({body}) {}",
            select.replace("revenue:s", "revenue0")
        );
    }
    let text = text.trim().trim_end_matches(';').to_string();
    match q {
        2 | 18 | 21 => format!("{text} limit 100"),
        3 => format!("{text} limit 10"),
        10 => format!("{text} limit 20"),
        _ => text,
    }
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

#[cfg(test)]
mod tests {
    use super::namespace_of;

    #[test]
    fn each_scale_factor_has_its_own_namespace() {
        assert_eq!(namespace_of(1.0), "tpch_sf1");
        assert_eq!(namespace_of(10.0), "tpch_sf10");
        assert_eq!(namespace_of(0.1), "tpch_sf0_1");
    }
}
