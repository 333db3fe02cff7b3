//! Nodes a worker adds to a task plan, kept out of the plan's shape.
//!
//! A worker reports each task's metrics as a list in the plan's pre-order, and the coordinator
//! lays that list over its own copy of the stage's plan, node by node (this is how `EXPLAIN
//! ANALYZE` of a distributed query gets every operator's rows, bytes and time). A node the
//! worker adds — a runtime filter above a scan, the collection of a join's build keys, the
//! publication of a join's filter — would shift every metric after it. So an added node is
//! run through an [`Overlay`]: it executes the added node (`top`), but shows, as its name,
//! children and metrics, the node it was added above (`base`). The pre-order walk then
//! visits exactly the nodes the coordinator planned.

use std::fmt;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result, Statistics};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

/// `top` run in place of `base` (see the module documentation).
#[derive(Debug)]
pub(crate) struct Overlay {
    base: Arc<dyn ExecutionPlan>,
    /// A chain of one-child nodes ending at `base`.
    top: Arc<dyn ExecutionPlan>,
}

impl Overlay {
    /// `top`, whose chain of single children ends at `base`, shown as `base`.
    pub(crate) fn over(
        top: Arc<dyn ExecutionPlan>,
        base: Arc<dyn ExecutionPlan>,
    ) -> Arc<dyn ExecutionPlan> {
        debug_assert!(reaches(&top, &base));
        Arc::new(Self { base, top })
    }
}

/// `plan` (a task plan after the worker's rules) in the shape of `planned` (the plan as it
/// arrived): each node the rules added above a planned node runs as an [`Overlay`] over it.
/// The rules only add nodes above others; a plan that cannot be matched so is run as it is
/// (its metrics may then not line up).
pub(crate) fn keep_shape(
    plan: Arc<dyn ExecutionPlan>,
    planned: &Arc<dyn ExecutionPlan>,
) -> Arc<dyn ExecutionPlan> {
    match shaped(&plan, planned) {
        Some(shaped) => shaped,
        None => {
            tracing::debug!("a task plan's added nodes could not be laid over its planned nodes");
            plan
        }
    }
}

fn shaped(
    node: &Arc<dyn ExecutionPlan>,
    planned: &Arc<dyn ExecutionPlan>,
) -> Option<Arc<dyn ExecutionPlan>> {
    let mut base = node.clone();
    while base.name() != planned.name() {
        let [child] = base.children()[..] else {
            return None;
        };
        base = child.clone();
    }
    let children: Vec<Arc<dyn ExecutionPlan>> = base.children().into_iter().cloned().collect();
    let planned_children = planned.children();
    if children.len() != planned_children.len() {
        return None;
    }
    let mut changed = false;
    let mut shaped_children = Vec::with_capacity(children.len());
    for (child, planned_child) in children.iter().zip(planned_children) {
        let shaped_child = shaped(child, planned_child)?;
        changed |= !Arc::ptr_eq(&shaped_child, child);
        shaped_children.push(shaped_child);
    }
    let new_base = if changed {
        base.clone().with_new_children(shaped_children).ok()?
    } else {
        base.clone()
    };
    if Arc::ptr_eq(&base, node) {
        return Some(new_base);
    }
    let top = rebase(node, &base, new_base.clone()).ok()?;
    Some(Overlay::over(top, new_base))
}

/// Whether `top`'s chain of single children ends at `base`.
fn reaches(top: &Arc<dyn ExecutionPlan>, base: &Arc<dyn ExecutionPlan>) -> bool {
    if Arc::ptr_eq(top, base) {
        return true;
    }
    match top.children()[..] {
        [child] => reaches(child, base),
        _ => false,
    }
}

/// `top` with `base` at the end of its chain replaced by `new`.
fn rebase(
    top: &Arc<dyn ExecutionPlan>,
    base: &Arc<dyn ExecutionPlan>,
    new: Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if Arc::ptr_eq(top, base) {
        return Ok(new);
    }
    match top.children()[..] {
        [child] => {
            let child = rebase(child, base, new)?;
            top.clone().with_new_children(vec![child])
        }
        _ => Err(DataFusionError::Internal(
            "an overlay's added nodes have one child each".into(),
        )),
    }
}

impl DisplayAs for Overlay {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        self.base.fmt_as(t, f)?;
        write!(f, " (run under {} on its worker)", self.top.name())
    }
}

impl ExecutionPlan for Overlay {
    fn name(&self) -> &str {
        self.base.name()
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.top.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.base.children()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let base = self.base.clone().with_new_children(children)?;
        let top = rebase(&self.top, &self.base, base.clone())?;
        Ok(Arc::new(Self { base, top }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.top.execute(partition, context)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.base.metrics()
    }

    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        self.top.partition_statistics(partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::physical_expr::expressions::lit;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::projection::ProjectionExec;

    fn names(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
        let mut names = Vec::new();
        plan.apply(|node| {
            names.push(node.name().to_string());
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        names
    }

    #[test]
    fn added_nodes_are_laid_over_the_planned_ones() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let leaf: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema));
        let column = || {
            vec![(
                Arc::new(datafusion::physical_expr::expressions::Column::new("a", 0)) as _,
                "a".to_string(),
            )]
        };
        let planned: Arc<dyn ExecutionPlan> =
            Arc::new(ProjectionExec::try_new(column(), leaf.clone()).unwrap());
        // A filter added above the leaf, and another above the projection.
        let filtered: Arc<dyn ExecutionPlan> =
            Arc::new(FilterExec::try_new(lit(true), leaf.clone()).unwrap());
        let projected: Arc<dyn ExecutionPlan> =
            Arc::new(ProjectionExec::try_new(column(), filtered).unwrap());
        let ran: Arc<dyn ExecutionPlan> =
            Arc::new(FilterExec::try_new(lit(true), projected).unwrap());
        assert_eq!(names(&ran).len(), 4);
        let shaped = keep_shape(ran, &planned);
        assert_eq!(names(&shaped), names(&planned));
        assert_eq!(shaped.name(), "ProjectionExec");
        // A plan of another shape runs as it is.
        let other: Arc<dyn ExecutionPlan> =
            datafusion::physical_plan::union::UnionExec::try_new(vec![leaf.clone(), leaf]).unwrap();
        let kept = keep_shape(other.clone(), &planned);
        assert!(Arc::ptr_eq(&kept, &other));
    }

    #[test]
    fn an_overlay_keeps_the_plans_shape_and_runs_what_was_added() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let leaf: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema.clone()));
        let base: Arc<dyn ExecutionPlan> = Arc::new(
            ProjectionExec::try_new(
                vec![(
                    Arc::new(datafusion::physical_expr::expressions::Column::new("a", 0)) as _,
                    "a".to_string(),
                )],
                leaf.clone(),
            )
            .unwrap(),
        );
        let top: Arc<dyn ExecutionPlan> =
            Arc::new(FilterExec::try_new(lit(true), base.clone()).unwrap());
        let overlay = Overlay::over(top, base.clone());
        assert_eq!(names(&overlay), names(&base));
        // New children reach the base, under the added node.
        let other: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema));
        let moved = overlay.with_new_children(vec![other.clone()]).unwrap();
        let overlay = moved.downcast_ref::<Overlay>().unwrap();
        assert_eq!(overlay.top.name(), "FilterExec");
        assert!(Arc::ptr_eq(overlay.base.children()[0], &other));
        assert!(reaches(&overlay.top, &overlay.base));
    }
}
