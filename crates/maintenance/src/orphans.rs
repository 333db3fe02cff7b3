//! Orphan cleanup: files in a table's storage that no metadata references.

use std::collections::HashSet;

/// A file found by listing storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    pub path: String,
    pub modified_ms: i64,
}

/// Listed files that nothing references and that are older than `min_age_ms` (default 3 days:
/// a writer may be about to commit anything younger). A data file's token index
/// ([`floe_sql::token_index`], named after it) is referenced while its data file is.
pub fn plan_orphans<'a>(
    listed: &'a [ListedFile],
    referenced: &HashSet<String>,
    now_ms: i64,
    min_age_ms: i64,
) -> Vec<&'a str> {
    let is_referenced = |path: &str| {
        referenced.contains(path)
            || floe_sql::token_index::data_file_of(path)
                .is_some_and(|data| referenced.contains(data))
    };
    listed
        .iter()
        .filter(|f| now_ms - f.modified_ms >= min_age_ms && !is_referenced(&f.path))
        .map(|f| f.path.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::expiry::{ExpiryPolicy, RefInfo, SnapshotInfo, freed_files, plan_expiry};

    #[test]
    fn young_or_referenced_files_stay() {
        let listed = vec![
            ListedFile {
                path: "old-orphan".into(),
                modified_ms: 0,
            },
            ListedFile {
                path: "young-orphan".into(),
                modified_ms: 9_500,
            },
            ListedFile {
                path: "referenced".into(),
                modified_ms: 0,
            },
        ];
        let referenced = HashSet::from(["referenced".to_string()]);
        assert_eq!(
            plan_orphans(&listed, &referenced, 10_000, 1_000),
            vec!["old-orphan"]
        );
    }

    #[test]
    fn a_token_index_lives_as_long_as_its_data_file() {
        let index = floe_sql::token_index::index_location;
        let old = |path: String| ListedFile {
            path,
            modified_ms: 0,
        };
        let listed = vec![
            old("t/data/live.parquet".into()),
            old(index("t/data/live.parquet")),
            old(index("t/data/dead.parquet")),
            old(index("t/data/other.avro.tokens")),
        ];
        let referenced = HashSet::from(["t/data/live.parquet".to_string()]);
        assert_eq!(
            plan_orphans(&listed, &referenced, 10_000, 1_000),
            vec![
                index("t/data/dead.parquet").as_str(),
                index("t/data/other.avro.tokens").as_str()
            ]
        );
    }

    /// Random commit histories with branches and tags: whatever expiry frees and orphan
    /// cleanup deletes, no file a retained snapshot reaches is ever among them.
    #[test]
    fn random_histories_never_lose_a_retained_file() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        for _ in 0..300 {
            let mut snapshots: Vec<SnapshotInfo> = Vec::new();
            let mut files_of: HashMap<i64, Vec<String>> = HashMap::new();
            let mut heads: HashMap<String, i64> = HashMap::new();
            let mut next_file = 0;
            let commits = rng.random_range(1..40);
            for id in 1..=commits {
                // Commit on main or on one of two side branches, from its head.
                let branch = ["main", "main", "dev", "audit"][rng.random_range(0..4)].to_string();
                let parent = heads.get(&branch).copied().or(heads.get("main").copied());
                let mut files: Vec<String> = parent
                    .and_then(|p| files_of.get(&p))
                    .map(|f| {
                        f.iter()
                            .filter(|n| !n.starts_with("list-"))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                // Some files removed (a delete or compaction), some added.
                files.retain(|_| rng.random_bool(0.8));
                for _ in 0..rng.random_range(0..4) {
                    files.push(format!("data-{next_file}"));
                    next_file += 1;
                }
                files.push(format!("list-{id}"));
                files_of.insert(id, files);
                snapshots.push(SnapshotInfo {
                    id,
                    parent,
                    timestamp_ms: id * 1000,
                });
                heads.insert(branch, id);
            }
            let mut refs: Vec<RefInfo> = heads
                .iter()
                .map(|(name, head)| RefInfo {
                    name: name.clone(),
                    snapshot_id: *head,
                    is_branch: true,
                    min_snapshots_to_keep: rng.random_bool(0.3).then(|| rng.random_range(1..5)),
                    max_snapshot_age_ms: rng.random_bool(0.3).then(|| rng.random_range(0..20_000)),
                    max_ref_age_ms: rng.random_bool(0.2).then(|| rng.random_range(0..20_000)),
                })
                .collect();
            if rng.random_bool(0.5) {
                refs.push(RefInfo {
                    name: "tag".into(),
                    snapshot_id: rng.random_range(1..=commits),
                    is_branch: false,
                    min_snapshots_to_keep: None,
                    max_snapshot_age_ms: None,
                    max_ref_age_ms: rng.random_bool(0.5).then(|| rng.random_range(0..40_000)),
                });
            }
            let policy = ExpiryPolicy {
                max_snapshot_age_ms: rng.random_range(0..30_000),
                min_snapshots_to_keep: rng.random_range(1..4),
            };
            let now = commits * 1000 + rng.random_range(0..10_000);
            let current = heads.get("main").copied();
            let plan = plan_expiry(&snapshots, &refs, current, &policy, now);

            let reachable: HashSet<&str> = plan
                .retained
                .iter()
                .flat_map(|id| files_of[id].iter().map(String::as_str))
                .collect();
            assert!(
                current.is_none_or(|c| plan.retained.contains(&c)),
                "the current snapshot expired"
            );
            let freed = freed_files(&plan, &files_of);
            assert!(
                freed.iter().all(|f| !reachable.contains(f)),
                "expiry freed a retained file"
            );

            // Orphan cleanup after expiry: every file ever written is listed, some just now.
            let listed: Vec<ListedFile> = files_of
                .values()
                .flatten()
                .collect::<HashSet<_>>()
                .into_iter()
                .map(|path| ListedFile {
                    path: path.clone(),
                    modified_ms: now - rng.random_range(0..5_000),
                })
                .collect();
            let referenced: HashSet<String> = reachable.iter().map(|s| s.to_string()).collect();
            let min_age = rng.random_range(0..3_000);
            for orphan in plan_orphans(&listed, &referenced, now, min_age) {
                assert!(
                    !reachable.contains(orphan),
                    "orphan cleanup deleted a retained file"
                );
                let file = listed.iter().find(|f| f.path == orphan).unwrap();
                assert!(
                    now - file.modified_ms >= min_age,
                    "orphan cleanup deleted a young file"
                );
            }
        }
    }
}
