//! A tenant's limits as they are set (`PUT /api/v1/tenants/{warehouse}/limits`) and stored:
//! every field optional, an unset field is no limit. The field names are the error
//! vocabulary too: a refusal names the limit it hit by its field name.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The limits of one tenant (a warehouse).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Limits {
    /// Bytes of ingest request bodies per second, as received (compressed bodies count
    /// compressed), over every door: `/ingest/v1`, OTLP/HTTP, OTLP/gRPC, remote write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest_bytes_per_second: Option<u64>,
    /// Bytes the tenant may send at once after a quiet spell (default: one second's worth).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest_burst_bytes: Option<u64>,
    /// Records (log records, spans, data points, samples, rows) per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest_records_per_second: Option<u64>,
    /// Records the tenant may send at once after a quiet spell (default: one second's worth).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest_burst_records: Option<u64>,
    /// Largest request body, in bytes as received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<u64>,
    /// Metric series (a metric name with one set of attributes and resource attributes) that
    /// received a point in the last [`super::SERIES_ACTIVE_MINUTES`] minutes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_active_series: Option<u64>,
    /// Attributes one record carries (its own, not its resource's or scope's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attributes: Option<u64>,
    /// Bytes of one attribute key or value (a record's, its resource's and its scope's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attribute_bytes: Option<u64>,
    /// Statements the tenant runs at once; more wait in line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_queries: Option<u64>,
    /// Statements that may wait in line for the tenant's running ones (default 0: refused at
    /// once when every place is taken).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queued_queries: Option<u64>,
    /// Memory one of the tenant's statements may hold before its operators spill (never
    /// more than the server's `--query-memory-mb`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_memory_bytes: Option<u64>,
    /// Samples one PromQL query of the tenant may load (Prometheus's `--query.max-samples`;
    /// the server's default is 50,000,000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_query_samples: Option<u64>,
    /// Bytes of data files the tenant's tables may hold (their current snapshots); ingest
    /// past it is refused until retention, expiry or drops bring it back under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_quota_bytes: Option<u64>,
    /// Days of observability data kept: rows of the tenant's `otel` tables older than this
    /// are deleted by the retention job (a table's own shorter retention stays).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_days: Option<u32>,
    /// How long after its commit a data file the tenant's ingestion wrote stays in a node's
    /// hot tier (the node's local disk), so recent data is read without object storage
    /// (default: the server's, a day; 0 keeps none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot_window_seconds: Option<u64>,
    /// The most bytes of the tenant's hot files one node keeps; past it the tenant's own
    /// oldest files leave first (default: the node's whole hot tier, `--cache-hot-mb`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot_share_bytes: Option<u64>,
}

/// Which limit a refusal hit: the name of its field in [`Limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    IngestBytesPerSecond,
    IngestBurstBytes,
    IngestRecordsPerSecond,
    IngestBurstRecords,
    MaxRequestBytes,
    MaxActiveSeries,
    MaxAttributes,
    MaxAttributeBytes,
    MaxConcurrentQueries,
    MaxQueuedQueries,
    StorageQuotaBytes,
    /// Not a tenant's: the server's write-ahead backlog or memory is full.
    Overload,
}

impl Limit {
    pub const ALL: [Limit; 12] = [
        Limit::IngestBytesPerSecond,
        Limit::IngestBurstBytes,
        Limit::IngestRecordsPerSecond,
        Limit::IngestBurstRecords,
        Limit::MaxRequestBytes,
        Limit::MaxActiveSeries,
        Limit::MaxAttributes,
        Limit::MaxAttributeBytes,
        Limit::MaxConcurrentQueries,
        Limit::MaxQueuedQueries,
        Limit::StorageQuotaBytes,
        Limit::Overload,
    ];

    /// Its name, as in the limits' JSON and in every refusal.
    pub fn name(self) -> &'static str {
        match self {
            Limit::IngestBytesPerSecond => "ingest-bytes-per-second",
            Limit::IngestBurstBytes => "ingest-burst-bytes",
            Limit::IngestRecordsPerSecond => "ingest-records-per-second",
            Limit::IngestBurstRecords => "ingest-burst-records",
            Limit::MaxRequestBytes => "max-request-bytes",
            Limit::MaxActiveSeries => "max-active-series",
            Limit::MaxAttributes => "max-attributes",
            Limit::MaxAttributeBytes => "max-attribute-bytes",
            Limit::MaxConcurrentQueries => "max-concurrent-queries",
            Limit::MaxQueuedQueries => "max-queued-queries",
            Limit::StorageQuotaBytes => "storage-quota-bytes",
            Limit::Overload => "overload",
        }
    }

    /// Whether sending the same again later can succeed (a rate or a line), as opposed to
    /// a request that never fits (too large) or a quota that waiting does not free.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            Limit::IngestBytesPerSecond
                | Limit::IngestRecordsPerSecond
                | Limit::MaxConcurrentQueries
                | Limit::MaxQueuedQueries
                | Limit::Overload
        )
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The most a rate may be: governor's buckets count in `u32`.
const MAX_RATE: u64 = u32::MAX as u64;

