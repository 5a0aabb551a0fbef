//! `ctlplane tune dispatch`: the DRAM load-dispatch model (KV-Direct §3.3.4,
//! Tables 5–6).
//!
//! The NIC has a small on-board DRAM next to the large host memory it reaches
//! over PCIe. A hash of the 64 B line address splits host memory into a
//! *cacheable* part, a fraction `l` of it (the **load dispatch ratio**), and
//! the rest. Accesses to the rest always go over PCIe. Accesses to the
//! cacheable part go to a cache of it held in NIC DRAM; misses also go over
//! PCIe. With `k = NIC DRAM size / KV memory size`, `h(l)` the hit rate of the
//! cache on the cacheable part, `B_nic` and `B_pcie` the random-access
//! throughputs of NIC DRAM and of PCIe, and `T` the memory accesses per
//! second, the two links carry
//!
//! ```text
//!   NIC DRAM:  l · T            (· (1 + (1 − h)) with --fill-write: a miss also writes the line in)
//!   PCIe:      (1 − l + l·(1 − h)) · T  =  (1 − l·h) · T
//! ```
//!
//! so the throughput is `T(l) = min(B_nic / l, B_pcie / (1 − l·h(l)))` and
//! the gain over PCIe only is `T(l) / B_pcie`. The optimal `l` balances the
//! two loads (the paper's condition `l / B_nic = (1 − l·h(l)) / B_pcie`),
//! or ends at a boundary. `l = k` is a fixed partition (everything cacheable
//! fits, `h = 1`); `l = 1` is a plain cache of all host memory.
//!
//! Hit rate, assuming the cache holds the most popular cacheable KVs and KVs
//! are equally sized (so memory fractions are key fractions); `n` keys:
//!
//! * `l <= k`: the cacheable part fits entirely, `h = 1`;
//! * uniform popularity: `h = k / l`;
//! * Zipf(θ): the cacheable part is a hash-chosen (so uniformly random)
//!   `l·n` of the keys; the cache holds `k·n` of them, the most popular
//!   cacheable ones, which are the cacheable keys among the global top
//!   `k·n / l` ranks. Hence `h = H(k·n / l, θ) / H(n, θ)` with
//!   `H(m, θ) = Σ_{i<=m} i^−θ`.
//!
//! Uniform has a closed form: `l* = min(k, D / (1 + D))` with `D = B_nic /
//! B_pcie`, gain `min(1 / (1 − k), 1 + D)`: beyond a partition, caching
//! uniform data buys nothing. Everything here is a model: no NIC DRAM exists
//! in the software appliance (see docs/TUNE.md for what is left out).

use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

/// Popularity of keys.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Skew {
    /// Every key equally likely.
    Uniform,
    /// Zipf with exponent `theta` (0.99 is YCSB's).
    Zipf {
        /// The exponent θ >= 0.
        theta: f64,
    },
}

/// Workload distribution named on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DistArg {
    /// Uniform key popularity.
    Uniform,
    /// Zipf key popularity (`--theta`).
    Zipf,
}

