//! Server-side scan planning: `planTableScan` (`POST …/tables/{table}/plan`),
//! `fetchPlanningResult` and `cancelPlanning` (`GET` / `DELETE …/plan/{plan-id}`) and
//! `fetchScanTasks` (`POST …/tables/{table}/tasks`).
//!
//! Floe plans with the planner its own SQL uses ([`floe_sql::scan::server_plan`]). A table
//! whose snapshot holds at most [`PlanLimits::sync_files`] data files is planned while the
//! client waits (`completed`); a larger one is planned in the background (`submitted`, then
//! polled by plan id). Either way the answer carries at most [`PlanLimits::page_files`] file
//! scan tasks, the rest as plan tasks the client fetches a page at a time.
//!
//! Planning needs `read-data` on the table (a plan names its data files and their statistics);
//! a plan, and every plan task of it, belongs to the principal that asked for it and to that
//! table: another principal, or the same one through another table's path, is told it does not
//! exist. Credentials in a plan are the table's vended credentials, asked for and scoped as a
//! load's are. Plans are kept in memory on the node that made them, for
//! [`PLAN_TTL`] at most, and only so many at once ([`MAX_PLANS`], [`MAX_PLANS_PER_PRINCIPAL`]).
//! Every request is audited as every catalog request is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::{Caller, Privilege};
use floe_sql::scan::IcebergTableProvider;
use floe_sql::scan::server_plan::{PlanError, PlanRequest, ScanPlan, prepare_scan};
use iceberg::TableIdent;
use serde::Deserialize;
use serde_json::{Value, json};

use super::tables::{ident, storage_credentials, wants_vended_credentials};
use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams};

/// How long a plan is kept after it was asked for.
pub const PLAN_TTL: Duration = Duration::from_secs(15 * 60);
/// Most plans kept on a node, and per principal.
pub const MAX_PLANS: usize = 1024;
pub const MAX_PLANS_PER_PRINCIPAL: usize = 32;

/// When a plan is made in the background, and how many file scan tasks one answer carries.
#[derive(Debug, Clone, Copy)]
pub struct PlanLimits {
    /// Snapshots with more data files than this are planned in the background.
    pub sync_files: u64,
    /// File scan tasks per answer.
    pub page_files: usize,
}

impl Default for PlanLimits {
    fn default() -> Self {
        Self {
            sync_files: 10_000,
            page_files: 1_000,
        }
    }
}

enum PlanState {
    Submitted,
    Completed(Arc<ScanPlan>),
    /// The `ErrorModel` of a plan that failed.
    Failed(Value),
}

struct Plan {
    owner: String,
    warehouse: String,
    table: TableIdent,
    made: Instant,
    state: PlanState,
    credentials: Option<Value>,
}

/// The plans this node holds, by plan id.
#[derive(Default)]
pub struct PlanStore {
    pub limits: PlanLimits,
    plans: Mutex<HashMap<String, Plan>>,
}

impl PlanStore {
    pub fn new(limits: PlanLimits) -> Self {
        Self {
            limits,
            plans: Mutex::default(),
        }
    }

