//! `floe bench …`: benchmark commands. Each prints ratios or absolute figures measured in
//! one run; none of them is a test.

mod catalog;
mod compaction;
mod history;
mod ingest;
mod kafka;
mod process;
mod tpch;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Load-test a running server's Iceberg REST catalog.
    Catalog(catalog::CatalogBenchArgs),
    /// TPC-H over Iceberg tables, side by side with DataFusion on Parquet and DuckDB.
    Tpch(tpch::TpchBenchArgs),
    /// HTTP ingestion into a running server (or with `--kafka`, Kafka ingestion in this
    /// process): throughput, freshness, files per commit.
    Ingest(ingest::IngestBenchArgs),
    /// Compaction of a table of many small files: throughput, memory, queries before and
    /// after against the same rows written optimally.
    Compaction(compaction::CompactionBenchArgs),
    /// Statement latency as a table's history grows (10, 100, 1,000 commits), with and
    /// without the per-manifest cache.
    History(history::HistoryBenchArgs),
}

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Catalog(args) => catalog::run(args).await,
        BenchCommand::Tpch(args) => tpch::run(args).await,
        BenchCommand::Ingest(args) => ingest::run(args).await,
        BenchCommand::Compaction(args) => compaction::run(args).await,
        BenchCommand::History(args) => history::run(args).await,
    }
}
