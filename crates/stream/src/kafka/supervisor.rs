//! The supervisor every node runs over the stream pipelines of its catalog. Nodes sharing a
//! store split each pipeline's source partitions: every node joins every pipeline as a member
//! (a lease in the store), the partitions (sorted) are dealt round-robin over the live members
//! (sorted), and each partition is leased in the store, so exactly one node reads it. A node
//! that stops renewing drops out of the members and its partition leases run out, so the
//! others take its partitions over; a node whose run was overtaken is fenced by the table's
//! offsets (see [`super::Pipeline`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floe_catalog::CatalogError;
use floe_catalog::clock::now_ms;
use floe_catalog::pipelines::PipelineStore;
use floe_catalog::service::CatalogService;
use floe_sql::SqlEngine;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Pipeline, PipelineSpec};

/// A pipeline's partitions as the broker listed them, and when.
type Listed = (std::time::Instant, Vec<(String, i32)>);

/// A pipeline running on this node, over the partitions it holds.
struct Running {
    pipeline: Arc<Pipeline>,
    partitions: BTreeSet<(String, i32)>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// Runs the pipelines this node holds leases on.
pub struct Pipelines {
    store: Arc<dyn PipelineStore>,
    catalog: Arc<CatalogService>,
    sql: Arc<SqlEngine>,
    /// Floe's schema registry, for pipelines that read registry formats.
    registry: Option<Arc<dyn crate::registry::SchemaSource>>,
    node: String,
    lease: Duration,
    running: Mutex<HashMap<String, Running>>,
    /// Each pipeline's partitions as the broker last told them, and when.
    partitions: Mutex<HashMap<String, Listed>>,
    /// The last error of each pipeline that stopped on one here.
    errors: Arc<Mutex<HashMap<String, String>>>,
}

impl std::fmt::Debug for Pipelines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pipelines({})", self.node)
    }
}

impl Pipelines {
    /// The store the pipelines and their leases are kept in.
    pub fn store(&self) -> &Arc<dyn PipelineStore> {
        &self.store
    }

    /// This node's name among the members.
    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn new(
        store: Arc<dyn PipelineStore>,
        catalog: Arc<CatalogService>,
        sql: Arc<SqlEngine>,
        lease: Duration,
    ) -> Self {
        Self {
            store,
            catalog,
            sql,
            registry: None,
            node: format!("node-{}", uuid::Uuid::now_v7()),
            lease,
            running: Mutex::new(HashMap::new()),
            partitions: Mutex::new(HashMap::new()),
            errors: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Pipelines look schema ids up in `registry` unless their spec names another.
    pub fn with_registry(mut self, registry: Arc<dyn crate::registry::SchemaSource>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Joins, leases, starts, renews and stops pipelines every third of the lease until
    /// `shutdown`; then stops them all and gives their leases up.
    pub async fn supervise(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.lease / 3);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {
                    if let Err(e) = self.pass().await {
                        tracing::warn!(error = %e, "supervise pipelines");
                    }
                }
            }
        }
        let running: Vec<(String, Running)> =
            self.running.lock().expect("pipelines").drain().collect();
        for (name, run) in running {
            run.stop.cancel();
            let _ = run.task.await;
            let _ = self.store.leave_pipeline(&name, &self.node).await;
        }
    }

    /// The pipeline's partitions from the broker, or as last seen when it does not answer.
    async fn partitions_of(&self, spec: &PipelineSpec) -> Option<Vec<(String, i32)>> {
        // The broker is asked again every half minute (topics gain partitions rarely).
        if let Some((at, partitions)) = self
            .partitions
            .lock()
            .expect("pipeline partitions")
            .get(&spec.name)
            && at.elapsed() < Duration::from_secs(30)
        {
            return Some(partitions.clone());
        }
        let asked = {
            let spec = spec.clone();
            tokio::task::spawn_blocking(move || super::partitions(&spec)).await
        };
        let mut known = self.partitions.lock().expect("pipeline partitions");
        match asked {
            Ok(Ok(partitions)) if !partitions.is_empty() => {
                known.insert(
                    spec.name.clone(),
                    (std::time::Instant::now(), partitions.clone()),
                );
                Some(partitions)
            }
            other => {
                let error = match other {
                    Ok(Ok(_)) => "the broker lists no partitions for the topics".to_string(),
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                };
                self.errors
                    .lock()
                    .expect("pipeline errors")
                    .insert(spec.name.clone(), error);
                known
                    .get(&spec.name)
                    .map(|(_, partitions)| partitions.clone())
            }
        }
    }

