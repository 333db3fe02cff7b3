//! Verification, table by table: what Floe holds against what the source holds now.
//!
//! For an Iceberg source: the source's current snapshot is in Floe's history, at or behind
//! Floe's `main`; its schema and partition spec are Floe's of the same ids; its file and row
//! counts (from metadata) equal Floe's at that snapshot. For a Hive source: Floe's columns and
//! identity partitions are the Hive table's, in order, and Floe holds a file in every Hive
//! partition. `deep` also reads every row through Floe: the row count must equal the
//! metadata's, and a checksum of every column is reported for the source's engine to match.

use serde::Serialize;
use serde_json::{Value, json};

use crate::engine::{CUT_OVER, MIGRATED, Migration, current_snapshot};
use crate::source::{SourceTable, hive_schema};

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableReport {
    pub source: String,
    pub target: String,
    pub wave: usize,
    pub passed: bool,
    pub checks: Vec<Check>,
    /// Deep only: rows read through Floe and a checksum per column.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<Value>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    pub migration: String,
    pub source: String,
    pub target_warehouse: String,
    pub verified_at: String,
    pub deep: bool,
    pub tables: Vec<TableReport>,
    pub passed: bool,
}

fn check(name: &str, passed: bool, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        passed,
        detail: detail.into(),
    }
}

fn by_id<'a>(list: &'a Value, key: &str, id: &Value) -> Option<&'a Value> {
    list.as_array()?.iter().find(|v| &v[key] == id)
}

impl Migration {
    pub async fn verify(&self, wave: Option<usize>, deep: bool) -> anyhow::Result<Report> {
        let mut tables = Vec::new();
        for (source, (w, state)) in self.records().await? {
            if wave.is_some_and(|want| want != w)
                || !matches!(state["step"].as_str(), Some(MIGRATED) | Some(CUT_OVER))
            {
                continue;
            }
            let (ns, name) = self.target(&source)?;
            let target = format!("{}.{}.{name}", self.plan.target.warehouse, ns.join("."));
            let mut checks = Vec::new();
            let mut read = None;
            match self.floe.load_table(&ns, &name).await? {
                None => checks.push(check("present", false, "Floe does not hold the table")),
                Some(floe) => {
                    checks.push(check("present", true, floe.metadata_location.clone()));
                    match self.source.describe(&source).await {
                        Ok(SourceTable::Iceberg { metadata_location }) => {
                            match self.floe.read_metadata(&metadata_location).await {
                                Ok(src) => iceberg_checks(&src, &floe.metadata, &mut checks),
                                Err(e) => {
                                    checks.push(check("source-metadata", false, format!("{e:#}")))
                                }
                            }
                        }
                        Ok(SourceTable::Hive(hive)) => {
                            hive_checks(&hive, &floe.metadata, &mut checks)?
                        }
                        Ok(SourceTable::Unsupported { reason }) => {
                            checks.push(check("source", false, reason))
                        }
                        Err(e) => checks.push(check("source", false, format!("{e:#}"))),
                    }
                    if deep {
                        let (c, r) = self.deep(&ns, &name, &floe.metadata).await;
                        checks.push(c);
                        read = r;
                    }
                }
            }
            tables.push(TableReport {
                passed: checks.iter().all(|c| c.passed),
                source,
                target,
                wave: w,
                checks,
                read,
            });
        }
        Ok(Report {
            migration: self.plan.name.clone(),
            source: crate::plan::redacted(&self.plan.source.uri),
            target_warehouse: self.plan.target.warehouse.clone(),
            verified_at: chrono::Utc::now().to_rfc3339(),
            deep,
            passed: tables.iter().all(|t| t.passed),
            tables,
        })
    }

