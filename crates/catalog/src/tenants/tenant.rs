//! One tenant's limits in force: token buckets for ingest bytes and records (GCRA, from
//! `governor`), the set of its active metric series, the line its statements wait in, the
//! storage its tables hold, and what it was given and refused (for `/metrics`).

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::limits::{Limit, Limits};
use crate::ErrorCode;

/// How long a metric series counts as active after its last point.
pub const SERIES_ACTIVE_MINUTES: u32 = 20;

/// A refusal by a limit: which, its value, the tenant, and when trying again can succeed.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub tenant: String,
    pub limit: Limit,
    /// The limit's value (for `overload`, the bound the server hit).
    pub value: u64,
    /// When the same request can succeed, for limits that free up by waiting.
    pub retry_after: Option<Duration>,
}

impl Refused {
    /// The transport-neutral code: a rate or a line is 429, a request that never fits 413,
    /// a used-up quota its own, the server's overload 503.
    pub fn code(&self) -> ErrorCode {
        match self.limit {
            Limit::Overload => ErrorCode::Unavailable,
            Limit::MaxRequestBytes | Limit::IngestBurstBytes | Limit::IngestBurstRecords => {
                ErrorCode::PayloadTooLarge
            }
            Limit::StorageQuotaBytes => ErrorCode::QuotaExceeded,
            _ => ErrorCode::TooManyRequests,
        }
    }

    /// `Retry-After` in whole seconds (at least 1), for a refusal that waiting helps.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
            .map(|s| s.max(1))
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.limit {
            Limit::Overload => write!(
                f,
                "the server is overloaded ({}) and sheds new work",
                self.value
            )?,
            Limit::MaxRequestBytes | Limit::IngestBurstBytes | Limit::IngestBurstRecords => write!(
                f,
                "tenant {:?}: the request is larger than its {} limit of {}",
                self.tenant, self.limit, self.value
            )?,
            _ => write!(
                f,
                "tenant {:?} is over its {} limit of {}",
                self.tenant, self.limit, self.value
            )?,
        }
        if let Some(after) = self.retry_after {
            write!(f, "; retry in {:.3} s", after.as_secs_f64())?;
        }
        Ok(())
    }
}

/// A token bucket: `rate` per second, `burst` at once.
struct Bucket {
    limiter: DefaultDirectRateLimiter,
    rate: u64,
    burst: u64,
}

impl Bucket {
    fn new(rate: u64, burst: Option<u64>) -> Bucket {
        let clamp = |v: u64| NonZeroU32::new(v.clamp(1, u32::MAX as u64) as u32).expect("≥ 1");
        let burst = burst.unwrap_or(rate);
        Bucket {
            limiter: RateLimiter::direct(Quota::per_second(clamp(rate)).allow_burst(clamp(burst))),
            rate,
            burst,
        }
    }

    /// Takes `n` tokens, or says which limit refused and for how long.
    fn take(
        &self,
        n: u64,
        rate_limit: Limit,
        burst_limit: Limit,
        tenant: &str,
    ) -> Result<(), Refused> {
        if n == 0 {
            return Ok(());
        }
        let refused = |limit, value, retry_after| Refused {
            tenant: tenant.to_string(),
            limit,
            value,
            retry_after,
        };
        if n > self.burst {
            return Err(refused(burst_limit, self.burst, None));
        }
        let count = NonZeroU32::new(n as u32).expect("n > 0 and ≤ burst");
        match self.limiter.check_n(count) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                Err(refused(rate_limit, self.rate, Some(wait)))
            }
            Err(_) => Err(refused(burst_limit, self.burst, None)),
        }
    }
}

/// The limits as set, with the buckets and the line made from them.
struct Applied {
    limits: Limits,
    updated_at_ms: i64,
    bytes: Option<Bucket>,
    records: Option<Bucket>,
    queries: Option<Arc<Semaphore>>,
}

impl Applied {
    fn new(limits: Limits, updated_at_ms: i64) -> Applied {
        Applied {
            bytes: limits
                .ingest_bytes_per_second
                .map(|rate| Bucket::new(rate, limits.ingest_burst_bytes)),
            records: limits
                .ingest_records_per_second
                .map(|rate| Bucket::new(rate, limits.ingest_burst_records)),
            queries: limits
                .max_concurrent_queries
                .map(|n| Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS as u64) as usize))),
            limits,
            updated_at_ms,
        }
    }
}

