//! Stream pipelines as a managed resource (`/api/v1/pipelines`), and the supervisor every
//! node runs. Nodes sharing a store split each pipeline's source partitions: every node
//! joins every pipeline as a member (a lease in the store), the partitions (sorted) are dealt
//! round-robin over the live members (sorted), and each partition is leased in the store, so
//! exactly one node reads it. A node that stops renewing drops out of the members and its
//! partition leases run out, so the others take its partitions over; a node whose run was
//! overtaken is fenced by the table's offsets (see `floe_stream::kafka`).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege, Scope};
use floe_catalog::pipelines::{PipelineRecord, PipelineStore};
use floe_catalog::service::CatalogService;
use floe_sql::SqlEngine;
use floe_stream::kafka::{Pipeline, PipelineSpec};
use iceberg::{NamespaceIdent, TableIdent};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;

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
    registry: Option<Arc<dyn floe_stream::registry::SchemaSource>>,
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

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Pipelines {
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
    pub fn with_registry(mut self, registry: Arc<dyn floe_stream::registry::SchemaSource>) -> Self {
        self.registry = Some(registry);
        self
    }

    pub fn store(&self) -> &Arc<dyn PipelineStore> {
        &self.store
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
            tokio::task::spawn_blocking(move || floe_stream::kafka::partitions(&spec)).await
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
        type Read = fn(&floe_stream::kafka::PipelineStats) -> f64;
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
        let stats: Vec<(&String, floe_stream::kafka::PipelineStats)> = names
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
    fn local_status(&self, name: &str) -> Value {
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

fn pipelines(state: &AppState) -> ApiResult<&Arc<Pipelines>> {
    state.pipelines.as_ref().ok_or_else(|| {
        ApiError(CatalogError::Unavailable(
            "pipelines are not enabled on this server".into(),
        ))
    })
}

/// The target namespace's scope, once the caller is known to hold `manage-pipelines` on it.
async fn authorize(
    state: &AppState,
    caller: &Caller,
    spec: &PipelineSpec,
) -> ApiResult<uuid::Uuid> {
    let wh = state
        .catalog
        .visible_warehouse(caller, &spec.warehouse)
        .await?;
    let namespace = NamespaceIdent::from_vec(spec.namespace.clone())
        .map_err(|e| ApiError(CatalogError::bad_request(format!("namespace: {e}"))))?;
    caller.require(
        Privilege::ManagePipelines,
        &Scope::namespace(wh.warehouse.id, &namespace),
        || CatalogError::no_such_namespace(namespace.join(".")),
    )?;
    Ok(wh.warehouse.id)
}

fn spec_of(record: &PipelineRecord) -> ApiResult<PipelineSpec> {
    serde_json::from_value(record.spec.clone()).map_err(|e| {
        ApiError(CatalogError::internal(
            "pipeline definition",
            std::io::Error::other(e.to_string()),
        ))
    })
}

/// A stored pipeline the caller may manage (404 otherwise: existence does not leak).
async fn managed(state: &AppState, caller: &Caller, name: &str) -> ApiResult<PipelineRecord> {
    let missing = || {
        ApiError(CatalogError::NotFound {
            error_type: "NotFoundException",
            message: format!("no pipeline {name}"),
        })
    };
    let record = pipelines(state)?
        .store
        .get_pipeline(name)
        .await?
        .ok_or_else(missing)?;
    let spec = spec_of(&record)?;
    authorize(state, caller, &spec)
        .await
        .map_err(|_| missing())?;
    Ok(record)
}

/// `POST /api/v1/pipelines`: defines a pipeline (it starts within a lease period on some
/// node). Needs `manage-pipelines` on the target namespace.
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(spec): JsonBody<PipelineSpec>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let supervisor = pipelines(&state)?;
    spec.validate()
        .map_err(|e| ApiError(CatalogError::bad_request(e.to_string())))?;
    let warehouse_id = authorize(&state, &caller, &spec).await?;
    let namespace = NamespaceIdent::from_vec(spec.namespace.clone())
        .map_err(|e| ApiError(CatalogError::bad_request(format!("namespace: {e}"))))?;
    state
        .catalog
        .load_namespace(&caller, &spec.warehouse, &namespace)
        .await?;
    supervisor
        .store
        .create_pipeline(&spec.name, warehouse_id, &json!(spec))
        .await?;
    Ok((StatusCode::CREATED, Json(json!(spec.redacted()))))
}

/// `GET /api/v1/pipelines`: the pipelines the caller may manage.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Value>> {
    let supervisor = pipelines(&state)?;
    // Holders of manage-pipelines on the server see every pipeline; others those whose
    // namespace (or an ancestor) they hold it on, chosen by the store's query.
    let records = if caller
        .grants
        .allows(Privilege::ManagePipelines, &Scope::server())
    {
        supervisor.store.list_pipelines().await?
    } else {
        supervisor
            .store
            .list_managed_pipelines(caller.principal.id)
            .await?
    };
    let mut visible = Vec::new();
    for record in records {
        let Ok(spec) = spec_of(&record) else { continue };
        visible.push(shown(record, &spec));
    }
    Ok(Json(json!({"pipelines": visible})))
}

/// `GET /api/v1/pipelines/{name}`.
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let record = managed(&state, &caller, &name).await?;
    let spec = spec_of(&record)?;
    Ok(Json(json!(shown(record, &spec))))
}