/// Arguments of `ctlplane tune dispatch`. Bandwidths are random 64 B access
/// throughputs in any one unit (GB/s by convention); only their ratio
/// matters to the optimal ratio, and the PCIe one scales the absolute
/// figure. Defaults are of the order of the paper's testbed: 4 GiB of NIC
/// DRAM at 12.8 GB/s, about 13 GB/s over two PCIe Gen3 x8 links.
#[derive(Args, Debug, Clone)]
pub struct DispatchArgs {
    /// NIC on-board DRAM usable as cache, GiB (0 = none).
    #[arg(long, default_value_t = 4.0)]
    pub nic_dram_gib: f64,
    /// NIC DRAM random-access throughput, GB/s.
    #[arg(long, default_value_t = 12.8)]
    pub nic_dram_gbps: f64,
    /// PCIe (host DRAM over PCIe) random-access throughput, GB/s.
    #[arg(long, default_value_t = 13.2)]
    pub pcie_gbps: f64,
    /// Total KV memory in host DRAM, GiB.
    #[arg(long, default_value_t = 64.0)]
    pub kv_mem_gib: f64,
    /// Key popularity.
    #[arg(long, value_enum, default_value_t = DistArg::Zipf)]
    pub dist: DistArg,
    /// Zipf exponent θ.
    #[arg(long, default_value_t = 0.99)]
    pub theta: f64,
    /// Number of keys (only matters for Zipf), e.g. 1e9.
    #[arg(long, default_value = "1e9")]
    pub keys: f64,
    /// Count a miss's line fill as a second NIC DRAM access.
    #[arg(long)]
    pub fill_write: bool,
    /// Rows of the printed l-sweep table (l = 0, 1/steps, ..., 1).
    #[arg(long, default_value_t = 10)]
    pub steps: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Exact sums up to this rank, Euler–Maclaurin beyond.
const EXACT_TERMS: usize = 1024;

/// The load-dispatch model (see the module documentation).
#[derive(Clone, Debug)]
pub struct Model {
    /// `k`: NIC DRAM size / KV memory size (>= 0).
    pub cache_fraction: f64,
    /// `D`: NIC DRAM throughput / PCIe throughput (>= 0).
    pub dram_over_pcie: f64,
    /// Key popularity.
    pub skew: Skew,
    /// Number of keys `n` (>= 1).
    pub keys: f64,
    /// A miss also writes the line into NIC DRAM.
    pub fill_write: bool,
    /// `prefix[i] = Σ_{j=1..=i} j^−θ` for `i < EXACT_TERMS` (Zipf only).
    prefix: Vec<f64>,
}

/// One evaluated dispatch ratio.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Point {
    /// Load dispatch ratio `l`.
    pub ratio: f64,
    /// Hit rate of the NIC DRAM cache on the cacheable part.
    pub hit_rate: f64,
    /// NIC DRAM accesses per memory access.
    pub nic_load: f64,
    /// PCIe accesses per memory access.
    pub pcie_load: f64,
    /// Throughput relative to PCIe only.
    pub relative_throughput: f64,
}

impl Model {
    /// Builds the model; `Err` for negative or non-finite inputs.
    pub fn new(
        cache_fraction: f64,
        dram_over_pcie: f64,
        skew: Skew,
        keys: f64,
        fill_write: bool,
    ) -> Result<Model, String> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        if !ok(cache_fraction) || !ok(dram_over_pcie) {
            return Err("sizes and bandwidths must be finite and >= 0".into());
        }
        if !(keys.is_finite() && keys >= 1.0) {
            return Err("--keys must be at least 1".into());
        }
        let mut prefix = Vec::new();
        if let Skew::Zipf { theta } = skew {
            if !(theta.is_finite() && theta >= 0.0) {
                return Err("--theta must be finite and >= 0".into());
            }
            prefix.reserve(EXACT_TERMS);
            prefix.push(0.0);
            for i in 1..EXACT_TERMS {
                prefix.push(prefix[i - 1] + (i as f64).powf(-theta));
            }
        }
        Ok(Model {
            cache_fraction,
            dram_over_pcie,
            skew,
            keys,
            fill_write,
            prefix,
        })
    }

    /// `H(m, θ) = Σ_{i=1..=m} i^−θ` for integer `m`: exact below
    /// `EXACT_TERMS`, Euler–Maclaurin (to the first derivative term) above.
    fn harmonic_int(&self, m: f64, theta: f64) -> f64 {
        if m < 1.0 {
            return 0.0;
        }
        if (m as usize) < EXACT_TERMS {
            return self.prefix[m as usize];
        }
        let a = EXACT_TERMS as f64;
        let f = |x: f64| x.powf(-theta);
        let df = |x: f64| -theta * x.powf(-theta - 1.0);
        let integral = if (1.0 - theta).abs() < 1e-12 {
            (m / a).ln()
        } else {
            (m.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta)
        };
        self.prefix[EXACT_TERMS - 1] + integral + (f(a) + f(m)) / 2.0 + (df(m) - df(a)) / 12.0
    }

    /// `H(m, θ)` for real `m >= 0`, linear between integers.
    pub fn harmonic(&self, m: f64, theta: f64) -> f64 {
        let mf = m.floor();
        self.harmonic_int(mf, theta) + (m - mf) * (mf + 1.0).powf(-theta)
    }

    /// Hit rate of the NIC DRAM cache on the cacheable part at ratio `l`.
    pub fn hit_rate(&self, l: f64) -> f64 {
        let k = self.cache_fraction;
        if k <= 0.0 {
            return 0.0;
        }
        if l <= k {
            return 1.0;
        }
        match self.skew {
            Skew::Uniform => k / l,
            Skew::Zipf { theta } => {
                let n = self.keys;
                let m = (k * n / l).min(n);
                (self.harmonic(m, theta) / self.harmonic(n, theta)).clamp(0.0, 1.0)
            }
        }
    }

    /// Evaluates ratio `l` (clamped to `[0, 1]`).
    pub fn eval(&self, l: f64) -> Point {
        let l = l.clamp(0.0, 1.0);
        let h = self.hit_rate(l);
        let nic_load = l * if self.fill_write { 2.0 - h } else { 1.0 };
        let pcie_load = (1.0 - l * h).max(0.0);
        let by_nic = if nic_load > 0.0 {
            self.dram_over_pcie / nic_load
        } else {
            f64::INFINITY
        };
        let by_pcie = if pcie_load > 0.0 {
            1.0 / pcie_load
        } else {
            f64::INFINITY
        };
        Point {
            ratio: l,
            hit_rate: h,
            nic_load,
            pcie_load,
            relative_throughput: by_nic.min(by_pcie),
        }
    }

    /// The ratio with the highest throughput (the smallest such ratio on
    /// ties, so no NIC DRAM means `l = 0`): a scan of 20 001 ratios, then a
    /// golden-section refinement around the best.
    pub fn optimum(&self) -> Point {
        const N: usize = 20_000;
        let mut best = self.eval(0.0);
        let mut bi = 0;
        for i in 1..=N {
            let p = self.eval(i as f64 / N as f64);
            if p.relative_throughput > best.relative_throughput * (1.0 + 1e-12) {
                best = p;
                bi = i;
            }
        }
        if bi == 0 {
            return best;
        }
        let (mut a, mut b) = (
            (bi - 1) as f64 / N as f64,
            ((bi + 1) as f64 / N as f64).min(1.0),
        );
        let g = (5f64.sqrt() - 1.0) / 2.0;
        for _ in 0..60 {
            let c = b - g * (b - a);
            let d = a + g * (b - a);
            if self.eval(c).relative_throughput >= self.eval(d).relative_throughput {
                b = d;
            } else {
                a = c;
            }
        }
        let r = self.eval((a + b) / 2.0);
        if r.relative_throughput > best.relative_throughput {
            r
        } else {
            best
        }
    }
}

