//! Building Prometheus metric families (the `prometheus` crate's data model, which
//! its text encoder writes out) and keeping exported counters monotonic.

use crate::latency::Latency;
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use std::collections::HashMap;

/// A series' labels as (name, value) pairs, in export order.
pub type Labels<'a> = &'a [(&'static str, &'a str)];

/// The highest value exported so far for every counter series (and histogram
/// bucket and sum) of one dataplane process. The dataplane's counters are
/// cumulative, but a few exported ones are derived from two reads (`get_misses` =
/// gets - hits) and could dip for a moment: a counter never goes backwards as
/// exported. [`Monotonic::reset`] when talking to a new dataplane process, whose
/// counters start again from 0 (Prometheus sees a counter reset, as it should).
#[derive(Debug, Default)]
pub struct Monotonic {
    high: HashMap<String, u64>,
}

impl Monotonic {
    /// Forgets every high-water mark (a new dataplane process).
    pub fn reset(&mut self) {
        self.high.clear();
    }

    /// `v`, or the highest value exported before for `key` if that is larger.
    fn clamp(&mut self, key: String, v: u64) -> u64 {
        let h = self.high.entry(key).or_insert(0);
        *h = (*h).max(v);
        *h
    }
}

/// The identity of a series: its name and label values.
fn series_key(name: &str, labels: Labels<'_>) -> String {
    let mut k = name.to_string();
    for (n, v) in labels {
        k.push('\u{0}');
        k.push_str(n);
        k.push('=');
        k.push_str(v);
    }
    k
}

fn label_pairs(labels: Labels<'_>) -> Vec<LabelPair> {
    labels
        .iter()
        .map(|(n, v)| {
            let mut p = LabelPair::default();
            p.set_name((*n).to_string());
            p.set_value((*v).to_string());
            p
        })
        .collect()
}

/// The metric families of one scrape, in order of first use; a family gets the
/// series of every worker.
pub struct Families<'m> {
    list: Vec<MetricFamily>,
    index: HashMap<&'static str, usize>,
    mono: &'m mut Monotonic,
}

