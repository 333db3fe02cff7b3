//! The one wall clock every crate reads for the times it records (leases, heartbeats,
//! audit, commits, pipeline statistics): milliseconds since the Unix epoch, UTC.

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Now, in microseconds since the Unix epoch (the unit of Iceberg's timestamps).
pub fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}
