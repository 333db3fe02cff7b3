//! Requests that change state finish even when their client hangs up.
//!
//! Hyper drops a request's future when its connection closes: an HTTP client's timeout, a
//! load balancer giving up, a Ctrl-C. Whatever the handler was awaiting at that moment is
//! cancelled — between writing a table's metadata file and swapping it in, between a store
//! transaction's queries, before its audit record. Every unit of work below this layer rolls
//! back when cut (docs/cancellation.md), but a request is several such units, and a client that
//! gives up must not decide which of them happen.
//!
//! So every request that may change state (any method but `GET`, `HEAD` and `OPTIONS`) runs on
//! a task of its own, and the connection only waits for that task: a vanished client leaves
//! the request to finish — and to be audited — as if it had stayed. Reads stay attached, so a
//! client that stops waiting stops the work: `GET`s, and the `POST`s that only read (SQL
//! statements, whose writes finish on the engine's own task and whose results stream after the
//! handler returned; server-side scan planning). A graceful stop waits for detached requests
//! as it waits for connections ([`Detached::idle`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Notify;
use tracing::Instrument;

/// The requests running detached from their connections.
#[derive(Debug, Clone, Default)]
pub struct Detached {
    inner: Arc<Count>,
}

#[derive(Debug, Default)]
struct Count {
    running: AtomicUsize,
    idle: Notify,
}

/// Counts one detached request while it lives.
struct Running(Arc<Count>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Detached {
    fn start(&self) -> Running {
        self.inner.running.fetch_add(1, Ordering::AcqRel);
        Running(self.inner.clone())
    }

    /// How many detached requests are running.
    pub fn running(&self) -> usize {
        self.inner.running.load(Ordering::Acquire)
    }

    /// Waits until no detached request is running.
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            if self.inner.running.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Whether a request only reads, so that its client's departure may stop it.
fn stays_attached(method: &Method, path: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        || path == "/api/v1/sql"
        || (path.starts_with("/catalog/") && (path.ends_with("/plan") || path.ends_with("/tasks")))
}

/// The middleware: runs state-changing requests detached from their connection.
pub async fn detach_writes(
    State(detached): State<Detached>,
    request: Request,
    next: Next,
) -> Response {
    if stays_attached(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    let running = detached.start();
    let span = tracing::Span::current();
    let task = tokio::spawn(
        async move {
            let response = next.run(request).await;
            drop(running);
            response
        }
        .instrument(span),
    );
    match task.await {
        Ok(response) => response,
        Err(e) => {
            // A handler that panicked: the unit of work it was in rolled back with it.
            let error_id = uuid::Uuid::now_v7();
            tracing::error!(%error_id, error = %e, "request handler failed");
            crate::error::error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalServerError",
                &format!("internal server error; error id {error_id}"),
            )
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reads_stay_attached() {
        assert!(stays_attached(&Method::GET, "/api/v1/tables"));
        assert!(stays_attached(&Method::POST, "/api/v1/sql"));
        assert!(stays_attached(
            &Method::POST,
            "/catalog/v1/default/namespaces/a/tables/t/plan"
        ));
        assert!(!stays_attached(
            &Method::POST,
            "/catalog/v1/default/namespaces/a/tables/t"
        ));
        assert!(!stays_attached(&Method::PUT, "/api/v1/migrations/p/tables"));
        assert!(!stays_attached(&Method::DELETE, "/api/v1/principals/x"));
        assert!(!stays_attached(&Method::POST, "/ingest/v1/default/a/t"));
    }

    #[tokio::test]
    async fn idle_waits_for_running_requests() {
        let detached = Detached::default();
        detached.idle().await;
        let running = detached.start();
        let waiter = tokio::spawn({
            let detached = detached.clone();
            async move { detached.idle().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(running);
        waiter.await.unwrap();
    }
}
