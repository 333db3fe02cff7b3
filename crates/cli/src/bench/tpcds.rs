//! `floe bench tpcds`: TPC-DS's 99 queries over Iceberg tables in Floe's SQL engine, side by
//! side in one run with DataFusion on the same data as plain Parquet files and with DuckDB on
//! those files ([`super::suite`]); every Floe answer is compared with DuckDB's value by value.
//!
//! The data and the queries come from DuckDB 1.4.4's `tpcds` extension (`dsdgen`, and the 99
//! queries as `tpcds_queries()` ships them), run once by a Python with that extension's wheel
//! (the test venv, `scripts/setup-python.sh`; the newest DuckDB's extensions are not on PyPI)
//! into `--dir/sf<N>/parquet` and `--dir/sf<N>/queries`. Floe's own writer loads each table
//! into namespace `tpcds_sf<N>` of a `tpcds` warehouse of an embedded catalog there. Later
//! runs reuse both.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use datafusion::datasource::sink::DataSink;
use datafusion::execution::TaskContext;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::{CatalogConfig, CatalogService, CreateTable};
use floe_sql::{EngineConfig, QueryOptions, SqlEngine};
use floe_storage::StorageProfile;
use floe_store::{SqlStore, StoreOptions};
use iceberg::NamespaceIdent;

#[derive(Args, Debug)]
pub struct TpcdsBenchArgs {
    /// TPC-DS scale factor (1 = 2.9 million `store_sales` rows).
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// Directory holding the generated data (reused when present).
    #[arg(long, default_value = "./floe-bench-tpcds")]
    dir: PathBuf,
    /// Timed runs per query and engine (after one warm-up); the best counts. 0 only compares
    /// the answers.
    #[arg(long, default_value_t = 3)]
    iterations: usize,
    /// Only these queries (e.g. `4,22,39`).
    #[arg(long, value_delimiter = ',')]
    queries: Vec<usize>,
    /// A Python with DuckDB 1.4.4 and the `duckdb-ext-tpcds` wheel, which generates the data
    /// (default: `FLOE_TPCDS_PYTHON`, or the test venv's).
    #[arg(long)]
    generator_python: Option<PathBuf>,
    /// A Python with the `duckdb` module, for the DuckDB column (default:
    /// `FLOE_DUCKDB_PYTHON`, the newest DuckDB's venv of `scripts/setup-duckdb.sh`, or the
    /// test venv's).
    #[arg(long)]
    duckdb_python: Option<PathBuf>,
    /// Also run every query through Floe with all of its rewrites off and require the same
    /// answer (the differential check of the rewrites; docs/sql.md).
    #[arg(long)]
    compare_rewrites: bool,
    /// Memory budget (MiB) of each Floe query; the peers run without one.
    #[arg(long, default_value_t = 16_384)]
    query_memory_limit_mb: usize,
    /// A run of one query by DataFusion on Parquet taking longer than this (seconds) counts
    /// as failed.
    #[arg(long, default_value_t = 900)]
    peer_timeout_secs: u64,
    /// `KEY=VALUE`: a property of every table the benchmark loads (e.g.
    /// `write.parquet.row-group-limit=122880`, `write.parquet.compression-codec=zstd`), for
    /// comparing file layouts; applies when the tables are loaded, into a fresh `--dir`.
    #[arg(long = "table-property", value_parser = key_value)]
    table_properties: Vec<(String, String)>,
    /// Instead of the peers: Floe distributed over this many `floe worker` processes on this
    /// machine against Floe alone, answers compared row by row.
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// With `--workers`: bytes of data one scan task reads, about.
    #[arg(long, default_value_t = 1 << 20)]
    task_bytes: usize,
}

fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// Generates the tables as Parquet and the queries as `q<N>.sql`, with DuckDB's `tpcds`
/// extension loaded from its wheel (nothing is downloaded).
const GENERATE: &str = r#"
import importlib.metadata, sys
from pathlib import Path
import duckdb
sf, out = float(sys.argv[1]), Path(sys.argv[2])
(out / "parquet").mkdir(parents=True, exist_ok=True)
(out / "queries").mkdir(parents=True, exist_ok=True)
files = importlib.metadata.files("duckdb-ext-tpcds") or []
ext = next(Path(f.locate()).resolve() for f in files if f.name == "tpcds.duckdb_extension")
con = duckdb.connect(config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"})
con.execute(f"LOAD '{ext}'")
con.execute(f"CALL dsdgen(sf={sf})")
for (name,) in con.execute("SHOW TABLES").fetchall():
    con.execute(f"COPY {name} TO '{out}/parquet/{name}.parquet' (FORMAT parquet)")
for nr, query in con.execute("SELECT query_nr, query FROM tpcds_queries()").fetchall():
    (out / "queries" / f"q{nr}.sql").write_text(query)
"#;

pub async fn run(args: TpcdsBenchArgs) -> anyhow::Result<()> {
    let dir = args.dir.join(format!("sf{}", args.sf));
    std::fs::create_dir_all(&dir)?;
    let dir = std::fs::canonicalize(&dir)?;
    let parquet = dir.join("parquet");
    let namespace = format!("tpcds_sf{}", args.sf).replace('.', "_");
    if !dir.join("generated").exists() {
        generate(&args, &dir)?;
        std::fs::write(dir.join("generated"), "")?;
    }
    let tables = tables_in(&parquet)?;
    let (engine, caller) = iceberg_side(&dir, &args).await?;
    let loaded = dir.join(format!("{namespace}.ready"));
    if !loaded.exists() {
        let properties = args.table_properties.iter().cloned().collect();
        load(&engine, &caller, &namespace, &parquet, &tables, &properties).await?;
        std::fs::write(&loaded, "")?;
    }
    let mut queries = Vec::new();
    for q in 1..=99 {
        if !args.queries.is_empty() && !args.queries.contains(&q) {
            continue;
        }
        let path = dir.join("queries").join(format!("q{q}.sql"));
        let sql =
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        queries.push((q, sql.trim().trim_end_matches(';').to_string()));
    }
    if args.workers > 0 {
        let prepared = super::tpch::Prepared {
            catalog_db: format!("sqlite:{}", dir.join("catalog.db").display()),
            dir,
            parquet,
            engine,
            caller,
            namespace,
            queries,
            warehouse: "tpcds",
        };
        let dist = super::tpch_workers::Distribution {
            suite: "tpcds",
            sf: args.sf,
            workers: args.workers,
            task_bytes: args.task_bytes,
            query_memory_limit_mb: args.query_memory_limit_mb,
            iterations: args.iterations,
            worker_netns: Vec::new(),
            coordinator_ip: None,
        };
        let cluster = super::tpch_workers::BenchCluster::start(&prepared, &dist).await?;
        return super::tpch_workers::compare(&prepared, &dist, &cluster.coordinator).await;
    }
    let outcome = super::suite::run(super::suite::Suite {
        name: "tpcds",
        scale_factor: args.sf,
        engine: &engine,
        caller: &caller,
        options: QueryOptions {
            warehouse: Some("tpcds".into()),
            namespace: Some(namespace),
            ..Default::default()
        },
        queries: &queries,
        tables,
        parquet: &parquet,
        answers: dir.join("duckdb-answers"),
        duckdb_python: args.duckdb_python.clone(),
        iterations: args.iterations,
        query_memory_limit_mb: args.query_memory_limit_mb,
        peer_timeout: std::time::Duration::from_secs(args.peer_timeout_secs),
        without_rewrites: args
            .compare_rewrites
            .then(|| super::tpch::without_rewrites(&engine, args.query_memory_limit_mb))
            .transpose()?,
    })
    .await?;
    if !outcome.wrong.is_empty() || !outcome.failed.is_empty() {
        bail!(
            "{} answer(s) differ from DuckDB's and {} quer(ies) failed",
            outcome.wrong.len(),
            outcome.failed.len()
        );
    }
    Ok(())
}

/// Runs [`GENERATE`] with the generator's Python.
fn generate(args: &TpcdsBenchArgs, dir: &Path) -> anyhow::Result<()> {
    let python = args
        .generator_python
        .clone()
        .or_else(|| std::env::var_os("FLOE_TPCDS_PYTHON").map(PathBuf::from))
        .or_else(|| {
            let venv = PathBuf::from(std::env::var_os("HOME")?).join(".cache/floe-venv/bin/python");
            venv.exists().then_some(venv)
        })
        .context(
            "no Python with DuckDB's tpcds extension: run scripts/setup-python.sh or pass \
             --generator-python",
        )?;
    let started = Instant::now();
    let status = std::process::Command::new(&python)
        .args(["-c", GENERATE])
        .arg(args.sf.to_string())
        .arg(dir)
        .status()
        .with_context(|| format!("start {}", python.display()))?;
    if !status.success() {
        bail!(
            "{} failed to generate TPC-DS data (see above)",
            python.display()
        );
    }
    println!(
        "generated TPC-DS at scale factor {} in {:.1} s",
        args.sf,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The tables generated: each `<table>.parquet` in `parquet`.
fn tables_in(parquet: &Path) -> anyhow::Result<Vec<String>> {
    let mut tables: Vec<String> = std::fs::read_dir(parquet)
        .with_context(|| format!("read {}", parquet.display()))?
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".parquet").map(str::to_string)
        })
        .collect();
    tables.sort();
    if tables.len() != 24 {
        bail!(
            "{} holds {} tables where TPC-DS has 24: delete the directory to generate it again",
            parquet.display(),
            tables.len()
        );
    }
    Ok(tables)
}

