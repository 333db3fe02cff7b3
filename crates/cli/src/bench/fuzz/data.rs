//! The fuzzer's tables, generated from the run's seed: the same rows written as Iceberg
//! tables by Floe's own writer (for Floe) and as one Parquet file per table (for DuckDB).
//!
//! Every table has NULLs in every column and rows repeated; `t0` is written in key order
//! under a sort order (so Floe's scans declare it), `t1` in many small commits (many files,
//! each in key order), `t2` is empty (no snapshot at all) and `t3` is partitioned by `i`.
//! Values come from small domains so that joins and `IN` lists meet, and include the edges
//! engines disagree on: `%`, `_`, unicode and empty strings, leap days, large decimals.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array,
    RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use floe_catalog::governance::authz::Caller;
use floe_catalog::service::CreateTable;
use floe_sql::SqlEngine;
use iceberg::spec::Transform;
use iceberg::{NamespaceIdent, TableIdent};
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;

use super::ast::{Ty, quote};

/// The warehouse and namespace the tables live in.
pub(super) const WAREHOUSE: &str = "fuzz";
pub(super) const NAMESPACE: &str = "s";

/// One value of a table.
#[derive(Clone, Debug, PartialEq, PartialOrd)]
pub(super) enum Value {
    Null,
    Int(i64),
    Double(f64),
    /// Unscaled, at the column's scale.
    Dec(i128),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since 1970-01-01 00:00:00.
    Ts(i64),
    Str(String),
    Bool(bool),
}

