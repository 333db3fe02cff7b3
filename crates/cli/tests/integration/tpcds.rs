//! TPC-DS's 99 queries (scale factor 0.1, DuckDB's `tpcds` extension) answered by Floe over
//! Iceberg tables exactly as DuckDB answers them on the same Parquet files.

use std::process::Command;

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
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args([
            "bench",
            "tpcds",
            "--sf",
            "0.1",
            "--iterations",
            "0",
            "--dir",
        ])
        .arg(dir.path())
        .env("FLOE_LOG", "warn")
        .output()
        .expect("run floe bench tpcds");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("99 of 99 answers equal DuckDB's, value by value; 0 differ"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("peer: DuckDB "), "{stdout}");
}
