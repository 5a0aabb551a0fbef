//! `ctlplane tune`: parameter tuning (KV-Direct §5.1.1 / Fig. 10, and the
//! DRAM load-dispatch model of §3.3.4 / Tables 5–6).
//!
//! `tune index` chooses the **hash index ratio** and the **inline
//! threshold** of [`kvengine::EngineConfig`] for a KV size distribution and a
//! target memory utilization by *simulation with the real engine*: for every
//! point of a grid it builds a [`kvengine::Engine`] over an owned region,
//! fills it with random keys drawn from the distribution up to the target
//! utilization and counts the distinct 64 B lines each GET and PUT touches
//! with the engine's access accounting (cargo feature `accounting` of
//! `kvengine`, enabled by this crate). A point whose engine answers
//! `OutOfMemory` before the target is reached is *infeasible* at that
//! utilization.
//!
//! What a point measures (all on the same key/size sequence, same seed):
//!
//! * **PUT (insert)**: the last inserts of the fill, from `target − window`
//!   to the target, where the window is `put_samples` mean-sized KVs (at most
//!   half the target): the paper's PUT at a given utilization;
//! * **GET**: `get_samples` GETs of uniformly random stored keys, after the
//!   fill;
//! * **PUT (update)**: then `put_samples` PUTs of random stored keys with a
//!   fresh size drawn from the distribution (may change slot count or slab
//!   class, so it can reallocate).
//!
//! The objective is `(1 − p)·GET + p·PUT` with `p = --put-ratio` and PUT
//! the insert or update figure (`--put-kind`). The inline threshold only
//! matters through *which* sizes of the distribution are inline, so grid
//! thresholds that inline the same set of sizes are simulated once and
//! reported as aliases. After the grid, `--refine` levels evaluate the
//! ratios half-way between the best ratio and its grid neighbours (at the
//! best threshold), which finds e.g. a feasible ratio between a feasible and
//! an infeasible grid point.
//!
//! Keys are `--key-bytes` long (8 by default) and distinct (a bijective mix
//! of a counter); the value is the rest of the KV size, so every size must
//! be at least the key length.

use clap::{Args, Subcommand};
use kvengine::{Engine, EngineConfig, LineStats, OpClass, Region, Status};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// Largest KV (key + value) the engine stores with its default 4 KiB top
/// slab class: 4096 minus the 4-byte long record header.
pub const MAX_KV_BYTES: usize = 4092;
/// Largest key the engine accepts.
pub const MAX_KEY_BYTES: usize = 255;
/// Largest valid inline threshold (`kvengine` refuses more: 10 slots × 5 B).
pub const MAX_INLINE_THRESHOLD: usize = 50;

/// `ctlplane tune ...` subcommands.
#[derive(Subcommand, Debug)]
pub enum TuneCmd {
    /// Find the hash index ratio and inline threshold that minimize memory
    /// lines per GET/PUT for a KV size distribution and target utilization,
    /// by simulation with the real engine (paper §5.1.1, Fig. 10).
    Index(IndexArgs),
    /// Optimal DRAM load-dispatch ratio between PCIe (host DRAM) and NIC
    /// on-board DRAM, and the throughput gain over PCIe only (paper §3.3.4,
    /// Tables 5–6). An analytic model: see docs/TUNE.md.
    Dispatch(crate::dispatch::DispatchArgs),
}

impl TuneCmd {
    /// Runs the chosen subcommand.
    pub fn run(self) -> Result<(), String> {
        match self {
            TuneCmd::Index(a) => run(a),
            TuneCmd::Dispatch(a) => crate::dispatch::run(a),
        }
    }
}

/// Which PUT figure enters the weighted objective.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PutKind {
    /// Inserts of new keys at the target utilization (the paper's PUT).
    Insert,
    /// Updates of stored keys with a fresh size from the distribution.
    Update,
}

