//! Maintenance policies: set on a warehouse, a namespace or a table, inherited downward (the
//! nearest setting of each field wins), and overridden by the table's own Iceberg
//! properties. Every field has a default, so maintenance is on without configuration.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::compaction::CompactionPolicy;
use crate::expiry::ExpiryPolicy;

const DAY_MS: i64 = 24 * 3600 * 1000;

/// A policy as set on one level: every field optional (unset fields inherit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Policy {
    /// Maintenance runs at all (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Compaction packs files up to this size (default 512 MiB; table property
    /// `write.target-file-size-bytes` overrides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_file_size_bytes: Option<u64>,
    /// Files smaller than this are small (default three quarters of the target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub small_file_bytes: Option<u64>,
    /// A commit leaving at least this many data files, smaller than `small-file-bytes` on
    /// average, queues a compaction (default 16).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub small_file_trigger: Option<u64>,
    /// Snapshots older than this expire (default 5 days; table property
    /// `history.expire.max-snapshot-age-ms` overrides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_snapshot_age_ms: Option<i64>,
    /// Snapshots kept per branch whatever their age (default 1; table property
    /// `history.expire.min-snapshots-to-keep` overrides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_snapshots_to_keep: Option<usize>,
    /// Unreferenced files younger than this are never deleted (default 3 days).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphan_min_age_ms: Option<i64>,
    /// Metadata files kept behind the current one (default 100, as Iceberg's
    /// `write.metadata.previous-versions-max`, which overrides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata_files_to_keep: Option<u64>,
    /// Data retention: rows whose `retention-column` (a date or timestamp) is older than
    /// `retention-days` are deleted. Off unless both are set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_column: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_days: Option<u32>,
    /// Per-minute and per-hour rollups of the observability tables (`otel.logs`,
    /// `otel.spans`, `otel.metrics`), kept by jobs after their commits (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollups: Option<bool>,
}

impl Policy {
    /// `self` with unset fields taken from `parent`.
    pub fn over(&self, parent: &Policy) -> Policy {
        Policy {
            enabled: self.enabled.or(parent.enabled),
            target_file_size_bytes: self
                .target_file_size_bytes
                .or(parent.target_file_size_bytes),
            small_file_bytes: self.small_file_bytes.or(parent.small_file_bytes),
            small_file_trigger: self.small_file_trigger.or(parent.small_file_trigger),
            max_snapshot_age_ms: self.max_snapshot_age_ms.or(parent.max_snapshot_age_ms),
            min_snapshots_to_keep: self.min_snapshots_to_keep.or(parent.min_snapshots_to_keep),
            orphan_min_age_ms: self.orphan_min_age_ms.or(parent.orphan_min_age_ms),
            metadata_files_to_keep: self
                .metadata_files_to_keep
                .or(parent.metadata_files_to_keep),
            retention_column: self
                .retention_column
                .clone()
                .or_else(|| parent.retention_column.clone()),
            retention_days: self.retention_days.or(parent.retention_days),
            rollups: self.rollups.or(parent.rollups),
        }
    }

    /// Checks values a user set; names the field and the rule.
    pub fn validate(&self) -> Result<(), String> {
        if self.target_file_size_bytes == Some(0) {
            return Err("target-file-size-bytes must be positive".into());
        }
        if self.small_file_bytes == Some(0) {
            return Err("small-file-bytes must be positive".into());
        }
        if let Some(age) = self.max_snapshot_age_ms
            && age < 0
        {
            return Err("max-snapshot-age-ms must not be negative".into());
        }
        if let Some(age) = self.orphan_min_age_ms
            && age < 3_600_000
        {
            return Err(
                "orphan-min-age-ms must be at least one hour (3600000): younger files may \
                 belong to a commit in flight"
                    .into(),
            );
        }
        if self.retention_days == Some(0) {
            return Err("retention-days must be positive".into());
        }
        if self.retention_column.as_deref() == Some("") {
            return Err("retention-column must name a column".into());
        }
        Ok(())
    }
}

/// A table's policy with every field decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Effective {
    pub enabled: bool,
    pub target_file_size_bytes: u64,
    pub small_file_bytes: u64,
    pub small_file_trigger: u64,
    pub max_snapshot_age_ms: i64,
    pub min_snapshots_to_keep: usize,
    pub orphan_min_age_ms: i64,
    pub metadata_files_to_keep: u64,
    pub retention: Option<(String, u32)>,
    pub rollups: bool,
}

