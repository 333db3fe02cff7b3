//! Arithmetic on native histograms: scaling, adding and subtracting (bringing schemas and
//! zero buckets together first), compaction, and counter-reset detection.
//!
//! Two histograms of different resolution are added at the coarser schema, since a bucket
//! of a finer schema falls entirely into one bucket of a coarser one, never the reverse. Two
//! zero buckets of different width are brought to the wider one, widened further while its
//! edge would cut a populated bucket in two: buckets below the edge move into the zero
//! bucket, and the buckets of the other operand below it are then left out (their counts are
//! already in the zero count it contributes).

use super::{CounterResetHint, FloatHistogram, exponential_bound};

/// Why two histograms cannot be added or subtracted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incompatible {
    /// One has exponential buckets, the other custom ones.
    Schema,
    /// Both have custom buckets, with different bounds.
    Bounds,
}

/// Add `count` to bucket `index`, inserting it where missing.
fn add_into(target: &mut Vec<(i32, f64)>, index: i32, count: f64) {
    match target.binary_search_by_key(&index, |b| b.0) {
        Ok(i) => target[i].1 += count,
        Err(i) => target.insert(i, (index, count)),
    }
}

/// The index at schema `to` of the bucket that bucket `index` at schema `from` (finer)
/// falls into: bucket i covers (2^((i-1)/2^s), 2^(i/2^s)], so halving the resolution maps
/// it to ceil(i/2).
fn reduce_index(index: i32, from: i32, to: i32) -> i32 {
    ((index - 1) >> (from - to)) + 1
}

/// Buckets merged into a coarser schema (every bucket kept, empty ones too).
fn reduce_buckets(buckets: &[(i32, f64)], from: i32, to: i32) -> Vec<(i32, f64)> {
    let mut out: Vec<(i32, f64)> = Vec::with_capacity(buckets.len());
    for &(i, c) in buckets {
        let target = reduce_index(i, from, to);
        match out.last_mut() {
            Some(last) if last.0 == target => last.1 += c,
            _ => out.push((target, c)),
        }
    }
    out
}

/// `buckets` without its leading ones whose upper bound is within `threshold` (those the
/// zero bucket already counts). Custom buckets have no zero bucket: nothing is skipped.
fn above_zero_bucket(buckets: &[(i32, f64)], schema: i32, threshold: f64) -> &[(i32, f64)] {
    if schema == super::CUSTOM_BUCKETS_SCHEMA {
        return buckets;
    }
    let skip = buckets
        .iter()
        .take_while(|(i, _)| exponential_bound(*i, schema) <= threshold)
        .count();
    &buckets[skip..]
}

impl FloatHistogram {
    /// Every count and the sum times `factor`.
    pub fn scaled(&self, factor: f64) -> FloatHistogram {
        let mut h = self.clone();
        h.count *= factor;
        h.sum *= factor;
        h.zero_count *= factor;
        for b in h.positive.iter_mut().chain(h.negative.iter_mut()) {
            b.1 *= factor;
        }
        h
    }

    /// Every count and the sum divided by `d`. Dividing by zero leaves count, sum and zero
    /// count infinite (or NaN) and drops every other bucket, as Prometheus does: a histogram
    /// of infinitely many observations has no meaningful distribution over its buckets.
    pub fn divided(&self, d: f64) -> FloatHistogram {
        let mut h = self.clone();
        h.count /= d;
        h.sum /= d;
        h.zero_count /= d;
        if d == 0.0 {
            h.positive.clear();
            h.negative.clear();
            return h;
        }
        for b in h.positive.iter_mut().chain(h.negative.iter_mut()) {
            b.1 /= d;
        }
        h
    }

    /// The same histogram at a coarser schema (unchanged when `schema` is not coarser, or
    /// the buckets are custom).
    pub fn to_schema(&self, schema: i32) -> FloatHistogram {
        if self.uses_custom_buckets() || schema >= self.schema {
            return self.clone();
        }
        let mut h = self.clone();
        h.positive = reduce_buckets(&self.positive, self.schema, schema);
        h.negative = reduce_buckets(&self.negative, self.schema, schema);
        h.schema = schema;
        h
    }