/// Arguments of `ctlplane tune index`.
#[derive(Args, Debug, Clone)]
pub struct IndexArgs {
    /// KV size distribution, key + value bytes: `N` (fixed), `MIN-MAX`
    /// (uniform) or `SIZE:WEIGHT,SIZE:WEIGHT,...`.
    #[arg(long, default_value = "10")]
    pub kv_size: String,
    /// Target memory utilization: stored key + value bytes / store size.
    #[arg(long, default_value_t = 0.5)]
    pub utilization: f64,
    /// Store size (the simulated engine's region) in MiB. Lines per op are
    /// intensive: 16 MiB and 32 MiB agree to about 0.3% for 10 B KVs.
    #[arg(long, default_value_t = 16)]
    pub mem_mib: usize,
    /// Hash index ratios to try: `A,B,C` or `START:END:STEP`.
    #[arg(long, default_value = "0.1:0.9:0.1")]
    pub ratios: String,
    /// Inline thresholds to try (bytes, 0..=50): `A,B,C` or `START:END:STEP`.
    #[arg(long, default_value = "0,10,20,30,40,50")]
    pub thresholds: String,
    /// Fraction of operations that are PUTs in the weighted objective.
    #[arg(long, default_value_t = 0.5)]
    pub put_ratio: f64,
    /// Which PUT figure the objective uses.
    #[arg(long, value_enum, default_value_t = PutKind::Insert)]
    pub put_kind: PutKind,
    /// Refinement levels on the hash index ratio after the grid (0 = none).
    #[arg(long, default_value_t = 2)]
    pub refine: u32,
    /// Key length in bytes (every KV size must be at least this).
    #[arg(long, default_value_t = 8)]
    pub key_bytes: usize,
    /// GETs sampled per point.
    #[arg(long, default_value_t = 20_000)]
    pub get_samples: usize,
    /// PUTs sampled per point (insert window and updates).
    #[arg(long, default_value_t = 20_000)]
    pub put_samples: usize,
    /// Random seed (the same key/size sequence for every point).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Points simulated in parallel (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

// ------------------------------------------------------------ distribution

/// A KV size (key + value bytes) distribution.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum KvDist {
    /// Uniform over `min..=max`.
    Range {
        /// Smallest size.
        min: usize,
        /// Largest size.
        max: usize,
    },
    /// Discrete sizes with weights (a fixed size is one entry).
    List {
        /// `(size, weight)` pairs, sizes ascending and distinct.
        entries: Vec<(usize, f64)>,
    },
}

impl KvDist {
    /// Parses `N`, `MIN-MAX` or `SIZE:WEIGHT,...`; every size must be in
    /// `1..=MAX_KV_BYTES`.
    pub fn parse(s: &str) -> Result<KvDist, String> {
        let s = s.trim();
        let size = |t: &str| -> Result<usize, String> {
            let v: usize = t
                .trim()
                .parse()
                .map_err(|_| format!("bad KV size {t:?} in {s:?}"))?;
            if v == 0 || v > MAX_KV_BYTES {
                return Err(format!("KV size {v} outside 1..={MAX_KV_BYTES}"));
            }
            Ok(v)
        };
        if s.contains(':') || s.contains(',') {
            let mut entries: Vec<(usize, f64)> = Vec::new();
            for part in s.split(',').filter(|p| !p.trim().is_empty()) {
                let (a, w) = match part.split_once(':') {
                    Some((a, w)) => (
                        size(a)?,
                        w.trim()
                            .parse::<f64>()
                            .map_err(|_| format!("bad weight in {part:?}"))?,
                    ),
                    None => (size(part)?, 1.0),
                };
                if !(w.is_finite() && w >= 0.0) {
                    return Err(format!("weight in {part:?} must be finite and >= 0"));
                }
                match entries.iter_mut().find(|e| e.0 == a) {
                    Some(e) => e.1 += w,
                    None => entries.push((a, w)),
                }
            }
            entries.retain(|e| e.1 > 0.0);
            if entries.is_empty() {
                return Err(format!("KV size list {s:?} has no positive weight"));
            }
            entries.sort_by_key(|e| e.0);
            Ok(KvDist::List { entries })
        } else if let Some((a, b)) = s.split_once('-') {
            let (min, max) = (size(a)?, size(b)?);
            if min > max {
                return Err(format!("empty KV size range {s:?}"));
            }
            Ok(KvDist::Range { min, max })
        } else {
            let v = size(s)?;
            Ok(KvDist::List {
                entries: vec![(v, 1.0)],
            })
        }
    }

    /// Smallest size.
    pub fn min(&self) -> usize {
        match self {
            KvDist::Range { min, .. } => *min,
            KvDist::List { entries } => entries[0].0,
        }
    }

    /// Largest size.
    pub fn max(&self) -> usize {
        match self {
            KvDist::Range { max, .. } => *max,
            KvDist::List { entries } => entries[entries.len() - 1].0,
        }
    }

    /// Mean size.
    pub fn mean(&self) -> f64 {
        match self {
            KvDist::Range { min, max } => (*min + *max) as f64 / 2.0,
            KvDist::List { entries } => {
                let w: f64 = entries.iter().map(|e| e.1).sum();
                entries.iter().map(|e| e.0 as f64 * e.1).sum::<f64>() / w
            }
        }
    }

