//! DataFusion's filter pushdown, kept from the places where it changes answers.
//!
//! DataFusion 54's physical filter pushdown moves filters — a query's, a join's dynamic
//! filter, a `TopK`'s — down the plan. It goes wrong in two places, both found by `floe bench
//! fuzz`, so [`GuardedFilterPushdown`] wraps each of DataFusion's filter pushdown rules (the
//! early and the late one): before the wrapped rule runs it puts a [`Barrier`] where a filter
//! must not pass, and takes the barriers away again before it returns, so no other rule and
//! no execution sees them. A filter a barrier refuses stays where it was (evaluated above, as
//! if the child could not take it). It applies always: it corrects answers.
//!
//! 1. **Columns that share a name.** Filters move by the *names* of their columns: a
//!    `ProjectionExec` looks each column up by name in its own output, a `FilterExec`,
//!    `SortExec` or `AggregateExec` in its input, a `HashJoinExec` in the child it pushes to.
//!    Where two columns of that schema share a name — `a1.s` and `a2.s` after a join, both
//!    `s` once qualifiers are gone — the lookup finds the first, and the filter lands on the
//!    other column (seed 12, #10: `SELECT a2.s, a1.s FROM t2 AS a1 RIGHT JOIN t1 AS a2 ON
//!    a1.b = a2.b WHERE (a1.s BETWEEN 'é' AND 'Ωmega') IS NULL` filtered `t1`'s `s` below the
//!    join and answered 3 rows where 10 are right). A barrier above every node whose output
//!    repeats a name lets a filter through only when each of its columns' names occurs once
//!    there — then a lookup by name finds the column the filter means.
//! 2. **The subquery side of `NOT IN`.** A null-aware anti join (`x NOT IN (SELECT y …)`)
//!    keeps no row once its subquery side holds a null `y`, so it must see every row there;
//!    the join's own dynamic filter (`y` between the build keys' bounds), pushed into that
//!    side's scan, prunes the nulls away (seed 13, #380: `SELECT d FROM t1 WHERE k NOT IN
//!    (SELECT i FROM t0) AND i = 6` answered 2 rows where `t0.i` holds nulls and none is
//!    right). A barrier above that side refuses every filter.
//!
//! The logical optimizer has the second fault too: DataFusion's `push_down_filter` copies a
//! condition on `x` onto `y` through the join's keys (`x > 8` becomes `y > 8` below the
//! subquery), dropping the nulls as well. [`GuardedPushDownFilter`] wraps that rule: while it
//! runs, the subquery's key of each null-aware anti join is wrapped in [`not_in_key`], an
//! identity the rule cannot see a column through, so it infers nothing from it.
//!
//! Plans without either shape are untouched; plans with one lose only those pushdowns.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRewriter};
use datafusion::common::{Result, internal_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter_pushdown::{
    ChildFilterDescription, FilterDescription, FilterPushdownPhase,
};
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

/// One of DataFusion's filter pushdown rules, run with barriers where filters must not pass.
#[derive(Debug)]
pub struct GuardedFilterPushdown {
    inner: Arc<dyn PhysicalOptimizerRule + Send + Sync>,
}

impl GuardedFilterPushdown {
    pub fn new(inner: Arc<dyn PhysicalOptimizerRule + Send + Sync>) -> Self {
        Self { inner }
    }
}

impl PhysicalOptimizerRule for GuardedFilterPushdown {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let guarded = with_barriers(plan)?;
        let pushed = self.inner.optimize(guarded, config)?;
        without_barriers(pushed)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn schema_check(&self) -> bool {
        self.inner.schema_check()
    }
}

/// How often each column name occurs in `schema`.
fn name_counts(schema: &SchemaRef) -> HashMap<&str, usize> {
    let mut counts = HashMap::new();
    for field in schema.fields() {
        *counts.entry(field.name().as_str()).or_insert(0) += 1;
    }
    counts
}

fn with_barriers(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let mut changed = false;
        let mut node = node;
        if let Some(join) = node.downcast_ref::<HashJoinExec>()
            && join.null_aware
        {
            let probe: Arc<dyn ExecutionPlan> =
                Arc::new(Barrier::new(Arc::clone(join.right()), Guard::Everything));
            node = Arc::clone(&node).with_new_children(vec![Arc::clone(join.left()), probe])?;
            changed = true;
        }
        if name_counts(&node.schema()).values().any(|n| *n > 1) {
            node = Arc::new(Barrier::new(node, Guard::RepeatedNames));
            changed = true;
        }
        Ok(if changed {
            Transformed::yes(node)
        } else {
            Transformed::no(node)
        })
    })
    .map(|t| t.data)
}

fn without_barriers(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| match node.downcast_ref::<Barrier>() {
        Some(barrier) => Ok(Transformed::yes(Arc::clone(&barrier.input))),
        None => Ok(Transformed::no(node)),
    })
    .map(|t| t.data)
}

/// What a [`Barrier`] keeps from passing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// Filters on a column whose name its input's output repeats.
    RepeatedNames,
    /// Every filter.
    Everything,
}