    async fn pass(&self) -> Result<(), CatalogError> {
        let defined = self.store.list_pipelines().await?;
        let mut keep = Vec::new();
        for record in &defined {
            let spec: PipelineSpec = match serde_json::from_value(record.spec.clone()) {
                Ok(spec) => spec,
                Err(e) => {
                    self.errors
                        .lock()
                        .expect("pipeline errors")
                        .insert(record.name.clone(), format!("definition: {e}"));
                    continue;
                }
            };
            keep.push(record.name.clone());
            let Some(partitions) = self.partitions_of(&spec).await else {
                continue;
            };
            let now = now_ms();
            let until = now + self.lease.as_millis() as i64;
            let members = self
                .store
                .join_pipeline(&record.name, &self.node, now, until)
                .await?;
            let seat = members.iter().position(|m| *m == self.node).unwrap_or(0);
            let share: Vec<(String, i32)> = partitions
                .iter()
                .enumerate()
                .filter(|(i, _)| i % members.len().max(1) == seat)
                .map(|(_, p)| p.clone())
                .collect();
            let granted: BTreeSet<(String, i32)> = self
                .store
                .lease_partitions(&record.name, &self.node, now, until, &share)
                .await?
                .into_iter()
                .collect();
            // Same partitions and still running: nothing to do but the renewal above.
            let previous = {
                let mut running = self.running.lock().expect("pipelines");
                let same = running
                    .get(&record.name)
                    .is_some_and(|r| r.partitions == granted && !r.task.is_finished());
                if same {
                    continue;
                }
                running.remove(&record.name)
            };
            // The share changed (a node came or went) or the run ended: stop the run (its
            // uncommitted records are read again by whoever reads them next), give up what
            // is no longer ours, start over on what is.
            if let Some(run) = previous {
                run.stop.cancel();
                let _ = run.task.await;
            }
            let keep_leases: Vec<(String, i32)> = granted.iter().cloned().collect();
            self.store
                .release_partitions(&record.name, &self.node, &keep_leases)
                .await?;
            if !granted.is_empty() {
                self.start(&record.name, spec, granted);
            }
        }
        // Stop what was deleted.
        let gone: Vec<(String, Running)> = {
            let mut running = self.running.lock().expect("pipelines");
            let names: Vec<String> = running
                .keys()
                .filter(|name| !keep.contains(name))
                .cloned()
                .collect();
            names
                .into_iter()
                .filter_map(|name| running.remove(&name).map(|run| (name, run)))
                .collect()
        };
        for (name, run) in gone {
            run.stop.cancel();
            let _ = run.task.await;
            let _ = self.store.leave_pipeline(&name, &self.node).await;
        }
        Ok(())
    }

    fn start(&self, name: &str, spec: PipelineSpec, partitions: BTreeSet<(String, i32)>) {
        let pipeline = match Pipeline::new(spec, self.catalog.clone(), self.sql.clone()) {
            Ok(p) => Arc::new(match &self.registry {
                Some(registry) => p.with_registry(registry.clone()),
                None => p,
            }),
            Err(e) => {
                self.errors
                    .lock()
                    .expect("pipeline errors")
                    .insert(name.to_string(), e.to_string());
                return;
            }
        };
        let stop = CancellationToken::new();
        let task = {
            let pipeline = pipeline.clone();
            let stop = stop.clone();
            let errors = self.errors.clone();
            let name = name.to_string();
            let partitions = partitions.clone();
            tokio::spawn(async move {
                if let Err(e) = pipeline.run_on(stop, Some(&partitions)).await {
                    tracing::warn!(pipeline = %name, error = %e, "pipeline stopped");
                    errors
                        .lock()
                        .expect("pipeline errors")
                        .insert(name, e.to_string());
                }
            })
        };
        tracing::info!(pipeline = %name, node = %self.node, partitions = partitions.len(), "start a pipeline");
        self.running.lock().expect("pipelines").insert(
            name.to_string(),
            Running {
                pipeline,
                partitions,
                stop,
                task,
            },
        );
    }

