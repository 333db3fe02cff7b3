//! `rate`, `increase` and `delta` of native histograms, before extrapolation.

use super::{CounterResetHint, FloatHistogram};
use crate::annotations::Annotation;
use crate::eval::Evaluator;

/// The last histogram of a window minus the first, at the coarsest schema the window
/// holds; for a counter, each histogram that follows a reset adds back the one before it.
/// A reset between the first two makes the first one irrelevant: it is taken as empty, so
/// that a change of layout there (e.g. custom bounds that changed) does not matter. None,
/// with a warning noted, where the histograms do not fit together.
pub(crate) fn rate(
    ev: &Evaluator,
    hs: &[&FloatHistogram],
    counter: bool,
    name: &str,
) -> Option<FloatHistogram> {
    let (first, last) = (hs[0], hs[hs.len() - 1]);
    let gauge = |h: &FloatHistogram| h.counter_reset_hint == CounterResetHint::Gauge;
    if counter && (gauge(first) || last.counter_reset_hint == CounterResetHint::Gauge) {
        ev.annotate(Annotation::NotCounter(name));
    }
    let empty;
    let mut prev = first;
    if counter && hs.len() > 1 && hs[1].detect_reset(first) {
        empty = FloatHistogram {
            schema: hs[1].schema,
            custom_values: hs[1].custom_values.clone(),
            ..Default::default()
        };
        prev = &empty;
    }
    let incompatible = |kind| {
        ev.annotate(Annotation::IncompatibleHistograms(kind, name));
        None
    };
    if last.uses_custom_buckets() != prev.uses_custom_buckets() {
        return incompatible(super::Incompatible::Schema);
    }
    let mut min_schema = prev.schema.min(last.schema);
    if counter {
        for h in &hs[1..hs.len() - 1] {
            if gauge(h) {
                ev.annotate(Annotation::NotCounter(name));
            }
            min_schema = min_schema.min(h.schema);
            if h.uses_custom_buckets() != prev.uses_custom_buckets() {
                return incompatible(super::Incompatible::Schema);
            }
        }
    }
    let mut h = match last.to_schema(min_schema).sub(prev) {
        Ok(h) => h,
        Err(kind) => return incompatible(kind),
    };
    if counter {
        for cur in &hs[1..] {
            if cur.detect_reset(prev) {
                h = match h.add(prev) {
                    Ok(h) => h,
                    Err(kind) => return incompatible(kind),
                };
            }
            prev = cur;
        }
    } else if !gauge(first) || !gauge(last) {
        ev.annotate(Annotation::NotGauge(name));
    }
    h.counter_reset_hint = CounterResetHint::Gauge;
    Some(h.compacted())
}