/// A generated table.
pub(super) struct Table {
    pub name: &'static str,
    pub columns: Vec<(&'static str, Ty)>,
    /// The rows of each commit, in order.
    pub commits: Vec<Vec<Vec<Value>>>,
    pub sorted_by: Option<&'static str>,
    pub partitioned_by: Option<&'static str>,
}

/// The strings the tables hold.
pub(super) const STRINGS: [&str; 18] = [
    "",
    "a",
    "A",
    "ab",
    "a%b",
    "a_b",
    "%",
    "_",
    "100%",
    "x_y_z",
    "é",
    "naïve",
    "日本",
    "Ωmega",
    " a",
    "a ",
    "special requests",
    "abcab",
];

/// A random value of `ty` from its domain (never NULL).
pub(super) fn value(rng: &mut StdRng, ty: Ty) -> Value {
    match ty {
        Ty::BigInt => Value::Int(
            *[
                -3,
                -1,
                0,
                1,
                2,
                3,
                5,
                7,
                10,
                42,
                1_000_000_000_000,
                -999_999_999_999,
            ]
            .choose(rng)
            .expect("a domain"),
        ),
        Ty::Int => Value::Int(rng.random_range(-2..10)),
        Ty::Double => Value::Double(
            *[
                -2.5,
                -1.0,
                0.0,
                0.25,
                0.5,
                1.0,
                1.5,
                2.0,
                3.75,
                100.0,
                1_000_000.5,
            ]
            .choose(rng)
            .expect("a domain"),
        ),
        Ty::Dec9 => Value::Dec(
            *[-5000, -125, -1, 0, 1, 10, 99, 150, 250, 1000, 999_999_999]
                .choose(rng)
                .expect("a domain"),
        ),
        Ty::Dec28 => Value::Dec(
            *[
                0,
                1,
                -1,
                500_000,
                1_500_000,
                -2_500_000,
                123_456_789_012_345_678,
                123_456_789_012_345_678_901,
            ]
            .choose(rng)
            .expect("a domain"),
        ),
        // 2024-02-26 … 2024-03-02 (a leap day among them), the epoch and 1999-12-31.
        Ty::Date => Value::Date(
            *[19779, 19780, 19781, 19782, 19783, 19784, 0, 10956]
                .choose(rng)
                .expect("a domain"),
        ),
        Ty::Ts => {
            let day = *[19780i64, 19781, 19782].choose(rng).expect("a domain");
            let second = *[0i64, 1, 3600, 43_200, 86_399]
                .choose(rng)
                .expect("a domain");
            let micros = *[0i64, 0, 999_999].choose(rng).expect("a domain");
            Value::Ts((day * 86_400 + second) * 1_000_000 + micros)
        }
        Ty::Str => Value::Str(STRINGS.choose(rng).expect("a domain").to_string()),
        Ty::Bool => Value::Bool(rng.random_bool(0.5)),
    }
}

/// `value` as a typed SQL literal of `ty`.
pub(super) fn literal(value: &Value, ty: Ty) -> String {
    let scale = |unscaled: i128, scale: u32| {
        let sign = if unscaled < 0 { "-" } else { "" };
        let digits = unscaled.unsigned_abs();
        let unit = 10u128.pow(scale);
        format!(
            "{sign}{}.{:0width$}",
            digits / unit,
            digits % unit,
            width = scale as usize
        )
    };
    match value {
        Value::Null => format!("CAST(NULL AS {})", ty.sql()),
        Value::Int(v) if *v < 0 => format!("({v})"),
        Value::Int(v) if ty == Ty::Int => format!("CAST({v} AS INT)"),
        Value::Int(v) => v.to_string(),
        Value::Double(v) => format!("CAST({v:?} AS DOUBLE)"),
        Value::Dec(v) => {
            let digits = scale(*v, if ty == Ty::Dec9 { 2 } else { 6 });
            format!("CAST('{digits}' AS {})", ty.sql())
        }
        Value::Date(days) => format!("DATE '{}'", date(*days)),
        Value::Ts(micros) => {
            let seconds = micros.div_euclid(1_000_000);
            let fraction = micros.rem_euclid(1_000_000);
            let time = chrono::DateTime::from_timestamp(seconds, 0)
                .expect("a timestamp in range")
                .naive_utc()
                .format("%Y-%m-%d %H:%M:%S");
            if fraction == 0 {
                format!("TIMESTAMP '{time}'")
            } else {
                format!("TIMESTAMP '{time}.{fraction:06}'")
            }
        }
        Value::Str(s) => quote(s),
        Value::Bool(b) => if *b { "TRUE" } else { "FALSE" }.into(),
    }
}

fn date(days: i32) -> String {
    (chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("the epoch")
        + chrono::Duration::days(days.into()))
    .format("%Y-%m-%d")
    .to_string()
}

const ALL: [(&str, Ty); 9] = [
    ("k", Ty::BigInt),
    ("i", Ty::Int),
    ("d", Ty::Double),
    ("m", Ty::Dec9),
    ("w", Ty::Dec28),
    ("dt", Ty::Date),
    ("ts", Ty::Ts),
    ("s", Ty::Str),
    ("b", Ty::Bool),
];

/// The tables of a seed.
pub(super) fn tables(rng: &mut StdRng) -> Vec<Table> {
    let pick = |names: &[&str]| -> Vec<(&'static str, Ty)> {
        ALL.iter()
            .filter(|(n, _)| names.contains(n))
            .copied()
            .collect()
    };
    let mut t0 = Table {
        name: "t0",
        columns: ALL.to_vec(),
        commits: vec![],
        sorted_by: Some("k"),
        partitioned_by: None,
    };
    let rows = rng.random_range(20..48);
    t0.commits.push(rows_of(rng, &t0.columns, rows));
    let mut t1 = Table {
        name: "t1",
        columns: pick(&["k", "i", "d", "m", "dt", "s", "b"]),
        commits: vec![],
        sorted_by: Some("k"),
        partitioned_by: None,
    };
    for _ in 0..rng.random_range(5..9) {
        let rows = rng.random_range(1..7);
        t1.commits.push(rows_of(rng, &t1.columns, rows));
    }
    let t2 = Table {
        name: "t2",
        columns: pick(&["k", "i", "w", "s", "b"]),
        commits: vec![],
        sorted_by: None,
        partitioned_by: None,
    };
    let mut t3 = Table {
        name: "t3",
        columns: pick(&["k", "i", "d", "w", "dt", "ts", "s", "b"]),
        commits: vec![],
        sorted_by: None,
        partitioned_by: Some("i"),
    };
    for _ in 0..2 {
        let rows = rng.random_range(4..10);
        t3.commits.push(rows_of(rng, &t3.columns, rows));
    }
    let mut tables = vec![t0, t1, t2, t3];
    for table in &mut tables {
        nulls_everywhere(table);
        if let Some(key) = table.sorted_by {
            let at = table.columns.iter().position(|(n, _)| *n == key);
            let at = at.expect("the sort column is a column");
            // Ascending, nulls first: the table's sort order.
            for rows in &mut table.commits {
                rows.sort_by(|a, b| {
                    let rank = |v: &Value| !matches!(v, Value::Null);
                    (rank(&a[at]), &a[at])
                        .partial_cmp(&(rank(&b[at]), &b[at]))
                        .expect("keys compare")
                });
            }
        }
    }
    tables
}

/// `n` rows, about one value in seven NULL and about one row in six a repeat of another.
fn rows_of(rng: &mut StdRng, columns: &[(&str, Ty)], n: usize) -> Vec<Vec<Value>> {
    let mut rows: Vec<Vec<Value>> = Vec::with_capacity(n);
    for _ in 0..n {
        if !rows.is_empty() && rng.random_bool(0.17) {
            let again = rows[rng.random_range(0..rows.len())].clone();
            rows.push(again);
            continue;
        }
        rows.push(
            columns
                .iter()
                .map(|&(_, ty)| {
                    if rng.random_bool(0.14) {
                        Value::Null
                    } else {
                        value(rng, ty)
                    }
                })
                .collect(),
        );
    }
    rows
}

/// Makes sure every column of a table with rows holds a NULL somewhere.
fn nulls_everywhere(table: &mut Table) {
    let total: usize = table.commits.iter().map(Vec::len).sum();
    for column in 0..table.columns.len() {
        let has_null = table
            .commits
            .iter()
            .flatten()
            .any(|r| r[column] == Value::Null);
        if has_null || total == 0 {
            continue;
        }
        let mut at = column % total;
        for rows in &mut table.commits {
            if at < rows.len() {
                rows[at][column] = Value::Null;
                break;
            }
            at -= rows.len();
        }
    }
}

impl Table {
    pub(super) fn rows(&self) -> usize {
        self.commits.iter().map(Vec::len).sum()
    }

