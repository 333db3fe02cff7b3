//! DataFusion's own sqllogictest files (a peer's test suite, fetched by
//! `scripts/setup-datafusion-slt.sh`) through Floe's engine with its rewrites on, over Iceberg
//! tables: no query may answer as DataFusion expects only with the rewrites off.
//!
//! CI runs the files at the top of DataFusion's `test_files` (joins, aggregates, subqueries,
//! windows, set operations, …; about two minutes in a debug build) except the two slowest;
//! `floe bench datafusion-slt` runs all of them.

use std::path::PathBuf;
use std::process::Command;

/// Where the setup script put the files, if it ran.
fn files() -> Option<PathBuf> {
    let dir = match std::env::var_os("FLOE_DATAFUSION_SLT") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?)
            .join(".cache/floe-datafusion-slt/54.1.0/test_files"),
    };
    dir.is_dir().then_some(dir)
}

fn bench(dir: &PathBuf, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["bench", "datafusion-slt", "--files"])
        .arg(dir)
        .args(args)
        .env("FLOE_LOG", "off")
        .output()
        .expect("run floe bench datafusion-slt");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (out.status.success(), format!("{stdout}\n{stderr}"))
}

/// How many records passed, from the summary line.
fn passed(output: &str) -> u64 {
    output
        .lines()
        .find_map(|l| l.strip_prefix("records: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn datafusions_own_files_answer_alike_with_floes_rewrites_on() {
    let Some(dir) = files() else {
        assert!(
            std::env::var("CI").is_err(),
            "CI runs scripts/setup-datafusion-slt.sh, which fetches DataFusion's files"
        );
        eprintln!("DataFusion's sqllogictest files are not fetched; skipping");
        return;
    };
    // Files in subdirectories (arrays, Spark's functions, dates and strings) and the two
    // slowest are left to the benchmark.
    let (ok, output) = bench(&dir, &["--skip", "/,imdb.slt,nested_loop_join_spill.slt"]);
    assert!(ok, "{output}");
    assert!(output.contains("rewrite failures: 0"), "{output}");
    // 6,400 of the records at the top pass today; far fewer means the files did not run.
    assert!(passed(&output) > 5_000, "{output}");
}

/// The check can fail: with a rewrite that drops a filter, queries answer as DataFusion
/// expects only with the rewrites off.
#[test]
fn a_rewrite_broken_on_purpose_fails_datafusions_files() {
    let Some(dir) = files() else {
        eprintln!("DataFusion's sqllogictest files are not fetched; skipping");
        return;
    };
    let (ok, output) = bench(&dir, &["--only", "select.slt", "--break-a-rewrite"]);
    assert!(!ok, "{output}");
    assert!(output.contains("REWRITE FAILURE"), "{output}");
}
