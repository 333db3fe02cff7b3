//! Floe's rewrites of DataFusion's plans: one file per rule, named after it, and the one
//! ordered list of rules every session of an engine runs ([`Rules`]), built once from the
//! engine's configuration ([`Rewrites`]).
//!
//! Logical rules: [`group_by_constants::GroupByConstants`] stands in for DataFusion's
//! `eliminate_group_by_constant` in DataFusion's list and [`three_valued_in::ThreeValuedIn`]
//! runs right before its `decorrelate_predicate_subquery`, and its `push_down_filter` runs
//! inside [`guarded_filter_pushdown::GuardedPushDownFilter`] (all always: they correct answers);
//! Floe's own run after all of DataFusion's, in this order:
//!
//! 1. [`plain_not_in::PlainNotIn`] — `NOT IN` over columns without nulls as a plain anti join;
//! 2. [`reorder_joins::ReorderJoins`] — inner joins ordered from table statistics.
//!
//! Physical rules sit inside DataFusion's list. Both of DataFusion's filter pushdown rules run
//! inside [`guarded_filter_pushdown::GuardedFilterPushdown`] (always: it corrects answers; filters
//! are moved by column name there).
//! [`broadcast_bounded_builds::BroadcastBoundedBuilds`] runs right after DataFusion's
//! `join_selection`, before distribution is enforced. The rest run after DataFusion's last
//! rewrite (the post-optimization filter pushdown, which places the dynamic filters several
//! of them read) and before its `SanityCheckPlan`, which then checks their output as it
//! checks DataFusion's:
//!
//! 3. [`plain_repartitions::PlainRepartitions`];
//! 4. [`apply_runtime_filters::ApplyRuntimeFilters`];
//! 5. [`fast_like::FastLike`];
//! 6. [`fast_conjunctions::FastConjunctions`] (after the rules that add filter conditions);
//! 7. [`fast_decimals::FastDecimals`];
//! 8. [`share_repeated_aggregations::ShareRepeatedAggregations`];
//! 9. [`preaggregated_sets::PreaggregatedSets`];
//! 10. [`few_groups::FewGroups`];
//! 11. [`compact_views::CompactViews`];
//! 12. [`yield_after_joins::YieldAfterJoins`], always: whatever the rules before it made, a
//!     join's output yields to the statement's deadline;
//! 13. [`forward_ordered_states::ForwardOrderedStates`], always (it corrects answers), last:
//!     DataFusion reverses ordered aggregates again whenever it rebuilds an aggregation.
//!
//! [`utils`] holds what several rules share.

use std::sync::Arc;

use datafusion::optimizer::OptimizerRule;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;

pub(crate) mod apply_runtime_filters;
pub(crate) mod broadcast_bounded_builds;
pub(crate) mod broken_on_purpose;
pub(crate) mod compact_views;
pub(crate) mod fast_conjunctions;
pub(crate) mod fast_decimals;
pub(crate) mod fast_like;
pub(crate) mod few_groups;
pub(crate) mod forward_ordered_states;
pub(crate) mod group_by_constants;
pub(crate) mod guarded_filter_pushdown;
pub(crate) mod multiset_set_ops;
pub(crate) mod null_in_lists;
pub(crate) mod plain_not_in;
pub(crate) mod plain_repartitions;
pub(crate) mod preaggregated_sets;
pub(crate) mod reorder_joins;
pub(crate) mod share_repeated_aggregations;
pub(crate) mod three_valued_in;
pub(crate) mod utils;
pub(crate) mod yield_after_joins;

