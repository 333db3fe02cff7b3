//! Prometheus's HTTP query API over a tenant's `otel.metrics`: `/prometheus/{warehouse}/api/v1/…`
//! (and `/prometheus/api/v1/…` with the tenant in `X-Scope-OrgID`, as Mimir takes it) —
//! `query`, `query_range`, `series`, `labels`, `label/{name}/values`, `metadata` and
//! `status/buildinfo`, by GET or by POST of a form, answered in Prometheus's JSON. A thin
//! door: PromQL is evaluated by [`floe_promql`], its selectors read through Floe SQL as the
//! caller ([`storage`]), so grants and the tenant's statement limits hold as for SQL.

mod params;
mod storage;

use axum::Extension;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use floe_catalog::governance::authz::Caller;
use floe_promql::labels::METRIC_NAME;
use floe_promql::value::quoted;
use floe_promql::{Engine, Error, Matcher, QueryRange};
use serde_json::{Value as Json, json};

use crate::AppState;
use params::Params;
use storage::SqlStorage;

/// Prometheus's cap on a range query's points per series.
const MAX_POINTS: i64 = 11_000;

/// The release whose PromQL semantics the engine follows (its test scripts are the judge).
const PROMETHEUS_VERSION: &str = "3.3.0";

pub(crate) fn router(state: AppState) -> Router<AppState> {
    use axum::routing::get;
    let mut router = Router::new();
    for prefix in ["/prometheus/{warehouse}/api/v1", "/prometheus/api/v1"] {
        router = router
            .route(&format!("{prefix}/query"), get(query).post(query))
            .route(
                &format!("{prefix}/query_range"),
                get(query_range).post(query_range),
            )
            .route(&format!("{prefix}/series"), get(series).post(series))
            .route(&format!("{prefix}/labels"), get(labels).post(labels))
            .route(
                &format!("{prefix}/label/{{name}}/values"),
                get(label_values),
            )
            .route(&format!("{prefix}/metadata"), get(metadata))
            .route(&format!("{prefix}/status/buildinfo"), get(buildinfo));
    }
    router.route_layer(axum::middleware::from_fn_with_state(
        state,
        require_principal,
    ))
}

/// Authentication answered in Prometheus's error form.
async fn require_principal(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match crate::auth::authenticated(&state, request).await {
        Ok(request) => crate::auth::run_as(request, next).await,
        Err(e) => {
            let status = crate::error::status_for(e.code());
            let kind = if status == StatusCode::UNAUTHORIZED {
                "unauthorized"
            } else {
                "forbidden"
            };
            let mut response = failure(status, kind, &crate::error::client_message(&e));
            if status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer realm=\"floe\""),
                );
            }
            response
        }
    }
}

/// A refusal in Prometheus's form: `{"status":"error","errorType":…,"error":…}`.
pub(super) struct Fail {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl IntoResponse for Fail {
    fn into_response(self) -> Response {
        failure(self.status, self.kind, &self.message)
    }
}

fn failure(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!(
            "{{\"status\":\"error\",\"errorType\":{},\"error\":{}}}",
            quoted(kind),
            quoted(message)
        ),
    )
        .into_response()
}

pub(super) fn bad_data(message: impl Into<String>) -> Fail {
    Fail {
        status: StatusCode::BAD_REQUEST,
        kind: "bad_data",
        message: message.into(),
    }
}