    /// Keeps a new plan of `owner`'s; refused when too many are kept already.
    fn admit(&self, plan: Plan) -> ApiResult<String> {
        let mut plans = self.plans.lock().expect("plans");
        plans.retain(|_, p| p.made.elapsed() < PLAN_TTL);
        let owned = plans.values().filter(|p| p.owner == plan.owner).count();
        if owned >= MAX_PLANS_PER_PRINCIPAL || plans.len() >= MAX_PLANS {
            return Err(ApiError(CatalogError::TooManyRequests(format!(
                "too many scan plans in flight ({owned} of this principal's); cancel finished \
                 ones (DELETE …/plan/{{plan-id}}) or wait {} minutes",
                PLAN_TTL.as_secs() / 60
            ))));
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        plans.insert(id.clone(), plan);
        Ok(id)
    }

    /// `f` over the plan `id` if it is the caller's and the table's.
    fn with<T>(
        &self,
        id: &str,
        caller: &Caller,
        warehouse: &str,
        table: &TableIdent,
        f: impl FnOnce(&mut Plan) -> T,
    ) -> Option<T> {
        let mut plans = self.plans.lock().expect("plans");
        let plan = plans.get_mut(id)?;
        let mine = plan.owner == caller.principal.name
            && plan.warehouse == warehouse
            && &plan.table == table
            && plan.made.elapsed() < PLAN_TTL;
        mine.then(|| f(plan))
    }

    fn remove(&self, id: &str) {
        self.plans.lock().expect("plans").remove(id);
    }
}

fn no_such_plan(id: &str) -> ApiError {
    ApiError(CatalogError::NotFound {
        error_type: "NoSuchPlanIdException",
        message: format!("No plan with id {id}"),
    })
}

fn no_such_task() -> ApiError {
    ApiError(CatalogError::NotFound {
        error_type: "NoSuchPlanTaskException",
        message: "No such plan task".into(),
    })
}

fn plan_error(e: PlanError) -> ApiError {
    match e {
        PlanError::Invalid(message) => ApiError::bad_request(message),
        PlanError::Read(e) => ApiError(CatalogError::internal(
            "plan the scan",
            std::io::Error::other(e.to_string()),
        )),
    }
}

type TablePath = PathParams<(String, String, String)>;

/// `POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan`.
pub async fn plan(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
    headers: HeaderMap,
    JsonBody(request): JsonBody<PlanRequest>,
) -> ApiResult<Json<Value>> {
    let ident = ident(&namespace, &table)?;
    state
        .catalog
        .authorize_table(&caller, &prefix, &ident, Privilege::ReadData)
        .await?;
    let loaded = state.catalog.load_table(&caller, &prefix, &ident).await?;
    let credentials = if wants_vended_credentials(&headers) {
        let vended = state
            .catalog
            .vend_credentials(&caller, &prefix, &ident)
            .await?;
        Some(storage_credentials(vended.as_ref()))
    } else {
        None
    };
    let access = state
        .sql
        .access(&caller, &prefix)
        .await
        .map_err(|e| ApiError::bad_request(e.message))?;
    let provider = IcebergTableProvider::try_new(access, loaded.clone())
        .map_err(|e| plan_error(PlanError::Read(e)))?;
    // Everything wrong with the request is answered now, whichever way it is planned.
    let prepared = prepare_scan(&provider, &request).map_err(plan_error)?;
    let store = state.plans.clone();
    let files = snapshot_files(&loaded.metadata, request.snapshot_id);
    let plan = Plan {
        owner: caller.principal.name.clone(),
        warehouse: prefix.clone(),
        table: ident.clone(),
        made: Instant::now(),
        state: PlanState::Submitted,
        credentials,
    };
    if files <= store.limits.sync_files {
        let planned = Arc::new(prepared.plan().await.map_err(plan_error)?);
        let pages = planned.files().div_ceil(store.limits.page_files);
        let mut answer = completed(&planned, &plan.credentials, store.limits.page_files)?;
        if pages > 1 {
            // The rest is fetched by plan task: the plan is kept for that.
            let credentials = plan.credentials.clone();
            let id = store.admit(Plan {
                state: PlanState::Completed(planned),
                ..plan
            })?;
            answer["plan-id"] = json!(id);
            answer["plan-tasks"] = json!(plan_tasks(&id, pages));
            if let Some(credentials) = credentials {
                answer["storage-credentials"] = credentials;
            }
        }
        return Ok(Json(answer));
    }
    let id = store.admit(plan)?;
    let background = id.clone();
    tokio::spawn(async move {
        let outcome = prepared.plan().await;
        let mut plans = store.plans.lock().expect("plans");
        if let Some(plan) = plans.get_mut(&background) {
            plan.state = match outcome {
                Ok(planned) => PlanState::Completed(Arc::new(planned)),
                Err(e) => {
                    let e = plan_error(e).0;
                    let status = crate::error::status_for(e.code());
                    PlanState::Failed(json!({
                        "message": crate::error::client_message(&e),
                        "type": e.error_type(),
                        "code": status.as_u16(),
                    }))
                }
            };
        }
    });
    Ok(Json(json!({ "status": "submitted", "plan-id": id })))
}

/// The data files of the snapshot a scan reads, as its summary counts them (unknown: planned
/// in the background, as a large one is).
fn snapshot_files(metadata: &iceberg::spec::TableMetadata, snapshot: Option<i64>) -> u64 {
    let snapshot = match snapshot {
        Some(id) => metadata.snapshot_by_id(id),
        None => metadata.current_snapshot(),
    };
    let Some(snapshot) = snapshot else {
        return 0;
    };
    snapshot
        .summary()
        .additional_properties
        .get("total-data-files")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

/// A completed answer: the first page of tasks (plan tasks for the rest are added by the
/// caller, which keeps the plan).
fn completed(plan: &ScanPlan, credentials: &Option<Value>, page: usize) -> ApiResult<Value> {
    let mut answer = plan
        .page(0..page)
        .map_err(|e| plan_error(PlanError::Read(e)))?;
    answer["status"] = json!("completed");
    if let Some(credentials) = credentials {
        answer["storage-credentials"] = credentials.clone();
    }
    Ok(answer)
}

/// Plan task tokens for pages 1.. of plan `id` (page 0 went with the answer).
fn plan_tasks(id: &str, pages: usize) -> Vec<String> {
    (1..pages).map(|page| format!("{id}.{page}")).collect()
}

type PlanPath = PathParams<(String, String, String, String)>;

/// `GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}`.
pub async fn fetch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table, id)): PlanPath,
) -> ApiResult<Json<Value>> {
    let ident = ident(&namespace, &table)?;
    // Grants revoked since the plan was made take effect at once.
    state
        .catalog
        .authorize_table(&caller, &prefix, &ident, Privilege::ReadData)
        .await?;
    let page = state.plans.limits.page_files;
    let answer = state
        .plans
        .with(&id, &caller, &prefix, &ident, |plan| match &plan.state {
            PlanState::Submitted => Ok::<Value, ApiError>(json!({ "status": "submitted" })),
            PlanState::Failed(error) => Ok(json!({ "status": "failed", "error": error })),
            PlanState::Completed(planned) => {
                let mut answer = completed(planned, &plan.credentials, page)?;
                let pages = planned.files().div_ceil(page);
                answer["plan-tasks"] = json!(plan_tasks(&id, pages));
                Ok(answer)
            }
        })
        .ok_or_else(|| no_such_plan(&id))??;
    Ok(Json(answer))
}