/// Which of Floe's plan rewrites are on (all are by default). Each has a `FLOE_SQL_*` switch
/// in the environment, read once when the configuration is made, that turns it off with
/// `off` — for comparing plans and times with and without it (docs/configuration.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewrites {
    /// `FLOE_SQL_PLAIN_NOT_IN`: [`plain_not_in`].
    pub plain_not_in: bool,
    /// `FLOE_SQL_JOIN_ORDER`: [`reorder_joins`].
    pub join_order: bool,
    /// `FLOE_SQL_BROADCAST_BOUNDED`: [`broadcast_bounded_builds`].
    pub broadcast_bounded: bool,
    /// `FLOE_SQL_PLAIN_REPARTITIONS`: [`plain_repartitions`].
    pub plain_repartitions: bool,
    /// `FLOE_SQL_RUNTIME_FILTERS`: [`apply_runtime_filters`].
    pub runtime_filters: bool,
    /// `FLOE_SQL_COLLECTED_KEYS`: joins' integer build-side keys collected for the runtime
    /// filters to test.
    pub collected_keys: bool,
    /// `FLOE_SQL_FAST_LIKE`: [`fast_like`].
    pub fast_like: bool,
    /// `FLOE_SQL_FAST_CONJUNCTIONS`: [`fast_conjunctions`].
    pub fast_conjunctions: bool,
    /// `FLOE_SQL_FAST_DECIMALS`: [`fast_decimals`].
    pub fast_decimals: bool,
    /// `FLOE_SQL_SHARED_AGGREGATIONS`: [`share_repeated_aggregations`].
    pub shared_aggregations: bool,
    /// `FLOE_SQL_PREAGGREGATED_SETS`: [`preaggregated_sets`].
    pub preaggregated_sets: bool,
    /// `FLOE_SQL_FEW_GROUPS`: [`few_groups`].
    pub few_groups: bool,
    /// `FLOE_SQL_COMPACT_VIEWS`: [`compact_views`].
    pub compact_views: bool,
    /// `FLOE_SQL_WRITTEN_ORDER`: scans declare the order their files were written in
    /// ([`crate::scan::provider`]).
    pub written_order: bool,
    /// `FLOE_SQL_TOKEN_INDEX`: scans skip data files whose token index proves that no row
    /// can pass the filters ([`crate::token_index`]).
    pub token_index: bool,
    /// `FLOE_SQL_POLICY_BOUNDS`: a row policy's conditions that the bounds of the files a
    /// scan reads prove true for every row are not evaluated ([`crate::policy`]).
    pub policy_bounds: bool,
    /// [`broken_on_purpose`]: a wrong rewrite, for showing that the differential checks
    /// catch one (`floe bench … --break-a-rewrite` only; never on otherwise).
    #[doc(hidden)]
    pub broken_on_purpose: bool,
}

impl Default for Rewrites {
    fn default() -> Self {
        Self {
            plain_not_in: true,
            join_order: true,
            broadcast_bounded: true,
            plain_repartitions: true,
            runtime_filters: true,
            collected_keys: true,
            fast_like: true,
            fast_conjunctions: true,
            fast_decimals: true,
            shared_aggregations: true,
            preaggregated_sets: true,
            few_groups: true,
            compact_views: true,
            written_order: true,
            token_index: true,
            policy_bounds: true,
            broken_on_purpose: false,
        }
    }
}

impl Rewrites {
    /// These, but for planning a distributed statement on its coordinator: runtime filters
    /// and shared aggregations join two places of one plan through memory, which the stages
    /// of a distributed plan do not share; the expression rewrites are left to the workers
    /// ([`Rules::on_workers`]); preaggregated grouping sets are not planned for stages yet,
    /// and compacted views' node does not travel.
    pub fn for_distribution(self) -> Self {
        Self {
            compact_views: false,
            runtime_filters: false,
            collected_keys: false,
            shared_aggregations: false,
            fast_like: false,
            fast_conjunctions: false,
            fast_decimals: false,
            preaggregated_sets: false,
            ..self
        }
    }

    /// Every rewrite off: DataFusion's plans as DataFusion makes them (the reference the
    /// differential tests hold the rewrites to).
    pub fn none() -> Self {
        Self {
            plain_not_in: false,
            join_order: false,
            broadcast_bounded: false,
            plain_repartitions: false,
            runtime_filters: false,
            collected_keys: false,
            fast_like: false,
            fast_conjunctions: false,
            fast_decimals: false,
            shared_aggregations: false,
            preaggregated_sets: false,
            few_groups: false,
            compact_views: false,
            written_order: false,
            token_index: false,
            policy_bounds: false,
            broken_on_purpose: false,
        }
    }

    /// All on but those whose switch reads `off` in the environment.
    pub fn from_env() -> Self {
        let on = |switch: &str| std::env::var(switch).as_deref() != Ok("off");
        Self {
            plain_not_in: on("FLOE_SQL_PLAIN_NOT_IN"),
            join_order: on("FLOE_SQL_JOIN_ORDER"),
            broadcast_bounded: on("FLOE_SQL_BROADCAST_BOUNDED"),
            plain_repartitions: on("FLOE_SQL_PLAIN_REPARTITIONS"),
            runtime_filters: on("FLOE_SQL_RUNTIME_FILTERS"),
            collected_keys: on("FLOE_SQL_COLLECTED_KEYS"),
            fast_like: on("FLOE_SQL_FAST_LIKE"),
            fast_conjunctions: on("FLOE_SQL_FAST_CONJUNCTIONS"),
            fast_decimals: on("FLOE_SQL_FAST_DECIMALS"),
            shared_aggregations: on("FLOE_SQL_SHARED_AGGREGATIONS"),
            preaggregated_sets: on("FLOE_SQL_PREAGGREGATED_SETS"),
            few_groups: on("FLOE_SQL_FEW_GROUPS"),
            compact_views: on("FLOE_SQL_COMPACT_VIEWS"),
            written_order: on("FLOE_SQL_WRITTEN_ORDER"),
            token_index: on("FLOE_SQL_TOKEN_INDEX"),
            policy_bounds: on("FLOE_SQL_POLICY_BOUNDS"),
            broken_on_purpose: false,
        }
    }
}