    /// What the zero count would be with a zero bucket `threshold` wide (at least the
    /// current width), and the width it takes: when the edge falls inside a populated
    /// bucket, the zero bucket grows to take that whole bucket, and the other side is looked
    /// at again with the new width.
    fn zero_count_at(&self, mut threshold: f64) -> (f64, f64) {
        if threshold == self.zero_threshold {
            return (self.zero_count, threshold);
        }
        loop {
            let (positive, t) = self.count_within(&self.positive, threshold);
            threshold = t;
            let (negative, t) = self.count_within(&self.negative, threshold);
            if t == threshold {
                return (self.zero_count + positive + negative, threshold);
            }
            // Widened on the negative side: the positive side is to be counted again.
            threshold = t;
        }
    }

    /// The count of one side's buckets below `threshold`, and the threshold, moved to the
    /// upper bound of a populated bucket it cuts.
    fn count_within(&self, side: &[(i32, f64)], threshold: f64) -> (f64, f64) {
        let mut count = 0.0;
        for &(i, c) in side {
            if self.bound(i - 1) >= threshold {
                break;
            }
            count += c;
            let upper = self.bound(i);
            if upper > threshold {
                return (count, if c != 0.0 { upper } else { threshold });
            }
        }
        (count, threshold)
    }

    /// Remove the buckets inside the zero bucket (their counts already moved into it), and
    /// with them every empty bucket.
    fn trim_buckets_in_zero_bucket(&mut self) {
        let t = self.zero_threshold;
        let schema = self.schema;
        for side in [&mut self.positive, &mut self.negative] {
            let inside = side
                .iter()
                .take_while(|(i, _)| exponential_bound(i - 1, schema) < t)
                .count();
            side.drain(..inside);
            side.retain(|b| b.1 != 0.0);
        }
    }

    /// Widen this histogram's zero bucket and `other`'s (virtually) until they are equal;
    /// returns the zero count `other` would have.
    fn reconcile_zero_buckets(&mut self, other: &FloatHistogram) -> f64 {
        let (mut other_count, mut other_threshold) = (other.zero_count, other.zero_threshold);
        while other_threshold != self.zero_threshold {
            if self.zero_threshold > other_threshold {
                (other_count, other_threshold) = other.zero_count_at(self.zero_threshold);
            }
            if other_threshold > self.zero_threshold {
                (self.zero_count, self.zero_threshold) = self.zero_count_at(other_threshold);
                self.trim_buckets_in_zero_bucket();
            }
        }
        other_count
    }

    fn combine(&self, other: &FloatHistogram, sign: f64) -> Result<FloatHistogram, Incompatible> {
        if self.uses_custom_buckets() != other.uses_custom_buckets() {
            return Err(Incompatible::Schema);
        }
        if self.uses_custom_buckets() && !same_bounds(&self.custom_values, &other.custom_values) {
            return Err(Incompatible::Bounds);
        }
        let mut h = self.clone();
        if !h.uses_custom_buckets() {
            let other_zero = h.reconcile_zero_buckets(other);
            h.zero_count += sign * other_zero;
        }
        h.count += sign * other.count;
        h.sum += sign * other.sum;
        let (mut positive, mut negative) = (other.positive.clone(), other.negative.clone());
        if !h.uses_custom_buckets() {
            if other.schema < h.schema {
                h = h.to_schema(other.schema);
            } else if other.schema > h.schema {
                positive = reduce_buckets(&positive, other.schema, h.schema);
                negative = reduce_buckets(&negative, other.schema, h.schema);
            }
        }
        for (mine, theirs) in [(&mut h.positive, &positive), (&mut h.negative, &negative)] {
            for &(i, c) in above_zero_bucket(theirs, h.schema, h.zero_threshold) {
                add_into(mine, i, sign * c);
            }
        }
        Ok(h)
    }

    /// The sum of two histograms. The hint says gauge when either is one, unknown when
    /// they disagree otherwise.
    pub fn add(&self, other: &FloatHistogram) -> Result<FloatHistogram, Incompatible> {
        use CounterResetHint::{Gauge, Unknown};
        let mut h = self.combine(other, 1.0)?;
        h.counter_reset_hint = match (self.counter_reset_hint, other.counter_reset_hint) {
            (a, b) if a == b => a,
            (Gauge, _) | (_, Gauge) => Gauge,
            _ => Unknown,
        };
        Ok(h)
    }

