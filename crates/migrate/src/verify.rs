//! Verification, table by table: what Floe holds against what the source holds now.
//!
//! For an Iceberg source: the source's current snapshot is in Floe's history, at or behind
//! Floe's `main`; its schema and partition spec are Floe's of the same ids; its file and row
//! counts (from metadata) equal Floe's at that snapshot. For a Hive source: Floe's columns and
//! identity partitions are the Hive table's, in order, and Floe holds a file in every Hive
//! partition. `deep` also reads every row on both sides — through Floe's SQL, and from the
//! source as its own engine reads it (a Hive table's Parquet files with the metastore's
//! partition values, an Iceberg source's snapshot from its own metadata file): Floe's row
//! count must equal its metadata's and the source's, and each column's non-null count and
//! order-independent checksum the source's.

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
    /// Deep only: each side's rows, and per column its non-null count and checksum.
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
                    let described = self.source.describe(&source).await;
                    match &described {
                        Ok(SourceTable::Iceberg { metadata_location }) => {
                            // A source registered in place keeps its metadata in the
                            // Floe table's location: read as that table's.
                            let inside = floe.metadata["location"].as_str().is_some_and(|l| {
                                metadata_location
                                    .starts_with(&format!("{}/", l.trim_end_matches('/')))
                            });
                            let table = inside.then_some((ns.as_slice(), name.as_str()));
                            match self.floe.read_metadata(metadata_location, table).await {
                                Ok(src) => iceberg_checks(&src, &floe.metadata, &mut checks),
                                Err(e) => {
                                    checks.push(check("source-metadata", false, format!("{e:#}")))
                                }
                            }
                        }
                        Ok(SourceTable::Hive(hive)) => {
                            hive_checks(hive, &floe.metadata, &mut checks)?
                        }
                        Ok(SourceTable::Unsupported { reason }) => {
                            checks.push(check("source", false, reason.clone()))
                        }
                        Err(e) => checks.push(check("source", false, format!("{e:#}"))),
                    }
                    if deep && let Ok(described) = &described {
                        read = self
                            .deep(&ns, &name, described, &floe.metadata, &mut checks)
                            .await;
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

    /// Reads every row on both sides (Floe's server reads the source too, as the source's
    /// engine would): Floe's count against its metadata's, the source's against Floe's, and
    /// each column's non-null count and checksum against the source's.
    async fn deep(
        &self,
        ns: &[String],
        name: &str,
        source: &SourceTable,
        metadata: &Value,
        checks: &mut Vec<Check>,
    ) -> Option<Value> {
        let source = match source {
            SourceTable::Iceberg { metadata_location } => {
                json!({"kind": "iceberg", "metadata-location": metadata_location})
            }
            SourceTable::Hive(hive) => json!({
                "kind": "hive",
                "location": hive.location,
                "partition-columns": hive.partition_keys.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                "partitions": hive.partitions.iter()
                    .map(|p| json!({"values": p.values, "location": p.location}))
                    .collect::<Vec<_>>(),
            }),
            SourceTable::Unsupported { .. } => return None,
        };
        let read = match self.floe.digest(ns, name, &source).await {
            Ok(read) => read,
            Err(e) => {
                checks.push(check("rows-read", false, format!("{e:#}")));
                return None;
            }
        };
        let (floe, source) = (&read["floe"], &read["source"]);
        // Floe's side at the snapshot it read: the source's, or its current one.
        let snapshot = by_id(&metadata["snapshots"], "snapshot-id", &floe["snapshot-id"]);
        let expected = snapshot
            .and_then(|s| s["summary"]["total-records"].as_str())
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        let rows = floe["rows"].as_u64().unwrap_or(0);
        checks.push(check(
            "rows-read",
            rows == expected,
            format!(
                "{rows} rows read through Floe at snapshot {}, {expected} in its metadata",
                floe["snapshot-id"]
            ),
        ));
        let source_rows = source["rows"].as_u64().unwrap_or(0);
        checks.push(check(
            "rows-source",
            source_rows == rows,
            format!("{source_rows} rows read from the source, {rows} through Floe"),
        ));
        let empty = Vec::new();
        let theirs = source["columns"].as_array().unwrap_or(&empty);
        let ours = floe["columns"].as_array().unwrap_or(&empty);
        let differing: Vec<String> = ours
            .iter()
            .filter(|c| {
                theirs
                    .iter()
                    .find(|t| t["name"] == c["name"])
                    .is_none_or(|t| {
                        t["non-null"] != c["non-null"] || t["checksum"] != c["checksum"]
                    })
            })
            .map(|c| c["name"].as_str().unwrap_or("").to_string())
            .collect();
        checks.push(check(
            "column-checksums",
            differing.is_empty() && !ours.is_empty(),
            if differing.is_empty() {
                format!(
                    "{} columns: non-null counts and checksums identical on both sides",
                    ours.len()
                )
            } else {
                format!("differ on the two sides: {}", differing.join(", "))
            },
        ));
        Some(read)
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
