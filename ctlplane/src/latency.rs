//! The dataplane's service-latency histograms (the `latency` dicts of `/kvd/stats`)
//! and percentiles read from them.
//!
//! A `latency` dict holds `sample_every` (1 of every N request packets is timed; 0:
//! sampling off), `sampled`, `sum_ns`, `le_ns` (K increasing finite upper bounds in
//! ns) and `counts` (K + 1 non-cumulative counts: `counts[i]` is the samples `v` with
//! `le_ns[i-1] < v <= le_ns[i]`, `counts[K]` those above `le_ns[K-1]`).

use serde_json::Value;
use std::fmt;

/// One `latency` dict.
#[derive(Clone, Debug, PartialEq)]
pub struct Latency {
    /// One request packet of this many is timed (0: sampling off).
    pub sample_every: u64,
    /// Samples taken, as the dataplane reports it (equals the sum of `counts` when
    /// read while no traffic runs).
    pub sampled: u64,
    /// Sum of the sampled times in ns.
    pub sum_ns: u64,
    /// The finite bucket upper bounds in ns, strictly increasing.
    pub le_ns: Vec<u64>,
    /// `le_ns.len() + 1` non-cumulative counts; the last is the overflow bucket.
    pub counts: Vec<u64>,
}

/// Where a percentile lies, at bucket resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// At most this many ns: the upper bound of the bucket holding it.
    AtMost(u64),
    /// Above the last finite bound (ns): it is in the overflow bucket.
    Above(u64),
}

fn field(v: &Value, k: &str) -> Result<u64, String> {
    v.get(k)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("latency: `{k}` missing or not an unsigned integer"))
}

fn array(v: &Value, k: &str) -> Result<Vec<u64>, String> {
    let a = v
        .get(k)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("latency: `{k}` missing or not an array"))?;
    a.iter()
        .map(|x| {
            x.as_u64()
                .ok_or_else(|| format!("latency: `{k}` holds {x}, not an unsigned integer"))
        })
        .collect()
}

impl Latency {
    /// Reads a `latency` dict. A dict that breaks the format (missing fields, bounds
    /// not increasing, a count array of the wrong length) is an error.
    pub fn from_json(v: &Value) -> Result<Latency, String> {
        let l = Latency {
            sample_every: field(v, "sample_every")?,
            sampled: field(v, "sampled")?,
            sum_ns: field(v, "sum_ns")?,
            le_ns: array(v, "le_ns")?,
            counts: array(v, "counts")?,
        };
        if l.counts.len() != l.le_ns.len() + 1 {
            return Err(format!(
                "latency: {} counts for {} bounds (want bounds + 1)",
                l.counts.len(),
                l.le_ns.len()
            ));
        }
        if l.le_ns.windows(2).any(|w| w[0] >= w[1]) {
            return Err("latency: `le_ns` is not strictly increasing".into());
        }
        Ok(l)
    }

    /// The `latency` dict of one `/kvd/stats` column (`total` or a worker's), if it
    /// has one (a dataplane from before latency sampling has none).
    pub fn of_column(c: &Value) -> Option<Result<Latency, String>> {
        c.get("latency").map(Latency::from_json)
    }

    /// The samples in the histogram (the sum of `counts`).
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// The `q` quantile (0 < q <= 1; clamped) at bucket resolution: the upper bound
    /// of the bucket holding the sample of rank ceil(q * n), i.e. a value the true
    /// percentile does not exceed (or `Above` the last bound for the overflow
    /// bucket). `None` without samples.
    pub fn quantile(&self, q: f64) -> Option<Bound> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        // Integer rank in parts per million: exact for p50..p99.99, no float
        // rounding (0.999 * 1000 must give rank 999, not 1000).
        let ppm = (q.clamp(0.0, 1.0) * 1e6).round() as u128;
        let rank = ((n as u128 * ppm).div_ceil(1_000_000)).max(1) as u64;
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(c);
            if seen >= rank {
                return Some(match self.le_ns.get(i) {
                    Some(&le) => Bound::AtMost(le),
                    None => Bound::Above(self.le_ns.last().copied().unwrap_or(0)),
                });
            }
        }
        None // unreachable: the last bucket brings `seen` to n >= rank
    }
}