    /// Number of distinct sizes `<= t`: two inline thresholds with the same
    /// count make the engine behave identically on this distribution.
    pub fn sizes_at_most(&self, t: usize) -> usize {
        match self {
            KvDist::Range { min, max } => (t.min(*max) + 1).saturating_sub(*min),
            KvDist::List { entries } => entries.iter().filter(|e| e.0 <= t).count(),
        }
    }

    /// Draws one size.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        match self {
            KvDist::Range { min, max } => rng.gen_range(*min..=*max),
            KvDist::List { entries } => {
                if entries.len() == 1 {
                    return entries[0].0;
                }
                let total: f64 = entries.iter().map(|e| e.1).sum();
                let mut x = rng.gen::<f64>() * total;
                for e in entries {
                    if x < e.1 {
                        return e.0;
                    }
                    x -= e.1;
                }
                entries[entries.len() - 1].0
            }
        }
    }
}

/// Parses a grid: `A,B,C` or `START:END:STEP` (inclusive of END up to
/// rounding).
pub fn parse_grid(s: &str) -> Result<Vec<f64>, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let num = |t: &str| -> Result<f64, String> {
        t.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("bad number {t:?} in grid {s:?}"))
    };
    let v = match parts.as_slice() {
        [one] => one
            .split(',')
            .filter(|t| !t.trim().is_empty())
            .map(num)
            .collect::<Result<Vec<_>, _>>()?,
        [a, b, step] => {
            let (a, b, step) = (num(a)?, num(b)?, num(step)?);
            if step <= 0.0 || b < a {
                return Err(format!("grid {s:?}: need START <= END and STEP > 0"));
            }
            let n = ((b - a) / step + 1e-9).floor() as usize;
            if n > 10_000 {
                return Err(format!("grid {s:?} has more than 10000 points"));
            }
            (0..=n)
                .map(|i| ((a + step * i as f64) * 1e9).round() / 1e9)
                .collect()
        }
        _ => return Err(format!("grid {s:?}: use A,B,C or START:END:STEP")),
    };
    if v.is_empty() {
        return Err(format!("grid {s:?} is empty"));
    }
    Ok(v)
}

// ------------------------------------------------------------ simulation

/// Fixed parameters of one simulation run.
#[derive(Clone, Debug, Serialize)]
pub struct SimParams {
    /// Store size in bytes.
    pub mem_bytes: usize,
    /// Target utilization (stored KV bytes / `mem_bytes`).
    pub target_utilization: f64,
    /// Key length.
    pub key_bytes: usize,
    /// GETs sampled.
    pub get_samples: usize,
    /// PUTs sampled (insert window and updates).
    pub put_samples: usize,
    /// Random seed.
    pub seed: u64,
}

/// Lines per op split into hash-index and slab lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Lines {
    /// Mean distinct 64 B lines per op (index + slab).
    pub total: f64,
    /// Of which hash-index lines (primary and chained buckets).
    pub index: f64,
    /// Of which slab lines (KV records).
    pub slab: f64,
    /// Operations measured.
    pub ops: u64,
}

impl Lines {
    fn from_stats(s: Option<LineStats>, class: OpClass) -> Lines {
        let s = s.unwrap_or_default();
        let i = class as usize;
        let n = s.ops[i].max(1) as f64;
        Lines {
            total: s.lines_per_op(class),
            index: s.index_lines[i] as f64 / n,
            slab: s.slab_lines[i] as f64 / n,
            ops: s.ops[i],
        }
    }
}

/// Result of one (ratio, threshold) point.
#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    /// Hash index ratio.
    pub hash_index_ratio: f64,
    /// Inline threshold.
    pub inline_threshold: usize,
    /// The target utilization was reached without `OutOfMemory`.
    pub feasible: bool,
    /// Utilization reached (the first `OutOfMemory` for infeasible points).
    pub utilization: f64,
    /// KVs stored after the fill.
    pub kvs: u64,
    /// Chained buckets after the fill.
    pub chained_buckets: u64,
    /// Lines per GET (feasible points only).
    pub get: Option<Lines>,
    /// Lines per PUT inserting a new key at the target (feasible only).
    pub put_insert: Option<Lines>,
    /// Lines per PUT updating a stored key (feasible only).
    pub put_update: Option<Lines>,
    /// Update PUTs answered `OutOfMemory` (a larger record did not fit).
    pub put_update_oom: u64,
    /// Weighted objective (feasible only).
    pub score: Option<f64>,
    /// When this threshold inlines the same sizes as a smaller simulated
    /// one, that threshold (the results are copied from it).
    pub same_as_threshold: Option<usize>,
}

impl PointResult {
    fn put(&self, kind: PutKind) -> Option<&Lines> {
        match kind {
            PutKind::Insert => self.put_insert.as_ref(),
            PutKind::Update => self.put_update.as_ref(),
        }
    }

