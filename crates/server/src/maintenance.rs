//! Maintenance over HTTP: snapshot expiry and orphan cleanup run on request, jobs queued for
//! the scheduler and their status, and maintenance policies. Everything needs
//! `manage-maintenance` on the object concerned, and nothing else: once that is checked the
//! work is done as the system (the request's audit record names the caller).

use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::{Path, Query, State};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_catalog::jobs::{JobFilter, JobRecord, JobStatus};
use floe_catalog::service::SecurableRef;
use floe_maintenance::exec::expire::{ExpireOptions, expire_snapshots as run_expiry};
use floe_maintenance::exec::orphans::{
    DEFAULT_MIN_AGE_MS, OrphanOptions, remove_orphan_files as run_orphans,
};
use floe_maintenance::exec::{Maintainer, MaintenanceError};
use floe_maintenance::policy::{Effective, Policy};
use floe_maintenance::scheduler::Scheduler;
use iceberg::{NamespaceIdent, TableIdent};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;

pub(crate) fn maintenance_error(e: MaintenanceError) -> ApiError {
    match e {
        MaintenanceError::Catalog(e) => ApiError(e),
        MaintenanceError::Unsupported(message) | MaintenanceError::Invalid(message) => {
            ApiError(CatalogError::bad_request(message))
        }
        MaintenanceError::Io { what, message } => {
            ApiError(CatalogError::internal(what, std::io::Error::other(message)))
        }
    }
}

fn table_ident(namespace: &[String], table: &str) -> ApiResult<TableIdent> {
    let namespace = NamespaceIdent::from_vec(namespace.to_vec())
        .map_err(|e| ApiError(CatalogError::bad_request(format!("namespace: {e}"))))?;
    Ok(TableIdent::new(namespace, table.to_string()))
}

/// The table, once the caller is known to hold `manage-maintenance` on it.
async fn maintained_table(
    state: &AppState,
    caller: &Caller,
    warehouse: &str,
    namespace: &[String],
    table: &str,
) -> ApiResult<TableIdent> {
    let ident = table_ident(namespace, table)?;
    state
        .catalog
        .authorize_table(caller, warehouse, &ident, Privilege::ManageMaintenance)
        .await?;
    Ok(ident)
}

pub(crate) fn maintainer(state: &AppState) -> Maintainer {
    Maintainer::new(state.catalog.clone(), state.sql.clone())
        .with_orphan_age_floor(state.orphan_age_floor_ms)
}