/// A stored pipeline as the API shows it: its secrets masked.
fn shown(mut record: PipelineRecord, spec: &PipelineSpec) -> PipelineRecord {
    record.spec = json!(spec.redacted());
    record
}

/// `DELETE /api/v1/pipelines/{name}`: the pipeline stops within a lease period; its table
/// and what it committed stay.
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    managed(&state, &caller, &name).await?;
    pipelines(&state)?.store.delete_pipeline(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v1/pipelines/{name}/status`: who runs it, the offsets the table has committed
/// per partition, and (on the node running it) its counters and last error.
pub async fn status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let record = managed(&state, &caller, &name).await?;
    let spec = spec_of(&record)?;
    let namespace = NamespaceIdent::from_vec(spec.namespace.clone())
        .map_err(|e| ApiError(CatalogError::bad_request(format!("namespace: {e}"))))?;
    let ident = TableIdent::new(namespace, spec.table.clone());
    let committed = match state
        .catalog
        .load_table(&Caller::system(), &spec.warehouse, &ident)
        .await
    {
        Ok(loaded) => spec.committed_offsets(&loaded.metadata),
        Err(_) => HashMap::new(),
    };
    // Lag needs the broker; a broker that does not answer is reported, not fatal.
    let lag = {
        let spec = spec.clone();
        tokio::task::spawn_blocking(move || floe_stream::kafka::lag(&spec, &committed)).await
    };
    let leases = pipelines(&state)?.store.partition_leases(&name).await?;
    let (partitions, broker_error) = match lag {
        Ok(Ok(lags)) => (
            Value::Array(
                lags.iter()
                    .map(|lag| {
                        let mut entry = json!(lag);
                        let lease = leases
                            .iter()
                            .find(|l| l.topic == lag.topic && l.partition == lag.partition);
                        entry["owner"] = json!(lease.and_then(|l| l.owner.clone()));
                        entry["lease-until-ms"] = json!(lease.and_then(|l| l.lease_until_ms));
                        entry
                    })
                    .collect(),
            ),
            Value::Null,
        ),
        Ok(Err(e)) => (json!(leases), json!(e.to_string())),
        Err(e) => (json!(leases), json!(e.to_string())),
    };
    let mut answer = pipelines(&state)?.local_status(&name);
    answer["name"] = json!(name);
    answer["node"] = json!(pipelines(&state)?.node);
    answer["partitions"] = partitions;
    answer["broker-error"] = broker_error;
    Ok(Json(answer))
}
