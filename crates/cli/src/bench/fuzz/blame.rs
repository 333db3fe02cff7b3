//! Which of Floe's rewrites a shrunk failure needs: the statement run again with each
//! rewrite alone on (and, when none suffices alone, with all on but each one in turn), and
//! whether a failure against DuckDB or a partitioning oracle happens with every rewrite off
//! as well — so a report says whether a rewrite or DataFusion itself is at fault.

use std::sync::Arc;

use floe_catalog::service::CatalogService;
use floe_sql::{EngineConfig, Rewrites, SqlEngine};

use super::generate::Case;
use super::oracles::{Checker, Failure, Oracle, Verdict};

/// Every rewrite's switch, by the name of its `FLOE_SQL_*` variable's field.
const REWRITES: [&str; 14] = [
    "plain_not_in",
    "join_order",
    "broadcast_bounded",
    "plain_repartitions",
    "runtime_filters",
    "collected_keys",
    "fast_like",
    "fast_conjunctions",
    "fast_decimals",
    "shared_aggregations",
    "preaggregated_sets",
    "few_groups",
    "compact_views",
    "written_order",
];

/// Every one of Floe's rewrites off: DataFusion's plans as it makes them.
pub(super) fn all_off() -> Rewrites {
    Rewrites::none()
}

/// `rewrites` with the one named set to `on` (collected keys feed the runtime filters, so
/// they come on together).
fn set(mut rewrites: Rewrites, name: &str, on: bool) -> Rewrites {
    match name {
        "plain_not_in" => rewrites.plain_not_in = on,
        "join_order" => rewrites.join_order = on,
        "broadcast_bounded" => rewrites.broadcast_bounded = on,
        "plain_repartitions" => rewrites.plain_repartitions = on,
        "runtime_filters" => rewrites.runtime_filters = on,
        "collected_keys" => {
            rewrites.collected_keys = on;
            rewrites.runtime_filters |= on;
        }
        "fast_like" => rewrites.fast_like = on,
        "fast_conjunctions" => rewrites.fast_conjunctions = on,
        "fast_decimals" => rewrites.fast_decimals = on,
        "shared_aggregations" => rewrites.shared_aggregations = on,
        "preaggregated_sets" => rewrites.preaggregated_sets = on,
        "few_groups" => rewrites.few_groups = on,
        "compact_views" => rewrites.compact_views = on,
        "written_order" => rewrites.written_order = on,
        _ => {}
    }
    rewrites
}

/// A sentence on what the failure of `case` needs.
pub(super) async fn blame(
    checker: &mut Checker,
    catalog: &Arc<CatalogService>,
    base: &EngineConfig,
    case: &Case,
    failure: &Failure,
) -> anyhow::Result<String> {
    let mut only_with = "";
    if failure.oracle != Oracle::Rewrites {
        // The same oracle with Floe's rewrites off standing in for Floe.
        checker.swap_engines();
        checker.forget();
        let verdict = checker.check(failure.oracle, case).await;
        checker.swap_engines();
        checker.forget();
        match verdict? {
            Verdict::Fail(f) if f.signature == failure.signature => {
                return Ok(
                    "with every rewrite off too (DataFusion's plans fail the same way)".into(),
                );
            }
            Verdict::Fail(f) => {
                return Ok(format!(
                    "with every rewrite on; with every one off it fails otherwise ({})",
                    f.signature
                ));
            }
            _ => only_with = "only with Floe's rewrites on, ",
        }
    }
    let mut alone = Vec::new();
    for name in REWRITES {
        let rewrites = set(all_off(), name, true);
        if reproduces(checker, catalog, base, rewrites, case, failure).await? {
            alone.push(name);
        }
    }
    if !alone.is_empty() {
        return Ok(format!(
            "{only_with}with any one of these rewrites on alone: {}",
            alone.join(", ")
        ));
    }
    let mut needed = Vec::new();
    for name in REWRITES {
        let without = set(Rewrites::default(), name, false);
        if !reproduces(checker, catalog, base, without, case, failure).await? {
            needed.push(name);
        }
    }
    Ok(format!(
        "{only_with}with no rewrite on alone; with all on, it goes away when any of these is \
         off: {}",
        if needed.is_empty() {
            "none (flaky?)".to_string()
        } else {
            needed.join(", ")
        }
    ))
}

/// Whether `case` fails as `failure` with `rewrites` in place of every rewrite on.
async fn reproduces(
    checker: &mut Checker,
    catalog: &Arc<CatalogService>,
    base: &EngineConfig,
    rewrites: Rewrites,
    case: &Case,
    failure: &Failure,
) -> anyhow::Result<bool> {
    let engine = Arc::new(SqlEngine::new(
        catalog.clone(),
        EngineConfig {
            rewrites,
            ..base.clone()
        },
    )?);
    let all_on = checker.replace_on(engine);
    checker.forget();
    let verdict = checker.check(failure.oracle, case).await;
    checker.replace_on(all_on);
    checker.forget();
    Ok(matches!(verdict?, Verdict::Fail(f) if f.signature == failure.signature))
}
