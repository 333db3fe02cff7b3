//! Quantiles: of a set of values (`quantile`, `quantile_over_time`) and of classic histogram
//! buckets (`histogram_quantile`), as Prometheus's `quantile.go` computes them.

/// The φ-quantile of values, interpolating between the two nearest ranks.
pub(crate) fn quantile(q: f64, mut values: Vec<f64>) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    // NaN sorts first, as in Prometheus's heap ordering.
    values.sort_by(|a, b| match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => a.total_cmp(b),
    });
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}

/// Two floats within `epsilon` of each other relative to their size (Prometheus's
/// `almost.Equal`).
pub(crate) fn almost_equal(a: f64, b: f64, epsilon: f64) -> bool {
    if a.is_nan() && b.is_nan() {
        return true;
    }
    if a == b {
        return true;
    }
    let abs_sum = a.abs() + b.abs();
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || abs_sum < f64::MIN_POSITIVE {
        return diff < epsilon * f64::MIN_POSITIVE;
    }
    diff / abs_sum.min(f64::MAX) < epsilon
}

/// The φ-quantile of classic buckets (upper bound, cumulative count), and whether their counts
/// had to be made monotonic. NaN without a `+Inf` bucket, fewer than two buckets, or no
/// observations.
pub(crate) fn bucket_quantile(q: f64, mut buckets: Vec<(f64, f64)>) -> (f64, bool) {
    if q.is_nan() {
        return (f64::NAN, false);
    }
    if q < 0.0 {
        return (f64::NEG_INFINITY, false);
    }
    if q > 1.0 {
        return (f64::INFINITY, false);
    }
    buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    if buckets.last().map(|b| b.0) != Some(f64::INFINITY) {
        return (f64::NAN, false);
    }
    // Buckets of the same bound (written twice) add up.
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for b in buckets {
        match merged.last_mut() {
            Some(last) if last.0 == b.0 => last.1 += b.1,
            _ => merged.push(b),
        }
    }
    let mut buckets = merged;
    let mut forced = false;
    let mut prev = buckets[0].1;
    for b in buckets.iter_mut().skip(1) {
        let cur = b.1;
        if cur == prev {
            continue;
        }
        if almost_equal(prev, cur, 1e-12) {
            b.1 = prev;
            continue;
        }
        if cur < prev {
            b.1 = prev;
            forced = true;
            continue;
        }
        prev = cur;
    }
    if buckets.len() < 2 {
        return (f64::NAN, forced);
    }
    let observations = buckets[buckets.len() - 1].1;
    if observations == 0.0 {
        return (f64::NAN, forced);
    }
    let mut rank = q * observations;
    let b = buckets[..buckets.len() - 1].partition_point(|b| b.1 < rank);
    if b == buckets.len() - 1 {
        return (buckets[buckets.len() - 2].0, forced);
    }
    if b == 0 && buckets[0].0 <= 0.0 {
        return (buckets[0].0, forced);
    }
    let (mut start, end, mut count) = (0.0, buckets[b].0, buckets[b].1);
    if b > 0 {
        start = buckets[b - 1].0;
        count -= buckets[b - 1].1;
        rank -= buckets[b - 1].1;
    }
    (start + (end - start) * (rank / count), forced)
}
