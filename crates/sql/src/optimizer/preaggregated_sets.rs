//! Grouping sets aggregated over rows already grouped by all of their keys.
//!
//! DataFusion computes `GROUP BY ROLLUP (a, b, c, d)` (or `CUBE`, or `GROUPING SETS`) by
//! inserting every input row once per grouping set into its partial aggregation's hash table:
//! TPC-DS Q22 rolls four keys of `item` up over 2.3 million `inventory` rows, 11.6 million
//! insertions of four strings each. This rule puts a plain partial aggregation by every key
//! of the sets first, and lets the grouping sets combine its states instead of raw rows:
//!
//! ```text
//! Partial(sets over a, b, c, d)        PartialReduce(sets over a, b, c, d)
//!   input                        =>      [a, b, c, d, 0 AS __grouping_id, states…]
//!                                          Partial(group by a, b, c, d)
//!                                            input
//! ```
//!
//! The plain partial aggregation skips itself where it would not reduce the rows (DataFusion's
//! partial aggregation probe), so a grouping whose keys are nearly unique costs one pass of
//! converting rows to states.
//!
//! Both run inside a [`PreaggregatedSetsExec`], which answers a partition without rows as the
//! partial aggregation of the sets did (one row of empty states for each set without keys,
//! `()` of a `ROLLUP`): DataFusion 54's combining aggregation panics there ("assertion failed"
//! in `count`'s `merge_batch`, which it hands NULL states to prime the empty set).
//!
//! Why the answer cannot change: a grouping set `S` of the keys `K` groups rows by `S`;
//! grouping them by `K` first and then by `S` gives the same groups, since `S ⊆ K`, and each
//! aggregate's state over a group is the merge of its states over the group's parts — the
//! law DataFusion's own partial and final aggregations rest on. The keys' values reach the
//! sets unchanged (the plain aggregation groups by the same expressions, named the same), and
//! the sets null the keys they leave out as before. The `FILTER` of an aggregate is applied to
//! raw rows by the plain aggregation, as the original did.
//!
//! It fires on a partial aggregation with more than one grouping set whose aggregates have
//! no `ORDER BY` and are not `DISTINCT` (their states merge too, but they are left as
//! DataFusion plans them), and only when the combining aggregation's output is the partial
//! aggregation's, column for column.

use std::fmt;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, displayable,
};
use futures::{StreamExt, TryStreamExt};

use crate::optimizer::utils::StreamSource;

/// The physical rule; see the module documentation.
#[derive(Debug, Default)]
pub struct PreaggregatedSets;