    fn rescore(&mut self, put_ratio: f64, kind: PutKind) {
        self.score = match (&self.get, self.put(kind)) {
            (Some(g), Some(p)) => Some((1.0 - put_ratio) * g.total + put_ratio * p.total),
            _ => None,
        };
    }
}

/// The `i`-th distinct key of a run (a bijective 64-bit mix of `i`, then
/// more pseudo-random bytes past 8).
fn key_of(i: u64, seed: u64, key_bytes: usize, out: &mut [u8; MAX_KEY_BYTES]) -> &[u8] {
    fn mix(mut z: u64) -> u64 {
        // splitmix64 finalizer: a bijection on u64.
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let mut z = mix(i ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut o = 0;
    while o < key_bytes {
        let b = z.to_le_bytes();
        let n = (key_bytes - o).min(8);
        out[o..o + n].copy_from_slice(&b[..n]);
        o += n;
        z = mix(z.wrapping_add(0x9e37_79b9_7f4a_7c15));
    }
    &out[..key_bytes]
}

/// Simulates one point: builds an engine with `ratio` and `threshold` over
/// `p.mem_bytes`, fills it to the target utilization with KVs from `dist`
/// and measures lines per GET / PUT. `Err` only for a bad configuration or
/// an unexpected engine answer.
pub fn simulate(
    dist: &KvDist,
    ratio: f64,
    threshold: usize,
    p: &SimParams,
) -> Result<PointResult, String> {
    if dist.min() < p.key_bytes {
        return Err(format!(
            "KV size {} is shorter than the key ({} B); lower --key-bytes",
            dist.min(),
            p.key_bytes
        ));
    }
    let cfg = EngineConfig {
        mem_bytes: p.mem_bytes,
        hash_index_ratio: ratio,
        inline_threshold: threshold,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(Region::owned(p.mem_bytes), &cfg)
        .map_err(|err| format!("ratio {ratio}, inline threshold {threshold}: {err}"))?;
    let mut rng = SmallRng::seed_from_u64(p.seed);
    let val = vec![0x5au8; MAX_KV_BYTES];
    let mut kb = [0u8; MAX_KEY_BYTES];
    let target = p.target_utilization * p.mem_bytes as f64;
    let window = (p.put_samples as f64 * dist.mean()).min(target / 2.0);
    let window_start = target - window;
    let mut n: u64 = 0;
    let mut bytes = 0.0f64;
    let mut measuring = false;
    let mut result = PointResult {
        hash_index_ratio: ratio,
        inline_threshold: threshold,
        feasible: false,
        utilization: 0.0,
        kvs: 0,
        chained_buckets: 0,
        get: None,
        put_insert: None,
        put_update: None,
        put_update_oom: 0,
        score: None,
        same_as_threshold: None,
    };
    // Fill: every PUT inserts a new key; the last `window` bytes are the
    // measured inserts.
    while bytes < target {
        if !measuring && bytes >= window_start {
            e.reset_accounting();
            measuring = true;
        }
        let size = dist.sample(&mut rng);
        let key = key_of(n, p.seed, p.key_bytes, &mut kb);
        match e.put(key, &val[..size - p.key_bytes]) {
            Status::Ok => {
                n += 1;
                bytes += size as f64;
            }
            Status::OutOfMemory => {
                let s = e.stats();
                result.utilization = s.memory_utilization;
                result.kvs = s.stored_kvs;
                result.chained_buckets = s.chained_buckets;
                return Ok(result);
            }
            other => return Err(format!("engine answered {other:?} to a {size} B KV")),
        }
    }
    let s = e.stats();
    result.feasible = true;
    result.utilization = s.memory_utilization;
    result.kvs = s.stored_kvs;
    result.chained_buckets = s.chained_buckets;
    result.put_insert = Some(Lines::from_stats(s.lines, OpClass::Put));
    // GETs of random stored keys.
    e.reset_accounting();
    let mut out = vec![0u8; MAX_KV_BYTES];
    for _ in 0..p.get_samples {
        let i = rng.gen_range(0..n);
        let key = key_of(i, p.seed, p.key_bytes, &mut kb);
        if let Err(st) = e.get(key, &mut out) {
            return Err(format!("stored key {i} not found: {st:?}"));
        }
    }
    result.get = Some(Lines::from_stats(e.stats().lines, OpClass::Get));
    // Updates of random stored keys with a fresh size.
    e.reset_accounting();
    for _ in 0..p.put_samples {
        let i = rng.gen_range(0..n);
        let size = dist.sample(&mut rng);
        let key = key_of(i, p.seed, p.key_bytes, &mut kb);
        match e.put(key, &val[..size - p.key_bytes]) {
            Status::Ok => {}
            Status::OutOfMemory => result.put_update_oom += 1,
            other => return Err(format!("engine answered {other:?} to an update")),
        }
    }
    result.put_update = Some(Lines::from_stats(e.stats().lines, OpClass::Put));
    Ok(result)
}

/// Runs `simulate` over `points` on `jobs` threads; results in input order.
pub fn simulate_all(
    dist: &KvDist,
    points: &[(f64, usize)],
    p: &SimParams,
    jobs: usize,
) -> Result<Vec<PointResult>, String> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut slots: Vec<Option<Result<PointResult, String>>> = vec![None; points.len()];
    let results = std::sync::Mutex::new(&mut slots);
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1).min(points.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(r, t)) = points.get(i) else { break };
                let res = simulate(dist, r, t, p);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(res);
            });
        }
    });
    slots
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("simulation thread died".into())))
        .collect()
}

