//! The steps of a migration, each resumable: a table's record in Floe says how far it got,
//! and every step first reconciles what a killed run may have left half done.
//!
//! A table goes `migrating` (intent recorded, nothing in Floe yet or a part) → `migrated`
//! (registered or converted; what the source and Floe held recorded) → `cut-over` (the source
//! points its readers at Floe) and, by a rollback, → `rolled-back`. `skipped` and `failed`
//! say why a table did not move.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::floe::{Floe, FloeTable};
use crate::plan::{OnConflict, Plan};
use crate::source::{Source, SourceTable, hive_schema};

pub const MIGRATING: &str = "migrating";
pub const MIGRATED: &str = "migrated";
pub const CUT_OVER: &str = "cut-over";
pub const ROLLED_BACK: &str = "rolled-back";
pub const SKIPPED: &str = "skipped";
pub const FAILED: &str = "failed";

/// A migration: its plan, its source and the Floe server it moves tables to.
pub struct Migration {
    pub plan: Plan,
    pub source: Box<dyn Source>,
    pub floe: Floe,
    /// Show progress bars (off when the output is not a terminal, or for JSON output).
    pub progress: bool,
}

/// The result of one table's step.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Outcome {
    pub source: String,
    pub wave: usize,
    pub target: String,
    pub step: String,
    pub detail: String,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Appends `step` to the state's history (the last 50 kept) and sets it.
fn advance(state: &mut Value, step: &str, detail: &str) {
    state["step"] = json!(step);
    let entry = json!({"step": step, "at-ms": now_ms(), "detail": detail});
    let history = state["history"].as_array().cloned().unwrap_or_default();
    let mut history: Vec<Value> = history.into_iter().rev().take(49).rev().collect();
    history.push(entry);
    state["history"] = Value::Array(history);
}

impl Migration {
    /// Source tables in `wave` (all waves when `None`), in plan order.
    pub async fn tables(&self, wave: Option<usize>) -> anyhow::Result<Vec<(String, usize)>> {
        if let Some(w) = wave {
            self.plan.wave(w)?;
        }
        let mut tables: Vec<(String, usize)> = self
            .source
            .list()
            .await?
            .into_iter()
            .filter_map(|t| self.plan.wave_of(&t).map(|w| (t, w)))
            .filter(|(_, w)| wave.is_none_or(|want| *w == want))
            .collect();
        tables.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        Ok(tables)
    }

    /// Floe's namespace and name for a source table.
    pub fn target(&self, source: &str) -> anyhow::Result<(Vec<String>, String)> {
        let (db, name) = crate::source::split(source)?;
        Ok((self.plan.namespace_for(db), name.to_string()))
    }

    fn target_name(&self, source: &str) -> String {
        match self.target(source) {
            Ok((ns, name)) => format!("{}.{}.{name}", self.plan.target.warehouse, ns.join(".")),
            Err(_) => String::new(),
        }
    }

    /// The records kept in Floe, by source table.
    pub async fn records(&self) -> anyhow::Result<BTreeMap<String, (usize, Value)>> {
        Ok(self
            .floe
            .records(&self.plan.name)
            .await?
            .into_iter()
            .filter_map(|r| {
                Some((
                    r["source"].as_str()?.to_string(),
                    (r["wave"].as_u64().unwrap_or(0) as usize, r["state"].clone()),
                ))
            })
            .collect())
    }

