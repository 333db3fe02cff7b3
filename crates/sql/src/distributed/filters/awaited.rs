//! A scan's task waiting for the filters its scans take from joins in other stages.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion_proto::physical_plan::DefaultPhysicalExtensionCodec;
use datafusion_proto::physical_plan::from_proto::parse_physical_expr;
use prost::Message;

use super::board::{FilterClient, FilterNode, RemoteBoard};

/// Longest a scan waits for filters from other stages before it reads without them; the
/// task still takes them when they come (later files are pruned with them, later rows
/// filtered).
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(30);

/// A scan's wait: its task's [`Awaited`] and the filters of that scan.
pub(crate) type Waits = (Arc<Awaited>, Vec<u64>);

/// The filters one task takes from other stages.
pub(crate) struct Awaited {
    remote: RemoteBoard,
    client: FilterClient,
    /// Each filter's root: the copy the board's filter is written into, which the scans'
    /// copies read.
    roots: HashMap<u64, Arc<DynamicFilterPhysicalExpr>>,
    /// The filters that are in, or known not to come.
    settled: Arc<Settled>,
    /// Taking the filters from the board, once a scan starts; stopped when the task's plan is
    /// dropped.
    taking: OnceLock<tokio::task::AbortHandle>,
}

#[derive(Default)]
pub(crate) struct Settled {
    ids: Mutex<HashSet<u64>>,
    changed: tokio::sync::Notify,
    /// Filters that came as none (they could not travel) or could not be applied.
    dropped: std::sync::atomic::AtomicUsize,
}

impl Settled {
    fn settle(&self, ids: impl IntoIterator<Item = u64>) {
        self.ids.lock().expect("settled filters").extend(ids);
        self.changed.notify_waiters();
    }

    fn all(&self, ids: &[u64]) -> bool {
        let settled = self.ids.lock().expect("settled filters");
        ids.iter().all(|id| settled.contains(id))
    }
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
        if let Some(taking) = self.taking.get() {
            taking.abort();
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
            settled: Arc::default(),
            taking: OnceLock::new(),
        }
    }

    /// How many of the task's filters from other stages came as none or could not be
    /// applied (its scans read without them): `runtime_filters_dropped` in `EXPLAIN ANALYZE`.
    pub(crate) fn dropped(&self) -> usize {
        self.settled
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether filter `id` is taken from another stage.
    pub(crate) fn awaits(&self, id: u64) -> bool {
        self.roots.contains_key(&id)
    }

    /// Resolves once each of `ids` is in or known not to come, or after [`LONGEST_WAIT`];
    /// the first call starts taking the task's filters from the board.
    pub(crate) async fn settled(&self, ids: &[u64]) {
        self.taking.get_or_init(|| {
            let task = tokio::spawn(take(
                self.remote.clone(),
                self.client.clone(),
                self.roots.clone(),
                self.settled.clone(),
            ));
            task.abort_handle()
        });
        let _ = tokio::time::timeout(LONGEST_WAIT, async {
            loop {
                let changed = self.settled.changed.notified();
                if self.settled.all(ids) {
                    return;
                }
                changed.await;
            }
        })
        .await;
    }
}

/// Takes the filters of `roots` from `remote` as each comes, writing each into its root,
/// until every one is in or known not to come (or the board is gone with its statement).
async fn take(
    remote: RemoteBoard,
    client: FilterClient,
    roots: HashMap<u64, Arc<DynamicFilterPhysicalExpr>>,
    settled: Arc<Settled>,
) {
    let mut left: Vec<u64> = roots.keys().copied().collect();
    while !left.is_empty() {
        let answer = match client.wait(&remote, &left, LONGEST_WAIT).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::warn!(error = %e, "wait for runtime filters from other stages");
                settled.settle(left);
                return;
            }
        };
        for node in answer.published {
            let Some(root) = roots.get(&node.filter) else {
                continue;
            };
            let drop_one = || {
                settled
                    .dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            };
            if node.expr == super::publish::keeps_everything() {
                drop_one();
            } else {
                match decoded(&node).and_then(|expr| over_children_of(root, expr)) {
                    Ok(expr) => {
                        if let Err(e) = root.update(expr) {
                            drop_one();
                            tracing::warn!(error = %e, "apply a runtime filter from another stage");
                        }
                    }
                    Err(e) => {
                        drop_one();
                        tracing::warn!(error = %e, "decode a runtime filter from another stage");
                    }
                }
            }
            root.mark_complete();
            left.retain(|id| *id != node.filter);
            settled.settle([node.filter]);
        }
        left.retain(|id| !answer.not_coming.contains(id));
        settled.settle(answer.not_coming);
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
        functions(),
        &schema,
        &DefaultPhysicalExtensionCodec {},
    )
}

/// A context that knows DataFusion's built-in functions, by which a decoded expression finds
/// the functions it calls: a filter on a key of two columns compares `struct(a, b)` (an empty
/// context knew none, and every such filter was dropped with a warning).
fn functions() -> &'static TaskContext {
    static FUNCTIONS: OnceLock<Arc<TaskContext>> = OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        datafusion::execution::SessionStateBuilder::new()
            .with_default_features()
            .build()
            .task_ctx()
    })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{DataType, Field};
    use datafusion::common::DFSchema;
    use datafusion::prelude::SessionContext;
    use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;

    use super::*;

    /// A runtime filter on a key of two columns (TPC-H Q20's) compares `struct(a, b)`; it
    /// decodes on the scan's side with the function found.
    #[test]
    fn a_filter_on_a_two_column_key_decodes() {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]);
        let context = SessionContext::new();
        let logical = DFSchema::try_from(schema.clone()).unwrap();
        let expr = context
            .parse_sql_expr("struct(a, b) IN (struct(1, 2), struct(3, 4))", &logical)
            .unwrap();
        let physical = context.create_physical_expr(expr, &logical).unwrap();
        let node = FilterNode {
            filter: 1,
            schema: datafusion_proto::protobuf::Schema::try_from(&schema)
                .unwrap()
                .encode_to_vec(),
            expr: serialize_physical_expr(&physical, &DefaultPhysicalExtensionCodec {})
                .unwrap()
                .encode_to_vec(),
        };
        let back = decoded(&node).unwrap();
        assert_eq!(back.to_string(), physical.to_string());
    }
}