/// The whole search: the grid, aliases for equivalent thresholds, ratio
/// refinement, and the optimum.
#[derive(Clone, Debug, Serialize)]
pub struct TuneReport {
    /// KV size distribution.
    pub kv_size: KvDist,
    /// Simulation parameters.
    pub params: SimParams,
    /// PUT fraction of the objective.
    pub put_ratio: f64,
    /// PUT figure used by the objective.
    pub put_kind: PutKind,
    /// Every point, grid first (by threshold, then ratio), then refinements.
    pub points: Vec<PointResult>,
    /// Index into `points` of the optimum (lowest score; ties: the smaller
    /// threshold, then the smaller ratio); `None` when nothing is feasible.
    pub optimum: Option<usize>,
    /// The optimum point itself (a copy of `points[optimum]`).
    pub optimum_point: Option<PointResult>,
}

/// Index of the lowest score (ties: smaller threshold, then smaller ratio).
fn best(points: &[PointResult]) -> Option<usize> {
    let mut b: Option<usize> = None;
    for (i, pt) in points.iter().enumerate() {
        let Some(s) = pt.score else { continue };
        let better = match b {
            None => true,
            Some(j) => {
                let (sj, pj) = (points[j].score.unwrap_or(f64::INFINITY), &points[j]);
                s < sj - 1e-12
                    || ((s - sj).abs() <= 1e-12
                        && (pt.inline_threshold, pt.hash_index_ratio)
                            < (pj.inline_threshold, pj.hash_index_ratio))
            }
        };
        if better {
            b = Some(i);
        }
    }
    b
}

/// Runs the grid search (and refinement) for `dist`.
#[allow(clippy::too_many_arguments)]
pub fn search(
    dist: &KvDist,
    ratios: &[f64],
    thresholds: &[usize],
    params: &SimParams,
    put_ratio: f64,
    put_kind: PutKind,
    refine: u32,
    jobs: usize,
) -> Result<TuneReport, String> {
    let mut ratios: Vec<f64> = ratios.to_vec();
    ratios.sort_by(f64::total_cmp);
    ratios.dedup();
    let mut thresholds: Vec<usize> = thresholds.to_vec();
    thresholds.sort_unstable();
    thresholds.dedup();
    // One representative threshold per set of inlined sizes.
    let mut rep_of: Vec<usize> = Vec::new(); // threshold -> representative threshold
    for &t in &thresholds {
        let k = dist.sizes_at_most(t);
        let rep = thresholds
            .iter()
            .copied()
            .find(|&u| dist.sizes_at_most(u) == k)
            .unwrap_or(t);
        rep_of.push(rep);
    }
    let mut reps: Vec<usize> = rep_of.clone();
    reps.dedup();
    let sim_points: Vec<(f64, usize)> = reps
        .iter()
        .flat_map(|&t| ratios.iter().map(move |&r| (r, t)))
        .collect();
    let sims = simulate_all(dist, &sim_points, params, jobs)?;
    let mut points = Vec::new();
    for (ti, &t) in thresholds.iter().enumerate() {
        let rep = rep_of[ti];
        for &r in &ratios {
            let idx = sim_points
                .iter()
                .position(|&(pr, pt)| pr == r && pt == rep)
                .ok_or("internal: missing grid point")?;
            let mut pt = sims[idx].clone();
            pt.inline_threshold = t;
            if rep != t {
                pt.same_as_threshold = Some(rep);
            }
            pt.rescore(put_ratio, put_kind);
            points.push(pt);
        }
    }
    // Refinement: midpoints around the best ratio at the best threshold.
    for _ in 0..refine {
        let Some(b) = best(&points) else { break };
        let (br, bt) = (points[b].hash_index_ratio, points[b].inline_threshold);
        let rep = points[b].same_as_threshold.unwrap_or(bt);
        let mut tried: Vec<f64> = points
            .iter()
            .filter(|p| p.inline_threshold == bt)
            .map(|p| p.hash_index_ratio)
            .collect();
        tried.sort_by(f64::total_cmp);
        let pos = tried.iter().position(|&r| r == br).unwrap_or(0);
        let mut new = Vec::new();
        if pos > 0 {
            new.push(((tried[pos - 1] + br) / 2.0, rep));
        }
        if pos + 1 < tried.len() {
            new.push(((tried[pos + 1] + br) / 2.0, rep));
        } else if br < 1.0 {
            new.push((((1.0 + br) / 2.0).min(1.0), rep));
        }
        for p in &mut new {
            p.0 = (p.0 * 1e9).round() / 1e9;
        }
        new.retain(|&(r, _)| !tried.contains(&r) && r > 0.0 && r <= 1.0);
        if new.is_empty() {
            break;
        }
        for mut pt in simulate_all(dist, &new, params, jobs)? {
            pt.inline_threshold = bt;
            if rep != bt {
                pt.same_as_threshold = Some(rep);
            }
            pt.rescore(put_ratio, put_kind);
            points.push(pt);
        }
    }
    let optimum = best(&points);
    Ok(TuneReport {
        kv_size: dist.clone(),
        params: params.clone(),
        put_ratio,
        put_kind,
        optimum_point: optimum.map(|i| points[i].clone()),
        points,
        optimum,
    })
}