    /// Reads every row of the table through Floe: the count against the metadata's, and a
    /// checksum per column.
    async fn deep(&self, ns: &[String], name: &str, metadata: &Value) -> (Check, Option<Value>) {
        let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        let table = format!(
            "{}.{}.{}",
            quote(&self.plan.target.warehouse),
            quote(&ns.join(".")),
            quote(name)
        );
        let schema_id = &metadata["current-schema-id"];
        let columns: Vec<String> = by_id(&metadata["schemas"], "schema-id", schema_id)
            .and_then(|s| s["fields"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|f| f["name"].as_str().map(str::to_string))
            .collect();
        let rows = match self
            .floe
            .query_row(&format!("SELECT count(*) AS \"rows\" FROM {table}"))
            .await
        {
            Ok(row) => row["rows"].as_i64().unwrap_or(-1),
            Err(e) => return (check("rows-read", false, format!("{e:#}")), None),
        };
        // One scan per column (of that column only): an ordered aggregate each, and DataFusion
        // takes one ordering per query.
        let mut checksums = serde_json::Map::new();
        for column in &columns {
            let text = format!("md5(CAST({} AS VARCHAR))", quote(column));
            let sql = format!(
                "SELECT count({}) AS n, md5(string_agg({text}, '' ORDER BY {text})) AS c FROM {table}",
                quote(column)
            );
            match self.floe.query_row(&sql).await {
                Ok(row) => {
                    checksums.insert(
                        column.clone(),
                        json!({"non-null": row["n"], "checksum": row["c"]}),
                    );
                }
                Err(e) => return (check("rows-read", false, format!("{column}: {e:#}")), None),
            }
        }
        let expected: i64 = current_snapshot(metadata)
            .and_then(|s| s["summary"]["total-records"].as_str())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (
            check(
                "rows-read",
                rows == expected,
                format!("{rows} rows read through Floe, {expected} in the metadata"),
            ),
            Some(json!({"rows": rows, "columns": checksums})),
        )
    }
}

fn iceberg_checks(src: &Value, floe: &Value, checks: &mut Vec<Check>) {
    let src_snapshot = &src["current-snapshot-id"];
    let in_floe = if src_snapshot.is_null() || src_snapshot == &json!(-1) {
        None
    } else {
        by_id(&floe["snapshots"], "snapshot-id", src_snapshot)
    };
    checks.push(check(
        "snapshot",
        src_snapshot.is_null() || src_snapshot == &json!(-1) || in_floe.is_some(),
        format!(
            "source at snapshot {src_snapshot}, Floe at {} ({})",
            floe["current-snapshot-id"],
            if floe["current-snapshot-id"] == *src_snapshot {
                "identical"
            } else if in_floe.is_some() {
                "Floe holds the source's snapshot and later ones"
            } else {
                "Floe lacks the source's snapshot"
            }
        ),
    ));
    checks.push(check(
        "table-uuid",
        src["table-uuid"] == floe["table-uuid"],
        format!("{}", src["table-uuid"]),
    ));
    let schema_id = &src["current-schema-id"];
    let same_schema = by_id(&src["schemas"], "schema-id", schema_id)
        == by_id(&floe["schemas"], "schema-id", schema_id);
    checks.push(check(
        "schema",
        same_schema,
        format!(
            "schema {schema_id} {}",
            if same_schema { "identical" } else { "differs" }
        ),
    ));
    let spec_id = &src["default-spec-id"];
    let same_spec = by_id(&src["partition-specs"], "spec-id", spec_id)
        == by_id(&floe["partition-specs"], "spec-id", spec_id);
    checks.push(check(
        "partition-spec",
        same_spec,
        format!(
            "spec {spec_id} {}",
            if same_spec { "identical" } else { "differs" }
        ),
    ));
    let src_summary = current_snapshot(src).map(|s| &s["summary"]);
    let floe_summary = in_floe.map(|s| &s["summary"]);
    for key in ["total-data-files", "total-records", "total-delete-files"] {
        let a = src_summary.map(|s| s[key].clone()).unwrap_or(Value::Null);
        let b = floe_summary.map(|s| s[key].clone()).unwrap_or(Value::Null);
        checks.push(check(key, a == b, format!("source {a}, Floe {b}")));
    }
}

fn hive_checks(
    hive: &crate::source::HiveTable,
    floe: &Value,
    checks: &mut Vec<Check>,
) -> anyhow::Result<()> {
    let expected = hive_schema(hive)?;
    let schema = by_id(&floe["schemas"], "schema-id", &floe["current-schema-id"]);
    let columns = |s: Option<&Value>| -> Vec<(String, String)> {
        s.and_then(|s| s["fields"].as_array())
            .into_iter()
            .flatten()
            .map(|f| {
                (
                    f["name"].as_str().unwrap_or("").to_string(),
                    f["type"].to_string(),
                )
            })
            .collect()
    };
    let want = columns(Some(&expected));
    let have = columns(schema);
    checks.push(check(
        "schema",
        want == have,
        format!(
            "{} columns; Floe {}",
            want.len(),
            if want == have { "identical" } else { "differs" }
        ),
    ));
    let spec = by_id(
        &floe["partition-specs"],
        "spec-id",
        &floe["default-spec-id"],
    );
    let spec_names: Vec<String> = spec
        .and_then(|s| s["fields"].as_array())
        .into_iter()
        .flatten()
        .filter(|f| f["transform"] == "identity")
        .filter_map(|f| f["name"].as_str().map(str::to_string))
        .collect();
    let keys: Vec<String> = hive.partition_keys.iter().map(|(n, _)| n.clone()).collect();
    checks.push(check(
        "partition-spec",
        spec_names == keys,
        format!("identity partitions {spec_names:?}, Hive partition keys {keys:?}"),
    ));
    let files: i64 = current_snapshot(floe)
        .and_then(|s| s["summary"]["total-data-files"].as_str())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let partitions = hive.partitions.len();
    checks.push(check(
        "files",
        files >= partitions as i64,
        format!("Floe holds {files} files over the source's {partitions} partitions"),
    ));
    Ok(())
}

/// The report as text for a reviewer.
pub fn text(report: &Report) -> String {
    let mut out = format!(
        "Migration {} — verification at {}{}\nsource {}\ntarget warehouse {}\n\n",
        report.migration,
        report.verified_at,
        if report.deep { " (deep)" } else { "" },
        report.source,
        report.target_warehouse
    );
    for table in &report.tables {
        out.push_str(&format!(
            "{} {} -> {} (wave {})\n",
            if table.passed { "PASS" } else { "FAIL" },
            table.source,
            table.target,
            table.wave
        ));
        for c in &table.checks {
            out.push_str(&format!(
                "    {} {:<20} {}\n",
                if c.passed { "ok  " } else { "FAIL" },
                c.name,
                c.detail
            ));
        }
    }
    let failed = report.tables.iter().filter(|t| !t.passed).count();
    out.push_str(&format!(
        "\n{} tables verified, {} failed: {}\n",
        report.tables.len(),
        failed,
        if report.passed { "PASSED" } else { "FAILED" }
    ));
    out
}
