//! Snapshot expiry: which snapshots a retention policy keeps, and which files expiring the
//! others frees — never one a kept snapshot can still reach.

use std::collections::{BTreeSet, HashMap, HashSet};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub id: i64,
    pub parent: Option<i64>,
    pub timestamp_ms: i64,
}

/// A branch or tag, with Iceberg's per-ref retention settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefInfo {
    pub name: String,
    pub snapshot_id: i64,
    pub is_branch: bool,
    /// Branches: snapshots to keep on the branch at least.
    pub min_snapshots_to_keep: Option<usize>,
    /// Branches: how old a snapshot on the branch may get.
    pub max_snapshot_age_ms: Option<i64>,
    /// How old the ref itself may get (never applies to `main`).
    pub max_ref_age_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiryPolicy {
    /// Default 5 days.
    pub max_snapshot_age_ms: i64,
    /// Default 1.
    pub min_snapshots_to_keep: usize,
}

impl Default for ExpiryPolicy {
    fn default() -> Self {
        Self {
            max_snapshot_age_ms: 5 * 24 * 3600 * 1000,
            min_snapshots_to_keep: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExpiryPlan {
    pub retained: BTreeSet<i64>,
    pub expired: BTreeSet<i64>,
    /// Refs older than their `max_ref_age_ms`, to remove.
    pub expired_refs: Vec<String>,
}

/// Keeps, per live branch, its head, at least its minimum number of ancestors and every
/// ancestor younger than its maximum age; per live tag, its snapshot; and the current
/// snapshot. Everything else expires.
pub fn plan_expiry(
    snapshots: &[SnapshotInfo],
    refs: &[RefInfo],
    current: Option<i64>,
    policy: &ExpiryPolicy,
    now_ms: i64,
) -> ExpiryPlan {
    let by_id: HashMap<i64, &SnapshotInfo> = snapshots.iter().map(|s| (s.id, s)).collect();
    let mut plan = ExpiryPlan::default();
    if let Some(current) = current.filter(|id| by_id.contains_key(id)) {
        plan.retained.insert(current);
    }
    for r in refs {
        let Some(head) = by_id.get(&r.snapshot_id) else {
            continue;
        };
        let ref_expired = r.name != "main"
            && r.max_ref_age_ms
                .is_some_and(|age| now_ms - head.timestamp_ms > age);
        if ref_expired {
            plan.expired_refs.push(r.name.clone());
            continue;
        }
        plan.retained.insert(head.id);
        if !r.is_branch {
            continue;
        }
        let keep = r
            .min_snapshots_to_keep
            .unwrap_or(policy.min_snapshots_to_keep)
            .max(1);
        let max_age = r.max_snapshot_age_ms.unwrap_or(policy.max_snapshot_age_ms);
        let mut kept = 0;
        let mut cursor = Some(head.id);
        let mut visited = HashSet::new();
        while let Some(id) = cursor {
            let Some(snapshot) = by_id.get(&id) else {
                break;
            };
            if !visited.insert(id) {
                break;
            }
            if kept < keep || now_ms - snapshot.timestamp_ms <= max_age {
                plan.retained.insert(id);
                kept += 1;
            } else {
                break;
            }
            cursor = snapshot.parent;
        }
    }
    plan.expired = snapshots
        .iter()
        .map(|s| s.id)
        .filter(|id| !plan.retained.contains(id))
        .collect();
    plan
}

/// Files reachable only from expired snapshots: those to delete. `files_of` lists each
/// snapshot's reachable files (data and delete files, manifests, its manifest list, statistics).
pub fn freed_files<'a>(
    plan: &ExpiryPlan,
    files_of: &'a HashMap<i64, Vec<String>>,
) -> BTreeSet<&'a str> {
    let kept: HashSet<&str> = plan
        .retained
        .iter()
        .filter_map(|id| files_of.get(id))
        .flatten()
        .map(String::as_str)
        .collect();
    plan.expired
        .iter()
        .filter_map(|id| files_of.get(id))
        .flatten()
        .map(String::as_str)
        .filter(|f| !kept.contains(f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: i64, step_ms: i64) -> Vec<SnapshotInfo> {
        (1..=n)
            .map(|id| SnapshotInfo {
                id,
                parent: (id > 1).then_some(id - 1),
                timestamp_ms: id * step_ms,
            })
            .collect()
    }

    fn branch(name: &str, head: i64) -> RefInfo {
        RefInfo {
            name: name.into(),
            snapshot_id: head,
            is_branch: true,
            min_snapshots_to_keep: None,
            max_snapshot_age_ms: None,
            max_ref_age_ms: None,
        }
    }

    #[test]
    fn age_and_minimum_count_decide_on_a_branch() {
        let snapshots = chain(10, 1000);
        let policy = ExpiryPolicy {
            max_snapshot_age_ms: 3500,
            min_snapshots_to_keep: 1,
        };
        let plan = plan_expiry(&snapshots, &[branch("main", 10)], Some(10), &policy, 10_000);
        // 10, 9, 8 and 7 are at most 3.5 s old.
        assert_eq!(plan.retained, BTreeSet::from([7, 8, 9, 10]));
        assert_eq!(plan.expired, (1..=6).collect());

        let mut keep_five = branch("main", 10);
        keep_five.min_snapshots_to_keep = Some(5);
        let plan = plan_expiry(&snapshots, &[keep_five], Some(10), &policy, 100_000);
        assert_eq!(plan.retained, (6..=10).collect());
    }

    #[test]
    fn tags_keep_their_snapshot_until_the_tag_expires() {
        let snapshots = chain(10, 1000);
        let policy = ExpiryPolicy {
            max_snapshot_age_ms: 0,
            min_snapshots_to_keep: 1,
        };
        let mut tag = RefInfo {
            name: "v1".into(),
            snapshot_id: 3,
            is_branch: false,
            min_snapshots_to_keep: None,
            max_snapshot_age_ms: None,
            max_ref_age_ms: None,
        };
        let plan = plan_expiry(
            &snapshots,
            &[branch("main", 10), tag.clone()],
            Some(10),
            &policy,
            10_000,
        );
        assert_eq!(plan.retained, BTreeSet::from([3, 10]));
        tag.max_ref_age_ms = Some(1000);
        let plan = plan_expiry(
            &snapshots,
            &[branch("main", 10), tag],
            Some(10),
            &policy,
            10_000,
        );
        assert_eq!(plan.retained, BTreeSet::from([10]));
        assert_eq!(plan.expired_refs, vec!["v1".to_string()]);
    }

    #[test]
    fn freed_files_exclude_what_kept_snapshots_reach() {
        let plan = ExpiryPlan {
            retained: BTreeSet::from([2]),
            expired: BTreeSet::from([1]),
            expired_refs: vec![],
        };
        let files = HashMap::from([
            (
                1,
                vec!["a".to_string(), "b".to_string(), "list-1".to_string()],
            ),
            (
                2,
                vec!["b".to_string(), "c".to_string(), "list-2".to_string()],
            ),
        ]);
        assert_eq!(freed_files(&plan, &files), BTreeSet::from(["a", "list-1"]));
    }
}