type LogicalRule = Arc<dyn OptimizerRule + Send + Sync>;
type PhysicalRule = Arc<dyn PhysicalOptimizerRule + Send + Sync>;

/// The rules of every session of an engine, in the order of the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    /// The whole logical list, DataFusion's rules included.
    pub(crate) logical: Vec<LogicalRule>,
    /// The whole physical list, DataFusion's rules included.
    pub(crate) physical: Vec<PhysicalRule>,
}

impl Rules {
    pub(crate) fn new(rewrites: &Rewrites) -> Self {
        let mut logical: Vec<LogicalRule> = Vec::new();
        for rule in datafusion::optimizer::Optimizer::new().rules {
            match rule.name() {
                "eliminate_group_by_constant" => {
                    logical.push(Arc::new(group_by_constants::GroupByConstants::default()));
                }
                "push_down_filter" => {
                    logical.push(Arc::new(
                        guarded_filter_pushdown::GuardedPushDownFilter::new(rule),
                    ));
                }
                "decorrelate_predicate_subquery" => {
                    logical.push(Arc::new(three_valued_in::ThreeValuedIn));
                    logical.push(rule);
                }
                _ => logical.push(rule),
            }
        }
        if rewrites.plain_not_in {
            logical.push(Arc::new(plain_not_in::PlainNotIn));
        }
        if rewrites.join_order {
            logical.push(Arc::new(reorder_joins::ReorderJoins));
        }

        let mut ours: Vec<PhysicalRule> = Vec::new();
        if rewrites.plain_repartitions {
            ours.push(Arc::new(plain_repartitions::PlainRepartitions));
        }
        if rewrites.runtime_filters {
            ours.push(Arc::new(apply_runtime_filters::ApplyRuntimeFilters::new(
                rewrites.collected_keys,
            )));
        }
        if rewrites.fast_like {
            ours.push(Arc::new(fast_like::FastLike));
        }
        if rewrites.fast_conjunctions {
            ours.push(Arc::new(fast_conjunctions::FastConjunctions));
        }
        if rewrites.fast_decimals {
            ours.push(Arc::new(fast_decimals::FastDecimals));
        }
        if rewrites.shared_aggregations {
            ours.push(Arc::new(
                share_repeated_aggregations::ShareRepeatedAggregations,
            ));
        }
        if rewrites.preaggregated_sets {
            ours.push(Arc::new(preaggregated_sets::PreaggregatedSets));
        }
        if rewrites.few_groups {
            ours.push(Arc::new(few_groups::FewGroups));
        }
        if rewrites.compact_views {
            ours.push(Arc::new(compact_views::CompactViews));
        }
        if rewrites.broken_on_purpose {
            ours.push(Arc::new(broken_on_purpose::BrokenOnPurpose));
        }
        ours.push(Arc::new(yield_after_joins::YieldAfterJoins));
        // A correction, not a rewrite: always on, and last, because DataFusion reverses the
        // aggregates again whenever an aggregation is rebuilt over new children.
        ours.push(Arc::new(forward_ordered_states::ForwardOrderedStates));

        let mut physical: Vec<PhysicalRule> = PhysicalOptimizer::new()
            .rules
            .into_iter()
            .map(|rule| -> PhysicalRule {
                if rule.name().starts_with("FilterPushdown") {
                    Arc::new(guarded_filter_pushdown::GuardedFilterPushdown::new(rule))
                } else {
                    rule
                }
            })
            .collect();
        if rewrites.broadcast_bounded {
            let at = position_after(&physical, "join_selection");
            physical.insert(
                at,
                Arc::new(broadcast_bounded_builds::BroadcastBoundedBuilds),
            );
        }
        let at = physical
            .iter()
            .position(|rule| rule.name() == "SanityCheckPlan")
            .unwrap_or(physical.len());
        physical.splice(at..at, ours);
        Self { logical, physical }
    }
}

