//! `floe bench …`: benchmark commands. Each prints ratios or absolute figures measured in
//! one run; none of them is a test.

mod catalog;
mod compaction;
mod datafusion_slt;
mod duckdb;
mod fuzz;
mod history;
mod ingest;
mod kafka;
mod logsearch;
mod migrate;
mod otlp;
mod process;
mod promql;
mod promql_tests;
mod rollup;
mod suite;
mod tenants;
mod tpcds;
mod tpch;
mod tpch_cache;
mod tpch_steal;
mod tpch_workers;
mod upsert;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Load-test a running server's Iceberg REST catalog.
    Catalog(catalog::CatalogBenchArgs),
    /// TPC-H over Iceberg tables, side by side with DataFusion on Parquet and DuckDB.
    Tpch(tpch::TpchBenchArgs),
    /// TPC-DS's 99 queries over Iceberg tables, side by side with DataFusion on Parquet and
    /// DuckDB, every answer compared with DuckDB's.
    Tpcds(tpcds::TpcdsBenchArgs),
    /// HTTP ingestion into a running server (or with `--kafka`, Kafka ingestion in this
    /// process): throughput, freshness, files per commit.
    Ingest(ingest::IngestBenchArgs),
    /// An upsert table against an append table over HTTP on a running server: rows/s per
    /// core loading keys and committing batches of 10% updates, the key index built again,
    /// reads after the commits against the table compacted.
    Upsert(upsert::UpsertBenchArgs),
    /// Compaction of a table of many small files: throughput, memory, queries before and
    /// after against the same rows written optimally.
    Compaction(compaction::CompactionBenchArgs),
    /// Statement latency as a table's history grows (10, 100, 1,000 commits), with and
    /// without the per-manifest cache.
    History(history::HistoryBenchArgs),
    /// OpenTelemetry logs over OTLP/HTTP into a running server: records/s per core, bytes on
    /// disk per record, acknowledgement to queryable, queries beside DuckDB.
    Otlp(otlp::OtlpBenchArgs),
    /// PromQL `query_range` latency against Prometheus holding the same remote-written
    /// samples: a query set and a 20-panel dashboard, answers compared.
    Promql(promql::PromqlBenchArgs),
    /// Prometheus's own PromQL test scripts through Floe's HTTP API (remote write in,
    /// `query`/`query_range` out), judged as Prometheus's runner judges them.
    PromqlTests(promql_tests::PromqlTestsArgs),
    /// Log search over a log table: needle and term searches with and without the token
    /// index, beside DuckDB on the same files; time and bytes read per query.
    Logsearch(logsearch::LogsearchBenchArgs),
    /// Noisy-neighbour isolation: tenant B's ingest and query latency alone and beside
    /// tenant A sending at ten times its limit.
    Tenants(tenants::TenantsBenchArgs),
    /// A month of logs with rollups on: the rollup jobs' cost per raw row, and a month-long
    /// dashboard query over the raw table beside the hourly rollup.
    Rollup(rollup::RollupBenchArgs),
    /// `floe migrate` of a generated 1,000-table JDBC catalog onto a running server: dry-run
    /// time, tables per minute, metadata MiB/s, verification time per table.
    Migrate(migrate::MigrateBenchArgs),
    /// Randomized differential testing of Floe's SQL (SQLancer's way): generated statements
    /// over generated tables, judged against DuckDB, against Floe with its rewrites off, and
    /// by ternary logic partitioning and NoREC; each failure shrunk to a small statement.
    Fuzz(fuzz::FuzzBenchArgs),
    /// DataFusion's own sqllogictest files through Floe's engine over Iceberg tables: a query
    /// that answers as DataFusion expects only with Floe's rewrites off is a failure.
    DatafusionSlt(datafusion_slt::DatafusionSltArgs),
}

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Catalog(args) => catalog::run(args).await,
        BenchCommand::Tpch(args) => tpch::run(args).await,
        BenchCommand::Tpcds(args) => tpcds::run(args).await,
        BenchCommand::Ingest(args) => ingest::run(args).await,
        BenchCommand::Upsert(args) => upsert::run(args).await,
        BenchCommand::Compaction(args) => compaction::run(args).await,
        BenchCommand::History(args) => history::run(args).await,
        BenchCommand::Otlp(args) => otlp::run(args).await,
        BenchCommand::Promql(args) => promql::run(args).await,
        BenchCommand::PromqlTests(args) => promql_tests::run(args).await,
        BenchCommand::Logsearch(args) => logsearch::run(args).await,
        BenchCommand::Tenants(args) => tenants::run(args).await,
        BenchCommand::Rollup(args) => rollup::run(args).await,
        BenchCommand::Migrate(args) => migrate::run(args).await,
        BenchCommand::Fuzz(args) => fuzz::run(args).await,
        BenchCommand::DatafusionSlt(args) => datafusion_slt::run(args).await,
    }
}

/// A SQL engine over an embedded SQLite catalog in `dir`, with one warehouse, `bench`, whose
/// tables live in `dir/warehouse`.
async fn embedded_engine(dir: &std::path::Path) -> anyhow::Result<floe_sql::SqlEngine> {
    let catalog = embedded_catalog(dir, "bench").await?;
    Ok(floe_sql::SqlEngine::new(
        catalog,
        floe_sql::EngineConfig::default(),
    )?)
}

/// Two engines over `catalog` with `base`'s settings: Floe's rewrites on (with one wrong on
/// purpose added when `break_a_rewrite`), and every rewrite off — the pair the differential
/// checks (`floe bench fuzz`, `floe bench datafusion-slt`) hold to each other.
fn rewrites_on_and_off(
    catalog: std::sync::Arc<floe_catalog::service::CatalogService>,
    base: floe_sql::EngineConfig,
    break_a_rewrite: bool,
) -> anyhow::Result<(
    std::sync::Arc<floe_sql::SqlEngine>,
    std::sync::Arc<floe_sql::SqlEngine>,
)> {
    use floe_sql::{EngineConfig, Rewrites, SqlEngine};
    use std::sync::Arc;

    let on = SqlEngine::new(
        catalog.clone(),
        EngineConfig {
            rewrites: Rewrites {
                broken_on_purpose: break_a_rewrite,
                ..Rewrites::default()
            },
            ..base.clone()
        },
    )?;
    let off = SqlEngine::new(
        catalog,
        EngineConfig {
            rewrites: Rewrites::none(),
            ..base
        },
    )?;
    Ok((Arc::new(on), Arc::new(off)))
}

/// An embedded SQLite catalog in `dir` (`dir/catalog.db`) with one warehouse, `warehouse`,
/// whose tables live in `dir/warehouse`.
async fn embedded_catalog(
    dir: &std::path::Path,
    warehouse: &str,
) -> anyhow::Result<std::sync::Arc<floe_catalog::service::CatalogService>> {
    use std::sync::Arc;

    use floe_catalog::governance::authz::Caller;
    use floe_catalog::service::{CatalogConfig, CatalogService};
    use floe_store::{SqlStore, StoreOptions};

    let url = format!("sqlite:{}", dir.join("catalog.db").display());
    let store = Arc::new(SqlStore::connect(&url, StoreOptions::default()).await?);
    let catalog = Arc::new(CatalogService::new(store, CatalogConfig::default()));
    catalog
        .create_warehouse(
            &Caller::system(),
            warehouse,
            floe_storage::StorageProfile::Local {
                path: dir.join("warehouse").to_string_lossy().into_owned(),
            },
            Default::default(),
        )
        .await?;
    Ok(catalog)
}
