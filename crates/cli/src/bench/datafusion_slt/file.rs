//! One of DataFusion's sqllogictest files through Floe's engine.
//!
//! Its statements run once, through the engine with Floe's rewrites on (`CREATE TABLE …`
//! makes an Iceberg table in a fresh embedded catalog); each query is answered with the
//! rewrites on and compared with the answer DataFusion's own driver expects. A query that
//! answers otherwise is asked again with every rewrite off: if that answer is DataFusion's,
//! a rewrite changed it — a failure. If not, the difference is Floe's as a whole (an Iceberg
//! type, a statement Floe does not run, an error worded differently) and the record does not
//! count for the rewrites.

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use floe_catalog::governance::authz::Caller;
use floe_sql::{QueryOptions, SqlEngine, SqlError};
use futures::TryStreamExt;
use sqllogictest::{
    AsyncDB, Condition, DBOutput, DefaultColumnType, Normalizer, Record, Runner, TestError,
    TestErrorKind,
};

/// The label DataFusion's driver runs under (`onlyif`/`skipif` conditions name it).
const LABEL: &str = "Datafusion";

/// What became of one file's records.
#[derive(Default)]
pub(super) struct Outcome {
    /// Statements and queries that ran as DataFusion's driver expects, rewrites on.
    pub pass: u64,
    /// Records whose difference is not the rewrites', each with why.
    pub apart: Vec<String>,
    /// Queries that answer as DataFusion expects with the rewrites off and otherwise with
    /// them on: the record and what Floe answered.
    pub failures: Vec<String>,
    /// Records that went otherwise than DataFusion expects, not for the rewrites (but plans
    /// in `EXPLAIN`), each with its error or diff (for `--show-differences`).
    pub differences: Vec<String>,
    /// Records not run: conditions for another engine, shell commands, variables.
    pub skipped: u64,
    /// Whether the file ran past its time and its remaining records were left.
    pub cut_short: bool,
}

/// Floe's engine as a sqllogictest database, writing answers as DataFusion's driver does.
struct Floe {
    engine: Arc<SqlEngine>,
}

#[async_trait::async_trait]
impl AsyncDB for Floe {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        let result = self
            .engine
            .query(&Caller::system(), sql, &QueryOptions::default())
            .await?;
        let width = result.schema.fields().len();
        let batches: Vec<RecordBatch> =
            result.stream.try_collect().await.map_err(SqlError::from)?;
        let rows = super::cells::rows(&batches)
            .map_err(|e| SqlError::from(datafusion::error::DataFusionError::from(e)))?;
        if rows.is_empty() && width == 0 {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; width],
            rows,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "floe"
    }
}

/// DataFusion's driver's comparison: each row's values joined by a space, trailing spaces
/// ignored, `<slt:ignore>` standing for any text.
fn validate(normalizer: Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    let expected: Vec<String> = expected.iter().map(normalizer).collect();
    let actual: Vec<String> = actual
        .iter()
        .map(|row| row.join(" ").trim_end().to_string())
        .collect();
    const IGNORE: &str = "<slt:ignore>";
    if !expected.iter().any(|line| line.contains(IGNORE)) {
        return actual == expected;
    }
    let (expected, actual) = (expected.join("\n"), actual.join("\n"));
    let mut at = 0;
    for (i, fragment) in expected.split(IGNORE).enumerate() {
        if fragment.is_empty() {
            continue;
        }
        match actual[at..].find(fragment) {
            Some(found) if i > 0 || found == 0 => at += found + fragment.len(),
            _ => return false,
        }
    }
    true
}

/// The normalizer's signature is sqllogictest's (`fn(&String) -> String`).
#[expect(clippy::ptr_arg)]
fn trim_end(value: &String) -> String {
    value.trim_end().to_string()
}

fn runner(engine: Arc<SqlEngine>) -> Runner<Floe, impl sqllogictest::MakeConnection<Conn = Floe>> {
    let mut runner = Runner::new(move || {
        let engine = Arc::clone(&engine);
        async move { Ok::<_, SqlError>(Floe { engine }) }
    });
    runner.add_label(LABEL);
    runner.with_normalizer(trim_end);
    runner.with_validator(validate);
    runner
}

/// Whether a record's conditions leave it to another engine.
fn not_ours(conditions: &[Condition]) -> bool {
    conditions.iter().any(|c| match c {
        Condition::OnlyIf { label } => label != LABEL,
        Condition::SkipIf { label } => label == LABEL,
    })
}

/// Whether a statement only reads, so that asking it twice changes nothing.
fn reads(sql: &str) -> bool {
    let head = sql.trim_start().to_ascii_lowercase();
    [
        "select", "with", "values", "(", "explain", "describe", "show",
    ]
    .iter()
    .any(|word| head.starts_with(word))
}

