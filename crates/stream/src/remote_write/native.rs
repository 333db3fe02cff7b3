//! Prometheus native histograms as rows of `otel.metrics`.
//!
//! A native histogram of a base-2 schema `s` (-4 to 8) is an OTLP exponential histogram of
//! scale `s`: Prometheus's bucket `i` holds `(base^(i-1), base^i]`, OTLP's bucket `j` holds
//! `(base^j, base^(j+1)]`, so bucket `i` is OTLP's `i - 1`, and the sparse spans become one
//! offset and dense counts (gaps as zeros). Integer histograms carry each bucket as the
//! delta from the one before; float histograms carry counts, taken when they are whole.
//! Custom buckets (schema -53, what a classic histogram becomes natively) are an OTLP
//! explicit-bucket histogram whose bounds are the custom values. A gauge histogram (its reset
//! hint, or its family's metadata) has no temporality; any other, cumulative.
//!
//! Spans may describe far more buckets than they cost to send (an offset of a million is
//! three bytes), so the dense width of each histogram is bounded ([`MOST_BUCKETS`]) and
//! charged to the request's decoding budget. A histogram that cannot be a row is refused
//! alone; one past the request's budget ([`crate::refusal::Kind::TooLarge`]) refuses the
//! request.

use opentelemetry_proto::tonic::common::v1::KeyValue;

use super::charge;
use crate::Refusal;
use crate::otlp::metrics::Values;

/// The most buckets one histogram may span, gaps included: schema 8 (the finest) from 10⁻⁹
/// to 10⁹ takes about 15,400.
pub const MOST_BUCKETS: u64 = 32_768;

/// The schema of custom buckets.
const CUSTOM_BUCKETS: i32 = -53;

/// Reset hint of a gauge histogram.
const RESET_GAUGE: i32 = 3;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(uint64, optional, tag = "1")]
    pub count_int: Option<u64>,
    #[prost(double, optional, tag = "2")]
    pub count_float: Option<f64>,
    #[prost(double, tag = "3")]
    pub sum: f64,
    #[prost(sint32, tag = "4")]
    pub schema: i32,
    #[prost(double, tag = "5")]
    pub zero_threshold: f64,
    #[prost(uint64, optional, tag = "6")]
    pub zero_count_int: Option<u64>,
    #[prost(double, optional, tag = "7")]
    pub zero_count_float: Option<f64>,
    #[prost(message, repeated, tag = "8")]
    pub negative_spans: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "9")]
    pub negative_deltas: Vec<i64>,
    #[prost(double, repeated, tag = "10")]
    pub negative_counts: Vec<f64>,
    #[prost(message, repeated, tag = "11")]
    pub positive_spans: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "12")]
    pub positive_deltas: Vec<i64>,
    #[prost(double, repeated, tag = "13")]
    pub positive_counts: Vec<f64>,
    #[prost(int32, tag = "14")]
    pub reset_hint: i32,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "15")]
    pub timestamp: i64,
    #[prost(double, repeated, tag = "16")]
    pub custom_values: Vec<f64>,
    /// When the histogram started counting, in milliseconds (0: not known).
    #[prost(int64, tag = "17")]
    pub start_timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// A count sent as an integer or as a float, as a whole number.
fn whole(integer: Option<u64>, float: Option<f64>, what: &str) -> Result<i64, Refusal> {
    match (integer, float) {
        (Some(n), _) => i64::try_from(n)
            .map_err(|_| Refusal::unsupported(format!("its {what} {n} is too large"))),
        (None, Some(f)) => whole_float(f, what),
        (None, None) => Ok(0),
    }
}

fn whole_float(f: f64, what: &str) -> Result<i64, Refusal> {
    if f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < i64::MAX as f64 {
        Ok(f as i64)
    } else {
        Err(Refusal::malformed(format!(
            "its {what} {f} is not a whole number of observations"
        )))
    }
}