// ------------------------------------------------------------ command

fn fmt_lines(l: &Option<Lines>) -> String {
    l.map_or_else(|| "-".into(), |l| format!("{:.3}", l.total))
}

/// Renders the report as the text table `tune index` prints.
pub fn render(rep: &TuneReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>6} {:>6} {:>7} {:>9} {:>9} {:>9} {:>8}  note",
        "ratio", "inline", "util", "GET", "PUT-ins", "PUT-upd", "score"
    );
    let mut order: Vec<usize> = (0..rep.points.len()).collect();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&rep.points[a], &rep.points[b]);
        (pa.inline_threshold, pa.hash_index_ratio)
            .partial_cmp(&(pb.inline_threshold, pb.hash_index_ratio))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut aliases: Vec<(usize, usize)> = Vec::new();
    for i in order {
        let p = &rep.points[i];
        if let (Some(t), false) = (p.same_as_threshold, rep.optimum == Some(i)) {
            if !aliases.contains(&(p.inline_threshold, t)) {
                aliases.push((p.inline_threshold, t));
            }
            continue;
        }
        let mut note = String::new();
        if !p.feasible {
            let _ = write!(note, "infeasible: full at {:.1}%", p.utilization * 100.0);
        }
        if let Some(t) = p.same_as_threshold {
            if !note.is_empty() {
                note.push_str("; ");
            }
            let _ = write!(note, "same as inline {t}");
        }
        if rep.optimum == Some(i) {
            if !note.is_empty() {
                note.push_str("; ");
            }
            note.push_str("<= optimum");
        }
        let _ = writeln!(
            s,
            "{:>6.3} {:>6} {:>6.1}% {:>9} {:>9} {:>9} {:>8}  {}",
            p.hash_index_ratio,
            p.inline_threshold,
            p.utilization * 100.0,
            fmt_lines(&p.get),
            fmt_lines(&p.put_insert),
            fmt_lines(&p.put_update),
            p.score.map_or_else(|| "-".into(), |v| format!("{v:.3}")),
            note
        );
    }
    for (t, rep_t) in aliases {
        let _ = writeln!(
            s,
            "inline {t}: inlines the same KV sizes as inline {rep_t}, same results"
        );
    }
    match rep.optimum {
        Some(i) => {
            let p = &rep.points[i];
            let _ = writeln!(
                s,
                "optimum: hash index ratio {:.3}, inline threshold {} B: {} lines/GET, {} lines/PUT-insert, {} lines/PUT-update, score {:.3} ({:.0}% PUT, PUT = {})",
                p.hash_index_ratio,
                p.inline_threshold,
                fmt_lines(&p.get),
                fmt_lines(&p.put_insert),
                fmt_lines(&p.put_update),
                p.score.unwrap_or(f64::NAN),
                rep.put_ratio * 100.0,
                match rep.put_kind {
                    PutKind::Insert => "insert",
                    PutKind::Update => "update",
                },
            );
        }
        None => {
            let _ = writeln!(
                s,
                "no feasible point: no configuration of the grid holds {:.1}% utilization",
                rep.params.target_utilization * 100.0
            );
        }
    }
    s
}

