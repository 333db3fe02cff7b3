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
//! Planning needs `read-data` on the table (a plan names its data files and their statistics),
//! and so does every later fetch. A plan, and every plan task of it, belongs to the principal
//! that asked for it (by id) and to that table (by its uuid, so a table renamed away and another
//! created under the name is not it): anyone else is told it does not exist. Credentials in an
//! answer are the table's vended credentials, vended afresh for each answer that asks for
//! them, as a load's are. Plans are kept in memory on the node that made them, for
//! [`PLAN_TTL`] at most, and only so many at once ([`MAX_PLANS`], [`MAX_PLANS_PER_PRINCIPAL`]);
//! at most [`PLANNING_AT_ONCE`] are being planned at a time, and a cancelled or expired plan's
//! background work stops. Every request is audited as every catalog request is, and none is
//! replayed by `Idempotency-Key` (each answer is checked anew).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use floe_catalog::CatalogError;
use floe_catalog::governance::authz::Caller;
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
pub(crate) const PLAN_TTL: Duration = Duration::from_secs(15 * 60);
/// Most plans kept on a node, and per principal.
pub(crate) const MAX_PLANS: usize = 256;
pub(crate) const MAX_PLANS_PER_PRINCIPAL: usize = 8;
/// Scans planned at once on a node (each reads manifests); the rest wait their turn.
pub(crate) const PLANNING_AT_ONCE: usize = 4;

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
    owner: uuid::Uuid,
    warehouse: String,
    table: TableIdent,
    table_uuid: uuid::Uuid,
    made: Instant,
    state: PlanState,
    /// The background planning, stopped when the plan goes.
    work: Option<tokio::task::AbortHandle>,
}

impl Drop for Plan {
    fn drop(&mut self) {
        if let Some(work) = &self.work {
            work.abort();
        }
    }
}

/// The plans this node holds, by plan id.
pub struct PlanStore {
    pub(crate) limits: PlanLimits,
    plans: Mutex<HashMap<String, Plan>>,
    planning: Arc<tokio::sync::Semaphore>,
}

impl Default for PlanStore {
    fn default() -> Self {
        Self::new(PlanLimits::default())
    }
}