    fn bar(&self, len: usize, what: &str) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(len as u64);
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} tables ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_message(what.to_string());
        bar
    }

    /// The dry run: what `run` would do to each table, changing nothing.
    pub async fn plan_changes(&self, wave: Option<usize>) -> anyhow::Result<Vec<Outcome>> {
        let records = self.records().await?;
        let mut outcomes = Vec::new();
        for (source, w) in self.tables(wave).await? {
            let target = self.target_name(&source);
            let done = records
                .get(&source)
                .and_then(|(_, s)| s["step"].as_str().map(str::to_string));
            let (step, detail) = match done.as_deref() {
                Some(MIGRATED) | Some(CUT_OVER) => ("unchanged".into(), "already migrated".into()),
                _ => match self.source.describe(&source).await {
                    Ok(SourceTable::Iceberg { metadata_location }) => {
                        let (ns, name) = self.target(&source)?;
                        match self.floe.load_table(&ns, &name).await? {
                            Some(existing) if existing.metadata_location == metadata_location => {
                                ("register".into(), "Floe already holds this metadata".into())
                            }
                            Some(_) => conflict_action(self.plan.target.on_conflict),
                            None => ("register".into(), format!("metadata {metadata_location}")),
                        }
                    }
                    Ok(SourceTable::Hive(hive)) => {
                        let (ns, name) = self.target(&source)?;
                        match self.floe.load_table(&ns, &name).await? {
                            Some(_) => conflict_action(self.plan.target.on_conflict),
                            None => (
                                "convert".into(),
                                format!(
                                    "Hive Parquet table at {} ({} partitions) in place, no data \
                                     copied",
                                    hive.location,
                                    hive.partitions.len()
                                ),
                            ),
                        }
                    }
                    Ok(SourceTable::Unsupported { reason }) => ("skip".into(), reason),
                    Err(e) => ("error".into(), format!("{e:#}")),
                },
            };
            let sync = if self.plan.syncs(&source) {
                "; synced until cut-over"
            } else {
                ""
            };
            outcomes.push(Outcome {
                source,
                wave: w,
                target,
                step,
                detail: format!("{detail}{sync}"),
            });
        }
        Ok(outcomes)
    }

    /// Migrates every table of `wave` not migrated yet.
    pub async fn run(&self, wave: usize) -> anyhow::Result<Vec<Outcome>> {
        let tables = self.tables(Some(wave)).await?;
        let records = self.records().await?;
        let bar = self.bar(tables.len(), &format!("wave {wave}"));
        let mut outcomes = Vec::new();
        for (source, w) in tables {
            bar.set_message(format!("wave {wave}: {source}"));
            let state = records
                .get(&source)
                .map(|(_, s)| s.clone())
                .unwrap_or_else(|| json!({}));
            let outcome = match self.migrate_table(&source, w, state).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    let detail = format!("{e:#}");
                    let mut state = json!({"error": detail});
                    if let Some((_, old)) = records.get(&source) {
                        state = old.clone();
                        state["error"] = json!(detail);
                    }
                    advance(&mut state, FAILED, &detail);
                    self.floe
                        .put_record(&self.plan.name, &source, w, &state)
                        .await?;
                    Outcome {
                        target: self.target_name(&source),
                        source: source.clone(),
                        wave: w,
                        step: FAILED.into(),
                        detail,
                    }
                }
            };
            outcomes.push(outcome);
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(outcomes)
    }

    async fn migrate_table(
        &self,
        source: &str,
        wave: usize,
        mut state: Value,
    ) -> anyhow::Result<Outcome> {
        let target = self.target_name(source);
        let outcome = |step: &str, detail: String| Outcome {
            source: source.to_string(),
            wave,
            target: target.clone(),
            step: step.to_string(),
            detail,
        };
        if matches!(state["step"].as_str(), Some(MIGRATED) | Some(CUT_OVER)) {
            return Ok(outcome("unchanged", "already migrated".into()));
        }
        let described = self.source.describe(source).await?;
        if let SourceTable::Unsupported { reason } = &described {
            advance(&mut state, SKIPPED, reason);
            self.floe
                .put_record(&self.plan.name, source, wave, &state)
                .await?;
            return Ok(outcome(SKIPPED, reason.clone()));
        }
        let (ns, name) = self.target(source)?;
        // Intent first: a run killed after this line finds the record and reconciles.
        state["source-table"] = serde_json::to_value(&described)?;
        state["target"] =
            json!({"warehouse": self.plan.target.warehouse, "namespace": ns, "table": name});
        state["sync"] = json!(self.plan.syncs(source));
        state.as_object_mut().map(|o| o.remove("error"));
        advance(&mut state, MIGRATING, "");
        self.floe
            .put_record(&self.plan.name, source, wave, &state)
            .await?;

        let created = self.floe.ensure_namespace(&ns).await?;
        if !created.is_empty() {
            let mut all = state["created-namespaces"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            all.extend(created.into_iter().map(|n| json!(n)));
            state["created-namespaces"] = Value::Array(all);
        }
        let table = match &described {
            SourceTable::Iceberg { metadata_location } => {
                match self.register(&ns, &name, metadata_location).await? {
                    Some(table) => table,
                    None => {
                        advance(&mut state, SKIPPED, "Floe holds another table of this name");
                        self.floe
                            .put_record(&self.plan.name, source, wave, &state)
                            .await?;
                        return Ok(outcome(
                            SKIPPED,
                            "Floe holds another table of this name".into(),
                        ));
                    }
                }
            }
            SourceTable::Hive(hive) => {
                let body = convert_body(&self.floe.warehouse, source, &ns, &name, hive, "create")?;
                match self.floe.convert(&body).await? {
                    Ok(_) => {}
                    Err((status, message)) if status == reqwest::StatusCode::CONFLICT => {
                        match self.plan.target.on_conflict {
                            OnConflict::Skip => {
                                advance(&mut state, SKIPPED, &message);
                                self.floe
                                    .put_record(&self.plan.name, source, wave, &state)
                                    .await?;
                                return Ok(outcome(SKIPPED, message));
                            }
                            _ => bail!("Floe holds another table {target}: {message}"),
                        }
                    }
                    Err((status, message)) => bail!("conversion refused ({status}): {message}"),
                }
                self.floe
                    .load_table(&ns, &name)
                    .await?
                    .context("the converted table is not in Floe")?
            }
            SourceTable::Unsupported { .. } => unreachable!("handled above"),
        };
        record_floe(&mut state, &table);
        let detail = match &described {
            SourceTable::Iceberg { .. } => format!("registered at {}", table.metadata_location),
            _ => format!(
                "converted: {} files, {} rows",
                summary_of(&table.metadata, "total-data-files"),
                summary_of(&table.metadata, "total-records")
            ),
        };
        advance(&mut state, MIGRATED, &detail);
        self.floe
            .put_record(&self.plan.name, source, wave, &state)
            .await?;
        Ok(outcome(MIGRATED, detail))
    }

    /// Registers `metadata_location` as `ns.name`; `None` when the plan skips a conflict.
    async fn register(
        &self,
        ns: &[String],
        name: &str,
        metadata_location: &str,
    ) -> anyhow::Result<Option<FloeTable>> {
        match self
            .floe
            .register(ns, name, metadata_location, false)
            .await?
        {
            Ok(table) => Ok(Some(table)),
            Err((status, message)) if status == reqwest::StatusCode::CONFLICT => {
                let existing = self.floe.load_table(ns, name).await?;
                // A run killed after registering left exactly this: taken as done.
                if let Some(existing) = existing
                    && existing.metadata_location == metadata_location
                {
                    return Ok(Some(existing));
                }
                match self.plan.target.on_conflict {
                    OnConflict::Fail => bail!(
                        "Floe holds another table {}.{name}: {message} (on-conflict = fail)",
                        ns.join(".")
                    ),
                    OnConflict::Skip => Ok(None),
                    OnConflict::Replace => {
                        match self
                            .floe
                            .register(ns, name, metadata_location, true)
                            .await?
                        {
                            Ok(table) => Ok(Some(table)),
                            Err((status, message)) => {
                                bail!("Floe refused to replace ({status}): {message}")
                            }
                        }
                    }
                }
            }
            Err((status, message)) => bail!("Floe refused to register ({status}): {message}"),
        }
    }

    /// Takes the source's new snapshots (Iceberg) or files (Hive) for every migrated table
    /// marked `sync` (of `wave`, or all).
    pub async fn sync(&self, wave: Option<usize>) -> anyhow::Result<Vec<Outcome>> {
        let mut outcomes = Vec::new();
        for (source, (w, state)) in self.records().await? {
            if wave.is_some_and(|want| want != w)
                || state["step"].as_str() != Some(MIGRATED)
                || state["sync"] != json!(true)
            {
                continue;
            }
            let result = self.sync_table(&source, w, state.clone()).await;
            outcomes.push(Outcome {
                target: self.target_name(&source),
                source: source.clone(),
                wave: w,
                step: if result.is_ok() { "synced" } else { FAILED }.into(),
                detail: match result {
                    Ok(detail) => detail,
                    Err(e) => format!("{e:#}"),
                },
            });
        }
        Ok(outcomes)
    }

    async fn sync_table(
        &self,
        source: &str,
        wave: usize,
        mut state: Value,
    ) -> anyhow::Result<String> {
        let (ns, name) = self.target(source)?;
        let floe = self
            .floe
            .load_table(&ns, &name)
            .await?
            .with_context(|| format!("{} is no longer in Floe", self.target_name(source)))?;
        let described = self.source.describe(source).await?;
        let detail = match &described {
            SourceTable::Iceberg { metadata_location } => {
                let known = state["source-table"]["metadata-location"].as_str();
                if known == Some(metadata_location.as_str()) {
                    return Ok("source unchanged".into());
                }
                if state["floe-metadata-location"].as_str() != Some(floe.metadata_location.as_str())
                {
                    bail!(
                        "Floe's table changed since the last sync (someone wrote to it in Floe): \
                         cut over instead, or roll the table back"
                    );
                }
                let table = match self
                    .floe
                    .register(&ns, &name, metadata_location, true)
                    .await?
                {
                    Ok(table) => table,
                    Err((status, message)) => {
                        bail!("Floe refused the new metadata ({status}): {message}")
                    }
                };
                record_floe(&mut state, &table);
                format!("now at {metadata_location}")
            }
            SourceTable::Hive(hive) => {
                let body = convert_body(&self.floe.warehouse, source, &ns, &name, hive, "sync")?;
                let report = match self.floe.convert(&body).await? {
                    Ok(report) => report,
                    Err((status, message)) => bail!("sync refused ({status}): {message}"),
                };
                let table = self
                    .floe
                    .load_table(&ns, &name)
                    .await?
                    .context("the table left Floe")?;
                record_floe(&mut state, &table);
                format!(
                    "{} new files, {} rows",
                    report["added-files"], report["added-records"]
                )
            }
            SourceTable::Unsupported { reason } => bail!("{reason}"),
        };
        state["source-table"] = serde_json::to_value(&described)?;
        advance(&mut state, MIGRATED, &format!("synced: {detail}"));
        self.floe
            .put_record(&self.plan.name, source, wave, &state)
            .await?;
        Ok(detail)
    }

    /// Cuts every migrated table of `wave` over: a last sync for tables kept in sync, then
    /// the source points its readers at Floe (what it changed is recorded for a rollback).
    pub async fn cut_over(&self, wave: usize) -> anyhow::Result<Vec<Outcome>> {
        if !self.plan.wave(wave)?.cut_over {
            bail!("wave {wave} does not allow a cut-over (set cut-over = true in the plan)");
        }
        let mut outcomes = Vec::new();
        for (source, (w, state)) in self.records().await? {
            if w != wave || state["step"].as_str() != Some(MIGRATED) {
                continue;
            }
            let result = self.cut_over_table(&source, w, state).await;
            outcomes.push(Outcome {
                target: self.target_name(&source),
                source: source.clone(),
                wave: w,
                step: if result.is_ok() { CUT_OVER } else { FAILED }.into(),
                detail: match result {
                    Ok(detail) => detail,
                    Err(e) => format!("{e:#}"),
                },
            });
        }
        Ok(outcomes)
    }

    async fn cut_over_table(
        &self,
        source: &str,
        wave: usize,
        state: Value,
    ) -> anyhow::Result<String> {
        if state["sync"] == json!(true) {
            self.sync_table(source, wave, state).await?;
        }
        let mut state = self
            .records()
            .await?
            .remove(source)
            .map(|(_, s)| s)
            .context("the table's record is gone")?;
        let (ns, name) = self.target(source)?;
        let floe = self
            .floe
            .load_table(&ns, &name)
            .await?
            .context("the table is not in Floe")?;
        let saved = self
            .source
            .cut_over(source, &self.target_name(source), &floe.metadata_location)
            .await?;
        let detail = match &saved {
            Some(_) => "the source points at Floe".to_string(),
            None => "this source has nothing to point at Floe; it is left as it is".to_string(),
        };
        state["saved"] = saved.unwrap_or(Value::Null);
        state["cut-over-metadata-location"] = json!(floe.metadata_location);
        advance(&mut state, CUT_OVER, &detail);
        self.floe
            .put_record(&self.plan.name, source, wave, &state)
            .await?;
        Ok(detail)
    }

    /// Returns Floe and the source to their state before `wave`: puts back what cut-overs
    /// changed, removes the wave's tables from Floe (their files stay) and the namespaces it
    /// created if empty, and says what was written to either side in between.
    pub async fn rollback(&self, wave: usize) -> anyhow::Result<Vec<Outcome>> {
        self.plan.wave(wave)?;
        let mut outcomes = Vec::new();
        let mut namespaces: Vec<Vec<String>> = Vec::new();
        for (source, (w, state)) in self.records().await? {
            if w != wave
                || !matches!(
                    state["step"].as_str(),
                    Some(MIGRATING) | Some(MIGRATED) | Some(CUT_OVER) | Some(FAILED)
                )
            {
                continue;
            }
            for ns in state["created-namespaces"].as_array().into_iter().flatten() {
                if let Ok(ns) = serde_json::from_value::<Vec<String>>(ns.clone()) {
                    namespaces.push(ns);
                }
            }
            let result = self.rollback_table(&source, w, state).await;
            outcomes.push(Outcome {
                target: self.target_name(&source),
                source: source.clone(),
                wave: w,
                step: if result.is_ok() { ROLLED_BACK } else { FAILED }.into(),
                detail: match result {
                    Ok(detail) => detail,
                    Err(e) => format!("{e:#}"),
                },
            });
        }
        // Deepest first, so a parent empties before it is tried.
        namespaces.sort_by_key(|ns| std::cmp::Reverse(ns.len()));
        namespaces.dedup();
        for ns in namespaces {
            self.floe.drop_namespace(&ns).await?;
        }
        Ok(outcomes)
    }

    async fn rollback_table(
        &self,
        source: &str,
        wave: usize,
        mut state: Value,
    ) -> anyhow::Result<String> {
        let mut notes = Vec::new();
        if !state["saved"].is_null() {
            self.source.restore(source, &state["saved"]).await?;
            notes.push("the source's parameters are restored".to_string());
        }
        let (ns, name) = self.target(source)?;
        let ours = match (
            self.floe.load_table(&ns, &name).await?,
            state["step"].as_str(),
        ) {
            (None, _) => None,
            (Some(table), _) => {
                let registered = state["source-table"]["metadata-location"].as_str();
                let converted =
                    table.metadata["properties"]["floe.migration.source"].as_str() == Some(source);
                let recorded = state["floe-metadata-location"].is_string();
                (recorded || converted || registered == Some(table.metadata_location.as_str()))
                    .then_some(table)
            }
        };
        if let Some(table) = ours {
            let writes = writes_since(&state, &table.metadata);
            if writes.is_empty() {
                notes.push("no writes in Floe since the migration".into());
            } else {
                notes.push(format!(
                    "{} snapshot(s) written in Floe since the migration are left out: {}",
                    writes.len(),
                    writes.join("; ")
                ));
            }
            self.floe.unregister(&ns, &name).await?;
        }
        if let Ok(now) = self.source.describe(source).await {
            let was: Option<SourceTable> =
                serde_json::from_value(state["source-table"].clone()).ok();
            if was.as_ref().is_some_and(|was| *was != now) {
                notes.push("the source changed since the migration".into());
            }
        }
        let detail = notes.join("; ");
        for key in [
            "floe-metadata-location",
            "floe-snapshot-id",
            "floe-sequence-number",
            "saved",
        ] {
            state.as_object_mut().map(|o| o.remove(key));
        }
        advance(&mut state, ROLLED_BACK, &detail);
        self.floe
            .put_record(&self.plan.name, source, wave, &state)
            .await?;
        Ok(detail)
    }
}