/// `ctlplane tune index`.
pub fn run(a: IndexArgs) -> Result<(), String> {
    let dist = KvDist::parse(&a.kv_size)?;
    if !(a.utilization > 0.0 && a.utilization <= 1.0) {
        return Err("--utilization must be in (0, 1]".into());
    }
    if !(0.0..=1.0).contains(&a.put_ratio) {
        return Err("--put-ratio must be in [0, 1]".into());
    }
    if a.key_bytes == 0 || a.key_bytes > MAX_KEY_BYTES {
        return Err(format!("--key-bytes must be in 1..={MAX_KEY_BYTES}"));
    }
    if dist.min() < a.key_bytes {
        return Err(format!(
            "smallest KV size {} B is shorter than the {} B key; lower --key-bytes",
            dist.min(),
            a.key_bytes
        ));
    }
    if a.mem_mib == 0 || a.mem_mib > 16 << 10 {
        return Err("--mem-mib must be in 1..=16384".into());
    }
    if a.get_samples == 0 || a.put_samples == 0 {
        return Err("--get-samples and --put-samples must be positive".into());
    }
    let ratios = parse_grid(&a.ratios)?;
    if let Some(r) = ratios.iter().find(|&&r| !(r > 0.0 && r <= 1.0)) {
        return Err(format!("hash index ratio {r} outside (0, 1]"));
    }
    let thresholds = parse_grid(&a.thresholds)?
        .into_iter()
        .map(|t| {
            if t >= 0.0 && t.fract() == 0.0 && t <= MAX_INLINE_THRESHOLD as f64 {
                Ok(t as usize)
            } else {
                Err(format!(
                    "inline threshold {t} must be an integer in 0..={MAX_INLINE_THRESHOLD}"
                ))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let params = SimParams {
        mem_bytes: a.mem_mib << 20,
        target_utilization: a.utilization,
        key_bytes: a.key_bytes,
        get_samples: a.get_samples,
        put_samples: a.put_samples,
        seed: a.seed,
    };
    let jobs = a.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    println!(
        "tune index: KV size {} ({}..={} B, mean {:.1} B), {} MiB store, target utilization {:.1}%, {} ratios x {} thresholds, {} job(s)",
        a.kv_size,
        dist.min(),
        dist.max(),
        dist.mean(),
        a.mem_mib,
        a.utilization * 100.0,
        ratios.len(),
        thresholds.len(),
        jobs
    );
    let t0 = Instant::now();
    let rep = search(
        &dist,
        &ratios,
        &thresholds,
        &params,
        a.put_ratio,
        a.put_kind,
        a.refine,
        jobs,
    )?;
    print!("{}", render(&rep));
    println!(
        "({} engine simulations in {:.1} s; lines = distinct 64 B lines per op, engine accounting)",
        rep.points
            .iter()
            .filter(|p| p.same_as_threshold.is_none())
            .count(),
        t0.elapsed().as_secs_f64()
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

    fn params(mem_mib: usize, util: f64) -> SimParams {
        SimParams {
            mem_bytes: mem_mib << 20,
            target_utilization: util,
            key_bytes: 8,
            get_samples: 5000,
            put_samples: 5000,
            seed: 7,
        }
    }

    #[test]
    fn parses_distributions() {
        assert_eq!(
            KvDist::parse("10").unwrap(),
            KvDist::List {
                entries: vec![(10, 1.0)]
            }
        );
        assert_eq!(
            KvDist::parse("10-100").unwrap(),
            KvDist::Range { min: 10, max: 100 }
        );
        let d = KvDist::parse("254:1, 10:3").unwrap();
        assert_eq!(
            d,
            KvDist::List {
                entries: vec![(10, 3.0), (254, 1.0)]
            }
        );
        assert!((d.mean() - (30.0 + 254.0) / 4.0).abs() < 1e-9);
        assert!(KvDist::parse("0").is_err());
        assert!(KvDist::parse("5000").is_err());
        assert!(KvDist::parse("20-10").is_err());
        assert!(KvDist::parse("10:0").is_err());
        assert!(KvDist::parse("10:x").is_err());
    }

    #[test]
    fn threshold_equivalence() {
        let d = KvDist::parse("10").unwrap();
        assert_eq!(d.sizes_at_most(5), 0);
        assert_eq!(d.sizes_at_most(10), 1);
        assert_eq!(d.sizes_at_most(50), 1);
        let r = KvDist::Range { min: 10, max: 20 };
        assert_eq!(r.sizes_at_most(9), 0);
        assert_eq!(r.sizes_at_most(10), 1);
        assert_eq!(r.sizes_at_most(15), 6);
        assert_eq!(r.sizes_at_most(50), 11);
    }

    #[test]
    fn sampling_follows_weights() {
        let d = KvDist::parse("10:3,100:1").unwrap();
        let mut rng = SmallRng::seed_from_u64(3);
        let n = 40_000;
        let small = (0..n).filter(|_| d.sample(&mut rng) == 10).count();
        let f = small as f64 / n as f64;
        assert!((f - 0.75).abs() < 0.02, "fraction of 10 B draws {f}");
        let r = KvDist::Range { min: 10, max: 12 };
        for _ in 0..1000 {
            assert!((10..=12).contains(&r.sample(&mut rng)));
        }
    }

    #[test]
    fn grids() {
        assert_eq!(parse_grid("0.1:0.3:0.1").unwrap(), vec![0.1, 0.2, 0.3]);
        assert_eq!(parse_grid("0,10, 20").unwrap(), vec![0.0, 10.0, 20.0]);
        assert!(parse_grid("0.3:0.1:0.1").is_err());
        assert!(parse_grid("a").is_err());
        assert!(parse_grid("").is_err());
    }

    #[test]
    fn keys_are_distinct() {
        let mut a = [0u8; MAX_KEY_BYTES];
        let mut b = [0u8; MAX_KEY_BYTES];
        let k0 = key_of(0, 1, 8, &mut a).to_vec();
        let k1 = key_of(1, 1, 8, &mut b).to_vec();
        assert_ne!(k0, k1);
        assert_eq!(key_of(5, 1, 20, &mut a).len(), 20);
    }

    /// 10 B KVs: a threshold that inlines them (10) touches fewer lines per
    /// GET and per PUT than one that does not (5: every KV goes to a slab
    /// record, one more line).
    #[test]
    fn inlining_small_kvs_beats_slab() {
        let d = KvDist::parse("10").unwrap();
        let p = params(4, 0.05);
        let inl = simulate(&d, 0.5, 10, &p).unwrap();
        let slab = simulate(&d, 0.5, 5, &p).unwrap();
        assert!(inl.feasible && slab.feasible);
        let (gi, gs) = (inl.get.unwrap().total, slab.get.unwrap().total);
        assert!(gi < gs, "GET lines inline {gi} vs slab {gs}");
        assert!(gi < 1.2 && gs >= 2.0, "GET lines inline {gi} vs slab {gs}");
        let (pi, ps) = (
            inl.put_insert.unwrap().total,
            slab.put_insert.unwrap().total,
        );
        assert!(pi < ps, "PUT lines inline {pi} vs slab {ps}");
        assert_eq!(inl.get.unwrap().slab, 0.0);
    }

    /// A tiny hash index (long chains) costs more lines per GET than a
    /// large one at the same utilization; and a too-large index leaves too
    /// little slab memory for 254 B KVs (infeasible).
    #[test]
    fn ratio_trades_chains_against_space() {
        let d = KvDist::parse("10").unwrap();
        let p = params(4, 0.3);
        let small = simulate(&d, 0.1, 20, &p).unwrap();
        let large = simulate(&d, 0.7, 20, &p).unwrap();
        assert!(small.feasible && large.feasible);
        assert!(small.get.unwrap().total > large.get.unwrap().total + 0.5);
        let big = KvDist::parse("254").unwrap();
        let full = simulate(&big, 0.9, 20, &params(4, 0.5)).unwrap();
        assert!(!full.feasible);
        assert!(full.utilization < 0.5 && full.get.is_none());
    }

    /// The search picks an inlining threshold for 10 B KVs and reports the
    /// thresholds that inline the same sizes as aliases.
    #[test]
    fn search_prefers_inline_for_small_kvs() {
        let d = KvDist::parse("10").unwrap();
        let rep = search(
            &d,
            &[0.3, 0.6],
            &[0, 5, 10, 20],
            &params(4, 0.3),
            0.5,
            PutKind::Insert,
            1,
            2,
        )
        .unwrap();
        let o = &rep.points[rep.optimum.unwrap()];
        assert_eq!(o.inline_threshold, 10);
        assert!(o.hash_index_ratio >= 0.6);
        let alias = rep
            .points
            .iter()
            .find(|p| p.inline_threshold == 20)
            .unwrap();
        assert_eq!(alias.same_as_threshold, Some(10));
        assert!(render(&rep).contains("optimum: hash index ratio"));
        // Threshold 0 (slab only) at ratio 0.6 leaves 40% slab: 10 B KVs in
        // 32 B blocks cannot reach 30%.
        let zero = rep
            .points
            .iter()
            .find(|p| p.inline_threshold == 0 && p.hash_index_ratio == 0.6)
            .unwrap();
        assert!(!zero.feasible);
    }
}
