//! A scan's task waiting for the filters its scans take from joins in other stages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::Schema;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion_proto::physical_plan::DefaultPhysicalExtensionCodec;
use datafusion_proto::physical_plan::from_proto::parse_physical_expr;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use prost::Message;

use super::board::{FilterClient, FilterNode, RemoteBoard};

/// Longest a scan waits for filters from other stages before it reads without them (it takes
/// them when they come).
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(30);

/// The filters one task takes from other stages, and its wait for them.
pub(crate) struct Awaited {
    remote: RemoteBoard,
    client: FilterClient,
    /// Each filter's root: the copy the board's filter is written into, which the scans'
    /// copies read.
    roots: HashMap<u64, Arc<DynamicFilterPhysicalExpr>>,
    ready: OnceLock<Shared<BoxFuture<'static, ()>>>,
    /// The wait, stopped when the task's plan is dropped.
    waiting: Mutex<Option<tokio::task::AbortHandle>>,
}

impl std::fmt::Debug for Awaited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids: Vec<_> = self.roots.keys().collect();
        ids.sort();
        f.debug_struct("Awaited").field("filters", &ids).finish()
    }
}

impl Drop for Awaited {
    fn drop(&mut self) {
        if let Some(waiting) = self.waiting.lock().expect("awaited").take() {
            waiting.abort();
        }
    }
}

impl Awaited {
    pub(crate) fn new(
        remote: RemoteBoard,
        client: FilterClient,
        roots: HashMap<u64, Arc<DynamicFilterPhysicalExpr>>,
    ) -> Self {
        Self {
            remote,
            client,
            roots,
            ready: OnceLock::new(),
            waiting: Mutex::new(None),
        }
    }

    /// Whether filter `id` is taken from another stage.
    pub(crate) fn awaits(&self, id: u64) -> bool {
        self.roots.contains_key(&id)
    }

    /// Resolves once every filter is in, known not to come, or [`LONGEST_WAIT`] has passed;
    /// the first call starts the wait.
    pub(crate) fn ready(&self) -> Shared<BoxFuture<'static, ()>> {
        self.ready
            .get_or_init(|| {
                let (remote, client) = (self.remote.clone(), self.client.clone());
                let roots = self.roots.clone();
                let waiting = tokio::spawn(fill(remote, client, roots));
                *self.waiting.lock().expect("awaited") = Some(waiting.abort_handle());
                waiting.map(|_| ()).boxed().shared()
            })
            .clone()
    }
}

/// Waits on `remote` for the filters of `roots`, writing each into its root as it comes.
async fn fill(
    remote: RemoteBoard,
    client: FilterClient,
    roots: HashMap<u64, Arc<DynamicFilterPhysicalExpr>>,
) {
    let deadline = Instant::now() + LONGEST_WAIT;
    let mut left: Vec<u64> = roots.keys().copied().collect();
    while !left.is_empty() {
        let hold = deadline.saturating_duration_since(Instant::now());
        if hold.is_zero() {
            tracing::debug!(filters = ?left, "read on without runtime filters still to come");
            return;
        }
        let answer = match client.wait(&remote, &left, hold).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::warn!(error = %e, "wait for runtime filters from other stages");
                return;
            }
        };
        for node in answer.published {
            left.retain(|id| *id != node.filter);
            let Some(root) = roots.get(&node.filter) else {
                continue;
            };
            match decoded(&node).and_then(|expr| over_children_of(root, expr)) {
                Ok(expr) => {
                    if let Err(e) = root.update(expr) {
                        tracing::warn!(error = %e, "apply a runtime filter from another stage");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "decode a runtime filter from another stage"),
            }
            root.mark_complete();
        }
        left.retain(|id| !answer.not_coming.contains(id));
    }
}

/// `expr` if every column it reads is one of `root`'s (the join's probe-side keys), which
/// the scans' copies map to their own columns.
fn over_children_of(
    root: &DynamicFilterPhysicalExpr,
    expr: Arc<dyn datafusion::physical_expr::PhysicalExpr>,
) -> Result<Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
    let columns = datafusion::physical_expr::utils::collect_columns(&expr);
    let keys = root.original_children();
    let known = columns.iter().all(|column| {
        keys.iter()
            .any(|key| key.as_ref() == column as &dyn datafusion::physical_expr::PhysicalExpr)
    });
    if known {
        Ok(expr)
    } else {
        Err(DataFusionError::Execution(
            "a published runtime filter reads columns its join does not key on".into(),
        ))
    }
}

/// A published filter's expression, over the schema it was published with.
fn decoded(node: &FilterNode) -> Result<Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
    let invalid = |e: &dyn std::fmt::Display| {
        DataFusionError::Execution(format!("a published runtime filter is invalid: {e}"))
    };
    let schema = datafusion_proto::protobuf::Schema::decode(node.schema.as_slice())
        .map_err(|e| invalid(&e))?;
    let schema = Schema::try_from(&schema).map_err(|e| invalid(&e))?;
    let expr = datafusion_proto::protobuf::PhysicalExprNode::decode(node.expr.as_slice())
        .map_err(|e| invalid(&e))?;
    parse_physical_expr(
        &expr,
        &TaskContext::default(),
        &schema,
        &DefaultPhysicalExtensionCodec {},
    )
}