    /// The mean of `n` histograms, this being the mean of the first `n - 1` and `h` the
    /// `n`-th: moved by (h - mean) / n, which stays finite where the sum would overflow.
    pub fn add_to_mean(
        &self,
        h: &FloatHistogram,
        n: usize,
    ) -> Result<FloatHistogram, Incompatible> {
        let n = n as f64;
        let step = h.divided(n).sub(&self.divided(n))?;
        self.add(&step)
    }

    /// The difference of two histograms (the hint stays this one's).
    pub fn sub(&self, other: &FloatHistogram) -> Result<FloatHistogram, Incompatible> {
        self.combine(other, -1.0)
    }

    /// The same data (what `==` between histograms asks): layout and every count bit for
    /// bit; the counter-reset hint does not matter.
    pub fn equals(&self, other: &FloatHistogram) -> bool {
        self.schema == other.schema
            && self.count.to_bits() == other.count.to_bits()
            && self.sum.to_bits() == other.sum.to_bits()
            && (!self.uses_custom_buckets()
                || same_bounds(&self.custom_values, &other.custom_values))
            && self.zero_threshold == other.zero_threshold
            && self.zero_count.to_bits() == other.zero_count.to_bits()
            && same_buckets(&self.negative, &other.negative)
            && same_buckets(&self.positive, &other.positive)
    }

    /// Without buckets of zero count.
    pub fn compacted(&self) -> FloatHistogram {
        let mut h = self.clone();
        h.positive.retain(|b| b.1 != 0.0);
        h.negative.retain(|b| b.1 != 0.0);
        h
    }

    /// Whether this histogram, coming after `prev`, shows a counter reset: the hint says
    /// so, or a count went down (buckets compared at this one's schema and zero bucket), or
    /// the layout changed in a way only a reset explains (finer schema, narrower zero
    /// bucket, other custom bounds, a zero bucket edge now inside a populated bucket).
    pub fn detect_reset(&self, prev: &FloatHistogram) -> bool {
        match self.counter_reset_hint {
            CounterResetHint::CounterReset => return true,
            CounterResetHint::NotCounterReset => return false,
            _ => {}
        }
        if self.count < prev.count
            || self.uses_custom_buckets() != prev.uses_custom_buckets()
            || (self.uses_custom_buckets()
                && !same_bounds(&self.custom_values, &prev.custom_values))
            || self.schema > prev.schema
            || self.zero_threshold < prev.zero_threshold
        {
            return true;
        }
        let (prev_zero, threshold) = prev.zero_count_at(self.zero_threshold);
        if threshold != self.zero_threshold || self.zero_count < prev_zero {
            return true;
        }
        let p = prev.to_schema(self.schema);
        let decreased = |cur: &[(i32, f64)], old: &[(i32, f64)]| {
            let cur = above_zero_bucket(cur, self.schema, self.zero_threshold);
            let old = above_zero_bucket(old, self.schema, self.zero_threshold);
            old.iter()
                .any(|&(i, c)| match cur.binary_search_by_key(&i, |b| b.0) {
                    Ok(j) => cur[j].1 < c,
                    Err(_) => c != 0.0,
                })
        };
        decreased(&self.positive, &p.positive) || decreased(&self.negative, &p.negative)
    }
}

