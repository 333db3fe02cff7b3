//! `floe bench datafusion-slt`: DataFusion's own sqllogictest files — a peer's test suite —
//! through Floe's engine with its rewrites on, over Iceberg tables.
//!
//! Each file runs in a fresh embedded catalog (warehouse and namespace `default`, so the
//! files' bare table names resolve), on two engines sharing it: Floe's rewrites on, and all
//! off. [`file`] says how a record is judged: a query that answers as DataFusion's driver
//! expects only with the rewrites off is a rewrite's wrong answer, and fails the run. The
//! rest that differ (types Iceberg does not have, statements Floe refuses such as `SET` or
//! `CREATE EXTERNAL TABLE`, plans in `EXPLAIN`) are counted apart, with their commonest
//! reasons. The files come from `scripts/setup-datafusion-slt.sh`.

mod cells;
mod file;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use floe_catalog::governance::authz::Caller;
use floe_sql::{EngineConfig, QueryOptions};
use futures::TryStreamExt;

#[derive(Args, Debug)]
pub struct DatafusionSltArgs {
    /// The directory of DataFusion's `.slt` files (default: `FLOE_DATAFUSION_SLT`, else
    /// where `scripts/setup-datafusion-slt.sh` puts them).
    #[arg(long)]
    files: Option<PathBuf>,
    /// Run only the files whose path under `--files` contains one of these.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Leave out the files whose path under `--files` contains one of these.
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
    /// Partitions of Floe's plans (DataFusion's driver runs with 4).
    #[arg(long, default_value_t = 4)]
    partitions: usize,
    /// Longest one file may run (seconds); the records of a file past it are left (a
    /// statement already running may take its statement timeout, 60 s, to end).
    #[arg(long, default_value_t = 300)]
    file_seconds: u64,
    /// How many of the commonest reasons for records apart to list.
    #[arg(long, default_value_t = 12)]
    reasons: usize,
    /// Print every record apart (but `EXPLAIN`s) with its error or diff.
    #[arg(long)]
    show_differences: bool,
    /// Add a rewrite that is wrong on purpose (it drops a filter) to Floe's rewrites, to
    /// show that a wrong rewrite is caught.
    #[arg(long, hide = true)]
    break_a_rewrite: bool,
}

/// Where `scripts/setup-datafusion-slt.sh` puts the files.
fn default_files() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("FLOE_DATAFUSION_SLT") {
        return Some(PathBuf::from(dir));
    }
    let home = PathBuf::from(std::env::var_os("HOME")?);
    Some(home.join(".cache/floe-datafusion-slt/54.1.0/test_files"))
}

/// The `.slt` files under `dir` (recursively; `.slt.part` files are only included by others),
/// by their path under `dir`.
fn files(dir: &Path, only: &[String], skip: &[String]) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).with_context(|| format!("reading {}", at.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "slt") {
                let name = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                let chosen = only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
                if chosen && !skip.iter().any(|s| name.contains(s.as_str())) {
                    found.push((name, path));
                }
            }
        }
    }
    found.sort();
    Ok(found)
}

pub async fn run(args: DatafusionSltArgs) -> anyhow::Result<()> {
    let Some(dir) = args.files.clone().or_else(default_files) else {
        bail!("no --files given and no HOME to find them under");
    };
    if !dir.is_dir() {
        bail!(
            "DataFusion's sqllogictest files are not at {} (run scripts/setup-datafusion-slt.sh)",
            dir.display()
        );
    }
    let files = files(&dir, &args.only, &args.skip)?;
    if files.is_empty() {
        bail!("no .slt file under {} matches", dir.display());
    }
    println!(
        "floe bench datafusion-slt: {} file(s) from {}{}",
        files.len(),
        dir.display(),
        if args.break_a_rewrite {
            ", with a rewrite broken on purpose"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let mut total = file::Outcome::default();
    let mut reasons: HashMap<String, u64> = HashMap::new();
    for (name, path) in &files {
        let began = Instant::now();
        let outcome = match one_file(&args, path).await {
            Ok(outcome) => outcome,
            Err(e) => {
                println!("{name}: not run: {e:#}");
                continue;
            }
        };
        println!(
            "{name}: {} pass, {} apart, {} skipped, {} rewrite failure(s) ({:.1} s){}",
            outcome.pass,
            outcome.apart.len(),
            outcome.skipped,
            outcome.failures.len(),
            began.elapsed().as_secs_f64(),
            if outcome.cut_short {
                ", cut short by --file-seconds"
            } else {
                ""
            }
        );
        for failure in &outcome.failures {
            println!("  REWRITE FAILURE {failure}");
        }
        if args.show_differences {
            for difference in &outcome.differences {
                println!("  DIFFERS {difference}");
            }
        }
        total.pass += outcome.pass;
        total.skipped += outcome.skipped;
        for reason in outcome.apart {
            *reasons.entry(reason.clone()).or_default() += 1;
            total.apart.push(reason);
        }
        total.failures.extend(outcome.failures);
    }
    let mut common: Vec<(String, u64)> = reasons.into_iter().collect();
    common.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    println!("commonest reasons for records apart:");
    for (reason, count) in common.iter().take(args.reasons) {
        println!("  {count:6}  {reason}");
    }
    println!(
        "records: {} pass with rewrites on, {} apart (Floe as a whole differs), {} skipped; \
         {} file(s) in {:.0} s",
        total.pass,
        total.apart.len(),
        total.skipped,
        files.len(),
        started.elapsed().as_secs_f64()
    );
    println!("rewrite failures: {}", total.failures.len());
    if !total.failures.is_empty() {
        bail!(
            "{} quer(ies) answer as DataFusion expects only with Floe's rewrites off",
            total.failures.len()
        );
    }
    Ok(())
}

/// One file in a catalog of its own.
async fn one_file(args: &DatafusionSltArgs, path: &Path) -> anyhow::Result<file::Outcome> {
    let records = sqllogictest::parse_file(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    let dir = tempfile::tempdir()?;
    let catalog = super::embedded_catalog(dir.path(), "default").await?;
    let base = EngineConfig {
        target_partitions: args.partitions,
        cpu_threads: 2,
        statement_timeout: Some(Duration::from_secs(60)),
        ..EngineConfig::default()
    };
    let (on, off) = super::rewrites_on_and_off(catalog, base, args.break_a_rewrite)?;
    let created = on
        .query(
            &Caller::system(),
            "CREATE SCHEMA \"default\"",
            &QueryOptions::default(),
        )
        .await?;
    created.stream.try_collect::<Vec<_>>().await?;
    let deadline = Instant::now() + Duration::from_secs(args.file_seconds);
    Ok(file::run(records, on, off, deadline).await)
}