impl PhysicalOptimizerRule for PreaggregatedSets {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            Ok(match preaggregated(aggregate)? {
                Some(rewritten) => Transformed::yes(rewritten),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "floe_preaggregated_sets"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `aggregate` computed over a plain partial aggregation by all of its keys, when it is a
/// partial aggregation of several grouping sets this rule may change.
fn preaggregated(aggregate: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let group_by = aggregate.group_expr();
    let fires = *aggregate.mode() == AggregateMode::Partial
        && group_by.has_grouping_set()
        && group_by.groups().len() > 1
        && !group_by.expr().is_empty()
        && aggregate.limit_options().is_none()
        && aggregate
            .aggr_expr()
            .iter()
            .all(|a| a.order_bys().is_empty() && !a.is_distinct());
    if !fires {
        return Ok(None);
    }
    let input = aggregate.input();
    let by_every_key = Arc::new(AggregateExec::try_new(
        AggregateMode::Partial,
        PhysicalGroupBy::new_single(group_by.expr().to_vec()),
        aggregate.aggr_expr().to_vec(),
        aggregate.filter_expr().to_vec(),
        Arc::clone(input),
        aggregate.input_schema(),
    )?);
    // The combining aggregation reads its states after the keys and a grouping id, where a
    // partial aggregation of grouping sets puts them; the plain one has no grouping id.
    let schema = by_every_key.schema();
    let keys = group_by.expr().len();
    let mut columns: Vec<(Arc<dyn PhysicalExpr>, String)> =
        Vec::with_capacity(schema.fields().len() + 1);
    for (i, field) in schema.fields().iter().enumerate() {
        if i == keys {
            columns.push((
                Arc::new(Literal::new(ScalarValue::UInt8(Some(0)))),
                "__grouping_id".to_string(),
            ));
        }
        columns.push((Arc::new(Column::new(field.name(), i)), field.name().clone()));
    }
    let with_grouping_id: Arc<dyn ExecutionPlan> =
        Arc::new(ProjectionExec::try_new(columns, by_every_key)?);
    let combined_keys: Vec<(Arc<dyn PhysicalExpr>, String)> = group_by
        .expr()
        .iter()
        .enumerate()
        .map(|(i, (_, name))| {
            (
                Arc::new(Column::new(name, i)) as Arc<dyn PhysicalExpr>,
                name.clone(),
            )
        })
        .collect();
    let combined: Arc<dyn ExecutionPlan> = Arc::new(AggregateExec::try_new(
        AggregateMode::PartialReduce,
        PhysicalGroupBy::new(
            combined_keys,
            group_by.null_expr().to_vec(),
            group_by.groups().to_vec(),
            true,
        ),
        aggregate.aggr_expr().to_vec(),
        vec![None; aggregate.aggr_expr().len()],
        Arc::clone(&with_grouping_id) as Arc<dyn ExecutionPlan>,
        aggregate.input_schema(),
    )?);
    let when_empty: Arc<dyn ExecutionPlan> = Arc::new(AggregateExec::try_new(
        AggregateMode::Partial,
        group_by.clone(),
        aggregate.aggr_expr().to_vec(),
        aggregate.filter_expr().to_vec(),
        Arc::new(EmptyExec::new(input.schema())),
        aggregate.input_schema(),
    )?);
    if !same_columns(&combined.schema(), &aggregate.schema())
        || !same_columns(&when_empty.schema(), &aggregate.schema())
    {
        return Ok(None);
    }
    Ok(Some(Arc::new(PreaggregatedSetsExec {
        by_every_key: with_grouping_id,
        combined,
        when_empty,
    })))
}

/// Whether two schemas have the same columns: names, types and nullability, in order.
fn same_columns(
    a: &datafusion::arrow::datatypes::SchemaRef,
    b: &datafusion::arrow::datatypes::SchemaRef,
) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields().iter().zip(b.fields().iter()).all(|(x, y)| {
            x.name() == y.name()
                && x.data_type() == y.data_type()
                && x.is_nullable() == y.is_nullable()
        })
}

/// A partial aggregation of grouping sets computed from a plain partial aggregation by every
/// key (its child); see the module documentation.
#[derive(Debug)]
pub struct PreaggregatedSetsExec {
    /// The plain partial aggregation, with a placeholder grouping id after its keys.
    by_every_key: Arc<dyn ExecutionPlan>,
    /// The combining aggregation over `by_every_key`: this node's schema and properties.
    combined: Arc<dyn ExecutionPlan>,
    /// The original partial aggregation over no rows: what a partition without rows gives.
    when_empty: Arc<dyn ExecutionPlan>,
}

impl DisplayAs for PreaggregatedSetsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "PreaggregatedSetsExec: {}",
            displayable(self.combined.as_ref()).one_line()
        )
    }
}

impl ExecutionPlan for PreaggregatedSetsExec {
    fn name(&self) -> &str {
        "PreaggregatedSetsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.combined.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.by_every_key]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let by_every_key = children.swap_remove(0);
        let combined =
            Arc::clone(&self.combined).with_new_children(vec![Arc::clone(&by_every_key)])?;
        Ok(Arc::new(Self {
            by_every_key,
            combined,
            when_empty: Arc::clone(&self.when_empty),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let mut rows = self.by_every_key.execute(partition, Arc::clone(&context))?;
        let (combined, when_empty) = (Arc::clone(&self.combined), Arc::clone(&self.when_empty));
        let answer = futures::stream::once(async move {
            let mut first = None;
            while let Some(batch) = rows.next().await {
                let batch = batch?;
                if batch.num_rows() > 0 {
                    first = Some(batch);
                    break;
                }
            }
            let Some(first) = first else {
                return when_empty.execute(0, context);
            };
            let properties = PlanProperties::new(
                EquivalenceProperties::new(rows.schema()),
                Partitioning::UnknownPartitioning(1),
                EmissionType::Incremental,
                Boundedness::Bounded,
            );
            let handed: Arc<dyn ExecutionPlan> =
                Arc::new(StreamSource::resuming(first, rows, Arc::new(properties)));
            combined
                .with_new_children(vec![handed])?
                .execute(0, context)
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            answer,
        )))
    }
}