fn scheduler(state: &AppState) -> ApiResult<&std::sync::Arc<Scheduler>> {
    state.scheduler.as_ref().ok_or_else(|| {
        ApiError(CatalogError::Unavailable(
            "the maintenance scheduler is not running on this server".into(),
        ))
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ExpireRequest {
    pub warehouse: String,
    /// Namespace levels.
    pub namespace: Vec<String>,
    pub table: String,
    /// List what would expire and be deleted, change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Overrides the table's `history.expire.max-snapshot-age-ms` for this run.
    pub max_snapshot_age_ms: Option<i64>,
    /// Overrides the table's `history.expire.min-snapshots-to-keep` for this run.
    pub min_snapshots_to_keep: Option<usize>,
}

/// `POST /api/v1/maintenance/expire-snapshots`: expires snapshots per the table's retention
/// policy, then deletes the files only they reached. Needs `manage-maintenance` on the table.
pub async fn expire_snapshots(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<ExpireRequest>,
) -> ApiResult<Json<Value>> {
    let ident = maintained_table(
        &state,
        &caller,
        &request.warehouse,
        &request.namespace,
        &request.table,
    )
    .await?;
    let options = ExpireOptions {
        dry_run: request.dry_run,
        max_snapshot_age_ms: request.max_snapshot_age_ms,
        min_snapshots_to_keep: request.min_snapshots_to_keep,
        metadata_files_to_keep: None,
    };
    let report = run_expiry(&maintainer(&state), &request.warehouse, &ident, &options)
        .await
        .map_err(maintenance_error)?;
    Ok(Json(json!(report)))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OrphanRequest {
    pub warehouse: String,
    pub namespace: Vec<String>,
    pub table: String,
    /// List what would be deleted, change nothing (the default).
    #[serde(default = "yes")]
    pub dry_run: bool,
    /// Only files older than this are orphans (default 3 days).
    pub older_than_ms: Option<i64>,
}

fn yes() -> bool {
    true
}

/// `POST /api/v1/maintenance/remove-orphan-files`: deletes files under the table's location
/// that no metadata references and that are older than the minimum age. A dry run (the
/// default) lists them. Needs `manage-maintenance` on the table.
pub async fn remove_orphan_files(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<OrphanRequest>,
) -> ApiResult<Json<Value>> {
    let ident = maintained_table(
        &state,
        &caller,
        &request.warehouse,
        &request.namespace,
        &request.table,
    )
    .await?;
    let options = OrphanOptions {
        dry_run: request.dry_run,
        older_than_ms: request.older_than_ms.unwrap_or(DEFAULT_MIN_AGE_MS),
    };
    let report = run_orphans(&maintainer(&state), &request.warehouse, &ident, &options)
        .await
        .map_err(maintenance_error)?;
    Ok(Json(json!(report)))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RunRequest {
    pub warehouse: String,
    pub namespace: Vec<String>,
    pub table: String,
    /// `compact`, `expire-snapshots`, `remove-orphan-files` or `retention`.
    pub kind: String,
    /// Options of this run: `dry-run`, `target-file-size-bytes`, `max-snapshot-age-ms`,
    /// `min-snapshots-to-keep`, `older-than-ms`, `retention-column`, `retention-days`.
    #[serde(default)]
    pub options: serde_json::Map<String, Value>,
    /// Higher runs sooner within the warehouse (default 100: requests go before triggers).
    pub priority: Option<i32>,
    /// Answer when the job has finished (or after `wait-seconds`, default 600).
    #[serde(default)]
    pub wait: bool,
    pub wait_seconds: Option<u64>,
}

/// The longest a request waits for its job (`wait-seconds` beyond it waits this long).
const MAX_WAIT_SECONDS: u64 = 3600;

const OPTION_KEYS: [&str; 7] = [
    "dry-run",
    "target-file-size-bytes",
    "max-snapshot-age-ms",
    "min-snapshots-to-keep",
    "older-than-ms",
    "retention-column",
    "retention-days",
];

/// `POST /api/v1/jobs`: queues a job (or finds the equal one already queued or running).
pub async fn run_job(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<RunRequest>,
) -> ApiResult<Json<Value>> {
    let scheduler = scheduler(&state)?;
    let ident = maintained_table(
        &state,
        &caller,
        &request.warehouse,
        &request.namespace,
        &request.table,
    )
    .await?;
    if let Some(key) = request
        .options
        .keys()
        .find(|k| !OPTION_KEYS.contains(&k.as_str()))
    {
        return Err(ApiError(CatalogError::bad_request(format!(
            "unknown job option {key}; options are {}",
            OPTION_KEYS.join(", ")
        ))));
    }
    if request.kind == "remove-orphan-files"
        && request.options.get("dry-run").and_then(Value::as_bool) != Some(true)
        && let Some(age) = request.options.get("older-than-ms")
    {
        let age = age.as_i64().ok_or_else(|| {
            ApiError(CatalogError::bad_request(
                "older-than-ms must be a whole number of milliseconds",
            ))
        })?;
        maintainer(&state)
            .check_orphan_age(age)
            .map_err(maintenance_error)?;
    }
    // An equal job already queued or running answers for this request; if it finishes
    // between the two steps, queue again.
    let table_id = state
        .catalog
        .resolve_securable(&SecurableRef::Table {
            warehouse: request.warehouse.clone(),
            namespace: request.namespace.clone(),
            name: request.table.clone(),
        })
        .await?
        .id;
    let mut found = None;
    for _ in 0..5 {
        let queued = scheduler
            .enqueue(
                &request.warehouse,
                &ident,
                &request.kind,
                "request",
                request.priority.unwrap_or(100),
                Value::Object(request.options.clone()),
            )
            .await?;
        if let Some(id) = queued {
            found = Some((id, true));
            break;
        }
        let pending = scheduler
            .jobs()
            .list_jobs(&JobFilter {
                table_id: uuid::Uuid::parse_str(&table_id).ok(),
                kind: Some(request.kind.clone()),
                limit: 20,
                ..Default::default()
            })
            .await?;
        if let Some(job) = pending
            .into_iter()
            .find(|j| matches!(j.status, JobStatus::Queued | JobStatus::Running))
        {
            let differs = OPTION_KEYS
                .iter()
                .any(|key| request.options.get(*key).unwrap_or(&Value::Null) != &job.params[*key]);
            if differs {
                return Err(ApiError(CatalogError::AlreadyExists {
                    error_type: "AlreadyExistsException",
                    message: format!(
                        "a {} job for this table is already {} (job {}) with other options; \
                     queue this one when it has finished",
                        job.kind,
                        job.status.as_str(),
                        job.id
                    ),
                }));
            }
            if job.status == JobStatus::Queued {
                scheduler
                    .jobs()
                    .expedite_job(
                        job.id,
                        floe_catalog::clock::now_ms(),
                        request.priority.unwrap_or(100),
                    )
                    .await?;
                scheduler.wake();
            }
            found = Some((job.id, false));
            break;
        }
    }
    let Some((id, queued)) = found else {
        return Err(ApiError(CatalogError::Unavailable(
            "the job could not be queued; try again".into(),
        )));
    };
    let mut job = scheduler.jobs().get_job(id).await?;
    if request.wait {
        let deadline = std::time::Instant::now()
            + Duration::from_secs(request.wait_seconds.unwrap_or(600).min(MAX_WAIT_SECONDS));
        while job
            .as_ref()
            .is_some_and(|j| !matches!(j.status, JobStatus::Succeeded | JobStatus::Failed))
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
            job = scheduler.jobs().get_job(id).await?;
        }
    }
    Ok(Json(json!({
        "queued": queued,
        "job": job.map(job_json),
    })))
}

fn job_json(job: JobRecord) -> Value {
    let mut value = json!(job);
    if let Some(object) = value.as_object_mut() {
        for key in ["warehouse", "namespace", "table"] {
            object.insert(key.to_string(), job.params[key].clone());
        }
    }
    value
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct JobsQuery {
    pub warehouse: String,
    /// Namespace levels joined by `.`; with `table`, one table's jobs.
    pub namespace: Option<String>,
    pub table: Option<String>,
    pub kind: Option<String>,
    pub status: Option<String>,
    pub limit: Option<usize>,
}

/// `GET /api/v1/jobs?warehouse=…[&namespace=…&table=…][&kind=…][&status=…]`: jobs newest
/// first. One table's jobs need `manage-maintenance` on it; a warehouse's, on the warehouse.
pub async fn list_jobs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<JobsQuery>,
) -> ApiResult<Json<Value>> {
    let scheduler = scheduler(&state)?;
    let status = match query.status.as_deref() {
        None => None,
        Some(s) => Some(JobStatus::parse(s).ok_or_else(|| {
            ApiError(CatalogError::bad_request(format!(
                "status must be queued, running, succeeded or failed, not {s}"
            )))
        })?),
    };
    let mut filter = JobFilter {
        kind: query.kind.clone(),
        status,
        limit: query.limit.unwrap_or(100).min(1000),
        ..Default::default()
    };
    match (&query.namespace, &query.table) {
        (Some(namespace), Some(table)) => {
            let levels: Vec<String> = namespace.split('.').map(String::from).collect();
            maintained_table(&state, &caller, &query.warehouse, &levels, table).await?;
            let id = state
                .catalog
                .resolve_securable(&SecurableRef::Table {
                    warehouse: query.warehouse.clone(),
                    namespace: levels,
                    name: table.clone(),
                })
                .await?
                .id;
            filter.table_id = uuid::Uuid::parse_str(&id).ok();
        }
        (None, None) => {
            let securable = authorized_scope(
                &state,
                &caller,
                &SecurableRef::Warehouse {
                    warehouse: query.warehouse.clone(),
                },
            )
            .await?;
            filter.warehouse_id = uuid::Uuid::parse_str(&securable.id).ok();
        }
        _ => {
            return Err(ApiError(CatalogError::bad_request(
                "namespace and table go together",
            )));
        }
    }
    let jobs = scheduler.jobs().list_jobs(&filter).await?;
    Ok(Json(json!({
        "jobs": jobs.into_iter().map(job_json).collect::<Vec<_>>(),
    })))
}

/// `GET /api/v1/jobs/{id}`: one job, for holders of `manage-maintenance` on its table.
pub async fn get_job(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let scheduler = scheduler(&state)?;
    let missing = || {
        ApiError(CatalogError::NotFound {
            error_type: "NotFoundException",
            message: format!("no job {id}"),
        })
    };
    let uuid = uuid::Uuid::parse_str(&id).map_err(|_| missing())?;
    let job = scheduler.jobs().get_job(uuid).await?.ok_or_else(missing)?;
    let warehouse = job.params["warehouse"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let namespace: Vec<String> = job.params["namespace"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let table = job.params["table"].as_str().unwrap_or_default().to_string();
    // A job of a table the caller may not maintain (or that is gone) is not theirs to see.
    maintained_table(&state, &caller, &warehouse, &namespace, &table)
        .await
        .map_err(|_| missing())?;
    Ok(Json(job_json(job)))
}

/// Who may set policies on a securable: holders of `manage-maintenance` on it.
async fn authorized_scope(
    state: &AppState,
    caller: &Caller,
    on: &SecurableRef,
) -> ApiResult<floe_catalog::governance::authz::Securable> {
    let hidden = || CatalogError::NotFound {
        error_type: "NotFoundException",
        message: "the securable does not exist".to_string(),
    };
    let securable = match state.catalog.resolve_securable(on).await {
        Ok(securable) => securable,
        Err(CatalogError::NotFound { .. }) => return Err(ApiError(hidden())),
        Err(e) => return Err(ApiError(e)),
    };
    caller.require(Privilege::ManageMaintenance, &securable.scope, hidden)?;
    Ok(securable)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PolicyRequest {
    /// A warehouse, namespace or table, as grants name them.
    pub on: SecurableRef,
    /// The policy of that level; `null` removes it.
    pub policy: Option<Policy>,
}

/// `PUT /api/v1/maintenance/policies`: sets (or with `"policy": null` removes) the policy of
/// a warehouse, namespace or table.
pub async fn set_policy(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<PolicyRequest>,
) -> ApiResult<Json<Value>> {
    let scheduler = scheduler(&state)?;
    let (warehouse, kind) = match &request.on {
        SecurableRef::Warehouse { warehouse } => (warehouse, "warehouse"),
        SecurableRef::Namespace { warehouse, .. } => (warehouse, "namespace"),
        SecurableRef::Table { warehouse, .. } => (warehouse, "table"),
        _ => {
            return Err(ApiError(CatalogError::bad_request(
                "policies are set on a warehouse, a namespace or a table",
            )));
        }
    };
    if let Some(policy) = &request.policy {
        policy
            .validate()
            .map_err(|e| ApiError(CatalogError::bad_request(format!("policy: {e}"))))?;
    }
    let securable = authorized_scope(&state, &caller, &request.on).await?;
    let warehouse_id = state.catalog.warehouse(warehouse).await?.warehouse.id;
    let scope_id = uuid::Uuid::parse_str(&securable.id)
        .map_err(|_| ApiError(CatalogError::bad_request("policies need a named object")))?;
    let value = request.policy.as_ref().map(|p| json!(p));
    scheduler
        .jobs()
        .set_policy(scope_id, warehouse_id, value.as_ref())
        .await?;
    Ok(Json(json!({"on": kind, "policy": value})))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PolicyQuery {
    pub warehouse: String,
    /// Namespace levels joined by `.`.
    pub namespace: Option<String>,
    pub table: Option<String>,
}

/// `GET /api/v1/maintenance/policies?warehouse=…[&namespace=…[&table=…]]`: the policy set on
/// that level, and for a table the effective one (inherited levels and table properties
/// applied).
pub async fn get_policy(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PolicyQuery>,
) -> ApiResult<Json<Value>> {
    let scheduler = scheduler(&state)?;
    let levels: Option<Vec<String>> = query
        .namespace
        .as_ref()
        .map(|n| n.split('.').map(String::from).collect());
    let on = match (&levels, &query.table) {
        (None, None) => SecurableRef::Warehouse {
            warehouse: query.warehouse.clone(),
        },
        (Some(levels), None) => SecurableRef::Namespace {
            warehouse: query.warehouse.clone(),
            namespace: levels.clone(),
        },
        (Some(levels), Some(table)) => SecurableRef::Table {
            warehouse: query.warehouse.clone(),
            namespace: levels.clone(),
            name: table.clone(),
        },
        (None, Some(_)) => {
            return Err(ApiError(CatalogError::bad_request(
                "a table is named with its namespace",
            )));
        }
    };
    let securable = authorized_scope(&state, &caller, &on).await?;
    let id = uuid::Uuid::parse_str(&securable.id).ok();
    let set = match id {
        Some(id) => scheduler
            .jobs()
            .get_policies(&[id])
            .await?
            .into_iter()
            .next()
            .map(|(_, p)| p),
        None => None,
    };
    let mut answer = json!({"policy": set});
    let effective: Option<Effective> = match (&levels, &query.table) {
        (Some(levels), Some(table)) => {
            let ident = table_ident(levels, table)?;
            let loaded = state
                .catalog
                .load_table(&Caller::system(), &query.warehouse, &ident)
                .await?;
            Some(
                scheduler
                    .effective_policy(&query.warehouse, &ident, &loaded.metadata)
                    .await?,
            )
        }
        _ => None,
    };
    if let Some(effective) = effective {
        answer["effective"] = json!(effective);
    }
    Ok(Json(answer))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CheckRequest {
    pub warehouse: String,
    pub namespace: Vec<String>,
    pub table: String,
    /// Also read every live Parquet file's footer and compare its row count.
    #[serde(default)]
    pub deep: bool,
    /// For a repair: only say what would be done (default true).
    pub dry_run: Option<bool>,
}

/// `POST /api/v1/tables/check`: what the table's metadata references that storage no longer
/// holds (or holds otherwise), and what storage holds that nothing references. Needs
/// `manage-maintenance` on the table; reads its metadata from storage, so it works on a table
/// whose current metadata no longer loads.
pub async fn check_table(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<CheckRequest>,
) -> ApiResult<Json<Value>> {
    if request.dry_run.is_some() {
        return Err(ApiError::bad_request("dry-run is an option of a repair"));
    }
    let ident = maintained_table(
        &state,
        &caller,
        &request.warehouse,
        &request.namespace,
        &request.table,
    )
    .await?;
    let report = floe_maintenance::exec::check::check_table(
        &maintainer(&state),
        &request.warehouse,
        &ident,
        request.deep,
    )
    .await
    .map_err(maintenance_error)?;
    Ok(Json(json!(report)))
}

/// `POST /api/v1/tables/repair`: mends what a check finds where that is safe, as new
/// catalog commits — by default a dry run that says what it would do. Needs
/// `manage-maintenance` on the table.
pub async fn repair_table(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(request): JsonBody<CheckRequest>,
) -> ApiResult<Json<Value>> {
    if request.deep {
        return Err(ApiError::bad_request("deep is an option of a check"));
    }
    let ident = maintained_table(
        &state,
        &caller,
        &request.warehouse,
        &request.namespace,
        &request.table,
    )
    .await?;
    let dry_run = request.dry_run.unwrap_or(true);
    // The record says which table and whether anything was to change; its first commit
    // carries this much, and the record of the answer adds what changed.
    let details = |actions: Option<&[floe_maintenance::exec::repair::Action]>| {
        let mut details = json!({
            "warehouse": request.warehouse,
            "table": ident.to_string(),
            "dry-run": dry_run,
        });
        if let Some(actions) = actions {
            details["actions"] = json!(actions);
        }
        details
    };
    crate::audit::note_details(details(None));
    let report = floe_maintenance::exec::repair::repair_table(
        &maintainer(&state),
        &request.warehouse,
        &ident,
        dry_run,
    )
    .await
    .map_err(maintenance_error)?;
    crate::audit::note_details(details(Some(&report.actions)));
    Ok(Json(json!(report)))
}
