//! `floe`: the one binary. Parses flags, sets up tracing and dispatches.

mod admin;
mod audit;
mod bench;
mod client;
mod maintenance;
mod pipeline;
mod serve;
mod sql;
mod warehouse;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "floe", version, about = "An open lakehouse in one binary")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Floe server.
    Serve(serve::ServeArgs),
    /// Manage warehouses of a running server.
    #[command(subcommand)]
    Warehouse(warehouse::WarehouseCommand),
    /// Administer principals and signing keys of a running server.
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Verify and query the audit trail.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Run SQL over the lakehouse: against a running server, or embedded on a data directory.
    Sql(sql::SqlArgs),
    /// Maintain tables of a running server.
    #[command(subcommand)]
    Maintenance(maintenance::MaintenanceCommand),
    /// Manage stream pipelines of a running server.
    #[command(subcommand)]
    Pipeline(pipeline::PipelineCommand),
    /// Run a Kafka-protocol mock broker (librdkafka's) for trying pipelines out.
    KafkaMock(pipeline::KafkaMockArgs),
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLOE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_tracing();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Warehouse(command) => warehouse::run(command).await,
            Command::Admin(command) => admin::run(command).await,
            Command::Audit(command) => audit::run(command).await,
            Command::Bench(command) => bench::run(command).await,
            Command::Sql(args) => sql::run(args).await,
            Command::Maintenance(command) => maintenance::run(command).await,
            Command::Pipeline(command) => pipeline::run(command).await,
            Command::KafkaMock(args) => pipeline::kafka_mock(args).await,
        }
    })
}