/// What `tune dispatch` reports.
#[derive(Clone, Debug, Serialize)]
pub struct DispatchReport {
    /// NIC DRAM GiB.
    pub nic_dram_gib: f64,
    /// NIC DRAM GB/s.
    pub nic_dram_gbps: f64,
    /// PCIe GB/s.
    pub pcie_gbps: f64,
    /// KV memory GiB.
    pub kv_mem_gib: f64,
    /// Key popularity.
    pub skew: Skew,
    /// Keys.
    pub keys: f64,
    /// Fill writes counted.
    pub fill_write: bool,
    /// `k`.
    pub cache_fraction: f64,
    /// PCIe only (`l = 0`).
    pub pcie_only: Point,
    /// Fixed partition (`l = min(k, 1)`).
    pub partition: Point,
    /// Cache of all memory (`l = 1`).
    pub cache_all: Point,
    /// The optimum.
    pub optimum: Point,
    /// Throughput at the optimum in the bandwidth unit (GB/s of 64 B accesses).
    pub optimum_gbps: f64,
    /// The l-sweep.
    pub sweep: Vec<Point>,
}

fn row(name: &str, p: &Point) -> String {
    format!(
        "{:<22} {:>7.4} {:>8.4} {:>9.4} {:>9.4} {:>9.4}",
        name, p.ratio, p.hit_rate, p.nic_load, p.pcie_load, p.relative_throughput
    )
}

