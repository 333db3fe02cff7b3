//! The series a PromQL selector names, read from the tenant's `otel.metrics` with Floe SQL
//! as the caller: the metric name, the `job` (the table's `service_name` partition) and the
//! time range go into the statement — so partitions, row groups and pages (the table is
//! written in service, metric name and time order; tables made before that in service and
//! time order) and the name's bloom filter prune the scan — and every matcher is then checked
//! on each series' labels.
//!
//! A row's series is its metric's name (`__name__`), its attributes, and `job` from
//! `service_name` when its attributes have none (OTLP's rows; remote write keeps `job` among
//! the attributes). Gauges and sums are float samples (a staleness marker — value NULL with
//! OTLP's no-recorded-value flag — is Prometheus's stale NaN); an `exponential_histogram` is a
//! native histogram of that scale, a `histogram` one of custom buckets (its bounds).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type};
use floe_catalog::governance::authz::Caller;
use floe_promql::histogram::{CUSTOM_BUCKETS_SCHEMA, CounterResetHint, FloatHistogram};
use floe_promql::labels::METRIC_NAME;
use floe_promql::value::stale_nan;
use floe_promql::{Error, Labels, MatchOp, Matcher, Point, Sample, Series, Want};
use floe_sql::{QueryOptions, SqlEngine, SqlError, SqlErrorKind};
use futures::TryStreamExt;
use tokio::sync::Semaphore;
use uuid::Uuid;

/// The service of rows whose sender named none (not a `job`).
const UNKNOWN_SERVICE: &str = "unknown_service";

/// How long a selector waits for a place among its principal's statements (Prometheus's
/// default query timeout).
const QUEUE_DEADLINE: Duration = Duration::from_secs(120);

/// Each principal's line of PromQL selector statements (see [`SqlStorage::line`]); one entry
/// per principal that has asked.
static LINES: LazyLock<Mutex<HashMap<Uuid, Arc<Semaphore>>>> = LazyLock::new(Default::default);

/// OTLP's `FLAG_NO_RECORDED_VALUE`: the row is a staleness marker.
const NO_RECORDED_VALUE: i64 = 1;

/// A tenant's metrics as one caller may read them.
pub(crate) struct SqlStorage {
    pub sql: Arc<SqlEngine>,
    pub caller: Caller,
    pub tenant: String,
    /// Samples one query may load (the tenant's `max-query-samples`), over all its selectors.
    pub max_samples: usize,
    /// Rows this request's selectors have read so far.
    pub loaded: std::sync::atomic::AtomicUsize,
}

/// A text as a SQL string literal.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn time_literal(ms: i64) -> String {
    format!(
        "arrow_cast({}, 'Timestamp(Microsecond, Some(\"UTC\"))')",
        ms.saturating_mul(1000)
    )
}

/// Whether a failure means the tenant has no metrics table yet (then there are no series).
fn no_table(e: &SqlError) -> bool {
    e.kind == SqlErrorKind::Invalid && e.message.contains("not found")
}

pub(crate) fn promql_error(e: SqlError) -> Error {
    match e.kind {
        SqlErrorKind::Timeout => Error::Timeout("query execution"),
        SqlErrorKind::PermissionDenied => Error::Denied(e.message),
        SqlErrorKind::TooManyStatements => Error::Execution(e.message),
        _ => Error::Storage(e.message),
    }
}

impl SqlStorage {
    /// The predicates a selector pushes into the scan.
    fn pushed(matchers: &[Matcher], mint: Option<i64>, maxt: Option<i64>) -> Vec<String> {
        let mut preds = Vec::new();
        if let Some(mint) = mint {
            preds.push(format!("time >= {}", time_literal(mint)));
        }
        // A sample's time is its row's time in whole milliseconds, rounded down: a row
        // within `maxt`'s millisecond is in.
        if let Some(maxt) = maxt {
            preds.push(format!("time < {}", time_literal(maxt.saturating_add(1))));
        }
        for m in matchers {
            match (&m.op, m.name.as_str()) {
                (MatchOp::Equal, METRIC_NAME) => {
                    preds.push(format!("metric_name = {}", quote(&m.value)))
                }
                (MatchOp::Regex(_), METRIC_NAME) => {
                    // Alternatives of plain names (`a|b|c`) become a list.
                    let names: Vec<&str> = m.value.split('|').collect();
                    if names.iter().all(|n| {
                        !n.is_empty()
                            && n.chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                    }) {
                        let list: Vec<String> = names.iter().map(|n| quote(n)).collect();
                        preds.push(format!("metric_name IN ({})", list.join(", ")));
                    }
                }
                // A series' `job` is its rows' service (remote write takes the service from
                // `job`; OTLP's rows get `job` from their service).
                (MatchOp::Equal, "job") if !m.value.is_empty() => {
                    preds.push(format!("service_name = {}", quote(&m.value)))
                }
                _ => {}
            }
        }
        preds
    }