/// A duration in ns with a unit that keeps it short: `840ns`, `1.45us`, `12.3ms`.
pub fn human_ns(ns: u64) -> String {
    let x = ns as f64;
    match ns {
        0..=999 => format!("{ns}ns"),
        1_000..=999_999 => format!("{:.3}us", x / 1e3),
        1_000_000..=999_999_999 => format!("{:.3}ms", x / 1e6),
        _ => format!("{:.3}s", x / 1e9),
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::AtMost(ns) => write!(f, "<={}", human_ns(*ns)),
            Bound::Above(ns) => write!(f, ">{}", human_ns(*ns)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hist(le: &[u64], counts: &[u64]) -> Latency {
        Latency {
            sample_every: 64,
            sampled: counts.iter().sum(),
            sum_ns: 0,
            le_ns: le.to_vec(),
            counts: counts.to_vec(),
        }
    }

    #[test]
    fn empty_histogram_has_no_percentiles() {
        let h = hist(&[256, 304, 362], &[0, 0, 0, 0]);
        assert_eq!(h.count(), 0);
        assert_eq!(h.quantile(0.5), None);
        assert_eq!(h.quantile(1.0), None);
    }

    #[test]
    fn all_in_overflow() {
        let h = hist(&[256, 304, 362], &[0, 0, 0, 7]);
        for q in [0.0, 0.5, 0.99, 0.999, 1.0] {
            assert_eq!(h.quantile(q), Some(Bound::Above(362)), "q {q}");
        }
        assert_eq!(h.quantile(0.5).unwrap().to_string(), ">362ns");
    }

    #[test]
    fn percentile_is_the_upper_bound_of_the_bucket_holding_its_rank() {
        // 1000 samples: 500 <= 256, 400 in (256, 304], 90 in (304, 362], 10 above.
        let h = hist(&[256, 304, 362], &[500, 400, 90, 10]);
        assert_eq!(h.quantile(0.5), Some(Bound::AtMost(256))); // rank 500
        assert_eq!(h.quantile(0.501), Some(Bound::AtMost(304))); // rank 501
        assert_eq!(h.quantile(0.9), Some(Bound::AtMost(304))); // rank 900
        assert_eq!(h.quantile(0.99), Some(Bound::AtMost(362))); // rank 990
        assert_eq!(h.quantile(0.999), Some(Bound::Above(362))); // rank 999
                                                                // q 0 is the first sample; out-of-range q are clamped.
        assert_eq!(h.quantile(0.0), Some(Bound::AtMost(256)));
        assert_eq!(h.quantile(-1.0), Some(Bound::AtMost(256)));
        assert_eq!(h.quantile(2.0), Some(Bound::Above(362)));
    }

    #[test]
    fn exact_ranks_do_not_round_up() {
        // 0.999 * 1000 is 998.999... in binary floating point: rank must be 999.
        let mut counts = vec![0u64; 4];
        counts[0] = 999;
        counts[3] = 1;
        let h = hist(&[256, 304, 362], &counts);
        assert_eq!(h.quantile(0.999), Some(Bound::AtMost(256)));
        assert_eq!(h.quantile(1.0), Some(Bound::Above(362)));
        // One sample: every percentile is its bucket.
        let one = hist(&[256, 304, 362], &[0, 1, 0, 0]);
        assert_eq!(one.quantile(0.5), Some(Bound::AtMost(304)));
        assert_eq!(one.quantile(0.999), Some(Bound::AtMost(304)));
    }

    #[test]
    fn no_finite_bounds_is_all_overflow() {
        let h = hist(&[], &[3]);
        assert_eq!(h.quantile(0.5), Some(Bound::Above(0)));
    }

    #[test]
    fn parses_and_rejects() {
        let v = json!({"sample_every": 64, "sampled": 3, "sum_ns": 900,
                       "le_ns": [256, 304], "counts": [1, 2, 0]});
        let l = Latency::from_json(&v).unwrap();
        assert_eq!((l.sample_every, l.sampled, l.count()), (64, 3, 3));
        let col = json!({"rx_packets": 1, "latency": v});
        assert_eq!(Latency::of_column(&col), Some(Ok(l)));
        assert_eq!(Latency::of_column(&json!({"rx_packets": 1})), None);

        let bad = [
            json!({"sample_every": 64, "sampled": 3, "sum_ns": 900,
                   "le_ns": [256, 304], "counts": [1, 2]}),
            json!({"sample_every": 64, "sampled": 3, "sum_ns": 900,
                   "le_ns": [304, 256], "counts": [1, 2, 0]}),
            json!({"sample_every": 64, "sampled": 3, "sum_ns": 900,
                   "le_ns": [256, 304], "counts": [1, -2, 0]}),
            json!({"sample_every": 64, "sum_ns": 900,
                   "le_ns": [256, 304], "counts": [1, 2, 0]}),
            json!({"sample_every": 64, "sampled": 3, "sum_ns": 900,
                   "le_ns": "256", "counts": [1, 2, 0]}),
            json!(null),
        ];
        for b in bad {
            assert!(Latency::from_json(&b).is_err(), "{b}");
        }
    }

    #[test]
    fn human_units() {
        assert_eq!(human_ns(840), "840ns");
        assert_eq!(human_ns(1_450), "1.450us");
        assert_eq!(human_ns(12_300_000), "12.300ms");
        assert_eq!(human_ns(268_435_456), "268.435ms");
        assert_eq!(human_ns(2_000_000_000), "2.000s");
        assert_eq!(Bound::AtMost(1_450).to_string(), "<=1.450us");
    }
}