/// What a tenant was given and refused since the server started.
#[derive(Debug, Default)]
pub struct Counters {
    pub accepted_records: AtomicU64,
    pub accepted_bytes: AtomicU64,
    refused: [AtomicU64; Limit::ALL.len()],
    /// Statements waiting in the tenant's line now.
    pub queued: AtomicU64,
    /// Statements that waited in the line, and their waits in microseconds.
    pub queue_waits: AtomicU64,
    pub queue_micros: AtomicU64,
}

impl Counters {
    /// Refusals by `limit`.
    pub fn refused(&self, limit: Limit) -> u64 {
        let at = Limit::ALL
            .iter()
            .position(|l| *l == limit)
            .expect("every limit");
        self.refused[at].load(Ordering::Relaxed)
    }

    pub fn count_refusal(&self, limit: Limit) {
        let at = Limit::ALL
            .iter()
            .position(|l| *l == limit)
            .expect("every limit");
        self.refused[at].fetch_add(1, Ordering::Relaxed);
    }
}

/// Series seen lately, each with the minute of its last point: exact, up to the limit.
#[derive(Default)]
struct Series {
    last_seen: HashMap<u64, u32>,
}

impl Series {
    /// Which of `series` (hashes) may take a point at `minute`: those seen before, and new
    /// ones while fewer than `limit` are active.
    fn admit(&mut self, series: &[u64], limit: u64, minute: u32) -> Vec<bool> {
        let mut pruned = false;
        series
            .iter()
            .map(|hash| {
                if let Some(seen) = self.last_seen.get_mut(hash) {
                    *seen = minute;
                    return true;
                }
                if self.last_seen.len() as u64 >= limit && !pruned {
                    let oldest = minute.saturating_sub(SERIES_ACTIVE_MINUTES);
                    self.last_seen.retain(|_, seen| *seen >= oldest);
                    pruned = true;
                }
                if (self.last_seen.len() as u64) < limit {
                    self.last_seen.insert(*hash, minute);
                    true
                } else {
                    false
                }
            })
            .collect()
    }
}

/// One tenant (a warehouse, by name) and its limits in force.
pub struct Tenant {
    pub name: String,
    applied: RwLock<Arc<Applied>>,
    /// Until when the records bucket is known empty (its last refusal's wait): requests
    /// before then are refused before they are decoded, so a flood costs little.
    records_blocked_until: Mutex<Option<std::time::Instant>>,
    series: Mutex<Series>,
    /// Bytes of data files its tables' current snapshots hold, as last measured.
    storage_bytes: AtomicU64,
    pub counters: Counters,
}

impl fmt::Debug for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tenant")
            .field("name", &self.name)
            .field("limits", &self.limits())
            .finish()
    }
}

/// A statement's place in its tenant's line, held while it runs.
#[derive(Debug)]
pub struct QueryPlace {
    _permit: Option<OwnedSemaphorePermit>,
}