/// The catalog in `dir` with its `tpcds` warehouse, and a root caller.
async fn iceberg_side(dir: &Path, args: &TpcdsBenchArgs) -> anyhow::Result<(SqlEngine, Caller)> {
    let url = format!("sqlite:{}", dir.join("catalog.db").display());
    let store = Arc::new(SqlStore::connect(&url, StoreOptions::default()).await?);
    let catalog = Arc::new(CatalogService::new(store, CatalogConfig::default()));
    let caller = Caller::system();
    if catalog.warehouse("tpcds").await.is_err() {
        let profile = StorageProfile::Local {
            path: dir.join("warehouse").to_string_lossy().into_owned(),
        };
        catalog
            .create_warehouse(&caller, "tpcds", profile, Default::default())
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

/// Writes every table's Parquet file into an Iceberg table with Floe's writer.
async fn load(
    engine: &SqlEngine,
    caller: &Caller,
    namespace: &str,
    parquet: &Path,
    tables: &[String],
    properties: &std::collections::HashMap<String, String>,
) -> anyhow::Result<()> {
    let catalog = engine.catalog();
    let ns = NamespaceIdent::new(namespace.into());
    if catalog.load_namespace(caller, "tpcds", &ns).await.is_err() {
        catalog
            .create_namespace(caller, "tpcds", &ns, Default::default())
            .await?;
    }
    // One partition, so that each table's rows are written in the order of its file, as a
    // user copying a table would (two partitions interleave their batches, and the row groups
    // of the copy would each span most of the dates that queries' filters prune by).
    let reader = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
    for table in tables {
        let started = Instant::now();
        let frame = reader
            .read_parquet(
                parquet
                    .join(format!("{table}.parquet"))
                    .to_string_lossy()
                    .as_ref(),
                ParquetReadOptions::default(),
            )
            .await?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let iceberg_schema = floe_sql::write::iceberg_schema(&schema)?;
        let access = engine.access(caller, "tpcds").await?;
        let created = catalog
            .create_table(
                caller,
                "tpcds",
                &ns,
                CreateTable {
                    name: table.clone(),
                    location: None,
                    schema: iceberg_schema,
                    partition_spec: None,
                    write_order: None,
                    stage_create: false,
                    properties: properties.clone(),
                },
            )
            .await?;
        let iceberg_table = floe_sql::write::table_of(&access, created)?;
        let stream = frame.execute_stream().await?;
        let rows = floe_sql::write::IcebergSink::new(access, iceberg_table, schema)
            .write_all(stream, &Arc::new(TaskContext::default()))
            .await?;
        println!(
            "loaded {table}: {rows} rows in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