    pub(super) fn schema(&self) -> SchemaRef {
        let fields: Vec<Field> = self
            .columns
            .iter()
            .map(|&(name, ty)| {
                let data_type = match ty {
                    Ty::BigInt => DataType::Int64,
                    Ty::Int => DataType::Int32,
                    Ty::Double => DataType::Float64,
                    Ty::Dec9 => DataType::Decimal128(9, 2),
                    Ty::Dec28 => DataType::Decimal128(28, 6),
                    Ty::Date => DataType::Date32,
                    Ty::Ts => DataType::Timestamp(TimeUnit::Microsecond, None),
                    Ty::Str => DataType::Utf8,
                    Ty::Bool => DataType::Boolean,
                };
                Field::new(name, data_type, true)
            })
            .collect();
        Arc::new(Schema::new(fields))
    }

    fn batch(&self, rows: &[Vec<Value>]) -> anyhow::Result<RecordBatch> {
        let mut arrays: Vec<ArrayRef> = Vec::new();
        for (c, &(_, ty)) in self.columns.iter().enumerate() {
            let values = rows.iter().map(|r| &r[c]);
            let array: ArrayRef = match ty {
                Ty::BigInt => Arc::new(
                    values
                        .map(|v| match v {
                            Value::Int(x) => Some(*x),
                            _ => None,
                        })
                        .collect::<Int64Array>(),
                ),
                Ty::Int => Arc::new(
                    values
                        .map(|v| match v {
                            Value::Int(x) => Some(*x as i32),
                            _ => None,
                        })
                        .collect::<Int32Array>(),
                ),
                Ty::Double => Arc::new(
                    values
                        .map(|v| match v {
                            Value::Double(x) => Some(*x),
                            _ => None,
                        })
                        .collect::<Float64Array>(),
                ),
                Ty::Dec9 | Ty::Dec28 => {
                    let (p, s) = if ty == Ty::Dec9 { (9, 2) } else { (28, 6) };
                    let array = values
                        .map(|v| match v {
                            Value::Dec(x) => Some(*x),
                            _ => None,
                        })
                        .collect::<Decimal128Array>();
                    Arc::new(array.with_precision_and_scale(p, s)?)
                }
                Ty::Date => Arc::new(
                    values
                        .map(|v| match v {
                            Value::Date(x) => Some(*x),
                            _ => None,
                        })
                        .collect::<Date32Array>(),
                ),
                Ty::Ts => Arc::new(
                    values
                        .map(|v| match v {
                            Value::Ts(x) => Some(*x),
                            _ => None,
                        })
                        .collect::<TimestampMicrosecondArray>(),
                ),
                Ty::Str => Arc::new(
                    values
                        .map(|v| match v {
                            Value::Str(x) => Some(x.as_str()),
                            _ => None,
                        })
                        .collect::<StringArray>(),
                ),
                Ty::Bool => Arc::new(
                    values
                        .map(|v| match v {
                            Value::Bool(x) => Some(*x),
                            _ => None,
                        })
                        .collect::<BooleanArray>(),
                ),
            };
            arrays.push(array);
        }
        Ok(RecordBatch::try_new(self.schema(), arrays)?)
    }

