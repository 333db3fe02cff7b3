//! Rollups: per-minute and per-hour summaries of a tenant's observability tables, kept
//! incrementally by jobs — counts, sums, minimums and maximums, distinct counts as HLL
//! sketches and quantiles as KLL sketches — so a dashboard over a month reads the hourly
//! rollup instead of the raw rows.
//!
//! | source | rollups | groups | measures |
//! | --- | --- | --- | --- |
//! | `otel.logs` | `logs_1m`, `logs_1h` | service, severity | `records`, `trace_ids` (HLL) |
//! | `otel.spans` | `spans_1m`, `spans_1h` | service, span name, status | `spans`, `duration_ns_sum/min/max`, `duration_ns_kll` (KLL), `trace_ids` (HLL) |
//! | `otel.metrics` | `metrics_1m`, `metrics_1h` | service, metric, type | `points`, `value_sum/min/max`, `value_kll` (KLL), `observations`, `observed_sum` |
//!
//! Every rollup row has a `bucket` (the minute or hour). A group may have several rows (one
//! per run that saw rows of it); queries merge them: `sum(records)`, `min(value_min)`,
//! `hll_estimate(hll_merge(trace_ids))`, `kll_quantile(kll_merge(value_kll), 0.99)`.
//!
//! **Exactly once.** A run reads only the rows the source's `append` snapshots added after the
//! snapshot the rollup last covered, and commits its rows in one snapshot whose summary
//! records the source snapshot it covers now (`floe.rollup.source-snapshot`), on the rollup
//! table exactly as it read it. A run that crashes before its commit leaves nothing; the next
//! reads from the same point. Rows a compaction or retention rewrote are not new (those
//! snapshots are not appends), so rollups keep what retention later deletes from the raw
//! table. The planner here decides which snapshots a run reads; the executor
//! ([`crate::exec::rollup`]) does the IO.

use iceberg::spec::{Operation, TableMetadata};

/// The summary key a rollup's snapshots record the covered source snapshot under.
pub const SOURCE_SNAPSHOT: &str = "floe.rollup.source-snapshot";

/// Source snapshots one run reads at most (the rest wait for the next run).
pub const MOST_SNAPSHOTS_PER_RUN: usize = 500;

/// How wide a rollup's buckets are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    Minute,
    Hour,
}

impl Interval {
    fn unit(self) -> &'static str {
        match self {
            Interval::Minute => "minute",
            Interval::Hour => "hour",
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Interval::Minute => "1m",
            Interval::Hour => "1h",
        }
    }
}

/// One rollup of a source table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollup {
    /// The rollup table's name, in the source's namespace.
    pub table: String,
    pub interval: Interval,
    /// The aggregation over `input` (the new rows).
    pub select: String,
}

/// The rollups of source table `name` (of the `otel` namespace); none for other tables.
pub fn rollups_of(name: &str) -> Vec<Rollup> {
    let body = |unit: &str| -> Option<String> {
        let bucket = format!("date_trunc('{unit}', time) AS bucket");
        Some(match name {
            "logs" => format!(
                "SELECT {bucket}, service_name, severity_text, count(*) AS records, \
                 hll_sketch(trace_id) AS trace_ids FROM input GROUP BY 1, 2, 3"
            ),
            "spans" => format!(
                "SELECT {bucket}, service_name, name, status_code, count(*) AS spans, \
                 sum(duration_ns) AS duration_ns_sum, min(duration_ns) AS duration_ns_min, \
                 max(duration_ns) AS duration_ns_max, kll_sketch(duration_ns) AS \
                 duration_ns_kll, hll_sketch(trace_id) AS trace_ids FROM input \
                 GROUP BY 1, 2, 3, 4"
            ),
            "metrics" => format!(
                "SELECT {bucket}, service_name, metric_name, metric_type, count(*) AS points, \
                 sum(value) AS value_sum, min(value) AS value_min, max(value) AS value_max, \
                 kll_sketch(value) AS value_kll, sum(count) AS observations, \
                 sum(sum) AS observed_sum FROM input GROUP BY 1, 2, 3, 4"
            ),
            _ => return None,
        })
    };
    [Interval::Minute, Interval::Hour]
        .into_iter()
        .filter_map(|interval| {
            Some(Rollup {
                table: format!("{name}_{}", interval.suffix()),
                interval,
                select: body(interval.unit())?,
            })
        })
        .collect()
}

/// What one run reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Nothing new since the covered snapshot.
    Nothing,
    /// The whole table at snapshot `.0` (the rollup's first run).
    Everything(i64),
    /// The rows each of these `append` snapshots added (oldest first); the run then covers
    /// `through`.
    Appends { snapshots: Vec<i64>, through: i64 },
    /// The covered snapshot is no longer in the source's history (expired, or `main` rolled
    /// back): continuing would count rows twice or miss some.
    Lost(i64),
}

/// Which source snapshots a run reads, given the snapshot the rollup covers (`None` before
/// its first run).
pub fn plan(source: &TableMetadata, covered: Option<i64>) -> Plan {
    let Some(head) = source.current_snapshot() else {
        return Plan::Nothing;
    };
    let Some(covered) = covered else {
        return Plan::Everything(head.snapshot_id());
    };
    // `main`'s history back to the covered snapshot, newest first.
    let mut newer = Vec::new();
    let mut at = Some(head);
    loop {
        let Some(snapshot) = at else {
            return Plan::Lost(covered);
        };
        // Parent links that loop never reach the covered snapshot.
        if newer.len() > source.snapshots().count() {
            return Plan::Lost(covered);
        }
        if snapshot.snapshot_id() == covered {
            break;
        }
        newer.push(snapshot);
        at = snapshot
            .parent_snapshot_id()
            .and_then(|id| source.snapshot_by_id(id));
    }
    if newer.is_empty() {
        return Plan::Nothing;
    }
    newer.reverse();
    newer.truncate(MOST_SNAPSHOTS_PER_RUN);
    let through = newer.last().map(|s| s.snapshot_id()).unwrap_or(covered);
    let snapshots = newer
        .iter()
        .filter(|s| s.summary().operation == Operation::Append)
        .map(|s| s.snapshot_id())
        .collect();
    Plan::Appends { snapshots, through }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_observability_table_has_a_minute_and_an_hour_rollup() {
        for source in ["logs", "spans", "metrics"] {
            let rollups = rollups_of(source);
            assert_eq!(rollups.len(), 2);
            assert_eq!(rollups[0].table, format!("{source}_1m"));
            assert!(rollups[1].select.contains("date_trunc('hour', time)"));
        }
        assert!(rollups_of("logs__dead_letters").is_empty());
    }
}