/// The buckets `spans` describe as the index of the first and dense counts, from integer
/// `deltas` or float `counts`, within `budget`.
fn dense(
    spans: &[BucketSpan],
    deltas: &[i64],
    counts: &[f64],
    budget: &mut usize,
) -> Result<(i32, Vec<i64>), Refusal> {
    let Some(first) = spans.first() else {
        if deltas.is_empty() && counts.is_empty() {
            return Ok((0, Vec::new()));
        }
        return Err(Refusal::malformed("it has bucket counts but no spans"));
    };
    let mut width: u64 = 0;
    let mut buckets: u64 = 0;
    for (i, span) in spans.iter().enumerate() {
        if i > 0 && span.offset < 0 {
            return Err(Refusal::malformed(format!(
                "span {i} has the negative gap {}",
                span.offset
            )));
        }
        let gap = if i == 0 { 0 } else { span.offset as u64 };
        width = width
            .saturating_add(gap)
            .saturating_add(u64::from(span.length));
        buckets += u64::from(span.length);
    }
    if width > MOST_BUCKETS {
        return Err(Refusal::unsupported(format!(
            "its spans cover {width} buckets, more than the {MOST_BUCKETS} one histogram may"
        )));
    }
    let sent = if counts.is_empty() {
        deltas.len()
    } else {
        counts.len()
    };
    if buckets != sent as u64 {
        return Err(Refusal::malformed(format!(
            "its spans hold {buckets} buckets but it sends {sent} counts"
        )));
    }
    charge(budget, width as usize * 8)?;
    let last = i64::from(first.offset) + width as i64;
    if last > i64::from(i32::MAX) {
        return Err(Refusal::unsupported(format!(
            "its buckets reach past index {}",
            i32::MAX
        )));
    }
    let mut dense = vec![0i64; width as usize];
    let mut at = 0usize;
    let mut sent = 0usize;
    let mut running: i64 = 0;
    for (i, span) in spans.iter().enumerate() {
        if i > 0 {
            at += span.offset as usize;
        }
        for _ in 0..span.length {
            let count = if counts.is_empty() {
                running = running.saturating_add(deltas[sent]);
                if running < 0 {
                    return Err(Refusal::malformed(format!(
                        "bucket {sent} has a negative count {running}"
                    )));
                }
                running
            } else {
                whole_float(counts[sent], "bucket count")?
            };
            dense[at] = count;
            at += 1;
            sent += 1;
        }
    }
    Ok((first.offset, dense))
}

/// The kind of metric row native histogram `h` is.
pub fn kind(h: &Histogram) -> &'static str {
    if h.schema == CUSTOM_BUCKETS {
        "histogram"
    } else {
        "exponential_histogram"
    }
}

