//! DuckDB beside Floe in benchmarks.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// DuckDB over the same Parquet files, in a Python process with the `duckdb` module that runs
/// one query at a time as asked (a line of JSON in, a line out), so its runs can alternate
/// with the other engines'.
pub struct DuckDb {
    child: std::process::Child,
    to: std::process::ChildStdin,
    from: std::io::BufReader<std::process::ChildStdout>,
    version: String,
}

/// The Python DuckDB runs in when none is named: `FLOE_DUCKDB_PYTHON`, the benchmark peer's
/// venv (`scripts/setup-duckdb.sh`: the newest DuckDB), or the test venv's (DuckDB 1.4.4).
pub(super) fn default_python() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os("FLOE_DUCKDB_PYTHON") {
        return Some(PathBuf::from(named));
    }
    let home = PathBuf::from(std::env::var_os("HOME")?);
    [
        ".cache/floe-duckdb/bin/python",
        ".cache/floe-venv/bin/python",
    ]
    .into_iter()
    .map(|p| home.join(p))
    .find(|p| p.exists())
}

/// A Python process running a DuckDB driver script, spoken to in JSON lines on its stdin and
/// stdout, and the DuckDB version its first line names.
pub(super) struct Started {
    pub child: std::process::Child,
    pub to: std::process::ChildStdin,
    pub from: std::io::BufReader<std::process::ChildStdout>,
    pub version: String,
}

/// Starts `python -c script args…` and reads the `{"version": …}` line the script prints
/// first (both drivers, the benchmarks' and the fuzzer's, begin so).
pub(super) fn started(python: &Path, script: &str, args: &[String]) -> anyhow::Result<Started> {
    let mut child = std::process::Command::new(python)
        .args(["-c", script])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("start {}", python.display()))?;
    let to = child.stdin.take().expect("piped stdin");
    let mut from = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut from, &mut line)?;
    let version = serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|v| v["version"].as_str().map(str::to_string))
        .with_context(|| format!("{} did not start DuckDB", python.display()))?;
    Ok(Started {
        child,
        to,
        from,
        version,
    })
}

impl DuckDb {
    /// Started when a Python with `duckdb` is found (`python`, or the test venv's), after
    /// running `setup` (views over the Parquet files); answers are fetched as Python rows, or
    /// as an Arrow table with `arrow_results`.
    pub fn start(
        python: Option<PathBuf>,
        setup: &[String],
        answers: &Path,
        arrow_results: bool,
    ) -> anyhow::Result<Option<Self>> {
        let python = python.or_else(default_python);
        let Some(python) = python else {
            return Ok(None);
        };
        let script = r#"
import json, re, sys, time, duckdb
# The high-water mark survives exec; restart it so it measures this process alone.
open("/proc/self/clear_refs", "w").write("5")
setup, answers = json.loads(sys.argv[1]), sys.argv[2]
# Rows as Python tuples, or (for time zones without pytz) as one Arrow table (DuckDB 2.0
# calls it to_arrow_table, 1.x fetch_arrow_table).
def arrow(result):
    return result.to_arrow_table() if hasattr(result, "to_arrow_table") else result.fetch_arrow_table()
if sys.argv[3] == "arrow":
    fetch = lambda result: arrow(result).num_rows
else:
    fetch = lambda result: len(result.fetchall())
print(json.dumps({"version": duckdb.__version__}), flush=True)
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
for statement in setup:
    con.execute(statement)
for line in sys.stdin:
    ask = json.loads(line)
    sql = ask["sql"]
    if "answer" in ask:
        rows = fetch(con.execute(sql))
        body = sql.strip().rstrip(";")
        con.execute(f"COPY ({body}) TO '{answers}/q{ask['answer']}.parquet' (FORMAT parquet)")
        reply = {"rows": rows}
    else:
        start = time.perf_counter()
        fetch(con.execute(sql))
        reply = {"ms": (time.perf_counter() - start) * 1000}
    print(json.dumps(reply), flush=True)
peak = int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024
print(json.dumps({"peak_mib": peak}), flush=True)
"#;
        let mode = if arrow_results { "arrow" } else { "rows" };
        let args = [
            serde_json::to_string(setup)?,
            answers.display().to_string(),
            mode.to_string(),
        ];
        let Started {
            child,
            to,
            from,
            version,
        } = started(&python, script, &args)?;
        Ok(Some(DuckDb {
            child,
            to,
            from,
            version,
        }))
    }

    /// `DuckDB <version>`.
    pub fn version(&self) -> String {
        format!("DuckDB {}", self.version)
    }

    pub fn ask(&mut self, ask: serde_json::Value) -> anyhow::Result<serde_json::Value> {
        use std::io::{BufRead, Write};
        writeln!(self.to, "{ask}").context("DuckDB side stopped (see its error above)")?;
        self.to.flush()?;
        let mut line = String::new();
        if self.from.read_line(&mut line)? == 0 {
            bail!("DuckDB side stopped (see its error above)");
        }
        Ok(serde_json::from_str(&line)?)
    }

    /// Runs query `q` once, writes its answer to `answers/q<q>.parquet`; its row count.
    pub fn warm_up(&mut self, q: usize, sql: &str) -> anyhow::Result<usize> {
        let reply = self.ask(serde_json::json!({ "sql": sql, "answer": q }))?;
        reply["rows"]
            .as_u64()
            .map(|rows| rows as usize)
            .context("DuckDB side gave no row count")
    }

    /// One timed run, in ms.
    pub fn time(&mut self, sql: &str) -> anyhow::Result<f64> {
        let reply = self.ask(serde_json::json!({ "sql": sql }))?;
        reply["ms"].as_f64().context("DuckDB side gave no time")
    }

    /// Ends the process; its peak resident memory (MiB).
    pub fn finish(self) -> anyhow::Result<Option<f64>> {
        use std::io::BufRead;
        let DuckDb {
            mut child,
            to,
            mut from,
            ..
        } = self;
        drop(to);
        let mut line = String::new();
        from.read_line(&mut line)?;
        if !child.wait()?.success() {
            bail!("DuckDB side failed (see its error above)");
        }
        let reply: serde_json::Value = serde_json::from_str(&line)?;
        Ok(reply["peak_mib"].as_f64())
    }
}