    /// Prometheus text for `/metrics`: the counters of the pipelines running here.
    pub fn render_metrics(&self) -> String {
        let running = self.running.lock().expect("pipelines");
        let mut names: Vec<&String> = running.keys().collect();
        names.sort();
        let mut text = String::new();
        type Read = fn(&super::PipelineStats) -> f64;
        let families: [(&str, &str, &str, Read); 10] = [
            (
                "floe_pipeline_records_total",
                "counter",
                "Records committed to the table.",
                |s| s.records_committed as f64,
            ),
            (
                "floe_pipeline_bytes_total",
                "counter",
                "Bytes of record values committed.",
                |s| s.bytes_committed as f64,
            ),
            (
                "floe_pipeline_commits_total",
                "counter",
                "Snapshots committed.",
                |s| s.commits as f64,
            ),
            (
                "floe_pipeline_files_total",
                "counter",
                "Data files written by committed snapshots (divide by commits for files per commit).",
                |s| s.files_written as f64,
            ),
            (
                "floe_pipeline_rejected_records_total",
                "counter",
                "Records the table could not take.",
                |s| s.rejected_records as f64,
            ),
            (
                "floe_pipeline_dead_letters_total",
                "counter",
                "Rows written to the dead-letter table.",
                |s| s.dead_letters as f64,
            ),
            (
                "floe_pipeline_lost_records_total",
                "counter",
                "Records the broker's retention deleted before the pipeline read them.",
                |s| s.records_lost as f64,
            ),
            (
                "floe_pipeline_commit_seconds_total",
                "counter",
                "Time spent committing.",
                |s| s.commit_seconds,
            ),
            (
                "floe_pipeline_last_commit_seconds",
                "gauge",
                "How long the last commit took.",
                |s| s.last_commit_seconds,
            ),
            (
                "floe_pipeline_last_commit_files",
                "gauge",
                "Data files the last commit wrote.",
                |s| s.last_commit_files as f64,
            ),
        ];
        let stats: Vec<(&String, super::PipelineStats)> = names
            .iter()
            .map(|name| (*name, running[*name].pipeline.stats()))
            .collect();
        for (name, kind, help, read) in families {
            text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (pipeline, stats) in &stats {
                let value = read(stats);
                text.push_str(&format!("{name}{{pipeline=\"{pipeline}\"}} {value}\n"));
            }
        }
        let name = "floe_pipeline_partition_lag";
        text.push_str(&format!(
            "# HELP {name} Records on the broker past the table's committed offset, per partition read here (high watermark from librdkafka's statistics every 5 s).\n# TYPE {name} gauge\n"
        ));
        for (pipeline, stats) in &stats {
            for partition in &stats.partitions {
                if let Some(lag) = partition.lag {
                    text.push_str(&format!(
                        "{name}{{pipeline=\"{pipeline}\",topic=\"{}\",partition=\"{}\"}} {lag}\n",
                        partition.topic, partition.partition
                    ));
                }
            }
        }
        text
    }

    /// What this node knows of a pipeline: whether it runs here, its counters, its last
    /// error.
    pub fn local_status(&self, name: &str) -> Value {
        let running = self.running.lock().expect("pipelines");
        let here = running.get(name);
        let stats = here.map(|r| r.pipeline.stats());
        let rates = stats.as_ref().map(|s| {
            let seconds = ((now_ms() - s.started_at_ms) as f64 / 1000.0).max(0.001);
            json!({
                "records-per-second": s.records_committed as f64 / seconds,
                "bytes-per-second": s.bytes_committed as f64 / seconds,
                "files-per-commit": if s.commits > 0 { s.files_written as f64 / s.commits as f64 } else { 0.0 },
                "mean-commit-seconds": if s.commits > 0 { s.commit_seconds / s.commits as f64 } else { 0.0 },
            })
        });
        json!({
            "running-here": here.is_some_and(|r| !r.task.is_finished()),
            "partitions-here": here.map(|r| r.partitions.iter().map(|(t, p)| json!({"topic": t, "partition": p})).collect::<Vec<_>>()),
            "stats": stats,
            "rates": rates,
            "last-error": self.errors.lock().expect("pipeline errors").get(name),
        })
    }
}