/// Runs `records` (one file's, includes expanded) over the engines `on` and `off`, which
/// share one catalog.
pub(super) async fn run(
    records: Vec<Record<DefaultColumnType>>,
    on: Arc<SqlEngine>,
    off: Arc<SqlEngine>,
    deadline: Instant,
) -> Outcome {
    let mut outcome = Outcome::default();
    let mut with = runner(on);
    let mut without = runner(off);
    for record in records {
        if Instant::now() > deadline {
            outcome.cut_short = true;
            break;
        }
        match &record {
            Record::Halt { .. } => break,
            Record::Statement { conditions, .. } | Record::Query { conditions, .. }
                if not_ours(conditions) =>
            {
                outcome.skipped += 1;
            }
            Record::Statement { .. } => match with.run_async(record).await {
                Ok(_) => outcome.pass += 1,
                Err(e) => {
                    outcome.differences.push(format!("{e}"));
                    outcome.apart.push(reason(&e));
                }
            },
            Record::Query { sql, .. } => {
                let sql = sql.clone();
                let Err(e) = with.run_async(record.clone()).await else {
                    outcome.pass += 1;
                    continue;
                };
                if explains(&sql) {
                    outcome
                        .apart
                        .push("a plan (EXPLAIN): Floe's plans are its own".into());
                } else if reordered(&e) && !ordered(&sql) {
                    outcome
                        .apart
                        .push("the same rows in another order, no ORDER BY".into());
                } else if reads(&sql) && without.run_async(record).await.is_ok() {
                    outcome.failures.push(format!("{e}"));
                } else {
                    outcome.differences.push(format!("{e}"));
                    outcome.apart.push(reason(&e));
                }
            }
            Record::Control(_) | Record::HashThreshold { .. } => {
                let _ = with.run_async(record.clone()).await;
                let _ = without.run_async(record).await;
            }
            Record::System { .. } | Record::Let { .. } => outcome.skipped += 1,
            _ => {}
        }
    }
    outcome
}

fn explains(sql: &str) -> bool {
    sql.trim_start().to_ascii_lowercase().starts_with("explain")
}

/// Whether a query answered the rows DataFusion expects, in another order.
fn reordered(error: &TestError) -> bool {
    let TestErrorKind::QueryResultMismatch {
        expected, actual, ..
    } = error.kind()
    else {
        return false;
    };
    let sorted = |text: &str| {
        let mut lines: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
        lines.sort();
        lines
    };
    sorted(&expected) == sorted(&actual)
}

/// Whether a statement's outermost query orders its rows (a statement that does not parse
/// is taken to order them, so that a difference in order still counts).
fn ordered(sql: &str) -> bool {
    use datafusion::sql::sqlparser::ast::Statement;
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    match Parser::parse_sql(&GenericDialect {}, sql).as_deref() {
        Ok([Statement::Query(query)]) => query.order_by.is_some(),
        _ => true,
    }
}

/// Why a record went otherwise than DataFusion's driver expects, in a few words that group
/// alike records (the first line of an error, without its quoted names).
fn reason(error: &TestError) -> String {
    match error.kind() {
        TestErrorKind::Fail { err, .. } => format!("refused: {}", gist(&err.to_string())),
        TestErrorKind::ErrorMismatch { .. } => "fails, but not with DataFusion's error".into(),
        TestErrorKind::Ok { .. } => "succeeds where DataFusion fails".into(),
        TestErrorKind::QueryResultMismatch { .. }
        | TestErrorKind::StatementResultMismatch { .. }
        | TestErrorKind::QueryResultColumnsMismatch { .. } => {
            "answers otherwise, rewrites on and off".into()
        }
        other => format!("{other}").lines().next().unwrap_or("").to_string(),
    }
}

/// An error's first line with quoted names and numbers replaced, at most 100 characters.
fn gist(message: &str) -> String {
    let line = message.lines().next().unwrap_or("");
    let mut out = String::new();
    let mut quoted: Option<char> = None;
    for c in line.chars() {
        match quoted {
            Some(q) if c == q => {
                quoted = None;
                out.push(c);
            }
            Some(_) => {}
            None if c == '\'' || c == '"' || c == '`' => {
                quoted = Some(c);
                out.push(c);
                out.push('…');
            }
            None if c.is_ascii_digit() => {
                if !out.ends_with('#') {
                    out.push('#');
                }
            }
            None => out.push(c),
        }
    }
    out.chars().take(100).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_compare_as_datafusions_driver_compares_them() {
        let rows = vec![vec!["1".to_string(), "a".to_string()]];
        assert!(validate(trim_end, &rows, &["1 a  ".to_string()]));
        assert!(!validate(trim_end, &rows, &["1 b".to_string()]));
        assert!(validate(trim_end, &rows, &["1 <slt:ignore>".to_string()]));
        assert!(!validate(trim_end, &rows, &["2 <slt:ignore>".to_string()]));
    }

    #[test]
    fn errors_are_grouped_by_their_gist() {
        assert_eq!(
            gist("table 'default.t1' not found at line 12\nmore"),
            "table '…' not found at line #"
        );
    }
}
