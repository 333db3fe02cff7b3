//! Bin-packing small data files into target-sized rewrite groups, per partition.

use std::collections::BTreeMap;

/// What compaction needs to know about one live data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFileInfo {
    pub path: String,
    pub size_bytes: u64,
    /// The partition tuple, as a key that is equal exactly when the tuples are.
    pub partition: String,
    pub spec_id: i32,
    /// Whether delete files apply to it (rewriting it applies them).
    pub has_deletes: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// Size files are packed up to (default 512 MiB).
    pub target_size_bytes: u64,
    /// Files smaller than this are candidates (default three quarters of the target).
    pub small_file_bytes: u64,
    /// A group without deletes to apply is only worth rewriting with this many files.
    pub min_input_files: usize,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        let target = 512 << 20;
        Self {
            target_size_bytes: target,
            small_file_bytes: target / 4 * 3,
            min_input_files: 2,
        }
    }
}

/// Files to rewrite together into about `expected_outputs` files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewriteGroup {
    pub spec_id: i32,
    pub partition: String,
    pub files: Vec<String>,
    pub input_bytes: u64,
    pub expected_outputs: usize,
}

/// Groups of files worth rewriting: per partition (and spec), candidates — small files and
/// files with deletes — packed first-fit by decreasing size into bins of the target size.
/// A bin is kept when it holds at least `min_input_files` files or any file with deletes.
pub fn plan_compaction(files: &[DataFileInfo], policy: &CompactionPolicy) -> Vec<RewriteGroup> {
    let mut by_partition: BTreeMap<(i32, &str), Vec<&DataFileInfo>> = BTreeMap::new();
    for file in files {
        if file.size_bytes < policy.small_file_bytes || file.has_deletes {
            by_partition
                .entry((file.spec_id, file.partition.as_str()))
                .or_default()
                .push(file);
        }
    }
    let target = policy.target_size_bytes.max(1);
    let mut groups = Vec::new();
    for ((spec_id, partition), mut candidates) in by_partition {
        candidates.sort_by(|a, b| b.size_bytes.cmp(&a.size_bytes).then(a.path.cmp(&b.path)));
        let mut bins: Vec<(u64, Vec<&DataFileInfo>)> = Vec::new();
        for file in candidates {
            match bins
                .iter_mut()
                .find(|(used, _)| used + file.size_bytes <= target)
            {
                Some((used, members)) => {
                    *used += file.size_bytes;
                    members.push(file);
                }
                None => bins.push((file.size_bytes, vec![file])),
            }
        }
        for (bytes, members) in bins {
            let applies_deletes = members.iter().any(|f| f.has_deletes);
            if members.len() < policy.min_input_files.max(1) && !applies_deletes {
                continue;
            }
            groups.push(RewriteGroup {
                spec_id,
                partition: partition.to_string(),
                files: members.iter().map(|f| f.path.clone()).collect(),
                input_bytes: bytes,
                expected_outputs: bytes.div_ceil(target).max(1) as usize,
            });
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::HashSet;

    fn file(path: &str, mib: u64, partition: &str) -> DataFileInfo {
        DataFileInfo {
            path: path.into(),
            size_bytes: mib << 20,
            partition: partition.into(),
            spec_id: 0,
            has_deletes: false,
        }
    }

    #[test]
    fn small_files_pack_per_partition_and_big_ones_stay() {
        let policy = CompactionPolicy {
            target_size_bytes: 100 << 20,
            small_file_bytes: 75 << 20,
            min_input_files: 2,
        };
        let files = vec![
            file("a1", 60, "a"),
            file("a2", 30, "a"),
            file("a3", 30, "a"),
            file("a4", 20, "a"),
            file("big", 200, "a"),
            file("b1", 10, "b"),
            file("c1", 10, "c"),
        ];
        let groups = plan_compaction(&files, &policy);
        // Partition a: {60, 30} then {30, 20}; b and c hold one small file each.
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].files, vec!["a1", "a2"]);
        assert_eq!(groups[1].files, vec!["a3", "a4"]);
        assert!(groups.iter().all(|g| g.partition == "a"));

        // A lone file with deletes is rewritten to apply them.
        let mut with_deletes = file("c2", 500, "c");
        with_deletes.has_deletes = true;
        let groups = plan_compaction(&[with_deletes], &policy);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].expected_outputs, 5);
    }

    #[test]
    fn random_layouts_keep_the_invariants() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for _ in 0..500 {
            let policy = CompactionPolicy {
                target_size_bytes: rng.random_range(10..200),
                small_file_bytes: rng.random_range(1..150),
                min_input_files: rng.random_range(1..4),
            };
            let files: Vec<DataFileInfo> = (0..rng.random_range(0..60))
                .map(|i| DataFileInfo {
                    path: format!("f{i}"),
                    size_bytes: rng.random_range(1..300),
                    partition: format!("p{}", rng.random_range(0..4)),
                    spec_id: rng.random_range(0..2),
                    has_deletes: rng.random_bool(0.1),
                })
                .collect();
            let by_path: std::collections::HashMap<&str, &DataFileInfo> =
                files.iter().map(|f| (f.path.as_str(), f)).collect();
            let groups = plan_compaction(&files, &policy);
            let mut seen = HashSet::new();
            for group in &groups {
                let members: Vec<&DataFileInfo> =
                    group.files.iter().map(|p| by_path[p.as_str()]).collect();
                // One partition and spec per group, every file at most once.
                assert!(
                    members
                        .iter()
                        .all(|f| f.partition == group.partition && f.spec_id == group.spec_id)
                );
                assert!(group.files.iter().all(|p| seen.insert(p.clone())));
                // Only candidates, within the target unless a single file exceeds it.
                assert!(
                    members
                        .iter()
                        .all(|f| f.size_bytes < policy.small_file_bytes || f.has_deletes)
                );
                let bytes: u64 = members.iter().map(|f| f.size_bytes).sum();
                assert_eq!(bytes, group.input_bytes);
                assert!(bytes <= policy.target_size_bytes || members.len() == 1);
                assert!(
                    members.len() >= policy.min_input_files
                        || members.iter().any(|f| f.has_deletes)
                );
            }
        }
    }
}
