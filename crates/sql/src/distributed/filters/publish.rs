//! A join's task publishing the join's filter to its statement's board.

use std::fmt;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use datafusion::common::runtime::SpawnedTask;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{DynamicFilterPhysicalExpr, lit};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_proto::physical_plan::DefaultPhysicalExtensionCodec;
use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;
use prost::Message;

use super::board::{FilterClient, FilterNode, MOST_FILTER_BYTES, RemoteBoard};

/// Runs `join` and, once the join has read its build side, publishes its filter (run under
/// an [`Overlay`](crate::distributed::overlay::Overlay), so the plan keeps its shape).
#[derive(Debug)]
pub(crate) struct PublishFilterExec {
    join: Arc<dyn ExecutionPlan>,
    filter: Arc<DynamicFilterPhysicalExpr>,
    remote: RemoteBoard,
    client: FilterClient,
    /// Publishing, once this task starts; stopped when the plan is dropped.
    publishing: OnceLock<SpawnedTask<()>>,
}

impl PublishFilterExec {
    pub(crate) fn new(
        join: Arc<dyn ExecutionPlan>,
        filter: Arc<DynamicFilterPhysicalExpr>,
        remote: RemoteBoard,
        client: FilterClient,
    ) -> Self {
        Self {
            join,
            filter,
            remote,
            client,
            publishing: OnceLock::new(),
        }
    }
}

/// `filter` as the board carries it: its expression over `probe` (the join's probe side).
/// A filter that cannot be written, or is too large to carry, travels as `true`, so the
/// scans waiting for it read on.
/// The encoding of a filter that keeps every row: what is published in place of one that
/// does not encode or is too large to travel (its scans then read without it, as they would
/// with none, and report it dropped).
pub(super) fn keeps_everything() -> &'static [u8] {
    static ENCODED: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
        let always: Arc<dyn PhysicalExpr> = lit(true);
        serialize_physical_expr(&always, &DefaultPhysicalExtensionCodec {})
            .map(|node| node.encode_to_vec())
            .unwrap_or_default()
    });
    &ENCODED
}

fn encoded(id: u64, filter: &DynamicFilterPhysicalExpr, probe: &SchemaRef) -> FilterNode {
    let codec = DefaultPhysicalExtensionCodec {};
    let schema = datafusion_proto::protobuf::Schema::try_from(probe.as_ref())
        .map(|s| s.encode_to_vec())
        .unwrap_or_default();
    let expr = filter
        .current()
        .and_then(|expr| serialize_physical_expr(&expr, &codec))
        .map(|node| node.encode_to_vec())
        .ok()
        .filter(|bytes| bytes.len() + schema.len() <= MOST_FILTER_BYTES);
    let expr = expr.unwrap_or_else(|| {
        tracing::debug!(
            filter = id,
            "a runtime filter that cannot travel is published as none"
        );
        keeps_everything().to_vec()
    });
    FilterNode {
        filter: id,
        schema,
        expr,
    }
}

impl DisplayAs for PublishFilterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "PublishFilterExec: to {}", self.remote.coordinator)
    }
}

impl ExecutionPlan for PublishFilterExec {
    fn name(&self) -> &str {
        "PublishFilterExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.join.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.join]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let join = children.swap_remove(0);
        let filter = super::published_filter(&join).unwrap_or_else(|| self.filter.clone());
        Ok(Arc::new(Self::new(
            join,
            filter,
            self.remote.clone(),
            self.client.clone(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let stream = self.join.execute(partition, context)?;
        self.publishing.get_or_init(|| {
            let filter = self.filter.clone();
            let (remote, client) = (self.remote.clone(), self.client.clone());
            let probe = self.join.children()[1].schema();
            SpawnedTask::spawn(async move {
                filter.wait_complete().await;
                let Some(id) = filter.expression_id() else {
                    return;
                };
                let node = encoded(id, &filter, &probe);
                if let Err(e) = client.publish(&remote, node).await {
                    tracing::warn!(error = %e, "publish a runtime filter");
                }
            })
        });
        Ok(stream)
    }
}
