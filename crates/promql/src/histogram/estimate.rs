//! What a histogram's buckets estimate about its observations: quantiles, the fraction
//! between two values, the variance.
//!
//! Within an exponential bucket observations are assumed spread evenly on a logarithmic
//! scale (as if they filled the buckets of a finer schema evenly), within a custom bucket or
//! the zero bucket evenly on a linear one. The zero bucket is taken to straddle zero unless
//! the histogram has buckets on one side only; then zero is its bound on the other side.

use super::{Bucket, FloatHistogram};

impl FloatHistogram {
    /// `bucket`, a zero bucket, cut at zero when all other buckets are on one side of it.
    fn zero_bucket_on_one_side(&self, mut bucket: Bucket) -> Bucket {
        if self.negative.is_empty() && !self.positive.is_empty() {
            bucket.lower = 0.0;
        } else if self.positive.is_empty() && !self.negative.is_empty() {
            bucket.upper = 0.0;
        }
        bucket
    }

    /// The estimated φ-quantile of the observations.
    ///
    /// Buckets are walked from the lower end for q < 0.5 and from the upper end otherwise, so
    /// that the rank is counted from the nearer end (less rounding). A histogram whose sum is
    /// NaN holds NaN observations, counted in `count` but in no bucket: it is always walked
    /// from the lower end, and a rank beyond the buckets answers the highest bound.
    pub fn quantile(&self, q: f64) -> f64 {
        if q < 0.0 {
            return f64::NEG_INFINITY;
        }
        if q > 1.0 {
            return f64::INFINITY;
        }
        if self.count == 0.0 || q.is_nan() {
            return f64::NAN;
        }
        let upward = self.sum.is_nan() || q < 0.5;
        let mut buckets = self.all_buckets();
        let rank = if upward {
            q * self.count
        } else {
            buckets.reverse();
            (1.0 - q) * self.count
        };
        // The bucket the rank falls into, and the count up to and including it.
        let mut bucket = Bucket::default();
        let mut seen = 0.0;
        for b in buckets {
            bucket = b;
            if bucket.count == 0.0 {
                continue;
            }
            seen += bucket.count;
            if seen >= rank {
                break;
            }
        }
        if self.uses_custom_buckets() {
            if bucket.lower == f64::NEG_INFINITY {
                // The first bucket: below zero only when its bound says so, else from zero.
                if bucket.upper <= 0.0 {
                    return bucket.upper;
                }
                bucket.lower = 0.0;
            } else if bucket.upper == f64::INFINITY {
                return bucket.lower;
            }
        } else if bucket.lower < 0.0 && bucket.upper > 0.0 {
            bucket = self.zero_bucket_on_one_side(bucket);
        }
        let seen = seen.min(self.count);
        if seen < rank {
            return bucket.upper;
        }
        // How far into the bucket, from its lower bound.
        let within = if upward {
            rank - (seen - bucket.count)
        } else {
            seen - rank
        };
        let fraction = within / bucket.count;
        if self.uses_custom_buckets() || (bucket.lower <= 0.0 && bucket.upper >= 0.0) {
            return bucket.lower + (bucket.upper - bucket.lower) * fraction;
        }
        let (log_lower, log_upper) = (bucket.lower.abs().log2(), bucket.upper.abs().log2());
        if bucket.lower > 0.0 {
            (log_lower + (log_upper - log_lower) * fraction).exp2()
        } else {
            // Mirrored: the bound nearer zero is the upper one.
            -(log_upper + (log_lower - log_upper) * (1.0 - fraction)).exp2()
        }
    }

