//! Repeated aggregations computed once.
//!
//! A common table expression referenced twice (TPC-H Q15's `revenue0`: joined to `supplier`
//! and searched for its maximum) is planned by DataFusion as two identical subplans, each
//! scanning and aggregating on its own. This rule finds complete aggregations (final or single
//! mode) that appear more than once with the same input and puts one shared node in every
//! place: the first consumer to read a partition computes it, the others read its batches
//! (held against the query's memory budget; past it the query fails, nothing spills). That is
//! how PostgreSQL evaluates a CTE, once per query. A distributed statement's coordinator does
//! not run it: stages share no memory.
//!
//! Copies are the same when their keys are: every node's one-line description and, for a
//! scan, its files and byte ranges by partition, its columns, its limit and its own (static)
//! predicate — runtime filters left out. The shared input is the first copy whose scans'
//! dynamic filters all come from hash joins inside it. It refuses copies with scans under
//! position deletes (their row selections are not compared) or over sources other than files,
//! partial aggregations, and copies none of which is self-contained so (a top-k sort's or an
//! aggregation's filter counts as from outside).
//!
//! Why the answer cannot change: the same operators over the same file ranges, columns and
//! static filters give each partition the same rows. Runtime filters a consumer pushed into
//! its copy go with the copy; they only removed rows the consumer's own joins above drop
//! anyway, and DataFusion pushes a filter through an aggregation only on grouping columns, so
//! they removed whole groups, never rows of a group kept. The shared copy has no filter from
//! outside, so it holds every group any consumer could keep. The copies partition alike, and
//! every instance later rules make of the shared node computes from its one input, once.
//!
//! What a copy computes is keyed by each node's one-line description, with what that leaves out
//! added where it changes the rows: a hash join's null-aware anti semantics (`NOT IN` prints as
//! a plain anti join), an aggregation's top-k direction and its aggregates' `FILTER`s, a scan's
//! column types and pushed projection. Each shared partition is computed on a task of its own
//! that every consumer awaits, so a consumer that stops reading (a `LIMIT` above it) cannot cut
//! it off and leave the operators below to run twice; the task stops with the plan.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::utils::split_conjunction;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, displayable,
};
use futures::{StreamExt, TryStreamExt};

use crate::optimizer::apply_runtime_filters::is_runtime_filter;
use crate::optimizer::fast_conjunctions::Conjunction;
use crate::optimizer::utils::{dynamic_filters, file_scan, map_children};

/// Shares repeated complete aggregations between their consumers.
#[derive(Debug, Default)]
pub struct ShareRepeatedAggregations;

