//! `floe`: the one binary. Parses flags, sets up tracing and dispatches to a subcommand:
//!
//! - `serve` ([`serve`]): the server — catalog, management API, SQL doors, ingestion,
//!   pipelines and maintenance jobs on one node; `worker` ([`worker`]): a node that runs
//!   distributed query stages;
//! - clients of a running server: `sql`, `warehouse`, `admin`, `audit`, `tenant`,
//!   `pipeline`, `ingest`, `table`, `maintenance` (over [`client`]);
//! - `migrate` ([`migrate`]): tables moved onto Floe from other catalogs;
//! - `bench` ([`bench`]): the benchmarks that measure Floe against its peers, side by side
//!   (TPC-H, TPC-DS, ingestion, upserts, the catalog), and the randomized differential fuzzer.

mod admin;
mod audit;
mod bench;
mod change_events;
mod client;
mod ingest;
mod maintenance;
mod migrate;
mod pipeline;
mod serve;
mod sql;
mod table;
mod tenant;
mod warehouse;
mod worker;

use clap::{Parser, Subcommand};

/// mimalloc rather than the system allocator: query execution allocates and frees large
/// Arrow buffers at a high rate, and glibc's malloc returns those to the kernel and faults
/// them back in (zeroed) on every batch.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (position 15 of its `mi_option_e`, in v2 and v3).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps memory freed by one batch or query for the next ones 10 s (mimalloc: 10 ms) before
/// handing it back to the kernel: scans read and decode column chunks of several MiB into
/// fresh buffers, and each page handed back is faulted in and zeroed again by the next read
/// (a fifth of a `lineitem` scan's CPU in profiles; a 1 s delay still left most of those
/// faults). An idle process still shrinks.
/// `MIMALLOC_PURGE_DELAY` in the environment, read by mimalloc itself, takes precedence.
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: `mi_option_set` only stores an integer in mimalloc's option table; the option
    // index is a constant of the pinned mimalloc version and the call has no other effect.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10_000);
    }
}

#[derive(Parser)]
#[command(name = "floe", version, about = "An open lakehouse in one binary")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Floe server.
    Serve(Box<serve::ServeArgs>),
    /// Manage warehouses of a running server.
    #[command(subcommand)]
    Warehouse(warehouse::WarehouseCommand),
    /// Administer principals and signing keys of a running server.
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Replay a table's write-ahead log entries on a running server.
    #[command(subcommand)]
    Ingest(ingest::IngestCommand),
    /// Check a table's integrity and repair what is safe to, on a running server.
    #[command(subcommand)]
    Table(table::TableCommand),
    /// Set and show tenants' (warehouses') limits on a running server.
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    /// Verify and query the audit trail.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Run SQL over the lakehouse: against a running server, or embedded on a data directory.
    Sql(sql::SqlArgs),
    /// Maintain tables of a running server.
    #[command(subcommand)]
    Maintenance(maintenance::MaintenanceCommand),
    /// Migrate tables onto a running server from Hive Metastore and other catalogs.
    #[command(subcommand)]
    Migrate(migrate::MigrateCommand),
    /// Manage stream pipelines of a running server.
    #[command(subcommand)]
    Pipeline(pipeline::PipelineCommand),
    /// Run a Kafka-protocol mock broker (librdkafka's) for trying pipelines out.
    KafkaMock(pipeline::KafkaMockArgs),
    /// Run the worker service of distributed queries (`floe worker list`: the workers a server
    /// knows).
    Worker(worker::WorkerArgs),
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
    tune_allocator();
    let cli = Cli::parse();
    init_tracing();
    // Process-wide, and only the first call counts: before anything reads Avro (manifests,
    // Kafka records).
    floe_stream::bound_avro_allocations();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve::run(*args).await,
            Command::Warehouse(command) => warehouse::run(command).await,
            Command::Admin(command) => admin::run(command).await,
            Command::Tenant(command) => tenant::run(command).await,
            Command::Table(command) => table::run(command).await,
            Command::Ingest(command) => ingest::run(command).await,
            Command::Audit(command) => audit::run(command).await,
            Command::Bench(command) => bench::run(command).await,
            Command::Worker(args) => worker::run(args).await,
            Command::Sql(args) => sql::run(args).await,
            Command::Maintenance(command) => maintenance::run(command).await,
            Command::Migrate(command) => migrate::run(command).await,
            Command::Pipeline(command) => pipeline::run(command).await,
            Command::KafkaMock(args) => pipeline::kafka_mock(args).await,
        }
    })
}