/// `ctlplane tune dispatch`.
pub fn run(a: DispatchArgs) -> Result<(), String> {
    if !(a.kv_mem_gib.is_finite() && a.kv_mem_gib > 0.0) {
        return Err("--kv-mem-gib must be > 0".into());
    }
    if !(a.pcie_gbps.is_finite() && a.pcie_gbps > 0.0) {
        return Err("--pcie-gbps must be > 0".into());
    }
    if a.steps == 0 || a.steps > 10_000 {
        return Err("--steps must be in 1..=10000".into());
    }
    let skew = match a.dist {
        DistArg::Uniform => Skew::Uniform,
        DistArg::Zipf => Skew::Zipf { theta: a.theta },
    };
    let model = Model::new(
        a.nic_dram_gib / a.kv_mem_gib,
        a.nic_dram_gbps / a.pcie_gbps,
        skew,
        a.keys,
        a.fill_write,
    )?;
    let k = model.cache_fraction;
    let opt = model.optimum();
    let rep = DispatchReport {
        nic_dram_gib: a.nic_dram_gib,
        nic_dram_gbps: a.nic_dram_gbps,
        pcie_gbps: a.pcie_gbps,
        kv_mem_gib: a.kv_mem_gib,
        skew,
        keys: a.keys,
        fill_write: a.fill_write,
        cache_fraction: k,
        pcie_only: model.eval(0.0),
        partition: model.eval(k.min(1.0)),
        cache_all: model.eval(1.0),
        optimum: opt,
        optimum_gbps: opt.relative_throughput * a.pcie_gbps,
        sweep: (0..=a.steps)
            .map(|i| model.eval(i as f64 / a.steps as f64))
            .collect(),
    };
    let skew_s = match skew {
        Skew::Uniform => "uniform".to_string(),
        Skew::Zipf { theta } => format!("zipf {theta}, {:.3e} keys", a.keys),
    };
    println!(
        "tune dispatch: NIC DRAM {} GiB @ {} GB/s, PCIe {} GB/s, KV memory {} GiB (k = {:.4}), {}{}",
        a.nic_dram_gib,
        a.nic_dram_gbps,
        a.pcie_gbps,
        a.kv_mem_gib,
        k,
        skew_s,
        if a.fill_write { ", fills counted" } else { "" }
    );
    println!(
        "{:<22} {:>7} {:>8} {:>9} {:>9} {:>9}",
        "", "l", "hit", "NIC/acc", "PCIe/acc", "rel.tput"
    );
    for p in &rep.sweep {
        println!("{}", row("", p));
    }
    println!("{}", row("PCIe only", &rep.pcie_only));
    println!("{}", row("partition (l = k)", &rep.partition));
    println!("{}", row("cache all (l = 1)", &rep.cache_all));
    println!("{}", row("optimum", &rep.optimum));
    println!(
        "optimal load dispatch ratio {:.4}: {:.3}x the PCIe-only throughput ({:.2} GB/s of 64 B accesses vs {:.2})",
        opt.ratio, opt.relative_throughput, rep.optimum_gbps, a.pcie_gbps
    );
    if let Some(path) = &a.json {
        let v = serde_json::to_string_pretty(&rep).map_err(|e| e.to_string())?;
        std::fs::write(path, v + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zipf(k: f64, d: f64, theta: f64, n: f64) -> Model {
        Model::new(k, d, Skew::Zipf { theta }, n, false).unwrap()
    }

    #[test]
    fn no_nic_dram_means_pcie_only() {
        for skew in [Skew::Uniform, Skew::Zipf { theta: 0.99 }] {
            let m = Model::new(0.0, 0.97, skew, 1e9, false).unwrap();
            let o = m.optimum();
            assert_eq!(o.ratio, 0.0);
            assert_eq!(o.relative_throughput, 1.0);
            // Zero NIC bandwidth, whatever the size: same.
            let m = Model::new(0.1, 0.0, skew, 1e9, true).unwrap();
            let o = m.optimum();
            assert_eq!(o.ratio, 0.0);
            assert_eq!(o.relative_throughput, 1.0);
        }
    }

    #[test]
    fn uniform_matches_closed_form() {
        for (k, d) in [
            (0.0625, 0.97),
            (0.5, 0.97),
            (0.1, 3.0),
            (0.3, 0.2),
            (2.0, 1.0),
        ] {
            let m = Model::new(k, d, Skew::Uniform, 1e6, false).unwrap();
            let o = m.optimum();
            let l = k.min(d / (1.0 + d));
            let gain = (1.0 / (1.0 - k.min(1.0))).min(1.0 + d);
            assert!(
                (o.ratio - l).abs() < 1e-4,
                "k {k} d {d}: l {} vs {l}",
                o.ratio
            );
            assert!(
                (o.relative_throughput - gain).abs() < 1e-6,
                "k {k} d {d}: gain {} vs {gain}",
                o.relative_throughput
            );
        }
    }

    #[test]
    fn harmonic_numbers() {
        let m = zipf(0.1, 1.0, 0.99, 1e9);
        let direct: f64 = (1..=200_000u32).map(|i| (i as f64).powf(-0.99)).sum();
        let h = m.harmonic(200_000.0, 0.99);
        assert!((h - direct).abs() / direct < 1e-10, "{h} vs {direct}");
        let m1 = zipf(0.1, 1.0, 1.0, 1e9);
        let direct: f64 = (1..=5000u32).map(|i| 1.0 / i as f64).sum();
        assert!((m1.harmonic(5000.0, 1.0) - direct).abs() < 1e-10);
        assert_eq!(m1.harmonic(0.0, 1.0), 0.0);
        assert!((m1.harmonic(3.0, 1.0) - (1.0 + 0.5 + 1.0 / 3.0)).abs() < 1e-12);
    }

    #[test]
    fn hit_rates() {
        let u = Model::new(0.1, 1.0, Skew::Uniform, 1e6, false).unwrap();
        assert_eq!(u.hit_rate(0.05), 1.0);
        assert!((u.hit_rate(0.5) - 0.2).abs() < 1e-12);
        let z = zipf(0.1, 1.0, 0.99, 1e6);
        assert_eq!(z.hit_rate(0.1), 1.0);
        // l = 1: the cache holds the global top k·n.
        let expect = z.harmonic(1e5, 0.99) / z.harmonic(1e6, 0.99);
        assert!((z.hit_rate(1.0) - expect).abs() < 1e-12);
        for l in [0.2, 0.5, 1.0] {
            assert!(z.hit_rate(l) > u.hit_rate(l));
            assert!(z.hit_rate(l) <= 1.0);
        }
        // theta 0 is uniform.
        let z0 = zipf(0.1, 1.0, 0.0, 1e6);
        assert!((z0.hit_rate(0.5) - 0.2).abs() < 1e-6);
    }

    #[test]
    fn optimum_is_monotone_in_resources_and_skew() {
        let mut last = 1.0;
        for k in [0.0, 0.01, 0.03, 0.0625, 0.125, 0.25, 0.5] {
            let o = zipf(k, 0.97, 0.99, 1e9).optimum();
            assert!(o.relative_throughput >= last - 1e-9, "k {k}");
            assert!(o.relative_throughput >= 1.0);
            last = o.relative_throughput;
        }
        let mut last = 1.0;
        for d in [0.0, 0.25, 0.5, 0.97, 2.0, 4.0] {
            let o = zipf(0.0625, d, 0.99, 1e9).optimum();
            assert!(o.relative_throughput >= last - 1e-9, "d {d}");
            last = o.relative_throughput;
        }
        let mut last = 1.0;
        for theta in [0.0, 0.5, 0.9, 0.99, 1.2] {
            let o = zipf(0.0625, 0.97, theta, 1e9).optimum();
            assert!(o.relative_throughput >= last - 1e-9, "theta {theta}");
            last = o.relative_throughput;
        }
        // Skew makes caching worth more than a partition.
        let z = zipf(0.0625, 0.97, 0.99, 1e9);
        let o = z.optimum();
        assert!(o.ratio > 0.0625 + 0.01);
        assert!(o.relative_throughput > z.eval(0.0625).relative_throughput + 0.01);
        // Throughput is bounded by both links together.
        assert!(o.relative_throughput <= 1.0 + 0.97 + 1e-9);
    }

    #[test]
    fn optimum_balances_the_links() {
        let z = zipf(0.0625, 0.97, 0.99, 1e9);
        let o = z.optimum();
        if o.ratio < 1.0 {
            // Interior optimum: both links saturated.
            let by_nic = 0.97 / o.nic_load;
            let by_pcie = 1.0 / o.pcie_load;
            assert!(
                (by_nic - by_pcie).abs() / by_pcie < 1e-6,
                "{by_nic} vs {by_pcie}"
            );
        }
        // Fill writes load NIC DRAM more: never a better optimum.
        let f = Model::new(0.0625, 0.97, Skew::Zipf { theta: 0.99 }, 1e9, true).unwrap();
        assert!(f.optimum().relative_throughput <= o.relative_throughput + 1e-12);
    }
}