impl Limits {
    /// Checks values a user set; names the field and the rule.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            (Limit::IngestBytesPerSecond, self.ingest_bytes_per_second),
            (Limit::IngestBurstBytes, self.ingest_burst_bytes),
            (
                Limit::IngestRecordsPerSecond,
                self.ingest_records_per_second,
            ),
            (Limit::IngestBurstRecords, self.ingest_burst_records),
            (Limit::MaxRequestBytes, self.max_request_bytes),
            (Limit::MaxActiveSeries, self.max_active_series),
            (Limit::MaxAttributeBytes, self.max_attribute_bytes),
            (Limit::MaxConcurrentQueries, self.max_concurrent_queries),
        ];
        for (limit, value) in positive {
            if value == Some(0) {
                return Err(format!(
                    "{limit} must be positive (leave it out for no limit)"
                ));
            }
        }
        for (limit, value) in [
            (Limit::IngestBytesPerSecond, self.ingest_bytes_per_second),
            (Limit::IngestBurstBytes, self.ingest_burst_bytes),
            (
                Limit::IngestRecordsPerSecond,
                self.ingest_records_per_second,
            ),
            (Limit::IngestBurstRecords, self.ingest_burst_records),
        ] {
            if value.is_some_and(|v| v > MAX_RATE) {
                return Err(format!("{limit} must be at most {MAX_RATE}"));
            }
        }
        if self.ingest_burst_bytes.is_some() && self.ingest_bytes_per_second.is_none() {
            return Err("ingest-burst-bytes needs ingest-bytes-per-second".into());
        }
        if self.ingest_burst_records.is_some() && self.ingest_records_per_second.is_none() {
            return Err("ingest-burst-records needs ingest-records-per-second".into());
        }
        if self.max_queued_queries.is_some() && self.max_concurrent_queries.is_none() {
            return Err("max-queued-queries needs max-concurrent-queries".into());
        }
        if self.max_active_series.is_some_and(|v| v > 100_000_000) {
            return Err("max-active-series must be at most 100000000".into());
        }
        if self.max_queued_queries.is_some_and(|v| v > 10_000) {
            return Err("max-queued-queries must be at most 10000".into());
        }
        if self.max_query_samples == Some(0) {
            return Err("max-query-samples must be positive".into());
        }
        if self.query_memory_bytes.is_some_and(|v| v < 1 << 20) {
            return Err("query-memory-bytes must be at least 1048576 (1 MiB)".into());
        }
        if self.hot_window_seconds.is_some_and(|v| v > 366 * 86_400) {
            return Err("hot-window-seconds must be at most 31622400 (366 days)".into());
        }
        if self.retention_days == Some(0) {
            return Err("retention-days must be positive (leave it out to keep everything)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_their_documented_names_and_refuse_nonsense() {
        let limits: Limits = serde_json::from_value(serde_json::json!({
            "ingest-records-per-second": 100,
            "ingest-burst-records": 200,
            "max-active-series": 10,
        }))
        .unwrap();
        assert_eq!(limits.ingest_records_per_second, Some(100));
        assert!(limits.validate().is_ok());
        for name in Limit::ALL.iter().filter(|l| **l != Limit::Overload) {
            let value = serde_json::json!({ name.name(): 5, "ingest-bytes-per-second": 5,
                "ingest-records-per-second": 5, "max-concurrent-queries": 5 });
            let limits = if name.name() == "query-memory-bytes" {
                continue;
            } else {
                serde_json::from_value::<Limits>(value)
            };
            assert!(limits.is_ok(), "{name} is a field of the limits");
        }
        let hot: Limits = serde_json::from_value(serde_json::json!({
            "hot-window-seconds": 3600, "hot-share-bytes": 1 << 30,
        }))
        .unwrap();
        assert_eq!(
            (hot.hot_window_seconds, hot.hot_share_bytes),
            (Some(3600), Some(1 << 30))
        );
        assert!(hot.validate().is_ok());
        let too_long = Limits {
            hot_window_seconds: Some(400 * 86_400),
            ..Limits::default()
        };
        assert!(
            too_long
                .validate()
                .unwrap_err()
                .contains("hot-window-seconds")
        );
        assert!(
            serde_json::from_value::<Limits>(serde_json::json!({"records-per-second": 1})).is_err(),
            "an unknown name is refused"
        );
        let zero = Limits {
            ingest_records_per_second: Some(0),
            ..Limits::default()
        };
        assert!(
            zero.validate()
                .unwrap_err()
                .contains("ingest-records-per-second")
        );
        let orphan_burst = Limits {
            ingest_burst_bytes: Some(10),
            ..Limits::default()
        };
        assert!(orphan_burst.validate().unwrap_err().contains("needs"));
    }
}
