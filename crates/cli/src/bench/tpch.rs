//! `floe bench tpch`: TPC-H over Iceberg tables in Floe's SQL engine, side by side in one run
//! with DataFusion on the same data as plain Parquet files and with DuckDB on those files.
//!
//! Data comes from `tpchgen` (the TPC-H generator), is written once as Parquet (one file per
//! table) and as Iceberg tables in namespace `tpch_sf<N>` of a `tpch` warehouse of an embedded
//! Floe catalog under `--dir`; later runs reuse it. Every query runs `--iterations` times per engine after one
//! warm-up; the best time counts. Every Floe result is checked value by value against DuckDB's
//! (and row counts against plain DataFusion's); peak resident memory is reported per engine.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

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
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogConfig, CatalogService, CreateTable};
use floe_sql::{EngineConfig, QueryOptions, SqlEngine};
use floe_storage::StorageProfile;
use floe_store::{SqlStore, StoreOptions};
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
    /// Timed runs per query and engine (after one warm-up); the best counts. 0 only compares
    /// the answers (with `--workers`: the distributed ones with Floe alone's).
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
    /// Also run every query through Floe with all of its rewrites off and require the same
    /// answer (the differential check of the rewrites; docs/sql.md).
    #[arg(long)]
    compare_rewrites: bool,
    /// Memory budget (MiB) of each Floe query; the peers run without one.
    #[arg(long, default_value_t = 16_384)]
    pub(super) query_memory_limit_mb: usize,
    /// Add a rewrite that is wrong on purpose (it drops a filter), to show that
    /// `--compare-rewrites` and the comparison with DuckDB catch a wrong rewrite.
    #[arg(long, hide = true)]
    break_a_rewrite: bool,
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
    /// The warehouse the tables are in.
    pub warehouse: &'static str,
}

impl Prepared {
    /// Where the queries' unqualified names resolve.
    pub fn options(&self) -> QueryOptions {
        QueryOptions {
            warehouse: Some(self.warehouse.into()),
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
        warehouse: "tpch",
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
    let outcome = super::suite::run(super::suite::Suite {
        name: "tpch",
        scale_factor: args.sf,
        engine: &engine,
        caller: &caller,
        options,
        queries: &queries,
        tables: TABLES.iter().map(|t| t.to_string()).collect(),
        parquet: &parquet,
        answers: dir.join("duckdb-answers"),
        duckdb_python: args.duckdb_python.clone(),
        iterations: args.iterations,
        query_memory_limit_mb: args.query_memory_limit_mb,
        peer_timeout: std::time::Duration::from_secs(args.peer_timeout_secs),
        without_rewrites: args
            .compare_rewrites
            .then(|| without_rewrites(&engine, args.query_memory_limit_mb))
            .transpose()?,
    })
    .await?;
    if let Some((q, why)) = outcome.wrong.iter().next() {
        bail!("Q{q}: Floe's answer differs from DuckDB's: {why}");
    }
    Ok(())
}

/// Floe's engine over `engine`'s catalog with every rewrite off.
pub(super) fn without_rewrites(engine: &SqlEngine, memory_mb: usize) -> anyhow::Result<SqlEngine> {
    Ok(SqlEngine::new(
        engine.catalog().clone(),
        EngineConfig {
            query_memory_limit: memory_mb << 20,
            rewrites: floe_sql::Rewrites::none(),
            ..EngineConfig::default()
        },
    )?)
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
                    sts_enabled: false,
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
            rewrites: floe_sql::Rewrites {
                broken_on_purpose: args.break_a_rewrite,
                ..EngineConfig::default().rewrites
            },
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
    ascending(schema, column).with_context(|| format!("the sort order of {table}"))
}

/// Ascending on `column`, nulls first: the order a benchmark's generated rows come in.
pub(super) fn ascending(
    schema: &iceberg::spec::Schema,
    column: &str,
) -> anyhow::Result<iceberg::spec::SortOrder> {
    use iceberg::spec::{NullOrder, SortDirection, SortField, SortOrder, Transform};
    let field = schema
        .field_by_name(column)
        .with_context(|| format!("no column {column}"))?;
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
