//! Who runs a statement now, and for how long: every front door's statements pass here.
//!
//! - A principal runs (or waits for) at most `max_queries_per_principal` statements at once;
//!   one more is refused at once with [`SqlErrorKind::TooManyStatements`], so no principal can
//!   fill the line the others wait in.
//! - A tenant (the statement's session warehouse) with `max-concurrent-queries` runs at most
//!   that many at once; up to `max-queued-queries` more wait, and past those one more is
//!   refused at once with [`SqlErrorKind::TooManyStatements`] naming the limit.
//! - At most `max_concurrent_queries` statements run; the others wait in line.
//! - Every statement has a deadline, its arrival plus the statement timeout: waiting, planning,
//!   running and handing over rows all stop there with [`SqlErrorKind::Timeout`], so a
//!   statement that never ends, or a client that stops reading, gives its place back.
//!
//! The ticket a statement holds travels with its result stream and is given back when the
//! stream ends or is dropped (a client that disconnects).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floe_catalog::governance::authz::Caller;
use floe_catalog::tenants::{QueryPlace, Tenant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use uuid::Uuid;

use super::{EngineConfig, SqlError, SqlErrorKind};

#[derive(Debug)]
pub(super) struct Admission {
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
    running: Arc<Mutex<HashMap<Uuid, usize>>>,
    per_principal: usize,
    timeout: Option<Duration>,
}

/// A statement's place: its principal's slot, its permit to run (none for planning only)
/// and its deadline.
#[derive(Debug)]
pub(super) struct Ticket {
    _slot: Slot,
    /// Its place in its tenant's line, when the tenant has one.
    _place: Option<QueryPlace>,
    /// Its places in the lines of the other warehouses it reads.
    _more: Vec<QueryPlace>,
    _permit: Option<OwnedSemaphorePermit>,
    pub deadline: Deadline,
}

impl Ticket {
    /// Holds `place` (in another tenant's line) as long as the statement runs.
    pub fn hold(&mut self, place: QueryPlace) {
        self._more.push(place);
    }
}

/// When a statement must be done by.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline {
    at: Option<Instant>,
    timeout: Duration,
}

impl Deadline {
    /// Runs `work` until the deadline; past it, `work` is dropped (which stops it).
    pub async fn run<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T, SqlError> {
        match self.at {
            None => Ok(work.await),
            Some(at) => tokio::time::timeout_at(at, work)
                .await
                .map_err(|_| self.expired()),
        }
    }

    pub fn expired(&self) -> SqlError {
        SqlError::new(
            SqlErrorKind::Timeout,
            format!(
                "the statement was stopped after its timeout of {} s",
                self.timeout.as_secs_f64()
            ),
        )
    }
}

/// One of a principal's places; given back on drop.
#[derive(Debug)]
struct Slot {
    running: Arc<Mutex<HashMap<Uuid, usize>>>,
    principal: Option<Uuid>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(id) = self.principal else { return };
        let mut running = self.running.lock().expect("admission lock");
        if let Some(count) = running.get_mut(&id) {
            *count -= 1;
            if *count == 0 {
                running.remove(&id);
            }
        }
    }
}

/// Counted while in the line, also when the caller gives up mid-wait.
struct InLine<'a>(&'a AtomicUsize);