    async fn rows(&self, columns: &str, preds: &[String]) -> Result<Vec<RecordBatch>, Error> {
        let mut sql = format!("SELECT {columns} FROM otel.metrics");
        if !preds.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&preds.join(" AND "));
        }
        let options = QueryOptions {
            warehouse: Some(self.tenant.clone()),
            namespace: Some("otel".into()),
            ..Default::default()
        };
        // A dashboard asks for many panels at once, more than a principal's statements may
        // run at once: a selector waits for a place, as Prometheus queues the queries beyond
        // its concurrency, until the query's deadline — first in its principal's line (in
        // order of arrival), then, should the principal's other statements hold the places,
        // by asking again now and then.
        let deadline = tokio::time::Instant::now() + QUEUE_DEADLINE;
        let _place = tokio::time::timeout_at(deadline, self.line().acquire_owned())
            .await
            .map_err(|_| Error::Timeout("query queue"))?
            .map_err(|_| Error::Execution("the server is shutting down".into()))?;
        let mut pause = Duration::from_millis(5);
        let result = loop {
            match self.sql.query(&self.caller, &sql, &options).await {
                Ok(r) => break r,
                Err(e) if no_table(&e) => return Ok(Vec::new()),
                Err(e)
                    if e.kind == SqlErrorKind::TooManyStatements
                        && tokio::time::Instant::now() + pause < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err(e) => return Err(promql_error(e)),
            }
        };
        // Rows are counted as they arrive: a selector that would load more samples than the
        // query may is refused before they are all held.
        let mut stream = result.stream;
        let mut batches = Vec::new();
        while let Some(batch) = stream
            .try_next()
            .await
            .map_err(|e| promql_error(SqlError::from(e)))?
        {
            let loaded = self
                .loaded
                .fetch_add(batch.num_rows(), std::sync::atomic::Ordering::Relaxed)
                + batch.num_rows();
            if loaded > self.max_samples {
                return Err(floe_promql::too_many_samples(self.max_samples));
            }
            batches.push(batch);
        }
        Ok(batches)
    }

    /// The line this caller's selectors wait in: as many places as a principal may run
    /// statements at once.
    fn line(&self) -> Arc<Semaphore> {
        let mut lines = LINES.lock().expect("promql lines");
        lines
            .entry(self.caller.principal.id)
            .or_insert_with(|| {
                Arc::new(Semaphore::new(
                    self.sql
                        .config()
                        .max_queries_per_principal
                        .clamp(1, Semaphore::MAX_PERMITS),
                ))
            })
            .clone()
    }

    /// Every series' labels matching `matchers` with a sample in the range (`series`,
    /// `labels`, `label/…/values`).
    pub async fn label_sets(
        &self,
        matchers: &[Matcher],
        mint: Option<i64>,
        maxt: Option<i64>,
    ) -> Result<Vec<Labels>, Error> {
        let preds = Self::pushed(matchers, mint, maxt);
        // DISTINCT where the engine hashes maps; else every row, deduplicated here.
        let batches = match self
            .rows("DISTINCT metric_name, service_name, attributes", &preds)
            .await
        {
            Ok(b) => b,
            // Only a statement the engine could not run is tried the other way; a refusal
            // (a limit, a deadline, a grant) is the answer.
            Err(Error::Storage(_)) => {
                self.rows("metric_name, service_name, attributes", &preds)
                    .await?
            }
            Err(e) => return Err(e),
        };
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for batch in &batches {
            for row in 0..batch.num_rows() {
                let labels = row_labels(batch, row);
                if matchers.iter().all(|m| m.matches_labels(&labels)) && seen.insert(labels.clone())
                {
                    out.push(labels);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// The metric names with a sample in the range, sorted.
    pub async fn metric_names(
        &self,
        mint: Option<i64>,
        maxt: Option<i64>,
    ) -> Result<Vec<String>, Error> {
        let preds = Self::pushed(&[], mint, maxt);
        let batches = self.rows("DISTINCT metric_name", &preds).await?;
        let mut names: Vec<String> = batches
            .iter()
            .flat_map(|b| {
                let column = b.column(0).as_string::<i32>();
                (0..b.num_rows())
                    .map(|r| column.value(r).to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Each metric's type, help and unit (`metadata`).
    pub async fn metadata(
        &self,
        metric: Option<&str>,
    ) -> Result<Vec<(String, String, String, String)>, Error> {
        let preds: Vec<String> = metric
            .map(|m| format!("metric_name = {}", quote(m)))
            .into_iter()
            .collect();
        let batches = self
            .rows("DISTINCT metric_name, metric_type, is_monotonic, COALESCE(description, '') AS description, COALESCE(unit, '') AS unit", &preds)
            .await?;
        let mut out = Vec::new();
        for b in &batches {
            let name = b.column(0).as_string::<i32>();
            let kind = b.column(1).as_string::<i32>();
            let monotonic = b.column(2).as_boolean();
            let help = b.column(3).as_string::<i32>();
            let unit = b.column(4).as_string::<i32>();
            for r in 0..b.num_rows() {
                let prom_type = match kind.value(r) {
                    "sum" if !monotonic.is_null(r) && monotonic.value(r) => "counter",
                    "sum" | "gauge" => "gauge",
                    "histogram" | "exponential_histogram" => "histogram",
                    "summary" => "summary",
                    _ => "unknown",
                };
                out.push((
                    name.value(r).to_string(),
                    prom_type.to_string(),
                    help.value(r).to_string(),
                    unit.value(r).to_string(),
                ));
            }
        }
        out.sort();
        out.dedup();
        // Rows written before a family's metadata came have no help or unit: such an entry
        // is left out where the metric has a described one.
        let described: std::collections::HashSet<String> = out
            .iter()
            .filter(|(_, _, help, unit)| !help.is_empty() || !unit.is_empty())
            .map(|(n, ..)| n.clone())
            .collect();
        out.retain(|(name, _, help, unit)| {
            !help.is_empty() || !unit.is_empty() || !described.contains(name)
        });
        Ok(out)
    }
}

const SAMPLE_COLUMNS: &str = "metric_name, service_name, attributes, time, metric_type, value, flags, count, sum, \
     bucket_counts, explicit_bounds, scale, zero_count, positive_offset, positive_bucket_counts, \
     negative_offset, negative_bucket_counts, aggregation_temporality";

#[async_trait]
impl floe_promql::Storage for SqlStorage {
    async fn select(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> floe_promql::Result<Vec<Series>> {
        let want = Want {
            matchers,
            mint,
            maxt,
        };
        Ok(self.select_many(&[want]).await?.pop().unwrap_or_default())
    }

    /// Selectors that push the same predicates into the scan (`x{code="500"}` and `x`: the
    /// rows of one metric) over overlapping times are served by one statement over the union
    /// of their times; each then takes its series and samples. The groups' statements run
    /// at once (in their principal's line).
    async fn select_many(&self, wants: &[Want<'_>]) -> floe_promql::Result<Vec<Vec<Series>>> {
        use futures::StreamExt;
        let groups = groups(wants);
        // Two of a query's statements at once: a query of many selectors does not take every
        // place in its principal's line ahead of the principal's other queries.
        let reads: Vec<_> = groups
            .iter()
            .map(|g| self.read_series(&g.pushed, g.mint, g.maxt))
            .collect();
        let read: Vec<Vec<Series>> = futures::stream::iter(reads)
            .buffered(2)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()?;
        let mut out = vec![Vec::new(); wants.len()];
        for (group, mut series) in groups.iter().zip(read) {
            let Some((last, others)) = group.members.split_last() else {
                continue;
            };
            for &i in others {
                out[i] = restrict(series.clone(), &wants[i]);
                // A member's series are a copy of the shared read: counted as the read was.
                let copied: usize = out[i].iter().map(|s| s.points.len()).sum();
                let loaded = self
                    .loaded
                    .fetch_add(copied, std::sync::atomic::Ordering::Relaxed)
                    + copied;
                if loaded > self.max_samples {
                    return Err(floe_promql::too_many_samples(self.max_samples));
                }
            }
            out[*last] = restrict(std::mem::take(&mut series), &wants[*last]);
        }
        Ok(out)
    }
}

/// Selectors read by one statement: those pushing the same predicates (their non-time
/// `WHERE`) over times that overlap, as one connected span.
struct Group {
    pushed: Vec<String>,
    mint: i64,
    maxt: i64,
    members: Vec<usize>,
}

fn groups(wants: &[Want<'_>]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, want) in wants.iter().enumerate() {
        let pushed = SqlStorage::pushed(want.matchers, None, None);
        let joined = groups
            .iter_mut()
            .find(|g| g.pushed == pushed && want.mint <= g.maxt && want.maxt >= g.mint);
        match joined {
            Some(g) => {
                g.mint = g.mint.min(want.mint);
                g.maxt = g.maxt.max(want.maxt);
                g.members.push(i);
            }
            None => groups.push(Group {
                pushed,
                mint: want.mint,
                maxt: want.maxt,
                members: vec![i],
            }),
        }
    }
    groups
}

/// The series of `series` that `want` selects, with its samples in its times.
fn restrict(series: Vec<Series>, want: &Want<'_>) -> Vec<Series> {
    series
        .into_iter()
        .filter(|s| want.matchers.iter().all(|m| m.matches_labels(&s.labels)))
        .filter_map(|mut s| {
            let lo = s.points.partition_point(|p| p.t < want.mint);
            let hi = s.points.partition_point(|p| p.t <= want.maxt);
            s.points.truncate(hi);
            s.points.drain(..lo);
            (!s.points.is_empty()).then_some(s)
        })
        .collect()
}

impl SqlStorage {
    /// Every series of the rows `pushed` picks with a sample in `mint..=maxt`.
    async fn read_series(
        &self,
        pushed: &[String],
        mint: i64,
        maxt: i64,
    ) -> floe_promql::Result<Vec<Series>> {
        let mut preds = Self::pushed(&[], Some(mint), Some(maxt));
        preds.extend(pushed.iter().cloned());
        let batches = self.rows(SAMPLE_COLUMNS, &preds).await?;
        // Rows of many series interleave (a metric's rows are in time order): each row
        // is keyed by its raw identity columns, and labels are decoded once per
        // distinct key, not per row.
        let mut by_key: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut by_labels: HashMap<Labels, usize> = HashMap::new();
        let mut series: Vec<(Labels, Vec<Point>)> = Vec::new();
        let mut key = Vec::new();
        for batch in &batches {
            let times = datafusion::arrow::compute::cast(batch.column(3), &DataType::Int64)
                .map_err(|e| Error::Storage(e.to_string()))?;
            let times = times.as_primitive::<Int64Type>();
            for row in 0..batch.num_rows() {
                series_key(batch, row, &mut key);
                let slot = match by_key.get(key.as_slice()) {
                    Some(slot) => *slot,
                    None => {
                        let labels = row_labels(batch, row);
                        let slot = *by_labels.entry(labels.clone()).or_insert_with(|| {
                            series.push((labels, Vec::new()));
                            series.len() - 1
                        });
                        by_key.insert(key.clone(), slot);
                        slot
                    }
                };
                let Some(sample) = row_sample(batch, row) else {
                    continue;
                };
                let t = times.value(row).div_euclid(1000);
                series[slot].1.push(Point { t, s: sample });
            }
        }
        let mut out: Vec<Series> = series
            .into_iter()
            .map(|(labels, mut points)| {
                points.sort_by_key(|p| p.t);
                // A sample written twice (a retried request) counts once: the last one.
                points.reverse();
                points.dedup_by_key(|p| p.t);
                points.reverse();
                Series {
                    labels,
                    points,
                    drop_name: false,
                }
            })
            .collect();
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }
}

/// A row's identity columns (name, service, attributes) written into `key`: rows with equal
/// keys are one series. Each part is length-prefixed, so no two different rows share a key.
fn series_key(batch: &RecordBatch, row: usize, key: &mut Vec<u8>) {
    fn part(key: &mut Vec<u8>, text: Option<&str>) {
        match text {
            None => key.extend_from_slice(&u32::MAX.to_le_bytes()),
            Some(t) => {
                key.extend_from_slice(&(t.len() as u32).to_le_bytes());
                key.extend_from_slice(t.as_bytes());
            }
        }
    }
    key.clear();
    let name = batch.column(0).as_string::<i32>();
    let service = batch.column(1).as_string::<i32>();
    part(key, (!name.is_null(row)).then(|| name.value(row)));
    part(key, (!service.is_null(row)).then(|| service.value(row)));
    let maps = batch.column(2).as_map();
    if maps.is_null(row) {
        return;
    }
    let offsets = maps.value_offsets();
    let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
    let keys = maps.keys().as_string::<i32>();
    let values = maps.values().as_string::<i32>();
    for i in start..end {
        part(key, Some(keys.value(i)));
        part(key, (!values.is_null(i)).then(|| values.value(i)));
    }
}

/// A row's series labels.
fn row_labels(batch: &RecordBatch, row: usize) -> Labels {
    let name = batch.column(0).as_string::<i32>();
    let service = batch.column(1).as_string::<i32>();
    let mut pairs: Vec<(String, String)> =
        vec![(METRIC_NAME.to_string(), name.value(row).to_string())];
    let maps = batch.column(2).as_map();
    let mut has_job = false;
    if !maps.is_null(row) {
        let entries = maps.value(row);
        let keys = entries.column(0).as_string::<i32>();
        let values = entries.column(1).as_string::<i32>();
        for i in 0..entries.len() {
            if values.is_null(i) {
                continue;
            }
            let key = keys.value(i);
            if key == METRIC_NAME {
                continue;
            }
            has_job |= key == "job";
            pairs.push((key.to_string(), values.value(i).to_string()));
        }
    }
    if !has_job
        && !service.is_null(row)
        && !service.value(row).is_empty()
        && service.value(row) != UNKNOWN_SERVICE
    {
        pairs.push(("job".to_string(), service.value(row).to_string()));
    }
    Labels::new(pairs)
}

fn list_i64(batch: &RecordBatch, col: usize, row: usize) -> Vec<f64> {
    let lists = batch.column(col).as_list::<i32>();
    if lists.is_null(row) {
        return Vec::new();
    }
    let values = lists.value(row);
    let values = values.as_primitive::<Int64Type>();
    values.iter().map(|v| v.unwrap_or(0) as f64).collect()
}

/// OTLP exponential buckets from `offset` as Prometheus's: OTLP's bucket j holds
/// (base^j, base^(j+1)], Prometheus's bucket j + 1 the same; `shift` halves the resolution
/// that many times (bucket j of the finer scale is in bucket j >> shift of the coarser).
/// None for indexes no histogram has (a row written with an absurd offset).
fn merged_buckets(offset: i64, counts: Vec<f64>, shift: u32) -> Option<Vec<(i32, f64)>> {
    const FURTHEST: i64 = 1 << 24;
    let mut out: Vec<(i32, f64)> = Vec::with_capacity(counts.len());
    for (i, c) in counts.into_iter().enumerate() {
        let j = offset.checked_add(i as i64)?;
        if j.abs() > FURTHEST {
            return None;
        }
        let index = i32::try_from((j >> shift) + 1).ok()?;
        match out.last_mut() {
            Some(last) if last.0 == index => last.1 += c,
            _ => out.push((index, c)),
        }
    }
    Some(out)
}

/// A row's sample, if it holds one.
fn row_sample(batch: &RecordBatch, row: usize) -> Option<Sample> {
    let kind = batch.column(4).as_string::<i32>().value(row);
    let flags = batch.column(6).as_primitive::<Int64Type>();
    let stale = !flags.is_null(row) && flags.value(row) & NO_RECORDED_VALUE != 0;
    match kind {
        "gauge" | "sum" => {
            let values = batch.column(5).as_primitive::<Float64Type>();
            if values.is_null(row) {
                return stale.then(|| Sample::Float(stale_nan()));
            }
            Some(Sample::Float(values.value(row)))
        }
        "histogram" | "exponential_histogram" => {
            let counts = batch.column(7).as_primitive::<Int64Type>();
            let sums = batch.column(8).as_primitive::<Float64Type>();
            if stale || counts.is_null(row) {
                return stale.then(|| {
                    Sample::Histogram(Arc::new(FloatHistogram {
                        sum: stale_nan(),
                        ..Default::default()
                    }))
                });
            }
            let temporality = batch.column(17).as_string::<i32>();
            let hint = if temporality.is_null(row) {
                CounterResetHint::Gauge
            } else {
                CounterResetHint::Unknown
            };
            let mut h = FloatHistogram {
                counter_reset_hint: hint,
                count: counts.value(row) as f64,
                sum: if sums.is_null(row) {
                    0.0
                } else {
                    sums.value(row)
                },
                ..Default::default()
            };
            if kind == "histogram" {
                h.schema = CUSTOM_BUCKETS_SCHEMA;
                let bounds = batch.column(10).as_list::<i32>();
                if !bounds.is_null(row) {
                    let b = bounds.value(row);
                    h.custom_values = b
                        .as_primitive::<Float64Type>()
                        .iter()
                        .map(|v| v.unwrap_or(f64::NAN))
                        .collect();
                }
                h.positive = list_i64(batch, 9, row)
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| (i as i32, c))
                    .collect();
            } else {
                let scale = batch.column(11).as_primitive::<Int32Type>();
                let zero = batch.column(12).as_primitive::<Int64Type>();
                let pos_off = batch.column(13).as_primitive::<Int32Type>();
                let neg_off = batch.column(15).as_primitive::<Int32Type>();
                let scale = if scale.is_null(row) {
                    0
                } else {
                    scale.value(row)
                };
                // Prometheus's schemas run from -4 to 8. OTLP's finer scales (SDKs default to
                // 20) are brought down to 8 by merging neighbouring buckets; coarser ones
                // than -4 have no Prometheus form, and such a point is not a sample.
                if scale < -4 {
                    return None;
                }
                let shift = (scale - 8).max(0) as u32;
                h.schema = scale.min(8);
                h.zero_count = if zero.is_null(row) {
                    0.0
                } else {
                    zero.value(row) as f64
                };
                let off = |a: &datafusion::arrow::array::PrimitiveArray<Int32Type>| {
                    if a.is_null(row) {
                        0i64
                    } else {
                        a.value(row) as i64
                    }
                };
                h.positive = merged_buckets(off(pos_off), list_i64(batch, 14, row), shift)?;
                h.negative = merged_buckets(off(neg_off), list_i64(batch, 16, row), shift)?;
            }
            Some(Sample::Histogram(Arc::new(h.compacted())))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, MapBuilder, StringArray, StringBuilder};

    /// A row's name, service and attributes.
    type Row<'a> = (&'a str, Option<&'a str>, &'a [(&'a str, Option<&'a str>)]);

    /// Rows as the selector statements answer them.
    fn batch(rows: &[Row<'_>]) -> RecordBatch {
        let names: ArrayRef = Arc::new(StringArray::from(
            rows.iter().map(|r| Some(r.0)).collect::<Vec<_>>(),
        ));
        let services: ArrayRef = Arc::new(StringArray::from(
            rows.iter().map(|r| r.1).collect::<Vec<_>>(),
        ));
        let mut maps = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        for (_, _, attributes) in rows {
            for (k, v) in *attributes {
                maps.keys().append_value(k);
                maps.values().append_option(*v);
            }
            maps.append(true).unwrap();
        }
        let maps: ArrayRef = Arc::new(maps.finish());
        RecordBatch::try_from_iter([("n", names), ("s", services), ("a", maps)]).unwrap()
    }

    fn key(batch: &RecordBatch, row: usize) -> Vec<u8> {
        let mut key = Vec::new();
        series_key(batch, row, &mut key);
        key
    }

    #[test]
    fn series_keys_tell_apart_what_labels_tell_apart() {
        let b = batch(&[
            ("ab", Some("c"), &[("k", Some("v"))]),
            ("a", Some("bc"), &[("k", Some("v"))]),
            ("ab", Some("c"), &[("k", Some("v"))]),
            ("ab", None, &[("k", Some("v"))]),
            ("ab", Some(""), &[("k", Some("v"))]),
            ("ab", Some("c"), &[("kv", None)]),
            ("ab", Some("c"), &[("k", Some("v")), ("x", Some("y"))]),
        ]);
        let keys: Vec<Vec<u8>> = (0..b.num_rows()).map(|r| key(&b, r)).collect();
        assert_eq!(keys[0], keys[2], "equal rows are one series");
        for (i, a) in keys.iter().enumerate() {
            for (j, other) in keys.iter().enumerate() {
                if i != j && !(i.min(j) == 0 && i.max(j) == 2) {
                    assert_ne!(a, other, "rows {i} and {j} are different series");
                }
            }
        }
    }

    #[test]
    fn rows_of_different_keys_may_be_one_series() {
        // A null attribute value is no label: the keys differ, the labels do not, and the
        // read puts both rows in one series by their labels.
        let b = batch(&[
            ("x", Some("c"), &[("k", Some("v")), ("gone", None)]),
            ("x", Some("c"), &[("k", Some("v"))]),
        ]);
        assert_ne!(key(&b, 0), key(&b, 1));
        assert_eq!(row_labels(&b, 0), row_labels(&b, 1));
    }

    #[test]
    fn selectors_share_a_statement_only_over_overlapping_times() {
        let name = |v: &str| {
            vec![Matcher {
                name: METRIC_NAME.into(),
                op: MatchOp::Equal,
                value: v.into(),
            }]
        };
        let x = name("x");
        let mut x500 = name("x");
        x500.push(Matcher {
            name: "code".into(),
            op: MatchOp::Equal,
            value: "500".into(),
        });
        let y = name("y");
        let want = |matchers, mint, maxt| Want {
            matchers,
            mint,
            maxt,
        };
        let wants = [
            want(&x, 0, 100),
            // Same pushed predicates, overlapping: one statement over 0..=150.
            want(&x500, 50, 150),
            // After that span: a statement of its own.
            want(&x, 151, 200),
            // Another metric.
            want(&y, 0, 100),
            // Touching the first span's end: joins it.
            want(&x, 150, 160),
        ];
        let shape: Vec<(i64, i64, Vec<usize>)> = groups(&wants)
            .into_iter()
            .map(|g| (g.mint, g.maxt, g.members))
            .collect();
        assert_eq!(
            shape,
            [
                (0, 160, vec![0, 1, 4]),
                (151, 200, vec![2]),
                (0, 100, vec![3])
            ]
        );
    }

    fn series(name: &str, code: &str, times: &[i64]) -> Series {
        Series {
            labels: Labels::new(vec![
                (METRIC_NAME.to_string(), name.to_string()),
                ("code".to_string(), code.to_string()),
            ]),
            points: times
                .iter()
                .map(|&t| Point {
                    t,
                    s: Sample::Float(t as f64),
                })
                .collect(),
            drop_name: false,
        }
    }

    #[test]
    fn a_shared_read_gives_each_selector_its_series_and_times() {
        let read = vec![
            series("x", "200", &[10, 20, 30, 40]),
            series("x", "500", &[10, 40]),
        ];
        let code = [Matcher {
            name: "code".into(),
            op: MatchOp::Equal,
            value: "500".into(),
        }];
        let narrow = Want {
            matchers: &code,
            mint: 20,
            maxt: 40,
        };
        let got = restrict(read.clone(), &narrow);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].points.iter().map(|p| p.t).collect::<Vec<_>>(), [40]);
        // A series with no sample in the selector's times is not among its series.
        let early = Want {
            matchers: &[],
            mint: 15,
            maxt: 30,
        };
        let got = restrict(read, &early);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].points.iter().map(|p| p.t).collect::<Vec<_>>(),
            [20, 30]
        );
    }
}