    /// `CREATE TABLE` and one `INSERT` per commit, for a failure's report.
    pub(super) fn ddl(&self) -> String {
        let columns: Vec<String> = self
            .columns
            .iter()
            .map(|(n, ty)| format!("{n} {}", ty.sql()))
            .collect();
        let mut out = format!("CREATE TABLE {} ({});", self.name, columns.join(", "));
        if let Some(key) = self.sorted_by {
            out.push_str(&format!("  -- written in order of {key} ASC NULLS FIRST"));
        }
        if let Some(key) = self.partitioned_by {
            out.push_str(&format!("  -- partitioned by identity({key})"));
        }
        for rows in &self.commits {
            let rows: Vec<String> = rows
                .iter()
                .map(|r| {
                    let values: Vec<String> = r
                        .iter()
                        .zip(&self.columns)
                        .map(|(v, &(_, ty))| literal(v, ty))
                        .collect();
                    format!("({})", values.join(", "))
                })
                .collect();
            out.push_str(&format!(
                "\nINSERT INTO {} VALUES {};",
                self.name,
                rows.join(", ")
            ));
        }
        out
    }
}

/// Writes every table: as Iceberg tables of warehouse [`WAREHOUSE`] with Floe's writer (one
/// commit per batch of rows), and as `parquet/<table>.parquet` for DuckDB.
pub(super) async fn write(
    tables: &[Table],
    engine: &SqlEngine,
    caller: &Caller,
    parquet: &Path,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(parquet)?;
    let catalog = engine.catalog();
    let ns = NamespaceIdent::new(NAMESPACE.into());
    catalog
        .create_namespace(caller, WAREHOUSE, &ns, Default::default())
        .await?;
    for table in tables {
        let schema = table.schema();
        let all: Vec<Vec<Value>> = table.commits.iter().flatten().cloned().collect();
        let file = std::fs::File::create(parquet.join(format!("{}.parquet", table.name)))?;
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None)?;
        writer.write(&table.batch(&all)?)?;
        writer.close()?;

        let iceberg_schema = floe_sql::write::iceberg_schema(&schema)?;
        let write_order = match table.sorted_by {
            Some(key) => Some(crate::bench::tpch::ascending(&iceberg_schema, key)?),
            None => None,
        };
        let partition_spec = match table.partitioned_by {
            Some(key) => Some(floe_sql::write::partition_spec(
                &iceberg_schema,
                &[(key.to_string(), Transform::Identity)],
            )?),
            None => None,
        };
        catalog
            .create_table(
                caller,
                WAREHOUSE,
                &ns,
                CreateTable {
                    name: table.name.into(),
                    location: None,
                    schema: iceberg_schema,
                    partition_spec,
                    write_order,
                    stage_create: false,
                    properties: Default::default(),
                },
            )
            .await
            .with_context(|| format!("create {}", table.name))?;
        let ident = TableIdent::new(ns.clone(), table.name.into());
        for rows in &table.commits {
            let access = engine.access(caller, WAREHOUSE).await?;
            let loaded = catalog.load_table(caller, WAREHOUSE, &ident).await?;
            let iceberg_table = floe_sql::write::table_of(&access, loaded)?;
            let batch = table.batch(rows)?;
            let stream =
                RecordBatchStreamAdapter::new(schema.clone(), futures::stream::iter([Ok(batch)]));
            floe_sql::write::IcebergSink::new(access, iceberg_table, schema.clone())
                .write_all(Box::pin(stream), &Arc::new(TaskContext::default()))
                .await
                .with_context(|| format!("write {}", table.name))?;
        }
    }
    Ok(())
}