impl PhysicalOptimizerRule for ShareRepeatedAggregations {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut found: HashMap<String, Vec<Arc<dyn ExecutionPlan>>> = HashMap::new();
        collect(&plan, &mut found);
        // Each copy, by its address in the plan, and the group of copies it belongs to.
        let mut groups: Vec<Group> = Vec::new();
        let mut copy_of: HashMap<usize, usize> = HashMap::new();
        for copies in found.into_values().filter(|copies| copies.len() > 1) {
            let Some(input) = copies.iter().find(|c| self_contained(c)).cloned() else {
                continue;
            };
            for copy in &copies {
                copy_of.insert(address(copy), groups.len());
            }
            groups.push(Group {
                input,
                consumers: copies.len(),
                node: None,
            });
        }
        if groups.is_empty() {
            return Ok(plan);
        }
        replace(plan, &copy_of, &mut groups)
    }

    fn name(&self) -> &str {
        "floe_share_repeated_aggregations"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A complete aggregation (not the partial half of one).
fn is_complete_aggregation(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.downcast_ref::<AggregateExec>().is_some_and(|a| {
        matches!(
            a.mode(),
            AggregateMode::Final
                | AggregateMode::FinalPartitioned
                | AggregateMode::Single
                | AggregateMode::SinglePartitioned
        )
    })
}

/// Where a plan node lives: the identity of one copy while the plan is rewritten.
fn address(plan: &Arc<dyn ExecutionPlan>) -> usize {
    Arc::as_ptr(plan) as *const () as usize
}

/// Complete aggregations by what they compute, outermost first (nested ones too; where both
/// an aggregation and one inside it repeat, [`replace`] shares the outer one).
fn collect(
    plan: &Arc<dyn ExecutionPlan>,
    found: &mut HashMap<String, Vec<Arc<dyn ExecutionPlan>>>,
) {
    if is_complete_aggregation(plan)
        && let Some(key) = key(plan)
    {
        found.entry(key).or_default().push(plan.clone());
    }
    for child in plan.children() {
        collect(child, found);
    }
}

/// Copies of one aggregation and, once built, the shared node that takes their places.
struct Group {
    /// The copy the shared node computes from.
    input: Arc<dyn ExecutionPlan>,
    consumers: usize,
    node: Option<Arc<dyn ExecutionPlan>>,
}

/// `plan` with every shared copy replaced by its group's shared node, outermost first. A
/// shared node is built when first placed, over its input with the copies inside that input
/// replaced too: an aggregation repeated inside a shared one and elsewhere as well (a CTE
/// used by another CTE used twice, and once more on its own) is then computed by one node
/// everywhere, never once through the outer node's input and again through its own.
fn replace(
    plan: Arc<dyn ExecutionPlan>,
    copy_of: &HashMap<usize, usize>,
    groups: &mut Vec<Group>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(&group) = copy_of.get(&address(&plan)) else {
        return map_children(plan, |_, child| replace(child, copy_of, groups));
    };
    if let Some(node) = &groups[group].node {
        return Ok(node.clone());
    }
    let input = groups[group].input.clone();
    let input = map_children(input, |_, child| replace(child, copy_of, groups))?;
    let node: Arc<dyn ExecutionPlan> = Arc::new(SharedExec::new(input, groups[group].consumers));
    groups[group].node = Some(node.clone());
    Ok(node)
}

/// What a subplan computes, leaving out runtime filters; `None` when it cannot be told (a
/// scan with deletes, a source other than files).
fn key(plan: &Arc<dyn ExecutionPlan>) -> Option<String> {
    if let Some(filter) = plan.downcast_ref::<FilterExec>() {
        let predicate = match filter.predicate().downcast_ref::<Conjunction>() {
            Some(conjunction) => conjunction.original().clone(),
            None => filter.predicate().clone(),
        };
        let own: Vec<String> = split_conjunction(&predicate)
            .into_iter()
            .filter(|condition| !is_runtime_filter(condition))
            .map(|condition| condition.to_string())
            .collect();
        let input = key(filter.input())?;
        if own.is_empty() && filter.projection().is_none() {
            return Some(input);
        }
        return Some(format!(
            "filter[{} projection={:?}]({input})",
            own.join(" and "),
            filter.projection()
        ));
    }
    if plan.downcast_ref::<DataSourceExec>().is_some() {
        let config = file_scan(plan)?;
        let mut text = String::from("scan[");
        for group in &config.file_groups {
            text.push('{');
            for file in group.iter() {
                if !file.extensions.is_empty() {
                    return None;
                }
                text.push_str(&format!("{} {:?};", file.object_meta.location, file.range));
            }
            text.push('}');
        }
        let columns: Vec<String> = plan
            .schema()
            .fields()
            .iter()
            .map(|f| format!("{} {}", f.name(), f.data_type()))
            .collect();
        // Expressions a projection pushed into the scan compute their columns.
        if let Some(projection) = config.file_source().projection() {
            text.push_str(&format!(" projection={projection:?}"));
        }
        text.push_str(&format!(" columns={columns:?} limit={:?}", config.limit));
        if let Some(predicate) = config.file_source().filter() {
            let dynamic: Vec<_> = dynamic_filters(&predicate).map(|(e, _)| e).collect();
            for conjunct in split_conjunction(&predicate) {
                if !dynamic.iter().any(|d| Arc::ptr_eq(d, conjunct)) {
                    text.push_str(&format!(" and {conjunct}"));
                }
            }
        }
        text.push(']');
        return Some(text);
    }
    if plan.children().is_empty() {
        return None;
    }
    let mut text = displayable(plan.as_ref()).one_line().to_string();
    // What the one-line display leaves out but changes the rows: a join's null-aware anti
    // semantics (`NOT IN`), an aggregation's top-k direction and its aggregates' filters.
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        text.push_str(&format!(" null_aware={}", join.null_aware));
    }
    if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
        let filters: Vec<String> = aggregate
            .filter_expr()
            .iter()
            .map(|f| f.as_ref().map_or_else(String::new, |f| f.to_string()))
            .collect();
        text.push_str(&format!(
            " limit={:?} filters={filters:?}",
            aggregate.limit_options()
        ));
    }
    text.push('(');
    for child in plan.children() {
        text.push_str(&key(child)?);
        text.push(',');
    }
    text.push(')');
    Some(text)
}

/// Whether every dynamic filter in `plan`'s scans comes from a join inside `plan`.
fn self_contained(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut produced = HashSet::new();
    let mut used = HashSet::new();
    let mut unknown = false;
    visit(plan, &mut |node| {
        if let Some(join) = node.downcast_ref::<HashJoinExec>()
            && let Some(id) = join.dynamic_filter_expr().and_then(|f| f.expression_id())
        {
            produced.insert(id);
        }
        if let Some(predicate) = file_scan(node).and_then(|c| c.file_source().filter()) {
            for (_, dynamic) in dynamic_filters(&predicate) {
                match dynamic.expression_id() {
                    Some(id) => {
                        used.insert(id);
                    }
                    None => unknown = true,
                }
            }
        }
    });
    !unknown && used.is_subset(&produced)
}