/// Floats identical bit for bit (how Prometheus compares custom bounds and, in `==`,
/// histograms: as data, not as numbers).
fn same_bounds(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn same_buckets(a: &[(i32, f64)], b: &[(i32, f64)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.0 == y.0 && x.1.to_bits() == y.1.to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(schema: i32, zero: (f64, f64), pos: &[(i32, f64)]) -> FloatHistogram {
        let count = zero.1 + pos.iter().map(|b| b.1).sum::<f64>();
        FloatHistogram {
            schema,
            zero_threshold: zero.0,
            zero_count: zero.1,
            count,
            sum: count,
            positive: pos.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn schema_reduction_merges_pairs_of_buckets() {
        // Schema 1 buckets -1..=3 are (2^-1, 2^-0.5], (2^-0.5, 1], (1, 2^0.5], (2^0.5, 2],
        // (2, 2^1.5]; at schema 0 they fall into (0.5, 1], (0.5, 1], (1, 2], (1, 2], (2, 4].
        let h = exp(
            1,
            (0.0, 0.0),
            &[(-1, 1.0), (0, 2.0), (1, 3.0), (2, 4.0), (3, 5.0)],
        );
        let r = h.to_schema(0);
        assert_eq!(r.positive, vec![(0, 3.0), (1, 7.0), (2, 5.0)]);
        assert_eq!(r.to_schema(-1).positive, vec![(0, 3.0), (1, 12.0)]);
    }

    #[test]
    fn adding_at_different_schemas_uses_the_coarser() {
        let a = exp(1, (0.0, 0.0), &[(1, 1.0), (2, 1.0)]);
        let b = exp(0, (0.0, 0.0), &[(1, 2.0)]);
        let s = a.add(&b).unwrap();
        assert_eq!(s.schema, 0);
        assert_eq!(s.positive, vec![(1, 4.0)]);
        assert_eq!(s.count, 4.0);
    }

    #[test]
    fn zero_bucket_widens_to_the_edge_of_a_populated_bucket() {
        // A zero bucket 0.75 wide cuts (0.5, 1] in two: it grows to 1 and takes the bucket.
        let h = exp(0, (0.25, 1.0), &[(-1, 2.0), (0, 3.0), (1, 4.0)]);
        assert_eq!(h.zero_count_at(0.75), (6.0, 1.0));
        // An empty bucket does not make it grow.
        let h = exp(0, (0.25, 1.0), &[(-1, 2.0), (0, 0.0), (1, 4.0)]);
        assert_eq!(h.zero_count_at(0.75), (3.0, 0.75));
    }

    #[test]
    fn adding_reconciles_zero_buckets() {
        let wide = exp(0, (1.0, 1.0), &[(1, 1.0)]);
        let narrow = exp(0, (0.25, 1.0), &[(-1, 2.0), (0, 3.0), (1, 4.0)]);
        for s in [wide.add(&narrow).unwrap(), narrow.add(&wide).unwrap()] {
            assert_eq!(s.zero_threshold, 1.0);
            assert_eq!(s.zero_count, 7.0);
            assert_eq!(s.compacted().positive, vec![(1, 5.0)]);
            assert_eq!(s.count, 12.0);
        }
    }

    #[test]
    fn dividing_by_zero_drops_the_buckets() {
        let h = exp(0, (0.001, 1.0), &[(1, 1.0)]).divided(0.0);
        assert!(h.positive.is_empty());
        assert_eq!(h.zero_count, f64::INFINITY);
        assert_eq!(h.count, f64::INFINITY);
    }

    #[test]
    fn reset_seen_in_one_bucket_only() {
        let a = exp(0, (0.0, 0.0), &[(0, 1.0), (1, 2.0), (2, 1.0)]);
        let b = exp(0, (0.0, 0.0), &[(0, 1.0), (1, 1.0), (2, 3.0)]);
        assert!(b.detect_reset(&a));
        assert!(!a.detect_reset(&a));
        // A coarser schema is no reset when the merged buckets grew.
        let fine = exp(1, (0.0, 0.0), &[(1, 1.0), (2, 1.0)]);
        let coarse = exp(0, (0.0, 0.0), &[(1, 2.0)]);
        assert!(!coarse.detect_reset(&fine));
        assert!(fine.detect_reset(&coarse));
    }

    #[test]
    fn incompatible_custom_bounds() {
        let mut a = exp(CUSTOM_BUCKETS, (0.0, 0.0), &[(0, 1.0)]);
        a.custom_values = vec![1.0];
        let mut b = a.clone();
        b.custom_values = vec![2.0];
        assert_eq!(a.add(&b), Err(Incompatible::Bounds));
        assert_eq!(a.add(&exp(0, (0.0, 0.0), &[])), Err(Incompatible::Schema));
        assert!(a.add(&a).is_ok());
    }

    const CUSTOM_BUCKETS: i32 = super::super::CUSTOM_BUCKETS_SCHEMA;
}