/// Stands above a node while filters are pushed down, letting through what its [`Guard`]
/// allows; never executed.
#[derive(Debug)]
pub struct Barrier {
    input: Arc<dyn ExecutionPlan>,
    guard: Guard,
}

impl Barrier {
    fn new(input: Arc<dyn ExecutionPlan>, guard: Guard) -> Self {
        Self { input, guard }
    }

    /// The positions of the input's columns a filter may name and still pass.
    fn passable(&self) -> HashSet<usize> {
        let schema = self.input.schema();
        match self.guard {
            Guard::Everything => HashSet::new(),
            Guard::RepeatedNames => {
                let occurrences = name_counts(&schema);
                schema
                    .fields()
                    .iter()
                    .enumerate()
                    .filter(|(_, field)| occurrences[field.name().as_str()] == 1)
                    .map(|(i, _)| i)
                    .collect()
            }
        }
    }
}

impl DisplayAs for Barrier {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Barrier: {:?}", self.guard)
    }
}

impl ExecutionPlan for Barrier {
    fn name(&self) -> &str {
        "Barrier"
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
        Ok(Arc::new(Self::new(children.swap_remove(0), self.guard)))
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        internal_err!("a filter pushdown barrier outlived the rule it guards")
    }

    fn gather_filters_for_pushdown(
        &self,
        _phase: FilterPushdownPhase,
        parent_filters: Vec<Arc<dyn PhysicalExpr>>,
        _config: &ConfigOptions,
    ) -> Result<FilterDescription> {
        // A filter passes when each of its columns is passable (for repeated names: one whose
        // name occurs once, so that a lookup by name finds it where it is).
        let child = ChildFilterDescription::from_child_with_allowed_indices(
            &parent_filters,
            self.passable(),
            &self.input,
        )?;
        // What the child takes is taken (ExecutionPlan's default handling of the result).
        Ok(FilterDescription::new().with_child(child))
    }
}

/// DataFusion's logical `push_down_filter`, run with the subquery keys of null-aware anti
/// joins out of its sight (see the module documentation).
#[derive(Debug)]
pub struct GuardedPushDownFilter {
    inner: Arc<dyn OptimizerRule + Send + Sync>,
}

impl GuardedPushDownFilter {
    pub fn new(inner: Arc<dyn OptimizerRule + Send + Sync>) -> Self {
        Self { inner }
    }
}

impl OptimizerRule for GuardedPushDownFilter {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        None
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let hidden = plan.transform_up_with_subqueries(hide_not_in_keys)?;
        let pushed = match self.inner.apply_order() {
            Some(order) => hidden.data.rewrite_with_subqueries(&mut EveryNode {
                order,
                rule: self.inner.as_ref(),
                config,
            })?,
            None => self.inner.rewrite(hidden.data, config)?,
        };
        // Hiding and showing the keys undo each other: the plan changed if the rule changed it.
        let shown = pushed.data.transform_up_with_subqueries(show_not_in_keys)?;
        Ok(Transformed::new_transformed(shown.data, pushed.transformed))
    }
}

/// Runs a rule on every node, in its order, as DataFusion's optimizer does.
struct EveryNode<'a> {
    order: ApplyOrder,
    rule: &'a (dyn OptimizerRule + Send + Sync),
    config: &'a dyn OptimizerConfig,
}

impl TreeNodeRewriter for EveryNode<'_> {
    type Node = LogicalPlan;

    fn f_down(&mut self, node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
        match self.order {
            ApplyOrder::TopDown => self.rule.rewrite(node, self.config),
            ApplyOrder::BottomUp => Ok(Transformed::no(node)),
        }
    }

    fn f_up(&mut self, node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
        match self.order {
            ApplyOrder::BottomUp => self.rule.rewrite(node, self.config),
            ApplyOrder::TopDown => Ok(Transformed::no(node)),
        }
    }
}

fn hide_not_in_keys(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    match plan {
        LogicalPlan::Join(mut join) if join.null_aware && !join.on.is_empty() => {
            for (_, right) in &mut join.on {
                *right = not_in_key().call(vec![right.clone()]);
            }
            Ok(Transformed::yes(LogicalPlan::Join(join)))
        }
        plan => Ok(Transformed::no(plan)),
    }
}

fn show_not_in_keys(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    match plan {
        LogicalPlan::Join(mut join) if join.null_aware => {
            let mut changed = false;
            for (_, right) in &mut join.on {
                if let Expr::ScalarFunction(call) = right
                    && call.func.name() == NOT_IN_KEY
                    && call.args.len() == 1
                {
                    *right = call.args[0].clone();
                    changed = true;
                }
            }
            Ok(Transformed::new_transformed(
                LogicalPlan::Join(join),
                changed,
            ))
        }
        plan => Ok(Transformed::no(plan)),
    }
}

const NOT_IN_KEY: &str = "__floe_not_in_key";

/// The identity over one value, standing for a `NOT IN` subquery's key while
/// `push_down_filter` runs; never executed.
pub fn not_in_key() -> ScalarUDF {
    ScalarUDF::new_from_impl(NotInKey {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct NotInKey {
    signature: Signature,
}

impl ScalarUDFImpl for NotInKey {
    fn name(&self) -> &str {
        NOT_IN_KEY
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(args.args[0].clone())
    }
}