fn visit(plan: &Arc<dyn ExecutionPlan>, f: &mut impl FnMut(&Arc<dyn ExecutionPlan>)) {
    f(plan);
    for child in plan.children() {
        visit(child, f);
    }
}

/// A subplan computed once per partition for several consumers.
///
/// The one node stands in several places of a plan that the physical-plan API treats as a
/// tree: a rule that runs later and rewrites below it calls [`ExecutionPlan::with_new_children`]
/// once per place, making several instances. Their children may share nodes that can be
/// executed only once per partition (a `RepartitionExec`'s output channels are taken by its
/// first execution), so every instance made from one shared node keeps its state: the
/// partitions it computed and the one input they are computed from, whatever child a later
/// rewrite gave an instance (the rewrites are equivalent; running one of them is the point).
#[derive(Debug)]
pub struct SharedExec {
    input: Arc<dyn ExecutionPlan>,
    consumers: usize,
    state: Arc<SharedState>,
}

#[derive(Debug)]
struct SharedState {
    /// What every instance computes from: the input the node was made with.
    input: Arc<dyn ExecutionPlan>,
    partitions: Vec<std::sync::Mutex<Option<Computation>>>,
}

/// One partition's computation: a task of its own, so that a consumer that stops reading (a
/// `LIMIT` above it, a statement stopped) does not cut it off — the next consumer would run
/// the input partition again, which a repartition below cannot do. Every consumer awaits the
/// same task; the task stops when the plan is dropped.
#[derive(Debug)]
struct Computation {
    result: futures::future::Shared<
        futures::future::BoxFuture<'static, Result<Arc<Computed>, Arc<DataFusionError>>>,
    >,
    task: tokio::task::AbortHandle,
}

impl Drop for SharedState {
    fn drop(&mut self) {
        for slot in &self.partitions {
            if let Ok(Some(computation)) = slot.lock().as_deref() {
                computation.task.abort();
            }
        }
    }
}

/// Computes partition `partition` of `input` to the end, holding its batches against the
/// query's memory budget.
async fn compute(
    input: Arc<dyn ExecutionPlan>,
    partition: usize,
    context: Arc<TaskContext>,
) -> Result<Arc<Computed>> {
    let reservation =
        MemoryConsumer::new(format!("SharedExec[{partition}]")).register(context.memory_pool());
    let mut stream = input.execute(partition, context.clone())?;
    let mut batches = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        reservation.try_grow(batch.get_array_memory_size())?;
        batches.push(batch);
    }
    Ok(Arc::new(Computed {
        batches,
        _reservation: reservation,
    }))
}

/// One partition's batches, and their memory counted against the query's budget until the
/// plan is dropped.
#[derive(Debug)]
struct Computed {
    batches: Vec<RecordBatch>,
    _reservation: MemoryReservation,
}

impl SharedExec {
    fn new(input: Arc<dyn ExecutionPlan>, consumers: usize) -> Self {
        let count = input.properties().partitioning.partition_count();
        Self {
            input: input.clone(),
            consumers,
            state: Arc::new(SharedState {
                input,
                partitions: (0..count).map(|_| Default::default()).collect(),
            }),
        }
    }
}

impl DisplayAs for SharedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SharedExec: computed once for {} consumers",
            self.consumers
        )
    }
}

impl ExecutionPlan for SharedExec {
    fn name(&self) -> &str {
        "SharedExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = children.remove(0);
        if input.schema() != self.input.schema()
            || input.properties().partitioning.partition_count() != self.state.partitions.len()
        {
            return Err(DataFusionError::Internal(
                "a shared aggregation's input was rewritten into another shape".into(),
            ));
        }
        // The same shared node in another place (see the type's documentation).
        Ok(Arc::new(SharedExec {
            input,
            consumers: self.consumers,
            state: self.state.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        use futures::FutureExt;
        let slot = self.state.partitions.get(partition).ok_or_else(|| {
            DataFusionError::Internal(format!("SharedExec has no partition {partition}"))
        })?;
        let result = {
            let mut slot = slot
                .lock()
                .map_err(|_| DataFusionError::Internal("SharedExec's lock".into()))?;
            let computation = slot.get_or_insert_with(|| {
                let task = tokio::spawn(compute(self.state.input.clone(), partition, context));
                let abort = task.abort_handle();
                Computation {
                    result: async move {
                        match task.await {
                            Ok(computed) => computed.map_err(Arc::new),
                            Err(e) => Err(Arc::new(DataFusionError::ExecutionJoin(Box::new(e)))),
                        }
                    }
                    .boxed()
                    .shared(),
                    task: abort,
                }
            });
            computation.result.clone()
        };
        let batches = futures::stream::once(async move {
            let computed = result.await.map_err(DataFusionError::Shared)?;
            Ok::<_, DataFusionError>(futures::stream::iter(
                (0..computed.batches.len()).map(move |i| Ok(computed.batches[i].clone())),
            ))
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            batches,
        )))
    }
}