    /// The estimated fraction of observations between `lower` and `upper`.
    pub fn fraction(&self, lower: f64, upper: f64) -> f64 {
        if self.count == 0.0 || lower.is_nan() || upper.is_nan() {
            return f64::NAN;
        }
        if lower >= upper {
            return 0.0;
        }
        // The rank (count of observations below) of `lower` and of `upper`, once found.
        let (mut lower_rank, mut upper_rank) = (None, None);
        let mut rank = 0.0;
        for b in self.all_buckets() {
            let zero_bucket = b.lower <= 0.0 && b.upper >= 0.0;
            let b = if zero_bucket {
                self.zero_bucket_on_one_side(b)
            } else {
                b
            };
            let linear = self.uses_custom_buckets() || zero_bucket;
            // The rank of `v`, a value inside this bucket.
            let rank_of = |v: f64| {
                let fraction = if linear {
                    (v - b.lower) / (b.upper - b.lower)
                } else {
                    let (log_lower, log_upper, log_v) =
                        (b.lower.abs().log2(), b.upper.abs().log2(), v.abs().log2());
                    if v > 0.0 {
                        (log_v - log_lower) / (log_upper - log_lower)
                    } else {
                        1.0 - (log_v - log_upper) / (log_lower - log_upper)
                    }
                };
                rank + b.count * fraction
            };
            for (value, found) in [(lower, &mut lower_rank), (upper, &mut upper_rank)] {
                if found.is_none() && b.lower >= value {
                    *found = Some(rank);
                }
            }
            if lower_rank.is_some() && upper_rank.is_some() {
                break;
            }
            for (value, found) in [(lower, &mut lower_rank), (upper, &mut upper_rank)] {
                if found.is_none() && b.lower < value && b.upper > value {
                    *found = Some(rank_of(value));
                }
            }
            if lower_rank.is_some() && upper_rank.is_some() {
                break;
            }
            rank += b.count;
        }
        let cap = |r: Option<f64>| match r {
            Some(r) if r <= self.count => r,
            _ => self.count,
        };
        (cap(upper_rank) - cap(lower_rank)) / self.count
    }

    /// The variance of the observations, each taken at its bucket's geometric middle (zero
    /// for a bucket that reaches across zero).
    pub fn variance(&self) -> f64 {
        let mean = self.sum / self.count;
        let (mut v, mut c) = (0.0, 0.0);
        for b in self.all_buckets() {
            if b.count == 0.0 {
                continue;
            }
            let val = if b.lower <= 0.0 && 0.0 <= b.upper {
                0.0
            } else {
                let m = (b.upper * b.lower).sqrt();
                if b.upper < 0.0 { -m } else { m }
            };
            let d = val - mean;
            (v, c) = crate::functions::kahan_inc(b.count * d * d, v, c);
        }
        (v + c) / self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> FloatHistogram {
        crate::testscript::parse_histogram(s).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
    }

    #[test]
    fn quantile_over_negative_buckets_mirrors_the_interpolation() {
        // Negative buckets (-1,-0.5], (-2,-1], (-4,-2], (-8,-4], (-16,-8] and a zero bucket.
        let h =
            parse("schema:0 count:12 sum:100 z_bucket:2 z_bucket_w:0.001 n_buckets:[2 3 0 1 4]");
        assert_eq!(h.quantile(0.0), -16.0);
        assert_eq!(h.quantile(1.0), 0.0);
        assert!(close(h.quantile(0.5), -1.5874010519681996));
        assert!(close(h.quantile(0.1), -12.996038341699768));
        // In the zero bucket, linear between its lower edge and zero (no positive buckets).
        assert!(close(h.quantile(0.9), -0.0006));
    }

    #[test]
    fn quantile_of_custom_buckets_starts_at_zero() {
        let h = parse("schema:-53 count:12 sum:1 custom_values:[0.1 0.2 1] buckets:[5 2 4 1]");
        assert_eq!(h.quantile(0.0), 0.0);
        assert!(close(h.quantile(0.2), 0.048));
        assert_eq!(h.quantile(1.0), 1.0);
        let h = parse("schema:-53 count:3 sum:1 custom_values:[-0.2 -0.1 0.3] buckets:[1 1 0 1]");
        assert_eq!(h.quantile(0.0), -0.2);
    }

    #[test]
    fn fraction_with_a_zero_bucket_on_one_side() {
        // Only positive buckets: the zero bucket counts as [0, 0.001].
        let h = parse("schema:0 count:12 sum:100 z_bucket:2 z_bucket_w:0.001 buckets:[2 3 0 1 4]");
        assert_eq!(h.fraction(0.0, f64::INFINITY), 1.0);
        assert_eq!(h.fraction(f64::NEG_INFINITY, 0.0), 0.0);
        assert!(close(h.fraction(0.0, 0.001), 2.0 / 12.0));
        assert!(close(h.fraction(0.0, 0.0005), 1.0 / 12.0));
    }
}