/// The row of native histogram `h` (its metric's kind, and its values), with `attributes`;
/// `gauge` when its family is a gauge histogram.
pub fn values<'a>(
    h: &Histogram,
    attributes: &'a [KeyValue],
    gauge: bool,
    budget: &mut usize,
) -> Result<(&'static str, Values<'a>), Refusal> {
    let count = whole(h.count_int, h.count_float, "count")?;
    let gauge = gauge || h.reset_hint == RESET_GAUGE;
    let values = Values {
        time: h.timestamp.saturating_mul(1000),
        start_time: (h.start_timestamp != 0).then(|| h.start_timestamp.saturating_mul(1000)),
        attributes,
        temporality: (!gauge).then_some("CUMULATIVE"),
        count: Some(count),
        sum: Some(h.sum),
        ..Values::default()
    };
    let (first, positive) = dense(
        &h.positive_spans,
        &h.positive_deltas,
        &h.positive_counts,
        budget,
    )?;
    if h.schema == CUSTOM_BUCKETS {
        let bounds = &h.custom_values;
        if bounds
            .windows(2)
            .any(|w| w[0].partial_cmp(&w[1]) != Some(std::cmp::Ordering::Less))
        {
            return Err(Refusal::malformed("its custom bounds do not increase"));
        }
        if !h.negative_spans.is_empty() {
            return Err(Refusal::malformed(
                "custom buckets have no negative buckets",
            ));
        }
        // Bucket i is the one up to bound i; the one past the last bound is +Inf's.
        let all = bounds.len() + 1;
        if first < 0 || first as usize + positive.len() > all {
            return Err(Refusal::malformed(format!(
                "its buckets reach past the {} its {} bounds make",
                all,
                bounds.len()
            )));
        }
        let mut counts = vec![0i64; all];
        counts[first as usize..first as usize + positive.len()].copy_from_slice(&positive);
        return Ok((
            "histogram",
            Values {
                bucket_counts: Some(counts),
                explicit_bounds: Some(bounds.clone()),
                ..values
            },
        ));
    }
    if !(-4..=8).contains(&h.schema) {
        return Err(Refusal::unsupported(format!(
            "schema {} is none Prometheus defines (-4 to 8, or -53 for custom buckets)",
            h.schema
        )));
    }
    let (negative_first, negative) = dense(
        &h.negative_spans,
        &h.negative_deltas,
        &h.negative_counts,
        budget,
    )?;
    // Prometheus's bucket i is OTLP's i - 1.
    let otlp = |first: i32, counts: Vec<i64>| match first.checked_sub(1) {
        Some(offset) => Ok(Some((offset, counts))),
        None => Err(Refusal::unsupported(format!(
            "its buckets start below index {}",
            i32::MIN + 1
        ))),
    };
    Ok((
        "exponential_histogram",
        Values {
            scale: Some(h.schema),
            zero_count: Some(whole(h.zero_count_int, h.zero_count_float, "zero count")?),
            positive: otlp(first, positive)?,
            negative: otlp(negative_first, negative)?,
            ..values
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refusal::Kind;

    fn span(offset: i32, length: u32) -> BucketSpan {
        BucketSpan { offset, length }
    }

    #[test]
    fn spans_and_deltas_become_dense_counts() {
        let mut budget = 1 << 20;
        // Buckets -2, -1 (counts 2, 3) then a gap of two, then bucket 2 (count 1).
        let (first, counts) =
            dense(&[span(-2, 2), span(2, 1)], &[2, 1, -2], &[], &mut budget).unwrap();
        assert_eq!((first, counts), (-2, vec![2, 3, 0, 0, 1]));
        let (first, counts) = dense(&[span(1, 2)], &[], &[4.0, 5.0], &mut budget).unwrap();
        assert_eq!((first, counts), (1, vec![4, 5]));
        for (spans, deltas, counts) in [
            (vec![span(0, 2)], vec![1], vec![]),
            (vec![span(0, 1)], vec![-1], vec![]),
            (vec![span(0, 1)], vec![], vec![0.5]),
            (vec![span(0, 1), span(-1, 1)], vec![1, 1], vec![]),
            (vec![span(0, 1), span(1_000_000, 1)], vec![1, 1], vec![]),
        ] {
            assert!(matches!(
                dense(&spans, &deltas, &counts, &mut budget),
                Err(r) if r.kind() != Kind::TooLarge
            ));
        }
        let mut small = 100;
        assert!(matches!(
            dense(&[span(0, 100)], &[1; 100], &[], &mut small),
            Err(r) if r.kind() == Kind::TooLarge
        ));
    }

    #[test]
    fn exponential_and_custom_histograms() {
        let mut budget = 1 << 20;
        let h = Histogram {
            count_int: Some(6),
            sum: 10.5,
            schema: 0,
            zero_count_int: Some(1),
            positive_spans: vec![span(1, 2)],
            positive_deltas: vec![2, 1],
            negative_spans: vec![span(0, 1)],
            negative_deltas: vec![0],
            timestamp: 1_000,
            ..Histogram::default()
        };
        let (kind, v) = values(&h, &[], false, &mut budget).unwrap();
        assert_eq!(kind, "exponential_histogram");
        assert_eq!(
            (v.scale, v.zero_count, v.count),
            (Some(0), Some(1), Some(6))
        );
        // Prometheus's bucket 1, (1, 2], is OTLP's bucket 0.
        assert_eq!(v.positive, Some((0, vec![2, 3])));
        assert_eq!(v.negative, Some((-1, vec![0])));
        assert_eq!((v.time, v.temporality), (1_000_000, Some("CUMULATIVE")));

        let custom = Histogram {
            count_float: Some(3.0),
            schema: CUSTOM_BUCKETS,
            custom_values: vec![0.1, 1.0],
            positive_spans: vec![span(1, 2)],
            positive_counts: vec![2.0, 1.0],
            reset_hint: RESET_GAUGE,
            ..Histogram::default()
        };
        let (kind, v) = values(&custom, &[], false, &mut budget).unwrap();
        assert_eq!(kind, "histogram");
        assert_eq!(v.bucket_counts, Some(vec![0, 2, 1]));
        assert_eq!(v.explicit_bounds, Some(vec![0.1, 1.0]));
        assert_eq!(v.temporality, None);

        let unknown = Histogram {
            schema: 9,
            ..Histogram::default()
        };
        assert!(matches!(
            values(&unknown, &[], false, &mut budget),
            Err(r) if r.kind() != Kind::TooLarge
        ));
        let past = Histogram {
            schema: CUSTOM_BUCKETS,
            custom_values: vec![1.0],
            positive_spans: vec![span(1, 2)],
            positive_deltas: vec![1, 0],
            ..Histogram::default()
        };
        assert!(matches!(
            values(&past, &[], false, &mut budget),
            Err(r) if r.kind() != Kind::TooLarge
        ));
    }
}
