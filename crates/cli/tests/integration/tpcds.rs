//! TPC-DS's 99 queries (scale factor 0.1, DuckDB's `tpcds` extension) and TPC-H's 22 answered
//! by Floe over Iceberg tables exactly as DuckDB answers them on the same Parquet files, and
//! exactly as Floe answers them with every rewrite off; TPC-DS's also in stages over three
//! workers exactly as Floe alone answers them.

use std::process::Command;

/// `floe bench` with `args` and `--dir dir`, which must succeed: its standard output, and the
/// text to show when an assertion on it fails (both outputs).
fn bench(args: &[&str], dir: &std::path::Path) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .arg("bench")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .env("FLOE_LOG", "warn")
        .output()
        .expect("run floe bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let shown = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{shown}");
    (stdout, shown)
}

#[test]
fn all_99_tpcds_answers_equal_duckdbs() {
    let home = std::env::var("HOME").unwrap_or_default();
    let venv = std::path::Path::new(&home).join(".cache/floe-venv/bin/python");
    if std::env::var_os("FLOE_TPCDS_PYTHON").is_none() && !venv.exists() {
        assert!(
            std::env::var("CI").is_err(),
            "CI runs scripts/setup-python.sh, which installs DuckDB's tpcds extension"
        );
        eprintln!("no Python with DuckDB's tpcds extension; skipping");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tpcds = ["tpcds", "--sf", "0.1", "--iterations", "0"];
    let (stdout, shown) = bench(&[&tpcds[..], &["--compare-rewrites"]].concat(), dir.path());
    assert!(
        stdout.contains("99 of 99 answers equal DuckDB's, value by value; 0 differ"),
        "{shown}"
    );
    assert!(
        stdout
            .contains("99 of 99 answers with every rewrite on equal those with every rewrite off"),
        "{shown}"
    );
    assert!(stdout.contains("peer: DuckDB "), "{stdout}");

    // The same data in stages over three workers: every answer identical to Floe alone's (a
    // union's children isolated per task once counted TPC-DS Q5's catalog returns twice).
    let (stdout, shown) = bench(&[&tpcds[..], &["--workers", "3"]].concat(), dir.path());
    let stages = stdout
        .split("99 of 99 distributed answers identical to Floe alone's, row by row; ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(stages >= 90, "only {stages} ran in stages: {stdout}");
}

#[test]
fn all_22_tpch_answers_equal_duckdbs_and_hold_without_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, shown) = bench(
        &[
            "tpch",
            "--sf",
            "0.1",
            "--iterations",
            "0",
            "--compare-rewrites",
        ],
        dir.path(),
    );
    assert!(
        stdout
            .contains("22 of 22 answers with every rewrite on equal those with every rewrite off"),
        "{shown}"
    );
    if stdout.contains("peer: DuckDB ") {
        assert!(
            stdout.contains("22 of 22 answers equal DuckDB's, value by value; 0 differ"),
            "{shown}"
        );
    } else {
        assert!(std::env::var("CI").is_err(), "CI installs DuckDB: {stdout}");
    }
}