impl Effective {
    /// `levels` from the table up to the warehouse (nearest first), then the table's
    /// properties over all of them.
    pub fn resolve(levels: &[Policy], properties: &HashMap<String, String>) -> Effective {
        let merged = levels
            .iter()
            .fold(Policy::default(), |acc, level| acc.over(level));
        let property = |key: &str| properties.get(key).and_then(|v| v.parse::<i64>().ok());
        let target = property("write.target-file-size-bytes")
            .map(|v| v.max(1) as u64)
            .or(merged.target_file_size_bytes)
            .unwrap_or(512 << 20);
        Effective {
            enabled: merged.enabled.unwrap_or(true),
            target_file_size_bytes: target,
            small_file_bytes: merged.small_file_bytes.unwrap_or(target / 4 * 3),
            small_file_trigger: merged.small_file_trigger.unwrap_or(16),
            max_snapshot_age_ms: property("history.expire.max-snapshot-age-ms")
                .or(merged.max_snapshot_age_ms)
                .unwrap_or(5 * DAY_MS),
            min_snapshots_to_keep: property("history.expire.min-snapshots-to-keep")
                .map(|v| v.max(1) as usize)
                .or(merged.min_snapshots_to_keep)
                .unwrap_or(1),
            orphan_min_age_ms: merged.orphan_min_age_ms.unwrap_or(3 * DAY_MS),
            metadata_files_to_keep: property("write.metadata.previous-versions-max")
                .map(|v| v.max(1) as u64)
                .or(merged.metadata_files_to_keep)
                .unwrap_or(100),
            retention: merged.retention_column.zip(merged.retention_days),
            rollups: merged.rollups.unwrap_or(false),
        }
    }

    pub fn compaction(&self) -> CompactionPolicy {
        CompactionPolicy {
            target_size_bytes: self.target_file_size_bytes,
            small_file_bytes: self.small_file_bytes,
            min_input_files: 2,
        }
    }

    pub fn expiry(&self) -> ExpiryPolicy {
        ExpiryPolicy {
            max_snapshot_age_ms: self.max_snapshot_age_ms,
            min_snapshots_to_keep: self.min_snapshots_to_keep,
        }
    }

    /// Whether a snapshot summary says the table has piled up small files.
    pub fn wants_compaction(&self, summary: &HashMap<String, String>) -> bool {
        let number = |key: &str| summary.get(key).and_then(|v| v.parse::<u64>().ok());
        let (Some(files), Some(bytes)) = (number("total-data-files"), number("total-files-size"))
        else {
            return false;
        };
        files >= self.small_file_trigger.max(2) && bytes / files.max(1) < self.small_file_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_level_wins_and_table_properties_override() {
        let table = Policy {
            max_snapshot_age_ms: Some(1000),
            ..Default::default()
        };
        let namespace = Policy {
            max_snapshot_age_ms: Some(2000),
            small_file_trigger: Some(4),
            ..Default::default()
        };
        let warehouse = Policy {
            small_file_trigger: Some(8),
            orphan_min_age_ms: Some(7_200_000),
            enabled: Some(false),
            ..Default::default()
        };
        let levels = [table, namespace, warehouse];
        let effective = Effective::resolve(&levels, &HashMap::new());
        assert_eq!(effective.max_snapshot_age_ms, 1000);
        assert_eq!(effective.small_file_trigger, 4);
        assert_eq!(effective.orphan_min_age_ms, 7_200_000);
        assert!(!effective.enabled);
        assert_eq!(effective.target_file_size_bytes, 512 << 20);
        assert_eq!(effective.small_file_bytes, 384 << 20);

        let properties = HashMap::from([
            (
                "history.expire.max-snapshot-age-ms".to_string(),
                "5".to_string(),
            ),
            (
                "write.target-file-size-bytes".to_string(),
                "1000".to_string(),
            ),
        ]);
        let effective = Effective::resolve(&levels, &properties);
        assert_eq!(effective.max_snapshot_age_ms, 5);
        assert_eq!(effective.target_file_size_bytes, 1000);
        assert_eq!(effective.small_file_bytes, 750);
    }

    #[test]
    fn defaults_are_on() {
        let effective = Effective::resolve(&[], &HashMap::new());
        assert!(effective.enabled);
        assert_eq!(effective.max_snapshot_age_ms, 5 * DAY_MS);
        assert_eq!(effective.min_snapshots_to_keep, 1);
        assert_eq!(effective.orphan_min_age_ms, 3 * DAY_MS);
        assert_eq!(effective.retention, None);
    }

    #[test]
    fn compaction_trigger_needs_many_small_files() {
        let effective = Effective::resolve(&[], &HashMap::new());
        let summary = |files: u64, bytes: u64| {
            HashMap::from([
                ("total-data-files".to_string(), files.to_string()),
                ("total-files-size".to_string(), bytes.to_string()),
            ])
        };
        assert!(effective.wants_compaction(&summary(16, 16 << 20)));
        assert!(!effective.wants_compaction(&summary(15, 15 << 20)));
        assert!(!effective.wants_compaction(&summary(100, 100 * (400 << 20))));
        assert!(!effective.wants_compaction(&HashMap::new()));
    }

    #[test]
    fn bad_values_are_named() {
        let bad = Policy {
            orphan_min_age_ms: Some(10),
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("orphan-min-age-ms"));
        let bad: Result<Policy, _> = serde_json::from_str(r#"{"target-size": 1}"#);
        assert!(bad.unwrap_err().to_string().contains("target-size"));
    }
}
