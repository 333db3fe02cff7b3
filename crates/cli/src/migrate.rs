//! `floe migrate …`: moves tables onto a running Floe server as a plan file says; see
//! `docs/migration.md` and the `floe-migrate` crate.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};
use floe_migrate::{Floe, Migration, Outcome, Plan};

use crate::client::ServerArgs;

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The plan file (TOML, or YAML when it ends in .yaml/.yml).
    #[arg(long)]
    plan: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Subcommand, Debug)]
pub enum MigrateCommand {
    /// Dry run: what `run` would do to each table (nothing changes).
    Plan {
        #[arg(long)]
        wave: Option<usize>,
        #[command(flatten)]
        args: PlanArgs,
    },
    /// Migrate the tables of one wave (resumable: run it again after a crash or kill).
    Run {
        #[arg(long)]
        wave: usize,
        #[command(flatten)]
        args: PlanArgs,
    },
    /// Each table's step, from the records Floe keeps.
    Status {
        #[command(flatten)]
        args: PlanArgs,
    },
    /// Verify migrated tables against the source; the report as text and JSON.
    Verify {
        #[arg(long)]
        wave: Option<usize>,
        /// Also read every row through Floe (row counts and a checksum per column).
        #[arg(long)]
        deep: bool,
        /// Write the report to FILE.txt and FILE.json as well.
        #[arg(long)]
        report: Option<PathBuf>,
        #[command(flatten)]
        args: PlanArgs,
    },
    /// Take the source's new snapshots or files for tables marked `sync`.
    Sync {
        #[arg(long)]
        wave: Option<usize>,
        /// Keep syncing every SECONDS until interrupted.
        #[arg(long)]
        every: Option<u64>,
        #[command(flatten)]
        args: PlanArgs,
    },
    /// Cut a wave's tables over: a last sync, then the source points its readers at Floe.
    Cutover {
        #[arg(long)]
        wave: usize,
        #[command(flatten)]
        args: PlanArgs,
    },
    /// Return Floe and the source to their state before a wave.
    Rollback {
        #[arg(long)]
        wave: usize,
        #[command(flatten)]
        args: PlanArgs,
    },
}

async fn open(args: &PlanArgs) -> anyhow::Result<Migration> {
    let plan = Plan::load(&args.plan)?;
    let client = args.server.connect().await?;
    let source = floe_migrate::source::open(&plan.source).await?;
    Ok(Migration {
        floe: Floe {
            http: client.http,
            base: client.base,
            token: client.token,
            warehouse: plan.target.warehouse.clone(),
        },
        source,
        progress: !args.json && std::io::stderr().is_terminal(),
        plan,
    })
}

fn print_outcomes(outcomes: &[Outcome], json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(outcomes)?);
        return Ok(());
    }
    for o in outcomes {
        println!(
            "wave {:<3} {:<12} {} -> {}  {}",
            o.wave, o.step, o.source, o.target, o.detail
        );
    }
    Ok(())
}

fn failures(outcomes: &[Outcome]) -> anyhow::Result<()> {
    let failed = outcomes.iter().filter(|o| o.step == "failed").count();
    if failed > 0 {
        bail!("{failed} of {} tables failed", outcomes.len());
    }
    Ok(())
}

pub async fn run(command: MigrateCommand) -> anyhow::Result<()> {
    match command {
        MigrateCommand::Plan { wave, args } => {
            let migration = open(&args).await?;
            print_outcomes(&migration.plan_changes(wave).await?, args.json)
        }
        MigrateCommand::Run { wave, args } => {
            let migration = open(&args).await?;
            let outcomes = migration.run(wave).await?;
            print_outcomes(&outcomes, args.json)?;
            failures(&outcomes)
        }
        MigrateCommand::Status { args } => {
            let migration = open(&args).await?;
            let records = migration.records().await?;
            if args.json {
                let all: Vec<_> = records
                    .iter()
                    .map(|(source, (wave, state))| {
                        serde_json::json!({"source": source, "wave": wave, "state": state})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&all)?);
                return Ok(());
            }
            for (source, (wave, state)) in records {
                let last = state["history"]
                    .as_array()
                    .and_then(|h| h.last())
                    .map(|h| h["detail"].as_str().unwrap_or("").to_string())
                    .unwrap_or_default();
                println!(
                    "wave {wave:<3} {:<12} {source}  {last}",
                    state["step"].as_str().unwrap_or("?")
                );
            }
            Ok(())
        }
        MigrateCommand::Verify {
            wave,
            deep,
            report,
            args,
        } => {
            let migration = open(&args).await?;
            let verified = migration.verify(wave, deep).await?;
            let text = floe_migrate::verify::text(&verified);
            let json = serde_json::to_string_pretty(&verified)?;
            if let Some(path) = report {
                std::fs::write(path.with_extension("txt"), &text)?;
                std::fs::write(path.with_extension("json"), &json)?;
            }
            if args.json {
                println!("{json}");
            } else {
                print!("{text}");
            }
            if !verified.passed {
                bail!("verification failed");
            }
            Ok(())
        }
        MigrateCommand::Sync { wave, every, args } => {
            let migration = open(&args).await?;
            loop {
                let outcomes = migration.sync(wave).await?;
                print_outcomes(&outcomes, args.json)?;
                match every {
                    Some(seconds) => {
                        tokio::time::sleep(std::time::Duration::from_secs(seconds.max(1))).await
                    }
                    None => return failures(&outcomes),
                }
            }
        }
        MigrateCommand::Cutover { wave, args } => {
            let migration = open(&args).await?;
            let outcomes = migration.cut_over(wave).await?;
            print_outcomes(&outcomes, args.json)?;
            failures(&outcomes)
        }
        MigrateCommand::Rollback { wave, args } => {
            let migration = open(&args).await?;
            let outcomes = migration.rollback(wave).await?;
            print_outcomes(&outcomes, args.json)?;
            failures(&outcomes)
        }
    }
}