impl Rules {
    /// The rules a worker runs over each task plan of a distributed statement, in their
    /// order: DataFusion's sort pushdown (the row-group order it gives a scan under a sort
    /// is not encoded by DataFusion), the runtime filters (once the task's dynamic filters
    /// are linked again, [`crate::distributed`]), then the expression rewrites of `rewrites`,
    /// whose expressions do not travel, and last the correction of ordered aggregates (a
    /// decoded aggregation was rebuilt, which reverses them again). The nodes they add run as
    /// overlays that keep the task plan's shape for its metrics.
    pub(crate) fn on_workers(rewrites: &Rewrites) -> Vec<PhysicalRule> {
        let mut rules: Vec<PhysicalRule> = vec![Arc::new(
            datafusion::physical_optimizer::pushdown_sort::PushdownSort::new(),
        )];
        if rewrites.runtime_filters {
            rules.push(Arc::new(apply_runtime_filters::ApplyRuntimeFilters::new(
                rewrites.collected_keys,
            )));
        }
        if rewrites.fast_like {
            rules.push(Arc::new(fast_like::FastLike));
        }
        if rewrites.fast_conjunctions {
            rules.push(Arc::new(fast_conjunctions::FastConjunctions));
        }
        if rewrites.fast_decimals {
            rules.push(Arc::new(fast_decimals::FastDecimals));
        }
        // A decoded task plan's aggregations were rebuilt, and reversed again.
        rules.push(Arc::new(forward_ordered_states::ForwardOrderedStates));
        rules
    }
}

/// Where a rule goes to run right after DataFusion's rule `name` (at the end if there is none).
fn position_after(rules: &[PhysicalRule], name: &str) -> usize {
    rules
        .iter()
        .position(|rule| rule.name() == name)
        .map_or(rules.len(), |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(rules: &Rules) -> Vec<&str> {
        rules.physical.iter().map(|rule| rule.name()).collect()
    }

    #[test]
    fn floe_rules_run_before_the_sanity_check_and_yielding_and_forward_states_are_last() {
        let rules = Rules::new(&Rewrites::default());
        let names = names(&rules);
        assert_eq!(names.last(), Some(&"SanityCheckPlan"));
        assert_eq!(names[names.len() - 2], "floe_forward_ordered_states");
        let yielding = names
            .iter()
            .position(|n| *n == "floe_yield_after_joins")
            .unwrap();
        assert_eq!(yielding, names.len() - 3);
        let broadcast = names
            .iter()
            .position(|n| *n == "floe_broadcast_bounded_builds")
            .unwrap();
        assert_eq!(names[broadcast - 1], "join_selection");
        let first_late = names
            .iter()
            .position(|n| *n == "floe_plain_repartitions")
            .unwrap();
        assert!(
            names[first_late..names.len() - 1]
                .iter()
                .all(|n| n.starts_with("floe_"))
        );
        let datafusion = datafusion::optimizer::Optimizer::new().rules.len();
        assert_eq!(rules.logical.len(), datafusion + 3);
        assert!(
            rules
                .logical
                .iter()
                .any(|r| format!("{r:?}").starts_with("GroupByConstants")),
            "DataFusion's rule is replaced"
        );
    }

    #[test]
    fn a_rewrite_switched_off_is_left_out_and_yielding_stays() {
        let rewrites = Rewrites {
            runtime_filters: false,
            broadcast_bounded: false,
            join_order: false,
            ..Rewrites::default()
        };
        let rules = Rules::new(&rewrites);
        let names = names(&rules);
        assert!(!names.contains(&"floe_apply_runtime_filters"));
        assert!(!names.contains(&"floe_broadcast_bounded_builds"));
        assert!(names.contains(&"floe_yield_after_joins"));
        let datafusion = datafusion::optimizer::Optimizer::new().rules.len();
        assert_eq!(rules.logical.len(), datafusion + 2);
    }

    #[test]
    fn a_distributed_coordinator_makes_no_node_that_cannot_travel_and_workers_rewrite() {
        let coordinator = Rules::new(&Rewrites::default().for_distribution());
        let names = names(&coordinator);
        for kept_home in [
            "floe_apply_runtime_filters",
            "floe_share_repeated_aggregations",
            "floe_fast_like",
            "floe_fast_conjunctions",
            "floe_fast_decimals",
        ] {
            assert!(!names.contains(&kept_home), "{kept_home}");
        }
        assert!(names.contains(&"floe_few_groups"));
        let on_workers = Rules::on_workers(&Rewrites::default());
        let workers: Vec<&str> = on_workers.iter().map(|r| r.name()).collect();
        assert_eq!(
            workers,
            [
                "PushdownSort",
                "floe_apply_runtime_filters",
                "floe_fast_like",
                "floe_fast_conjunctions",
                "floe_fast_decimals",
                "floe_forward_ordered_states"
            ]
        );
        let off = Rewrites {
            fast_like: false,
            ..Rewrites::default()
        };
        assert_eq!(Rules::on_workers(&off).len(), 5);
    }
}