impl PlanStore {
    pub fn new(limits: PlanLimits) -> Self {
        Self {
            limits,
            plans: Mutex::default(),
            planning: Arc::new(tokio::sync::Semaphore::new(PLANNING_AT_ONCE)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Plan>> {
        // Nothing panics while holding it; a poisoned map is still a map of plans.
        self.plans.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps a new plan of `owner`'s. Beyond the limits the oldest finished plan (the
    /// principal's own first) is forgotten — clients rarely cancel the plans they are done
    /// with; only plans still being planned are never dropped, and with the limit full of
    /// those the new one is refused.
    fn admit(&self, plan: Plan) -> ApiResult<String> {
        let mut plans = self.lock();
        plans.retain(|_, p| p.made.elapsed() < PLAN_TTL);
        let finished = |p: &Plan| !matches!(p.state, PlanState::Submitted);
        let oldest = |plans: &HashMap<String, Plan>, owner: Option<uuid::Uuid>| {
            plans
                .iter()
                .filter(|(_, p)| finished(p) && owner.is_none_or(|o| p.owner == o))
                .min_by_key(|(_, p)| p.made)
                .map(|(id, _)| id.clone())
        };
        while plans.values().filter(|p| p.owner == plan.owner).count() >= MAX_PLANS_PER_PRINCIPAL
            || plans.len() >= MAX_PLANS
        {
            let mine = plans.values().filter(|p| p.owner == plan.owner).count();
            let victim = if mine >= MAX_PLANS_PER_PRINCIPAL {
                oldest(&plans, Some(plan.owner))
            } else {
                oldest(&plans, None)
            };
            let Some(victim) = victim else {
                return Err(ApiError(CatalogError::TooManyRequests(format!(
                    "too many scans being planned ({mine} of this principal's); wait for them \
                     or cancel them (DELETE …/plan/{{plan-id}})"
                ))));
            };
            plans.remove(&victim);
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        plans.insert(id.clone(), plan);
        Ok(id)
    }

    /// `f` over the plan `id` if it is the caller's and the table's (`table` as the caller
    /// names it, `table_uuid` what that name is now).
    fn with<T>(
        &self,
        id: &str,
        caller: &Caller,
        warehouse: &str,
        table: &TableIdent,
        table_uuid: uuid::Uuid,
        f: impl FnOnce(&mut Plan) -> T,
    ) -> Option<T> {
        let mut plans = self.lock();
        let plan = plans.get_mut(id)?;
        let mine = plan.owner == caller.principal.id
            && plan.warehouse == warehouse
            && &plan.table == table
            && plan.table_uuid == table_uuid
            && plan.made.elapsed() < PLAN_TTL;
        mine.then(|| f(plan))
    }

    fn remove(&self, id: &str) {
        let removed = self.lock().remove(id);
        drop(removed);
    }
}

/// The table the caller names, once it may read its files (`read-data`, and no row or
/// column policy applies to it there: a plan hands out file paths and column bounds).
async fn readable_table(
    state: &AppState,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
) -> ApiResult<floe_catalog::service::LoadedTable> {
    state
        .catalog
        .authorize_raw_read(caller, warehouse, ident)
        .await?;
    Ok(state.catalog.load_table(caller, warehouse, ident).await?)
}

/// The table's vended credentials when the client asked for them (`None` otherwise).
async fn credentials(
    state: &AppState,
    caller: &Caller,
    warehouse: &str,
    ident: &TableIdent,
    headers: &HeaderMap,
) -> ApiResult<Option<Value>> {
    if !wants_vended_credentials(headers) {
        return Ok(None);
    }
    let vended = state
        .catalog
        .vend_credentials(caller, warehouse, ident)
        .await?;
    Ok(Some(storage_credentials(vended.as_ref())))
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
pub(crate) async fn plan(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table)): TablePath,
    headers: HeaderMap,
    JsonBody(request): JsonBody<PlanRequest>,
) -> ApiResult<Json<Value>> {
    let ident = ident(&namespace, &table)?;
    let loaded = readable_table(&state, &caller, &prefix, &ident).await?;
    let credentials = credentials(&state, &caller, &prefix, &ident, &headers).await?;
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
    let files = prepared.data_files().await.unwrap_or(u64::MAX);
    let plan = Plan {
        owner: caller.principal.id,
        warehouse: prefix.clone(),
        table: ident.clone(),
        table_uuid: loaded.metadata.uuid(),
        made: Instant::now(),
        state: PlanState::Submitted,
        work: None,
    };
    if files <= store.limits.sync_files {
        let planned = {
            let _turn = store.planning.acquire().await.map_err(|_| {
                ApiError(CatalogError::Unavailable("the server is stopping".into()))
            })?;
            Arc::new(prepared.plan().await.map_err(plan_error)?)
        };
        let page = planned.page_size(store.limits.page_files);
        let pages = planned.files().div_ceil(page);
        let mut answer = completed(&planned, credentials, page)?;
        if pages > 1 {
            // The rest is fetched by plan task: the plan is kept for that.
            let mut plan = plan;
            plan.state = PlanState::Completed(planned);
            let id = store.admit(plan)?;
            answer["plan-id"] = json!(id);
            answer["plan-tasks"] = json!(plan_tasks(&id, pages));
        }
        return Ok(Json(answer));
    }
    let id = store.admit(plan)?;
    let background = id.clone();
    let work_store = store.clone();
    let work = tokio::spawn(async move {
        let outcome = match work_store.planning.clone().acquire_owned().await {
            Ok(_turn) => prepared.plan().await,
            Err(_) => return,
        };
        let mut plans = work_store.lock();
        if let Some(plan) = plans.get_mut(&background) {
            plan.work = None;
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
    if let Some(plan) = store.lock().get_mut(&id) {
        plan.work = Some(work.abort_handle());
    }
    Ok(Json(json!({ "status": "submitted", "plan-id": id })))
}

/// A completed answer: the first page of tasks (plan tasks for the rest are added by the
/// caller, which keeps the plan).
fn completed(plan: &ScanPlan, credentials: Option<Value>, page: usize) -> ApiResult<Value> {
    let mut answer = plan
        .page(0..page)
        .map_err(|e| plan_error(PlanError::Read(e)))?;
    answer["status"] = json!("completed");
    if let Some(credentials) = credentials {
        answer["storage-credentials"] = credentials;
    }
    Ok(answer)
}

/// Plan task tokens for pages 1.. of plan `id` (page 0 went with the answer).
fn plan_tasks(id: &str, pages: usize) -> Vec<String> {
    (1..pages).map(|page| format!("{id}.{page}")).collect()
}

type PlanPath = PathParams<(String, String, String, String)>;

/// `GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}`.
pub(crate) async fn fetch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table, id)): PlanPath,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let ident = ident(&namespace, &table)?;
    // Grants revoked since the plan was made take effect at once.
    let loaded = readable_table(&state, &caller, &prefix, &ident).await?;
    enum Seen {
        Submitted,
        Failed(Value),
        Completed(Arc<ScanPlan>),
    }
    let seen = state
        .plans
        .with(
            &id,
            &caller,
            &prefix,
            &ident,
            loaded.metadata.uuid(),
            |plan| match &plan.state {
                PlanState::Submitted => Seen::Submitted,
                PlanState::Failed(error) => Seen::Failed(error.clone()),
                PlanState::Completed(planned) => Seen::Completed(planned.clone()),
            },
        )
        .ok_or_else(|| no_such_plan(&id))?;
    // The page is written outside the plans' lock.
    let answer = match seen {
        Seen::Submitted => json!({ "status": "submitted" }),
        Seen::Failed(error) => json!({ "status": "failed", "error": error }),
        Seen::Completed(planned) => {
            let credentials = credentials(&state, &caller, &prefix, &ident, &headers).await?;
            let page = planned.page_size(state.plans.limits.page_files);
            let mut answer = completed(&planned, credentials, page)?;
            answer["plan-tasks"] = json!(plan_tasks(&id, planned.files().div_ceil(page)));
            answer
        }
    };
    Ok(Json(answer))
}

/// `DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}`.
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathParams((prefix, namespace, table, id)): PlanPath,
) -> ApiResult<StatusCode> {
    let ident = ident(&namespace, &table)?;
    let loaded = readable_table(&state, &caller, &prefix, &ident).await?;
    state
        .plans
        .with(
            &id,
            &caller,
            &prefix,
            &ident,
            loaded.metadata.uuid(),
            |_| (),
        )
        .ok_or_else(|| no_such_plan(&id))?;
    state.plans.remove(&id);
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct FetchTasks {
    plan_task: String,
}

/// `POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/tasks`.
pub(crate) async fn tasks(
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
    let loaded = readable_table(&state, &caller, &prefix, &ident).await?;
    let planned = state
        .plans
        .with(
            id,
            &caller,
            &prefix,
            &ident,
            loaded.metadata.uuid(),
            |plan| match &plan.state {
                PlanState::Completed(planned) => Some(planned.clone()),
                _ => None,
            },
        )
        .flatten()
        .ok_or_else(no_such_task)?;
    let size = planned.page_size(state.plans.limits.page_files);
    if page == 0 || page >= planned.files().div_ceil(size) {
        return Err(no_such_task());
    }
    let start = page * size;
    let answer = planned
        .page(start..start + size)
        .map_err(|e| plan_error(PlanError::Read(e)))?;
    Ok(Json(answer))
}