impl<'a> InLine<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        InLine(count)
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Admission {
    pub fn new(config: &EngineConfig) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(config.max_concurrent_queries.max(1))),
            waiting: AtomicUsize::new(0),
            running: Arc::new(Mutex::new(HashMap::new())),
            per_principal: config.max_queries_per_principal.max(1),
            timeout: config.statement_timeout,
        }
    }

    /// Statements waiting for a permit right now.
    pub fn queued(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// A place to plan and run one statement of `caller` for `tenant`: its slot at once (or
    /// a refusal), then a place in its tenant's line (or a refusal when the line is full),
    /// then a permit once one is free, before the deadline.
    pub async fn admit(
        &self,
        caller: &Caller,
        tenant: Option<&Tenant>,
    ) -> Result<Ticket, SqlError> {
        let mut ticket = self.plan_only(caller)?;
        if let Some(tenant) = tenant {
            let place = ticket
                .deadline
                .run(tenant.admit_query())
                .await?
                .map_err(|refused| {
                    SqlError::new(SqlErrorKind::TooManyStatements, refused.to_string())
                })?;
            ticket._place = Some(place);
        }
        let permit = {
            let _in_line = InLine::enter(&self.waiting);
            ticket
                .deadline
                .run(self.permits.clone().acquire_owned())
                .await?
                .map_err(|_| {
                    SqlError::new(SqlErrorKind::Execution, "the engine is shutting down")
                })?
        };
        ticket._permit = Some(permit);
        Ok(ticket)
    }

    /// A place to plan a statement without running it (describing it): the slot and the
    /// deadline, no permit.
    pub fn plan_only(&self, caller: &Caller) -> Result<Ticket, SqlError> {
        let deadline = Deadline {
            at: self.timeout.map(|t| Instant::now() + t),
            timeout: self.timeout.unwrap_or_default(),
        };
        // The system's own work (ingest commits, maintenance) is not a principal's.
        let principal = (!caller.principal.id.is_nil()).then_some(caller.principal.id);
        if let Some(id) = principal {
            let mut running = self.running.lock().expect("admission lock");
            let count = running.entry(id).or_insert(0);
            if *count >= self.per_principal {
                return Err(SqlError::new(
                    SqlErrorKind::TooManyStatements,
                    format!(
                        "{} already runs {} statements, as many as one principal may at once; \
                         retry when one has finished",
                        caller.principal.name, self.per_principal
                    ),
                ));
            }
            *count += 1;
        }
        Ok(Ticket {
            _slot: Slot {
                running: self.running.clone(),
                principal,
            },
            _place: None,
            _more: Vec::new(),
            _permit: None,
            deadline,
        })
    }
}

#[cfg(test)]
mod tests {
    use floe_catalog::governance::Principal;

    use super::*;

    fn caller(name: &str) -> Caller {
        let mut caller = Caller::system();
        caller.principal = Principal {
            id: Uuid::now_v7(),
            name: name.into(),
            ..caller.principal
        };
        caller
    }

    #[tokio::test]
    async fn a_principal_is_refused_past_its_cap_and_others_still_get_in() {
        let admission = Admission::new(&EngineConfig {
            max_concurrent_queries: 8,
            max_queries_per_principal: 2,
            ..EngineConfig::default()
        });
        let greedy = caller("greedy");
        let first = admission.admit(&greedy, None).await.unwrap();
        let _second = admission.admit(&greedy, None).await.unwrap();
        let refused = admission.admit(&greedy, None).await.unwrap_err();
        assert_eq!(refused.kind, SqlErrorKind::TooManyStatements);
        assert!(refused.message.contains("greedy"), "{}", refused.message);
        assert!(admission.admit(&caller("other"), None).await.is_ok());
        drop(first);
        assert!(admission.admit(&greedy, None).await.is_ok());
        // The system is no principal: it is never refused.
        let system = Caller::system();
        let held: Vec<_> = (0..4)
            .map(|_| admission.plan_only(&system).unwrap())
            .collect();
        assert_eq!(held.len(), 4);
    }

    #[tokio::test]
    async fn waiting_in_line_ends_at_the_deadline() {
        let admission = Admission::new(&EngineConfig {
            max_concurrent_queries: 1,
            max_queries_per_principal: 4,
            statement_timeout: Some(Duration::from_millis(50)),
            ..EngineConfig::default()
        });
        let running = admission.admit(&caller("a"), None).await.unwrap();
        let late = admission.admit(&caller("b"), None).await.unwrap_err();
        assert_eq!(late.kind, SqlErrorKind::Timeout);
        assert_eq!(admission.queued(), 0);
        drop(running);
        assert!(admission.admit(&caller("b"), None).await.is_ok());
    }
}
