//! `floe bench …`: benchmark commands. Each prints ratios or absolute figures measured in
//! one run; none of them is a test.

mod catalog;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Load-test a running server's Iceberg REST catalog.
    Catalog(catalog::CatalogBenchArgs),
}

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Catalog(args) => catalog::run(args).await,
    }
}
