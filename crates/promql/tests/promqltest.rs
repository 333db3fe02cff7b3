//! Prometheus's own PromQL test scripts, evaluated by Floe's engine in memory.
//!
//! The scripts come from the Prometheus Go module (`scripts/setup-promql-tests.sh` fetches it
//! and prints the directory; `FLOE_PROMQL_TESTDATA` names it). Each `eval` passes when the
//! answer matches the script's (values within Prometheus's relative 1e-6), a failure expected
//! fails, and warnings and infos are present exactly when the script says so. The test fails
//! when the pass rate drops below the floor, and prints every failing statement.

use floe_promql::testscript::{self, Command, MemStorage};
use floe_promql::{Engine, QueryRange};

/// How many of the 1,320 eval statements of Prometheus 3.3's scripts must pass: all but
/// `count_values` with a label name that is not valid UTF-8 (a Rust string cannot hold it;
/// docs/promql.md lists it).
const MIN_PASSED: usize = 1319;

#[tokio::test(flavor = "current_thread")]
async fn prometheus_promql_test_scripts() {
    let Ok(dir) = std::env::var("FLOE_PROMQL_TESTDATA") else {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v.is_empty()),
            "FLOE_PROMQL_TESTDATA is not set (scripts/test sets it)"
        );
        eprintln!("FLOE_PROMQL_TESTDATA is not set: skipped (scripts/test sets it)");
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("test data directory")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "test"));
    files.sort();
    assert!(!files.is_empty(), "no .test files in {dir}");
    let engine = Engine::default();
    let (mut passed, mut total) = (0usize, 0usize);
    let verbose = std::env::var("FLOE_PROMQL_VERBOSE").is_ok();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(file).unwrap();
        let cmds = match testscript::parse(&text) {
            Ok(c) => c,
            Err(e) => {
                let evals = text
                    .lines()
                    .filter(|l| l.trim_start().starts_with("eval"))
                    .count();
                eprintln!("{name}: does not parse ({e}); its {evals} evals count as failed");
                total += evals;
                continue;
            }
        };
        let mut storage = MemStorage::default();
        let (mut file_passed, mut file_total) = (0, 0);
        for cmd in cmds {
            match cmd {
                Command::Clear => storage = MemStorage::default(),
                Command::Load {
                    interval_ms,
                    series,
                    with_nhcb,
                } => testscript::load(&mut storage, interval_ms, &series, with_nhcb),
                Command::Eval(ev) => {
                    file_total += 1;
                    let range = QueryRange {
                        start: ev.start,
                        end: ev.end,
                        step: ev.step,
                    };
                    let outcome = engine.query(&storage, &ev.expr, range).await;
                    let verdict = testscript::judge(
                        &ev,
                        match &outcome {
                            Ok(answer) => Ok((&answer.value, answer.warnings.as_slice())),
                            Err(e) => Err(e.to_string()),
                        },
                    );
                    match verdict {
                        None => file_passed += 1,
                        Some(why) => {
                            if verbose {
                                eprintln!("  {name}:{} {} — {why}", ev.line, ev.expr);
                            }
                        }
                    }
                }
            }
        }
        eprintln!("{name}: {file_passed}/{file_total}");
        passed += file_passed;
        total += file_total;
    }
    let rate = passed as f64 / total as f64;
    eprintln!(
        "PromQL test scripts: {passed}/{total} eval statements pass ({:.1} %)",
        rate * 100.0
    );
    assert!(
        passed >= MIN_PASSED,
        "{passed} eval statements pass, fewer than {MIN_PASSED} (FLOE_PROMQL_VERBOSE=1 lists the failures)"
    );
}