fn conflict_action(on_conflict: OnConflict) -> (String, String) {
    match on_conflict {
        OnConflict::Fail => (
            "conflict".into(),
            "Floe holds a table of this name; run stops it (on-conflict = fail)".into(),
        ),
        OnConflict::Skip => (
            "skip".into(),
            "Floe holds a table of this name (on-conflict = skip)".into(),
        ),
        OnConflict::Replace => (
            "replace".into(),
            "Floe's table of this name is replaced (its files stay)".into(),
        ),
    }
}

/// The convert request for a Hive table.
fn convert_body(
    warehouse: &str,
    source: &str,
    ns: &[String],
    name: &str,
    hive: &crate::source::HiveTable,
    mode: &str,
) -> anyhow::Result<Value> {
    Ok(json!({
        "warehouse": warehouse,
        "namespace": ns,
        "table": name,
        "source": source,
        "location": hive.location,
        "schema": hive_schema(hive)?,
        "partition-columns": hive.partition_keys.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        "partitions": hive.partitions.iter().map(|p| json!({"values": p.values, "location": p.location})).collect::<Vec<_>>(),
        "mode": mode,
    }))
}

fn record_floe(state: &mut Value, table: &FloeTable) {
    state["floe-metadata-location"] = json!(table.metadata_location);
    state["floe-snapshot-id"] = table.metadata["current-snapshot-id"].clone();
    state["floe-sequence-number"] = table.metadata["last-sequence-number"].clone();
}

