//! One audit record per request (health checks and metrics scrapes aside). A request that
//! changes state has its record committed by the store in the same transaction as the change
//! (see [`AuditScope`]); the records of all other requests go to a background writer that
//! appends them to the hash-chained trail in batches.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use floe_catalog::governance::audit::{AuditEvent, AuditScope, AuditStore, Checkpoint};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::AppState;

/// Marks a response that hides an object from a caller who may not see it: a denial, though
/// the client sees a 404.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AuditDenied;

/// Who a request acted as, set on the response by the layers that know.
#[derive(Debug, Clone)]
pub(crate) struct AuditSubject(pub String);

/// Sends events to the writer; waits when the writer is behind (never drops a record).
#[derive(Debug, Clone)]
pub struct AuditSink {
    sender: mpsc::Sender<AuditEvent>,
}

impl AuditSink {
    /// Starts the writer; it drains what is queued when `shutdown` fires.
    pub fn start(
        store: Arc<dyn AuditStore>,
        shutdown: CancellationToken,
    ) -> (AuditSink, tokio::task::JoinHandle<()>) {
        let (sender, receiver) = mpsc::channel(16_384);
        let writer = tokio::spawn(write_batches(store, receiver, shutdown));
        (AuditSink { sender }, writer)
    }

    pub(crate) async fn send(&self, event: AuditEvent) {
        if self.sender.send(event).await.is_err() {
            tracing::error!("audit writer is gone; record lost");
        }
    }
}

async fn write_batches(
    store: Arc<dyn AuditStore>,
    mut receiver: mpsc::Receiver<AuditEvent>,
    shutdown: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            event = receiver.recv() => event,
            _ = shutdown.cancelled() => {
                receiver.close();
                receiver.recv().await
            }
        };
        let Some(first) = first else { break };
        let mut batch = vec![first];
        while batch.len() < 1000 {
            match receiver.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        let mut attempt = 0u32;
        loop {
            match store.append_audit(batch.clone()).await {
                Ok(()) => break,
                Err(e) => {
                    attempt += 1;
                    tracing::error!(attempt, records = batch.len(), error = %e, "append audit records");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt.min(50))))
                        .await;
                }
            }
        }
    }
}

/// Adds facts the path does not show (the securable a grant is on, a rename's target) to the
/// record of the request being served. Call it before the change, whose transaction writes the
/// record. Never pass secrets.
pub(crate) fn note_details(details: serde_json::Value) {
    if let Some(scope) = AuditScope::current() {
        scope.set_details(details.to_string());
    }
}

/// Notes the trail's head in `path` (see [`Checkpoint`]) every `interval` while it grows,
/// and once more when `shutdown` fires (after the writer has drained, if the caller awaits it
/// first). A failure to read or write is logged and retried at the next tick.
pub fn start_checkpoints(
    store: Arc<dyn AuditStore>,
    path: std::path::PathBuf,
    interval: Duration,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut noted = None;
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            checkpoint(store.as_ref(), &path, &mut noted).await;
        }
    })
}

/// Replaces the checkpoint file with the head (unless it is the one noted last): the newest
/// checkpoint pins every record before it through the chain, so one is enough. Written to a
/// temporary file, synced and renamed, so a crash never leaves half a line.
pub async fn checkpoint(
    store: &dyn AuditStore,
    path: &std::path::Path,
    noted: &mut Option<(i64, String)>,
) {
    let head = match store.audit_head().await {
        Ok(Some(head)) => head,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "read the audit trail's head for a checkpoint");
            return;
        }
    };
    if noted.as_ref() == Some(&head) {
        return;
    }
    let line = Checkpoint {
        seq: head.0,
        hash: head.1.clone(),
        at_ms: floe_catalog::clock::now_ms(),
    }
    .line();
    let written = async {
        use tokio::io::AsyncWriteExt;
        let temporary = path.with_extension("tmp");
        let mut file = tokio::fs::File::create(&temporary).await?;
        file.write_all(line.as_bytes()).await?;
        file.sync_data().await?;
        tokio::fs::rename(&temporary, path).await
    }
    .await;
    match written {
        Ok(()) => *noted = Some(head),
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "write an audit checkpoint"),
    }
}

/// How a statement ended, for its record: the stages it was cut into when it was distributed
/// and the row and column policies it read under, or its error.
pub(crate) type Outcome<'a> =
    Result<(Option<&'a floe_sql::distributed::StagePlan>, &'a [String]), &'a floe_sql::SqlError>;

/// The [`Outcome`] of a statement's `query` call.
pub(crate) fn outcome_of(
    outcome: &Result<floe_sql::QueryResult, floe_sql::SqlError>,
) -> Outcome<'_> {
    outcome
        .as_ref()
        .map(|r| (r.stages.as_ref(), r.policies.as_slice()))
}

