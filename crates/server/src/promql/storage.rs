//! The series a PromQL selector names, read from the tenant's `otel.metrics` with Floe SQL
//! as the caller: the metric name, the `job` (the table's `service_name` partition) and the
//! time range go into the statement — so partitions, row groups (the table is sorted by
//! service and time) and the name's bloom filter prune the scan — and every matcher is then
//! checked on each series' labels.
//!
//! A row's series is its metric's name (`__name__`), its attributes, and `job` from
//! `service_name` when its attributes have none (OTLP's rows; remote write keeps `job` among
//! the attributes). Gauges and sums are float samples (a staleness marker — value NULL with
//! OTLP's no-recorded-value flag — is Prometheus's stale NaN); an `exponential_histogram` is a
//! native histogram of that scale, a `histogram` one of custom buckets (its bounds).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type};
use floe_catalog::governance::authz::Caller;
use floe_promql::histogram::{CUSTOM_BUCKETS_SCHEMA, CounterResetHint, FloatHistogram};
use floe_promql::labels::METRIC_NAME;
use floe_promql::value::stale_nan;
use floe_promql::{Error, Labels, MatchOp, Matcher, Point, Sample, Series};
use floe_sql::{QueryOptions, SqlEngine, SqlError, SqlErrorKind};
use futures::TryStreamExt;

/// The service of rows whose sender named none (not a `job`).
const UNKNOWN_SERVICE: &str = "unknown_service";

/// How long a selector waits for a place among its principal's statements (Prometheus's
/// default query timeout).
const QUEUE_DEADLINE: Duration = Duration::from_secs(120);

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
        if let Some(maxt) = maxt {
            preds.push(format!("time <= {}", time_literal(maxt)));
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
        // its concurrency, until the query's deadline.
        let deadline = tokio::time::Instant::now() + QUEUE_DEADLINE;
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
        let preds = Self::pushed(matchers, Some(mint), Some(maxt));
        let batches = self.rows(SAMPLE_COLUMNS, &preds).await?;
        let mut series: HashMap<Labels, Vec<Point>> = HashMap::new();
        // Labels decoded once per distinct (name, service, attributes) row of a batch would be
        // better; rows of one series follow each other in the table's sort order, so the
        // previous row's labels are reused when its columns are equal.
        for batch in &batches {
            let times = datafusion::arrow::compute::cast(batch.column(3), &DataType::Int64)
                .map_err(|e| Error::Storage(e.to_string()))?;
            let times = times.as_primitive::<Int64Type>();
            let mut previous: Option<(usize, Labels)> = None;
            for row in 0..batch.num_rows() {
                let labels = match &previous {
                    Some((p, l)) if same_series(batch, *p, row) => l.clone(),
                    _ => row_labels(batch, row),
                };
                previous = Some((row, labels.clone()));
                if !matchers.iter().all(|m| m.matches_labels(&labels)) {
                    continue;
                }
                let Some(sample) = row_sample(batch, row) else {
                    continue;
                };
                let t = times.value(row).div_euclid(1000);
                series
                    .entry(labels)
                    .or_default()
                    .push(Point { t, s: sample });
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

fn same_series(batch: &RecordBatch, a: usize, b: usize) -> bool {
    let name = batch.column(0).as_string::<i32>();
    let service = batch.column(1).as_string::<i32>();
    if name.value(a) != name.value(b) || service.value(a) != service.value(b) {
        return false;
    }
    let maps = batch.column(2).as_map();
    if maps.is_null(a) != maps.is_null(b) {
        return false;
    }
    maps.is_null(a) || maps.value(a) == maps.value(b)
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