fn promql_failure(e: &Error) -> Fail {
    let status = match e {
        Error::BadData(_) => StatusCode::BAD_REQUEST,
        Error::Execution(_) => StatusCode::UNPROCESSABLE_ENTITY,
        Error::Timeout(_) => StatusCode::SERVICE_UNAVAILABLE,
        Error::Denied(_) => StatusCode::FORBIDDEN,
        Error::Storage(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    Fail {
        status,
        kind: e.error_type(),
        message: e.to_string(),
    }
}

fn success(data: Json, notes: Vec<String>) -> Response {
    success_text(data.to_string(), notes)
}

/// `{"status":"success","data":…,"warnings":[…],"infos":[…]}`, members in Prometheus's
/// order (its answers are compared byte for byte), `data` already JSON text.
fn success_text(data: String, notes: Vec<String>) -> Response {
    let (warnings, infos): (Vec<String>, Vec<String>) = notes
        .into_iter()
        .partition(|n| !n.starts_with("PromQL info"));
    let mut body = format!("{{\"status\":\"success\",\"data\":{data}");
    for (key, list) in [("warnings", warnings), ("infos", infos)] {
        if !list.is_empty() {
            body.push_str(&format!(",\"{key}\":{}", Json::from(list)));
        }
    }
    body.push('}');
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// The tenant a request names (its path, else `X-Scope-OrgID`, else `default`) and storage
/// reading it as the caller; a tenant the caller cannot see is `not_found`.
async fn tenant_storage(
    state: &AppState,
    caller: &Caller,
    path: Option<String>,
    headers: &HeaderMap,
) -> Result<SqlStorage, Fail> {
    let tenant = path.unwrap_or_else(|| {
        headers
            .get("x-scope-orgid")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .unwrap_or("default")
            .to_string()
    });
    if state
        .catalog
        .visible_warehouse(caller, &tenant)
        .await
        .is_err()
    {
        return Err(Fail {
            status: StatusCode::NOT_FOUND,
            kind: "not_found",
            message: format!("unknown tenant {tenant:?}"),
        });
    }
    let max_samples = state
        .catalog
        .tenants()
        .existing(&tenant)
        .map_or(DEFAULT_MAX_SAMPLES, |t| {
            t.query_samples(DEFAULT_MAX_SAMPLES)
        });
    Ok(SqlStorage {
        sql: state.sql.clone(),
        caller: caller.clone(),
        tenant,
        max_samples,
        loaded: Default::default(),
    })
}

fn warehouse(path: Option<UrlPath<String>>) -> Option<String> {
    path.map(|UrlPath(w)| w)
}

/// Queries parsed or evaluated at once on this node; more wait for a place. Both are CPU
/// only (regular expressions compiled, series computed), so a burst of heavy queries takes
/// a few threads, not every core, and never the async workers.
static EVALUATIONS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

/// The stack of the threads that parse and evaluate: both recurse over the query's tree
/// (at most `floe_promql::MAX_DEPTH` deep once parsed), which a worker's 2 MiB may not hold.
const EVALUATION_STACK: usize = 64 << 20;

/// Sets the engine's flag when the request goes away before its answer (a client that hung
/// up), so that an evaluation still running stops at its next check.
struct CancelOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `work` on a thread of its own with a large stack, awaited without blocking the caller.
async fn on_evaluation_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Fail> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("floe-promql".into())
        .stack_size(EVALUATION_STACK)
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| internal(&format!("start an evaluation thread: {e}")))?;
    // A panic drops the sender: the cause is in the log (the panic hook's), the client gets
    // an error id only.
    rx.await
        .map_err(|_| internal("a PromQL evaluation thread panicked"))
}

/// A 500 carrying an id, the cause logged with it (never shown to the client).
fn internal(cause: &str) -> Fail {
    let id = uuid::Uuid::now_v7();
    tracing::error!(error_id = %id, cause, "PromQL query failed");
    Fail {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        kind: "internal",
        message: format!("internal error; error id {id}"),
    }
}

/// A query evaluated for a tenant: parsed on an evaluation thread, its selectors read
/// (waiting on storage), then evaluated on an evaluation thread — bounded by the engine's
/// sample limit and deadline, and stopped if the client goes away.
async fn evaluate(
    storage: &SqlStorage,
    text: &str,
    range: QueryRange,
    as_range: bool,
) -> Result<floe_promql::Answer, Fail> {
    let engine = engine(storage);
    let _cancel = CancelOnDrop(engine.cancelled.clone());
    // A place is held while the CPU works, not while the selectors wait on storage.
    let place = || async {
        EVALUATIONS
            .acquire()
            .await
            .map_err(|_| internal("evaluation places closed"))
    };
    let (planner, query) = (engine.clone(), text.to_string());
    let held = place().await?;
    // As Prometheus words a query it cannot take: the parameter named.
    let plan = on_evaluation_thread(move || planner.plan(&query, range, as_range))
        .await?
        .map_err(|e| match e {
            Error::BadData(m) => {
                promql_failure(&Error::BadData(format!("invalid parameter \"query\": {m}")))
            }
            e => promql_failure(&e),
        })?;
    drop(held);
    let fetched = engine
        .fetch(storage, &plan)
        .await
        .map_err(|e| promql_failure(&e))?;
    let _held = place().await?;
    on_evaluation_thread(move || engine.evaluate(&plan, &fetched))
        .await?
        .map_err(|e| promql_failure(&e))
}

/// Samples a query may load unless its tenant says otherwise (Prometheus's default).
const DEFAULT_MAX_SAMPLES: usize = 50_000_000;

/// The engine for a tenant's query: its sample limit.
fn engine(storage: &SqlStorage) -> Engine {
    let mut engine = Engine::default();
    engine.limits.max_samples = storage.max_samples;
    engine
}

async fn query(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    path: Option<UrlPath<String>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Result<Response, Fail> {
    let params = Params::of(raw.as_deref(), &headers, &body)?;
    let text = params
        .get("query")
        .ok_or_else(|| bad_data("invalid parameter \"query\": no query given"))?;
    let t = params.time("time")?.unwrap_or_else(now_ms);
    let storage = tenant_storage(&state, &caller, warehouse(path), &headers).await?;
    let answer = evaluate(&storage, text, QueryRange::instant(t), false).await?;
    Ok(success_text(answer.value.to_json_text(), answer.warnings))
}

async fn query_range(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    path: Option<UrlPath<String>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Result<Response, Fail> {
    let params = Params::of(raw.as_deref(), &headers, &body)?;
    let text = params
        .get("query")
        .ok_or_else(|| bad_data("invalid parameter \"query\": no query given"))?;
    let missing = |name: &str, what: &str| {
        bad_data(format!(
            "invalid parameter \"{name}\": cannot parse \"\" to a valid {what}"
        ))
    };
    let start = params
        .time("start")?
        .ok_or_else(|| missing("start", "timestamp"))?;
    let end = params
        .time("end")?
        .ok_or_else(|| missing("end", "timestamp"))?;
    let step = params
        .duration("step")?
        .ok_or_else(|| missing("step", "duration"))?;
    if end < start {
        return Err(bad_data(
            "invalid parameter \"end\": end timestamp must not be before start time",
        ));
    }
    if step <= 0 {
        return Err(bad_data(
            "invalid parameter \"step\": zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    if (end - start) / step > MAX_POINTS {
        return Err(bad_data(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
        ));
    }
    let storage = tenant_storage(&state, &caller, warehouse(path), &headers).await?;
    // A range of one step is still a range query: a matrix answer.
    let range = QueryRange { start, end, step };
    let answer = evaluate(&storage, text, range, true).await?;
    Ok(success_text(answer.value.to_json_text(), answer.warnings))
}

/// The `match[]` selectors of a request (at least one where `required`).
fn selectors(params: &Params, required: bool) -> Result<Vec<Vec<Matcher>>, Fail> {
    let all = params.all("match[]");
    if all.is_empty() && required {
        return Err(bad_data("no match[] parameter provided"));
    }
    let mut out = Vec::new();
    for s in all {
        let sets = floe_promql::parse_selector(s)
            .map_err(|e| bad_data(format!("invalid parameter \"match[]\": {e}")))?;
        out.extend(sets);
    }
    Ok(out)
}

/// The label sets of every series `match[]` names in the range (the whole table when no
/// selector is given).
async fn matching_label_sets(
    storage: &SqlStorage,
    params: &Params,
    required: bool,
) -> Result<Vec<floe_promql::Labels>, Fail> {
    let sets = selectors(params, required)?;
    let (start, end) = (params.time("start")?, params.time("end")?);
    let matcher_sets = if sets.is_empty() {
        vec![Vec::new()]
    } else {
        sets
    };
    let mut all = Vec::new();
    for m in matcher_sets {
        all.extend(
            storage
                .label_sets(&m, start, end)
                .await
                .map_err(|e| promql_failure(&e))?,
        );
    }
    all.sort();
    all.dedup();
    Ok(all)
}

async fn series(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    path: Option<UrlPath<String>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Result<Response, Fail> {
    let params = Params::of(raw.as_deref(), &headers, &body)?;
    let storage = tenant_storage(&state, &caller, warehouse(path), &headers).await?;
    let sets = matching_label_sets(&storage, &params, true).await?;
    let data: Vec<Json> = sets
        .iter()
        .take(params.limit()?)
        .map(floe_promql::value::labels_json)
        .collect();
    Ok(success(Json::Array(data), Vec::new()))
}

/// Names or values as Prometheus lists them: sorted, each once, at most `limit`.
fn sorted_strings(mut items: Vec<&str>, limit: usize) -> Response {
    items.sort_unstable();
    items.dedup();
    let data: Vec<Json> = items.into_iter().take(limit).map(|v| json!(v)).collect();
    success(Json::Array(data), Vec::new())
}

async fn labels(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    path: Option<UrlPath<String>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Result<Response, Fail> {
    let params = Params::of(raw.as_deref(), &headers, &body)?;
    let storage = tenant_storage(&state, &caller, warehouse(path), &headers).await?;
    let sets = matching_label_sets(&storage, &params, false).await?;
    let names = sets.iter().flat_map(|l| l.iter().map(|(n, _)| n)).collect();
    Ok(sorted_strings(names, params.limit()?))
}

async fn label_values(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    path: axum::extract::Path<Vec<(String, String)>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, Fail> {
    let params = Params::of(raw.as_deref(), &headers, &[])?;
    let mut tenant = None;
    let mut name = String::new();
    for (k, v) in path.0 {
        match k.as_str() {
            "warehouse" => tenant = Some(v),
            "name" => name = v,
            _ => {}
        }
    }
    if !floe_promql::valid_label_name(&name) {
        return Err(bad_data(format!("invalid label name: {name:?}")));
    }
    let storage = tenant_storage(&state, &caller, tenant, &headers).await?;
    // Metric names without a selector — the query editor's metric list — are one column.
    if name == METRIC_NAME && params.all("match[]").is_empty() {
        let (start, end) = (params.time("start")?, params.time("end")?);
        let names = storage
            .metric_names(start, end)
            .await
            .map_err(|e| promql_failure(&e))?;
        let data: Vec<Json> = names
            .into_iter()
            .take(params.limit()?)
            .map(Json::String)
            .collect();
        return Ok(success(Json::Array(data), Vec::new()));
    }
    let sets = matching_label_sets(&storage, &params, false).await?;
    let values = sets
        .iter()
        .map(|l| l.get(&name))
        .filter(|v| !v.is_empty())
        .collect();
    Ok(sorted_strings(values, params.limit()?))
}

async fn metadata(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    path: Option<UrlPath<String>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, Fail> {
    let params = Params::of(raw.as_deref(), &headers, &[])?;
    let storage = tenant_storage(&state, &caller, warehouse(path), &headers).await?;
    let rows = storage
        .metadata(params.get("metric"))
        .await
        .map_err(|e| promql_failure(&e))?;
    let limit = params.limit()?;
    let per_metric = params
        .get("limit_per_metric")
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(usize::MAX);
    let mut data = serde_json::Map::new();
    for (name, kind, help, unit) in rows {
        if !data.contains_key(&name) && data.len() >= limit {
            continue;
        }
        let entry = data.entry(name).or_insert_with(|| Json::Array(Vec::new()));
        if let Json::Array(list) = entry
            && list.len() < per_metric
        {
            list.push(Json::String(format!(
                "{{\"type\":{},\"help\":{},\"unit\":{}}}",
                quoted(&kind),
                quoted(&help),
                quoted(&unit)
            )));
        }
    }
    // Metric names sorted (a JSON map); each entry's members in Prometheus's order.
    let entries: Vec<String> = data
        .into_iter()
        .map(|(name, list)| {
            let items: Vec<String> = list
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            format!("{}:[{}]", quoted(&name), items.join(","))
        })
        .collect();
    Ok(success_text(
        format!("{{{}}}", entries.join(",")),
        Vec::new(),
    ))
}

async fn buildinfo() -> Response {
    let revision = concat!("floe-", env!("CARGO_PKG_VERSION"));
    success_text(
        format!(
            "{{\"version\":{},\"revision\":{},\"branch\":\"\",\"buildUser\":\"\",\"buildDate\":\"\",\"goVersion\":\"\"}}",
            quoted(PROMETHEUS_VERSION),
            quoted(revision)
        ),
        Vec::new(),
    )
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