/// Counted while waiting in a tenant's line, also when the waiter gives up.
struct Waiting<'a>(&'a AtomicU64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Tenant {
    pub(super) fn new(name: &str, limits: Limits, updated_at_ms: i64) -> Tenant {
        Tenant {
            name: name.to_string(),
            applied: RwLock::new(Arc::new(Applied::new(limits, updated_at_ms))),
            records_blocked_until: Mutex::new(None),
            series: Mutex::new(Series::default()),
            storage_bytes: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    fn applied(&self) -> Arc<Applied> {
        self.applied.read().expect("tenant limits").clone()
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.applied().limits.clone()
    }

    pub(super) fn updated_at_ms(&self) -> i64 {
        self.applied().updated_at_ms
    }

    /// Puts `limits` in force at once: new buckets (full) and a new line; statements
    /// running under the old line finish there.
    pub(super) fn apply(&self, limits: Limits, updated_at_ms: i64) {
        *self.applied.write().expect("tenant limits") =
            Arc::new(Applied::new(limits, updated_at_ms));
        *self.records_blocked_until.lock().expect("tenant bucket") = None;
    }

    fn refuse(&self, refused: Refused) -> Refused {
        self.counters.count_refusal(refused.limit);
        refused
    }

    /// A request of `bytes` as received, before it is decoded: its size, the tenant's
    /// storage quota, its bytes bucket, and its records bucket while that is known empty
    /// (until the wait its last records refusal gave).
    pub fn admit_request(&self, bytes: u64) -> Result<(), Refused> {
        let applied = self.applied();
        let limits = &applied.limits;
        if let Some(max) = limits.max_request_bytes
            && bytes > max
        {
            return Err(self.refuse(Refused {
                tenant: self.name.clone(),
                limit: Limit::MaxRequestBytes,
                value: max,
                retry_after: None,
            }));
        }
        if let Some(quota) = limits.storage_quota_bytes
            && self.storage_bytes.load(Ordering::Relaxed) >= quota
        {
            return Err(self.refuse(Refused {
                tenant: self.name.clone(),
                limit: Limit::StorageQuotaBytes,
                value: quota,
                retry_after: None,
            }));
        }
        if let Some(bucket) = &applied.records {
            let blocked = *self.records_blocked_until.lock().expect("tenant bucket");
            let now = std::time::Instant::now();
            if let Some(until) = blocked.filter(|until| *until > now) {
                return Err(self.refuse(Refused {
                    tenant: self.name.clone(),
                    limit: Limit::IngestRecordsPerSecond,
                    value: bucket.rate,
                    retry_after: Some(until - now),
                }));
            }
        }
        if let Some(bucket) = &applied.bytes {
            bucket
                .take(
                    bytes,
                    Limit::IngestBytesPerSecond,
                    Limit::IngestBurstBytes,
                    &self.name,
                )
                .map_err(|r| self.refuse(r))?;
        }
        self.counters
            .accepted_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// `records` decoded from an admitted request: the records bucket. All of them or none.
    pub fn admit_records(&self, records: u64) -> Result<(), Refused> {
        if let Some(bucket) = &self.applied().records {
            bucket
                .take(
                    records,
                    Limit::IngestRecordsPerSecond,
                    Limit::IngestBurstRecords,
                    &self.name,
                )
                .map_err(|r| {
                    if let Some(wait) = r.retry_after {
                        *self.records_blocked_until.lock().expect("tenant bucket") =
                            Some(std::time::Instant::now() + wait);
                    }
                    self.refuse(r)
                })?;
        }
        Ok(())
    }

    /// Counts records taken durably.
    pub fn accepted(&self, records: u64) {
        self.counters
            .accepted_records
            .fetch_add(records, Ordering::Relaxed);
    }

    /// Counts a refusal decided elsewhere (overload, per-record limits).
    pub fn count_refusal(&self, limit: Limit) {
        self.counters.count_refusal(limit);
    }

    /// Which of `series` (hashes of metric series, one per point) may take their point at
    /// `minute` (minutes since the epoch); `None` when the tenant has no series limit.
    pub fn admit_series(&self, series: &[u64], minute: u32) -> Option<(Vec<bool>, u64)> {
        let limit = self.applied().limits.max_active_series?;
        let admitted = self
            .series
            .lock()
            .expect("tenant series")
            .admit(series, limit, minute);
        Some((admitted, limit))
    }

    /// Active series right now (as of the last prune).
    pub fn active_series(&self) -> u64 {
        self.series.lock().expect("tenant series").last_seen.len() as u64
    }

    pub fn set_storage_bytes(&self, bytes: u64) {
        self.storage_bytes.store(bytes, Ordering::Relaxed);
    }

    pub fn storage_bytes(&self) -> u64 {
        self.storage_bytes.load(Ordering::Relaxed)
    }

    /// A place for one statement: at once when the tenant has no line or a free place,
    /// else in line (while fewer than `max-queued-queries` wait), else refused. The caller
    /// bounds the wait by its statement's deadline (dropping the future leaves the line).
    pub async fn admit_query(&self) -> Result<QueryPlace, Refused> {
        let applied = self.applied();
        let Some(line) = &applied.queries else {
            return Ok(QueryPlace { _permit: None });
        };
        if let Ok(permit) = line.clone().try_acquire_owned() {
            return Ok(QueryPlace {
                _permit: Some(permit),
            });
        }
        let queue = applied.limits.max_queued_queries.unwrap_or(0);
        let concurrent = applied.limits.max_concurrent_queries.unwrap_or(0);
        let waiting = self.counters.queued.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&self.counters.queued);
        if waiting >= queue {
            let (limit, value) = if queue == 0 {
                (Limit::MaxConcurrentQueries, concurrent)
            } else {
                (Limit::MaxQueuedQueries, queue)
            };
            return Err(self.refuse(Refused {
                tenant: self.name.clone(),
                limit,
                value,
                retry_after: Some(Duration::from_secs(1)),
            }));
        }
        let started = std::time::Instant::now();
        let permit = line.clone().acquire_owned().await.ok();
        self.counters.queue_waits.fetch_add(1, Ordering::Relaxed);
        self.counters
            .queue_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        Ok(QueryPlace { _permit: permit })
    }

    /// The samples one PromQL query may load: its own limit, else `default`.
    pub fn query_samples(&self, default: usize) -> usize {
        self.applied()
            .limits
            .max_query_samples
            .map_or(default, |v| usize::try_from(v).unwrap_or(usize::MAX))
    }

    /// The memory one of its statements may hold, given the server's `ceiling`.
    pub fn query_memory(&self, ceiling: usize) -> usize {
        self.applied()
            .limits
            .query_memory_bytes
            .map_or(ceiling, |share| ceiling.min(share as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(limits: Limits) -> Tenant {
        Tenant::new("a", limits, 0)
    }

    #[test]
    fn a_bucket_refuses_past_its_burst_with_a_wait_from_its_rate() {
        let a = tenant(Limits {
            ingest_records_per_second: Some(10),
            ingest_burst_records: Some(20),
            ..Limits::default()
        });
        assert!(a.admit_records(15).is_ok());
        let refused = a.admit_records(10).unwrap_err();
        assert_eq!(refused.limit, Limit::IngestRecordsPerSecond);
        assert_eq!(refused.value, 10);
        let wait = refused.retry_after.unwrap();
        // Five tokens left; ten more need half a second at ten per second.
        assert!(
            wait > Duration::from_millis(400) && wait <= Duration::from_millis(510),
            "{wait:?}"
        );
        assert_eq!(refused.retry_after_seconds(), Some(1));
        assert_eq!(refused.code(), ErrorCode::TooManyRequests);
        let never = a.admit_records(21).unwrap_err();
        assert_eq!(never.limit, Limit::IngestBurstRecords);
        assert_eq!(never.retry_after, None);
        assert_eq!(never.code(), ErrorCode::PayloadTooLarge);
        assert_eq!(a.counters.refused(Limit::IngestRecordsPerSecond), 1);
        assert!(
            refused
                .to_string()
                .contains("ingest-records-per-second limit of 10"),
            "{refused}"
        );
        // While the records bucket is known empty, requests are refused before decoding.
        let early = a.admit_request(10).unwrap_err();
        assert_eq!(early.limit, Limit::IngestRecordsPerSecond);
        assert!(early.retry_after.unwrap() <= wait);
        // New limits take effect at once, with a full bucket.
        a.apply(
            Limits {
                ingest_records_per_second: Some(1000),
                ..Limits::default()
            },
            1,
        );
        assert!(a.admit_records(500).is_ok());
    }

    #[test]
    fn series_past_the_limit_are_refused_until_old_ones_go_quiet() {
        let a = tenant(Limits {
            max_active_series: Some(2),
            ..Limits::default()
        });
        let (admitted, _) = a.admit_series(&[1, 2, 3, 1], 100).unwrap();
        assert_eq!(admitted, [true, true, false, true]);
        // Still active ten minutes later: 3 is refused, 2 is known.
        let (admitted, _) = a.admit_series(&[3, 2], 110).unwrap();
        assert_eq!(admitted, [false, true]);
        // Series 1 is quiet for longer than the window, so 3 takes its place.
        let (admitted, _) = a
            .admit_series(&[3], 100 + SERIES_ACTIVE_MINUTES + 11)
            .unwrap();
        assert_eq!(admitted, [true]);
        assert!(tenant(Limits::default()).admit_series(&[1], 0).is_none());
    }

    #[tokio::test]
    async fn statements_wait_in_a_bounded_line_and_the_rest_are_refused() {
        let a = tenant(Limits {
            max_concurrent_queries: Some(1),
            max_queued_queries: Some(1),
            ..Limits::default()
        });
        let running = a.admit_query().await.unwrap();
        let a = Arc::new(a);
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.admit_query().await.map(|_| ()) })
        };
        while a.counters.queued.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
        let refused = a.admit_query().await.unwrap_err();
        assert_eq!(refused.limit, Limit::MaxQueuedQueries);
        assert!(refused.retry_after.is_some());
        drop(running);
        waiter.await.unwrap().unwrap();
        assert_eq!(a.counters.queue_waits.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn request_size_and_storage_quota_refuse_without_a_wait() {
        let a = tenant(Limits {
            max_request_bytes: Some(100),
            storage_quota_bytes: Some(1000),
            ..Limits::default()
        });
        assert!(a.admit_request(100).is_ok());
        assert_eq!(
            a.admit_request(101).unwrap_err().limit,
            Limit::MaxRequestBytes
        );
        a.set_storage_bytes(1000);
        let full = a.admit_request(10).unwrap_err();
        assert_eq!(full.limit, Limit::StorageQuotaBytes);
        assert_eq!(full.code(), ErrorCode::QuotaExceeded);
        assert_eq!(full.retry_after_seconds(), None);
    }
}
