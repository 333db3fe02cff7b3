//! DuckDB as the fuzzer's reference: a Python process with the `duckdb` module over the
//! tables' Parquet files, one statement per line of JSON. Unlike the benchmarks' driver
//! ([`crate::bench::duckdb`]) it survives statements DuckDB refuses (the reply carries the
//! error), and it hands each answer back whole, as a Parquet file the fuzzer reads.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use datafusion::arrow::array::RecordBatch;

const SCRIPT: &str = r#"
import json, sys, threading, duckdb
setup = json.loads(sys.argv[1])
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
for statement in setup:
    con.execute(statement)
print(json.dumps({"version": duckdb.__version__}), flush=True)
for line in sys.stdin:
    ask = json.loads(line)
    # A statement that runs away is interrupted rather than stalling the fuzzer.
    timer = threading.Timer(60, con.interrupt)
    timer.start()
    try:
        con.execute(f"COPY ({ask['sql']}) TO '{ask['out']}' (FORMAT parquet)")
        reply = {"ok": True}
    except Exception as e:
        reply = {"error": f"{type(e).__name__}: {e}"}
    finally:
        timer.cancel()
    print(json.dumps(reply), flush=True)
"#;

pub(super) struct Duck {
    child: std::process::Child,
    to: Option<std::process::ChildStdin>,
    from: std::io::BufReader<std::process::ChildStdout>,
    version: String,
    /// Where answers are written.
    dir: PathBuf,
    /// The answer file of the statement sent and not yet received.
    pending: Option<PathBuf>,
    asked: u64,
}

impl Duck {
    /// DuckDB with a view per table over `parquet/<table>.parquet`; `None` when no Python is
    /// named or found.
    pub(super) fn start(
        python: Option<PathBuf>,
        tables: &[&str],
        parquet: &Path,
        dir: &Path,
    ) -> anyhow::Result<Option<Self>> {
        let Some(python) = python.or_else(crate::bench::duckdb::default_python) else {
            return Ok(None);
        };
        let views: Vec<String> = tables
            .iter()
            .map(|t| {
                format!(
                    "CREATE VIEW {t} AS SELECT * FROM read_parquet('{}')",
                    parquet.join(format!("{t}.parquet")).display()
                )
            })
            .collect();
        std::fs::create_dir_all(dir)?;
        let crate::bench::duckdb::Started {
            child,
            to,
            from,
            version,
        } = crate::bench::duckdb::started(&python, SCRIPT, &[serde_json::to_string(&views)?])?;
        Ok(Some(Duck {
            child,
            to: Some(to),
            from,
            version,
            dir: dir.to_path_buf(),
            pending: None,
            asked: 0,
        }))
    }

    /// `DuckDB <version>`.
    pub(super) fn version(&self) -> String {
        format!("DuckDB {}", self.version)
    }

    /// Sends `sql`; DuckDB runs it while the caller does other work.
    pub(super) fn send(&mut self, sql: &str) -> anyhow::Result<()> {
        if self.pending.is_some() {
            bail!("a DuckDB answer is still pending");
        }
        self.asked += 1;
        let out = self.dir.join(format!("answer-{}.parquet", self.asked));
        let ask = serde_json::json!({ "sql": sql, "out": out.to_string_lossy() });
        let to = self.to.as_mut().context("DuckDB side closed")?;
        writeln!(to, "{ask}").context("DuckDB side stopped (see its error above)")?;
        to.flush()?;
        self.pending = Some(out);
        Ok(())
    }

    /// The answer to the statement sent: its rows, or DuckDB's error.
    pub(super) fn receive(&mut self) -> anyhow::Result<Result<Vec<RecordBatch>, String>> {
        let out = self.pending.take().context("no DuckDB statement pending")?;
        let mut line = String::new();
        if self.from.read_line(&mut line)? == 0 {
            bail!("DuckDB side stopped (see its error above)");
        }
        let reply: serde_json::Value = serde_json::from_str(&line)?;
        if let Some(error) = reply["error"].as_str() {
            return Ok(Err(error.to_string()));
        }
        let file = std::fs::File::open(&out).with_context(|| format!("open {}", out.display()))?;
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?
            .build()?;
        let batches = reader.collect::<Result<Vec<_>, _>>()?;
        std::fs::remove_file(&out)?;
        Ok(Ok(batches))
    }

    /// Runs `sql` and waits for its answer.
    pub(super) fn run(&mut self, sql: &str) -> anyhow::Result<Result<Vec<RecordBatch>, String>> {
        self.send(sql)?;
        self.receive()
    }
}

impl Drop for Duck {
    fn drop(&mut self) {
        // Closing its input ends the Python process's loop.
        drop(self.to.take());
        let _ = self.child.wait();
    }
}