/// A value of the current snapshot's summary.
pub fn summary_of(metadata: &Value, key: &str) -> String {
    current_snapshot(metadata)
        .and_then(|s| s["summary"][key].as_str().map(str::to_string))
        .unwrap_or_else(|| "0".into())
}

pub fn current_snapshot(metadata: &Value) -> Option<&Value> {
    let id = metadata["current-snapshot-id"].as_i64()?;
    metadata["snapshots"]
        .as_array()?
        .iter()
        .find(|s| s["snapshot-id"].as_i64() == Some(id))
}

/// The snapshots Floe's table gained after the migration recorded it: those numbered after the
/// sequence number it had, and — for format-version 1, which numbers nothing — those that
/// descend from the snapshot it was at (every snapshot, when it had none).
fn writes_since(state: &Value, metadata: &Value) -> Vec<String> {
    let since = state["floe-sequence-number"].as_i64();
    // A record from before the migration noted Floe's table has no baseline to compare with.
    let Some(recorded) = state.get("floe-snapshot-id").map(Value::as_i64) else {
        return Vec::new();
    };
    let snapshots: Vec<&Value> = metadata["snapshots"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let parent_of = |id: i64| {
        snapshots
            .iter()
            .find(|s| s["snapshot-id"].as_i64() == Some(id))
            .and_then(|s| s["parent-snapshot-id"].as_i64())
    };
    let descends = |snapshot: &Value| {
        let Some(mut id) = snapshot["snapshot-id"].as_i64() else {
            return false;
        };
        let Some(recorded) = recorded else {
            // The table had no snapshot when it was recorded: every snapshot is newer.
            return true;
        };
        // Bounded by the number of snapshots: a cycle in crafted metadata ends the walk.
        for _ in 0..snapshots.len() {
            match parent_of(id) {
                Some(parent) if parent == recorded => return true,
                Some(parent) => id = parent,
                None => return false,
            }
        }
        false
    };
    snapshots
        .iter()
        .filter(|s| match (since, s["sequence-number"].as_i64()) {
            (Some(since), Some(sequence)) if sequence > 0 => sequence > since || descends(s),
            _ => descends(s),
        })
        .map(|s| {
            format!(
                "snapshot {} ({} at {} ms, {} records added)",
                s["snapshot-id"],
                s["summary"]["operation"].as_str().unwrap_or("?"),
                s["timestamp-ms"],
                s["summary"]["added-records"].as_str().unwrap_or("0")
            )
        })
        .collect()
}

#[cfg(test)]
mod writes_since_tests {
    use super::*;

    fn snapshot(id: i64, parent: Option<i64>, sequence: Option<i64>) -> Value {
        let mut s =
            json!({"snapshot-id": id, "timestamp-ms": id, "summary": {"operation": "append"}});
        if let Some(parent) = parent {
            s["parent-snapshot-id"] = json!(parent);
        }
        if let Some(sequence) = sequence {
            s["sequence-number"] = json!(sequence);
        }
        s
    }

    #[test]
    fn v1_writes_are_the_recorded_snapshots_descendants() {
        let metadata = json!({"snapshots": [
            snapshot(1, None, None), snapshot(2, Some(1), None), snapshot(3, Some(2), None),
        ]});
        let state = json!({"floe-snapshot-id": 2, "floe-sequence-number": null});
        let writes = writes_since(&state, &metadata);
        assert_eq!(writes.len(), 1, "{writes:?}");
        assert!(writes[0].starts_with("snapshot 3 "), "{writes:?}");
        let empty_at_migration = json!({"floe-snapshot-id": null});
        assert_eq!(writes_since(&empty_at_migration, &metadata).len(), 3);
        assert!(writes_since(&json!({}), &metadata).is_empty());
    }

    #[test]
    fn v2_writes_are_numbered_after_the_record() {
        let metadata = json!({"snapshots": [
            snapshot(1, None, Some(1)), snapshot(2, Some(1), Some(2)), snapshot(9, None, Some(3)),
        ]});
        let state = json!({"floe-snapshot-id": 2, "floe-sequence-number": 2});
        let writes = writes_since(&state, &metadata);
        assert_eq!(writes.len(), 1, "{writes:?}");
        assert!(writes[0].starts_with("snapshot 9 "), "{writes:?}");
    }

    #[test]
    fn a_cycle_in_crafted_metadata_ends() {
        let metadata =
            json!({"snapshots": [snapshot(1, Some(2), None), snapshot(2, Some(1), None)]});
        assert!(writes_since(&json!({"floe-snapshot-id": 5}), &metadata).is_empty());
    }
}