/// `DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}`.
pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table, id)): PlanPath,
) -> ApiResult<StatusCode> {
    let ident = ident(&namespace, &table)?;
    state
        .plans
        .with(&id, &caller, &prefix, &ident, |_| ())
        .ok_or_else(|| no_such_plan(&id))?;
    state.plans.remove(&id);
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct FetchTasks {
    plan_task: String,
}

/// `POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/tasks`.
pub async fn tasks(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
    JsonBody(request): JsonBody<FetchTasks>,
) -> ApiResult<Json<Value>> {
    let ident = ident(&namespace, &table)?;
    let (id, page) = request
        .plan_task
        .split_once('.')
        .and_then(|(id, page)| Some((id, page.parse::<usize>().ok()?)))
        .ok_or_else(no_such_task)?;
    state
        .catalog
        .authorize_table(&caller, &prefix, &ident, Privilege::ReadData)
        .await?;
    let size = state.plans.limits.page_files;
    let planned = state
        .plans
        .with(id, &caller, &prefix, &ident, |plan| match &plan.state {
            PlanState::Completed(planned) => Some(planned.clone()),
            _ => None,
        })
        .flatten()
        .filter(|planned| page >= 1 && page < planned.files().div_ceil(size))
        .ok_or_else(no_such_task)?;
    let start = page * size;
    let answer = planned
        .page(start..start + size)
        .map_err(|e| plan_error(PlanError::Read(e)))?;
    Ok(Json(answer))
}