/// What the record of a SQL statement says of it: the statement, the stages it was cut into
/// over workers when it was distributed, and the row and column policies it read under.
pub(crate) fn statement_details(
    sql: &str,
    stages: Option<&floe_sql::distributed::StagePlan>,
    policies: &[String],
) -> serde_json::Value {
    let mut details = serde_json::json!({ "statement": sql });
    if let Some(stages) = stages {
        details["distributed"] = serde_json::json!(stages);
    }
    if !policies.is_empty() {
        details["policies"] = serde_json::json!(policies);
    }
    details
}

/// The record of one SQL statement from a front door that is not HTTP (PostgreSQL wire,
/// Flight SQL): its outcome as an HTTP-like status, a missing privilege as a denial.
pub(crate) fn statement_event(
    principal: &str,
    action: &str,
    resource: String,
    client: String,
    sql: &str,
    outcome: Outcome<'_>,
) -> AuditEvent {
    let (error, stages, policies) = match outcome {
        Ok((stages, policies)) => (None, stages, policies),
        Err(error) => (Some(error), None, &[][..]),
    };
    let status = match error.map(|e| &e.kind) {
        None => 200,
        Some(floe_sql::SqlErrorKind::PermissionDenied) => 403,
        Some(floe_sql::SqlErrorKind::TooManyStatements) => 429,
        Some(floe_sql::SqlErrorKind::Timeout) => 504,
        Some(_) => 400,
    };
    let mut event = login_event(principal, action, resource, client, status);
    event.details = statement_details(sql, stages, policies).to_string();
    event
}

/// The record of a sign-in (or a refused one) at a front door that is not HTTP: `status` as
/// HTTP would answer it (200, or 401 for credentials that were refused), 401 and 403 denials.
pub(crate) fn login_event(
    principal: &str,
    action: &str,
    resource: String,
    client: String,
    status: u16,
) -> AuditEvent {
    AuditEvent {
        at_ms: floe_catalog::clock::now_ms(),
        request_id: uuid::Uuid::now_v7().to_string(),
        principal: principal.to_string(),
        action: action.to_string(),
        resource,
        decision: if matches!(status, 401 | 403) {
            "deny"
        } else {
            "allow"
        }
        .into(),
        status,
        client,
        details: "{}".into(),
    }
}

pub(crate) async fn record(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_string();
    if path == "/health" || path == "/metrics" {
        return next.run(request).await;
    }
    let request_id = uuid::Uuid::now_v7().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_default();
    // The record as it will read if the request succeeds; the store commits it with the
    // request's first change, if it makes one.
    let scope = AuditScope::new(AuditEvent {
        at_ms: floe_catalog::clock::now_ms(),
        request_id: request_id.clone(),
        principal: "anonymous".into(),
        action: format!("{} {route}", request.method()),
        resource: path,
        decision: "allow".into(),
        status: success_status(request.method(), &route),
        client,
        details: "{}".into(),
    });
    let mut response = scope.run(next.run(request)).await;
    let status = response.status().as_u16();
    let denied =
        matches!(status, 401 | 403) || response.extensions().get::<AuditDenied>().is_some();
    if let Some(subject) = response.extensions().get::<AuditSubject>() {
        scope.set_principal(&subject.0);
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", value);
    }
    let mut event = scope.event();
    event.status = status;
    event.decision = if denied { "deny" } else { "allow" }.into();
    match scope.committed() {
        // The record went into the store with the change and says what the client saw.
        Some((_, committed)) if committed == event => {}
        // The change committed, but the response differs from the record committed with it
        // (a failure after the commit): a second record says what the client saw.
        Some((seq, _)) => {
            event.details = follows_record(&event.details, seq);
            state.audit.send(event).await;
        }
        // Nothing changed: the writer appends the record in its next batch.
        None => state.audit.send(event).await,
    }
    response
}

/// The details of a record that follows the one committed with the change (record `seq`):
/// what the request noted, and which record it follows.
fn follows_record(details: &str, seq: i64) -> String {
    let mut value = serde_json::from_str::<serde_json::Value>(details)
        .ok()
        .filter(serde_json::Value::is_object)
        .unwrap_or_else(|| serde_json::json!({}));
    value["follows-record"] = serde_json::json!(seq);
    value.to_string()
}

/// The status a route answers with when it succeeds, which the record committed together
/// with a change carries.
fn success_status(method: &Method, route: &str) -> u16 {
    const CREATED_POSTS: [&str; 3] = ["/api/v1/warehouses", "/api/v1/principals", "/api/v1/roles"];
    const NO_CONTENT_POSTS: [&str; 9] = [
        "/tables/rename",
        "/views/rename",
        "/transactions/commit",
        "/metrics",
        "/disable",
        "/enable",
        "/members",
        "/grants",
        "/grants/revoke",
    ];
    if *method == Method::DELETE || *method == Method::HEAD {
        204
    } else if *method == Method::POST && CREATED_POSTS.contains(&route) {
        201
    } else if *method == Method::POST && NO_CONTENT_POSTS.iter().any(|s| route.ends_with(s)) {
        204
    } else {
        200
    }
}