impl<'m> Families<'m> {
    /// No families yet; counters are kept monotonic through `mono`.
    pub fn new(mono: &'m mut Monotonic) -> Families<'m> {
        Families {
            list: Vec::new(),
            index: HashMap::new(),
            mono,
        }
    }

    fn push(&mut self, name: &'static str, help: &'static str, t: MetricType, m: Metric) {
        let i = *self.index.entry(name).or_insert_with(|| {
            let mut f = MetricFamily::default();
            f.set_name(name.to_string());
            f.set_help(help.to_string());
            f.set_field_type(t);
            self.list.push(f);
            self.list.len() - 1
        });
        self.list[i].mut_metric().push(m);
    }

    /// A counter series (`name` ends in `_total`).
    pub fn counter(&mut self, name: &'static str, help: &'static str, labels: Labels<'_>, v: u64) {
        let v = self.mono.clamp(series_key(name, labels), v);
        let mut c = Counter::default();
        c.set_value(v as f64);
        let mut m = Metric::from_label(label_pairs(labels));
        m.set_counter(c);
        self.push(name, help, MetricType::COUNTER, m);
    }

    /// A gauge series.
    pub fn gauge(&mut self, name: &'static str, help: &'static str, labels: Labels<'_>, v: f64) {
        let mut g = Gauge::default();
        g.set_value(v);
        let mut m = Metric::from_label(label_pairs(labels));
        m.set_gauge(g);
        self.push(name, help, MetricType::GAUGE, m);
    }

    /// A histogram series in seconds from a dataplane latency histogram in ns: a
    /// bucket per finite bound (`le` = bound / 1e9, cumulative counts), `+Inf` and
    /// `_count` = all samples, `_sum` = `sum_ns` / 1e9. Every bucket count and the
    /// sum are kept monotonic, so the cumulative buckets are too.
    pub fn histogram_seconds(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: Labels<'_>,
        h: &Latency,
    ) {
        let key = series_key(name, labels);
        let mut cumulative = 0u64;
        let mut buckets = Vec::with_capacity(h.le_ns.len());
        // A dashboard needs a few log-spaced buckets, not the dataplane's four per
        // octave: only the bounds that are powers of two go out (exact: the counts
        // are cumulative), all of them if none is. `ctlplane stats` keeps the rest.
        let any_pow2 = h.le_ns.iter().any(|le| le.is_power_of_two());
        for (i, &c) in h.counts.iter().enumerate() {
            let c = self.mono.clamp(format!("{key}\u{0}#{i}"), c);
            cumulative = cumulative.saturating_add(c);
            match h.le_ns.get(i) {
                Some(&le) if le.is_power_of_two() || !any_pow2 => {
                    let mut b = Bucket::default();
                    b.set_upper_bound(le as f64 / 1e9);
                    b.set_cumulative_count(cumulative);
                    buckets.push(b);
                }
                _ => {}
            }
        }
        let sum_ns = self.mono.clamp(format!("{key}\u{0}sum"), h.sum_ns);
        let mut hist = Histogram::default();
        hist.set_bucket(buckets);
        hist.set_sample_count(cumulative);
        hist.set_sample_sum(sum_ns as f64 / 1e9);
        let mut m = Metric::from_label(label_pairs(labels));
        m.set_histogram(hist);
        self.push(name, help, MetricType::HISTOGRAM, m);
    }

    /// The families, each with at least one series.
    pub fn finish(self) -> Vec<MetricFamily> {
        self.list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_never_go_backwards_until_reset() {
        let mut mono = Monotonic::default();
        let value = |mono: &mut Monotonic, v: u64| {
            let mut f = Families::new(mono);
            f.counter("kvd_x_total", "x", &[("worker", "0")], v);
            f.finish()[0].get_metric()[0].get_counter().get_value()
        };
        assert_eq!(value(&mut mono, 10), 10.0);
        assert_eq!(value(&mut mono, 9), 10.0);
        assert_eq!(value(&mut mono, 12), 12.0);
        mono.reset();
        assert_eq!(value(&mut mono, 3), 3.0);
    }

    #[test]
    fn one_family_per_name_in_first_use_order() {
        let mut mono = Monotonic::default();
        let mut f = Families::new(&mut mono);
        f.gauge("kvd_a", "a", &[("worker", "0")], 1.0);
        f.counter("kvd_b_total", "b", &[("worker", "0")], 1);
        f.gauge("kvd_a", "a", &[("worker", "1")], 2.0);
        let fams = f.finish();
        let names: Vec<&str> = fams.iter().map(|f| f.name()).collect();
        assert_eq!(names, ["kvd_a", "kvd_b_total"]);
        assert_eq!(fams[0].get_metric().len(), 2);
        assert_eq!(fams[0].get_field_type(), MetricType::GAUGE);
        assert_eq!(fams[1].get_field_type(), MetricType::COUNTER);
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_in_seconds() {
        let mut mono = Monotonic::default();
        let mut f = Families::new(&mut mono);
        let h = Latency {
            sample_every: 64,
            sampled: 6,
            sum_ns: 2_000,
            le_ns: vec![256, 512],
            counts: vec![1, 2, 3],
        };
        f.histogram_seconds("kvd_h_seconds", "h", &[("worker", "0")], &h);
        let fams = f.finish();
        let hist = fams[0].get_metric()[0].get_histogram();
        let b: Vec<(f64, u64)> = hist
            .get_bucket()
            .iter()
            .map(|b| (b.upper_bound(), b.cumulative_count()))
            .collect();
        assert_eq!(b, [(256e-9, 1), (512e-9, 3)]);
        assert_eq!(hist.get_sample_count(), 6);
        assert!((hist.get_sample_sum() - 2e-6).abs() < 1e-15);
    }
}
