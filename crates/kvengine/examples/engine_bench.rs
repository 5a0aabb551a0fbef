//! Engine benchmark (run through `scripts/bench.sh engine`).
//!
//! Two modes, because line accounting is a compile-time feature:
//!
//! * `engine_bench lines --out results/engine_lines.json` (build with
//!   `--features accounting`): distinct 64 B lines per GET/PUT against memory
//!   utilization for several KV sizes / inline thresholds / hash index ratios,
//!   the utilization reached when the first PUT fails, slab transfer and
//!   merge figures.
//! * `engine_bench throughput --lines results/engine_lines.json --out
//!   results/engine.json` (normal build): single-core GET/PUT Mops of the
//!   batched engine, the engine without batching, and hashbrown; merges the
//!   lines JSON, writes `results/engine.json` and the PNG plots.

use hashbrown::HashMap;
use kvengine::{BatchOp, Engine, EngineConfig, Region, ResultSink, Status};
use kvload::{scattered_key as key_of, RandomSource, SplitMix64, Zipf};
use plotters::prelude::*;
use serde_json::{json, Value};
use std::time::Instant;

// ---------------------------------------------------------------- helpers

// Keys, key sequences and Zipf ranks come from kvload (SplitMix64 stream,
// `scattered_key`, YCSB's Zipfian).

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Region::owned already asks for transparent huge pages on Linux.
fn region(bytes: usize) -> Region {
    Region::owned(bytes)
}

#[derive(Default)]
struct Sink {
    hits: u64,
    sum: u64,
    oom: u64,
}
impl ResultSink for Sink {
    #[inline(always)]
    fn result(&mut self, _i: usize, status: Status, value: &[u8]) {
        match status {
            Status::Ok => {
                self.hits += 1;
                if let Some(&b) = value.first() {
                    self.sum += u64::from(b);
                }
            }
            Status::OutOfMemory => self.oom += 1,
            _ => {}
        }
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

// ---------------------------------------------------------------- lines mode

/// Fills an engine with distinct KVs of `kv` bytes (8 B key) and samples
/// lines per GET and per PUT at each utilization checkpoint; returns the
/// series and the utilization reached when the first PUT failed.
fn lines_sweep(mem: usize, kv: usize, ratio: f64, inline: usize) -> (Vec<(f64, f64, f64)>, f64) {
    let cfg = EngineConfig {
        mem_bytes: mem,
        hash_index_ratio: ratio,
        inline_threshold: inline,
        max_slab_class: 4096,
    };
    let mut e = Engine::new(region(mem), &cfg).unwrap();
    let val = vec![0x5au8; kv - 8];
    let mut rng = SplitMix64::new(42);
    let mut out = vec![0u8; 4096];
    let mut pts = Vec::new();
    let mut next_cp = 0.05;
    let mut n: u64 = 0;
    let mut put_window: Option<(f64, u64)> = None; // (checkpoint, inserts left)
    let mut put_lines = 0.0;
    loop {
        if put_window.is_none() {
            e.reset_accounting();
        }
        let st = e.put(&key_of(n), &val);
        if st != Status::Ok {
            break;
        }
        n += 1;
        if let Some((cp, left)) = put_window {
            if left == 1 {
                put_lines = e.stats().lines_per_put().unwrap_or(f64::NAN);
                put_window = None;
                let _ = cp;
            } else {
                put_window = Some((cp, left - 1));
            }
        }
        let util = e.stats().memory_utilization;
        if util >= next_cp && put_window.is_none() {
            // GET lines at this utilization: random existing keys.
            e.reset_accounting();
            for _ in 0..50_000 {
                let k = key_of(rng.below(n));
                let _ = e.get(&k, &mut out);
            }
            let g = e.stats().lines_per_get().unwrap_or(f64::NAN);
            pts.push((next_cp, g, f64::NAN));
            // PUT lines: the next 1% of inserts.
            e.reset_accounting();
            let window = ((mem as f64 * 0.01) / kv as f64).max(100.0) as u64;
            put_window = Some((next_cp, window));
            next_cp = ((next_cp + 0.05) * 100.0).round() / 100.0;
        }
        if put_window.is_none() && put_lines > 0.0 {
            if let Some(p) = pts.last_mut() {
                if p.2.is_nan() {
                    p.2 = put_lines;
                }
            }
        }
    }
    if let Some(p) = pts.last_mut() {
        if p.2.is_nan() {
            p.2 = e.stats().lines_per_put().unwrap_or(f64::NAN);
        }
    }
    e.check_invariants().expect("engine invariants after fill");
    (pts, e.stats().memory_utilization)
}

/// Slab churn: transfers per allocation and merge time per free slot.
fn slab_churn() -> Value {
    let mem = 64 << 20;
    let cfg = EngineConfig {
        mem_bytes: mem,
        hash_index_ratio: 0.1,
        inline_threshold: 20,
        max_slab_class: 4096,
    };
    let mut e = Engine::new(region(mem), &cfg).unwrap();
    let mut rng = SplitMix64::new(7);
    let buf = vec![0x33u8; 2048];
    let mut live: Vec<u64> = Vec::new();
    let mut next = 0u64;
    while e.stats().memory_utilization < 0.5 {
        let len = 20 + rng.below(1000) as usize;
        if e.put(&key_of(next), &buf[..len]) != Status::Ok {
            break;
        }
        live.push(next);
        next += 1;
    }
    let s0 = e.stats();
    for _ in 0..1_000_000 {
        if rng.below(2) == 0 && !live.is_empty() {
            let j = rng.below(live.len() as u64) as usize;
            let k = live.swap_remove(j);
            assert_eq!(e.delete(&key_of(k)), Status::Ok);
        } else {
            let len = 20 + rng.below(1000) as usize;
            if e.put(&key_of(next), &buf[..len]) == Status::Ok {
                live.push(next);
            }
            next += 1;
        }
    }
    let s1 = e.stats();
    let allocs = s1.slab_allocs - s0.slab_allocs;
    let transfers = (s1.pool.refills + s1.pool.spills) - (s0.pool.refills + s0.pool.spills);
    // Delete half of what is left so there is plenty to merge.
    for k in live.iter().step_by(2) {
        e.delete(&key_of(*k));
    }
    e.flush_slab_cache();
    let rep = e.merge_slabs();
    e.check_invariants().expect("invariants after merge");
    let merged: u64 = rep.merged.iter().sum();
    json!({
        "workload": "64 MiB, ratio 0.1, fill to 50% with 20..1020 B values, then 1M ops (50% delete random live key, 50% insert new key)",
        "churn_allocs": allocs,
        "churn_transfers": transfers,
        "transfers_per_alloc": transfers as f64 / allocs.max(1) as f64,
        "merge_free_slots_scanned": rep.scanned,
        "merge_pairs_merged": merged,
        "merge_ms": rep.elapsed.as_secs_f64() * 1e3,
        "merge_ns_per_free_slot": rep.elapsed.as_secs_f64() * 1e9 / rep.scanned.max(1) as f64,
    })
}

fn lines_mode(args: &[String]) {
    if !cfg!(feature = "accounting") {
        eprintln!("lines mode needs --features accounting");
        std::process::exit(2);
    }
    let out = arg(args, "--out").unwrap_or_else(|| "results/engine_lines.json".into());
    let mem: usize = 32 << 20;
    let mut series = Vec::new();
    let configs: &[(usize, f64, usize)] = &[
        (10, 0.5, 20),
        (10, 0.7, 20),
        (10, 0.8, 20),
        (10, 0.9, 20),
        (10, 0.8, 0),
        (10, 0.8, 10),
        (10, 0.8, 50),
        (10, 0.3, 20),
        (10, 0.2, 20),
        (10, 0.1, 20),
        (10, 0.05, 20),
        (254, 0.02, 20),
        (254, 0.05, 20),
        (254, 0.1, 20),
    ];
    let mut max_util_10b: (f64, f64) = (0.0, 0.0);
    for &(kv, ratio, inline) in configs {
        let t = Instant::now();
        let (pts, max_util) = lines_sweep(mem, kv, ratio, inline);
        eprintln!(
            "lines: kv {kv} ratio {ratio} inline {inline}: max util {max_util:.3} ({:.1}s)",
            t.elapsed().as_secs_f64()
        );
        if kv == 10 && inline >= 10 && max_util > max_util_10b.0 {
            max_util_10b = (max_util, ratio);
        }
        series.push(json!({
            "kv_bytes": kv, "hash_index_ratio": ratio, "inline_threshold": inline,
            "max_utilization": max_util,
            "points": pts.iter().map(|p| json!({"utilization": p.0, "lines_per_get": p.1, "lines_per_put": p.2})).collect::<Vec<_>>(),
        }));
    }
    let slab = slab_churn();
    let v = json!({
        "mode": "lines (cargo feature accounting)",
        "region_bytes": mem,
        "key_bytes": 8,
        "series": series,
        "max_utilization_10b": max_util_10b.0,
        "max_utilization_10b_ratio": max_util_10b.1,
        "slab": slab,
    });
    std::fs::write(&out, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    eprintln!("wrote {out}");
}

// ---------------------------------------------------------------- throughput mode

const BATCH: usize = 256;

fn engine_batched(e: &mut Engine, keys: &[[u8; 8]], put: Option<u8>) -> (f64, Sink) {
    engine_batched_with(e, keys, put, BATCH, false)
}

/// Batched engine run: `batch` ops per call (<= BATCH), pipelined or grouped.
fn engine_batched_with(
    e: &mut Engine,
    keys: &[[u8; 8]],
    put: Option<u8>,
    batch: usize,
    grouped: bool,
) -> (f64, Sink) {
    let mut sink = Sink::default();
    let vals: [[u8; 2]; BATCH] = std::array::from_fn(|j| [put.unwrap_or(0), j as u8]);
    let mut ops: Vec<BatchOp<'_>> = Vec::with_capacity(BATCH);
    let t = Instant::now();
    for chunk in keys.chunks(batch) {
        ops.clear();
        match put {
            None => ops.extend(chunk.iter().map(|k| BatchOp::get(k))),
            Some(_) => ops.extend(chunk.iter().zip(&vals).map(|(k, v)| BatchOp::put(k, v))),
        }
        if grouped {
            e.execute_batch_grouped(&ops, &mut sink);
        } else {
            e.execute_batch(&ops, &mut sink);
        }
    }
    (keys.len() as f64 / t.elapsed().as_secs_f64() / 1e6, sink)
}

fn engine_single(e: &mut Engine, keys: &[[u8; 8]], put: Option<u8>) -> (f64, u64) {
    let mut out = [0u8; 64];
    let mut hits = 0u64;
    let t = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        match put {
            None => {
                if let Ok(n) = e.get(k, &mut out) {
                    hits += 1;
                    std::hint::black_box(&out[..n]);
                }
            }
            Some(v) => {
                if e.put(k, &[v, i as u8]) == Status::Ok {
                    hits += 1;
                }
            }
        }
    }
    (keys.len() as f64 / t.elapsed().as_secs_f64() / 1e6, hits)
}

fn hb_run(m: &mut HashMap<[u8; 8], [u8; 2]>, keys: &[[u8; 8]], put: Option<u8>) -> (f64, u64) {
    let mut hits = 0u64;
    let t = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        match put {
            None => {
                if let Some(v) = m.get(k) {
                    hits += 1;
                    std::hint::black_box(v);
                }
            }
            Some(v) => {
                m.insert(*k, [v, i as u8]);
                hits += 1;
            }
        }
    }
    (keys.len() as f64 / t.elapsed().as_secs_f64() / 1e6, hits)
}

// A benchmark or test scenario read top to bottom: exempt from the function-length
// guard (Cargo.toml [workspace.lints]), which is for library and binary code.
#[allow(clippy::too_many_lines)]
fn throughput_mode(args: &[String]) {
    let out = arg(args, "--out").unwrap_or_else(|| "results/engine.json".into());
    let lines_path = arg(args, "--lines").unwrap_or_else(|| "results/engine_lines.json".into());
    let n: u64 = arg(args, "--n")
        .map(|s| s.parse().unwrap())
        .unwrap_or(10_000_000);
    let nops: usize = arg(args, "--ops")
        .map(|s| s.parse().unwrap())
        .unwrap_or(10_000_000);
    let reps: usize = arg(args, "--reps").map(|s| s.parse().unwrap()).unwrap_or(3);
    let ratio: f64 = arg(args, "--ratio")
        .map(|s| s.parse().unwrap())
        .unwrap_or(0.8);
    let inline: usize = arg(args, "--inline")
        .map(|s| s.parse().unwrap())
        .unwrap_or(20);
    let util = 0.5;
    let mem = ((n as f64 * 10.0 / util) as usize).next_multiple_of(2 << 20);
    let cfg = EngineConfig {
        mem_bytes: mem,
        hash_index_ratio: ratio,
        inline_threshold: inline,
        max_slab_class: 4096,
    };

    eprintln!(
        "throughput: {n} KVs of 10 B, region {} MiB, ratio {ratio}, inline {inline}",
        mem >> 20
    );
    let mut e = Engine::new(region(mem), &cfg).unwrap();
    let all: Vec<[u8; 8]> = (0..n).map(key_of).collect();
    let (insert_mops, s) = engine_batched(&mut e, &all, Some(1));
    assert_eq!(s.hits, n, "load hit out-of-memory");
    let st = e.stats();
    eprintln!(
        "  loaded: util {:.3}, chained buckets {}, insert {insert_mops:.2} Mops",
        st.memory_utilization, st.chained_buckets
    );
    let thp = std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("AnonHugePages"))
                .map(|l| l.to_string())
        })
        .unwrap_or_default();
    eprintln!("  {thp}");
    let mut hb: HashMap<[u8; 8], [u8; 2]> = HashMap::with_capacity(n as usize);
    let t = Instant::now();
    for (i, k) in all.iter().enumerate() {
        hb.insert(*k, [1, i as u8]);
    }
    drop(all);
    let hb_insert_mops = n as f64 / t.elapsed().as_secs_f64() / 1e6;

    let mut rng = SplitMix64::new(2024);
    let uniform: Vec<[u8; 8]> = (0..nops).map(|_| key_of(rng.below(n))).collect();
    let t = Instant::now();
    let z = Zipf::new(n, 0.99);
    let zipf: Vec<[u8; 8]> = (0..nops).map(|_| key_of(z.next(&mut rng))).collect();
    eprintln!(
        "  zipf generator ready in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    let mut res = serde_json::Map::new();
    for (dname, seq) in [("uniform", &uniform), ("zipf099", &zipf)] {
        let mut m: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
        for r in 0..reps {
            let v = (r + 2) as u8;
            let (a, s) = engine_batched(&mut e, seq, None);
            assert_eq!(s.hits, seq.len() as u64);
            m.entry("engine_get").or_default().push(a);
            let (a32, _) = engine_batched_with(&mut e, seq, None, 32, false);
            m.entry("engine_get_batch32").or_default().push(a32);
            let (ag, _) = engine_batched_with(&mut e, seq, None, BATCH, true);
            m.entry("engine_get_grouped").or_default().push(ag);
            let (b, h) = engine_single(&mut e, seq, None);
            assert_eq!(h, seq.len() as u64);
            m.entry("nobatch_get").or_default().push(b);
            let (c, h) = hb_run(&mut hb, seq, None);
            assert_eq!(h, seq.len() as u64);
            m.entry("hashbrown_get").or_default().push(c);
            let (d, s) = engine_batched(&mut e, seq, Some(v));
            assert_eq!(s.hits, seq.len() as u64);
            m.entry("engine_put").or_default().push(d);
            let (f, _) = engine_single(&mut e, seq, Some(v));
            m.entry("nobatch_put").or_default().push(f);
            let (g, _) = hb_run(&mut hb, seq, Some(v));
            m.entry("hashbrown_put").or_default().push(g);
            eprintln!("  {dname} rep {r}: get engine {a:.2} (batch32 {a32:.2}, grouped {ag:.2}) nobatch {b:.2} hashbrown {c:.2} | put engine {d:.2} nobatch {f:.2} hashbrown {g:.2} Mops");
        }
        let mut o = serde_json::Map::new();
        let rel = |a: &str, b: &str| -> f64 {
            median(m[a].iter().zip(&m[b]).map(|(x, y)| x / y).collect())
        };
        o.insert(
            "get_speedup_vs_hashbrown".into(),
            json!(rel("engine_get", "hashbrown_get")),
        );
        o.insert(
            "get_speedup_vs_nobatch".into(),
            json!(rel("engine_get", "nobatch_get")),
        );
        o.insert(
            "put_speedup_vs_hashbrown".into(),
            json!(rel("engine_put", "hashbrown_put")),
        );
        for (k, v) in m {
            o.insert(format!("{k}_mops"), json!(median(v.clone())));
            o.insert(format!("{k}_runs"), json!(v));
        }
        res.insert(dname.into(), Value::Object(o));
    }
    e.check_invariants()
        .expect("invariants after throughput runs");
    let st = e.stats();

    let memref = memlat();
    let lines: Value = std::fs::read_to_string(&lines_path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    // Lines per op at 50% utilization for the throughput configuration.
    let (mut lpg, mut lpp) = (f64::NAN, f64::NAN);
    if let Some(series) = lines["series"].as_array() {
        for s in series {
            if s["kv_bytes"] == 10
                && s["hash_index_ratio"].as_f64() == Some(ratio)
                && s["inline_threshold"] == inline as u64
            {
                for p in s["points"].as_array().unwrap() {
                    if (p["utilization"].as_f64().unwrap() - 0.5).abs() < 1e-9 {
                        lpg = p["lines_per_get"].as_f64().unwrap_or(f64::NAN);
                        lpp = p["lines_per_put"].as_f64().unwrap_or(f64::NAN);
                    }
                }
            }
        }
    }
    let u = &res["uniform"];
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let v = json!({
        "engine_get_mops": u["engine_get_mops"],
        "engine_put_mops": u["engine_put_mops"],
        "hashbrown_get_mops": u["hashbrown_get_mops"],
        "hashbrown_put_mops": u["hashbrown_put_mops"],
        "nobatch_get_mops": u["nobatch_get_mops"],
        "nobatch_put_mops": u["nobatch_put_mops"],
        "engine_get_zipf_mops": res["zipf099"]["engine_get_mops"],
        "engine_put_zipf_mops": res["zipf099"]["engine_put_mops"],
        "hashbrown_get_zipf_mops": res["zipf099"]["hashbrown_get_mops"],
        "nobatch_get_zipf_mops": res["zipf099"]["nobatch_get_mops"],
        "get_speedup_vs_hashbrown": u["get_speedup_vs_hashbrown"],
        "get_speedup_vs_nobatch": u["get_speedup_vs_nobatch"],
        "put_speedup_vs_hashbrown": u["put_speedup_vs_hashbrown"],
        "engine_insert_mops": insert_mops,
        "hashbrown_insert_mops": hb_insert_mops,
        "lines_per_get": lpg,
        "lines_per_put": lpp,
        "max_utilization_10b": lines["max_utilization_10b"],
        "max_utilization_10b_hash_index_ratio": lines["max_utilization_10b_ratio"],
        "slab_transfers_per_alloc": lines["slab"]["transfers_per_alloc"],
        "merge_ns_per_free_slot": lines["slab"]["merge_ns_per_free_slot"],
        "throughput": Value::Object(res),
        "memory_reference": memref,
        "lines": lines,
        "config": {
            "kvs": n, "kv_bytes": 10, "key_bytes": 8, "value_bytes": 2, "ops_per_run": nops, "reps": reps,
            "batch_ops_per_call": BATCH, "prefetch_group": kvengine::batch::GROUP,
            "mem_bytes": mem, "hash_index_ratio": ratio, "inline_threshold": inline, "max_slab_class": 4096,
            "memory_utilization_after_load": st.memory_utilization, "chained_buckets": st.chained_buckets,
            "hashbrown": "hashbrown 0.15 HashMap<[u8;8],[u8;2]>, default hasher (foldhash)",
            "zipf": "YCSB zipfian theta 0.99 over the same keys (rank 0 hottest; keys are already scattered by key_of)",
        },
        "command": arg(args, "--cmd").unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" ")),
        "machine": { "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0), "cpu_model": cpu },
        "date": date,
    });
    std::fs::write(&out, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    eprintln!("wrote {out}");
    let dir = std::path::Path::new(&out)
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    if let Err(err) = plots(&v, &dir) {
        eprintln!("plotting failed: {err}");
    }
}

// ---------------------------------------------------------------- plots

// A benchmark or test scenario read top to bottom: exempt from the function-length
// guard (Cargo.toml [workspace.lints]), which is for library and binary code.
#[allow(clippy::too_many_lines)]
fn plots(v: &Value, dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let colors = [
        RED,
        BLUE,
        GREEN,
        MAGENTA,
        CYAN,
        BLACK,
        RGBColor(255, 140, 0),
        RGBColor(128, 0, 128),
        RGBColor(0, 128, 128),
        RGBColor(128, 128, 0),
    ];
    if let Some(series) = v["lines"]["series"].as_array() {
        for (metric, title, file) in [
            (
                "lines_per_get",
                "Distinct 64 B lines per GET",
                "engine_lines_get.png",
            ),
            (
                "lines_per_put",
                "Distinct 64 B lines per PUT (insert)",
                "engine_lines_put.png",
            ),
        ] {
            for kv in [10u64, 254] {
                let path = dir.join(file.replace(".png", &format!("_{kv}b.png")));
                let root = BitMapBackend::new(&path, (900, 560)).into_drawing_area();
                root.fill(&WHITE)?;
                let sel: Vec<&Value> = series.iter().filter(|s| s["kv_bytes"] == kv).collect();
                let ymax = sel
                    .iter()
                    .flat_map(|s| {
                        s["points"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter_map(|p| p[metric].as_f64())
                    })
                    .filter(|y| y.is_finite())
                    .fold(1.0f64, f64::max)
                    .min(12.0);
                let mut chart = ChartBuilder::on(&root)
                    .caption(format!("{title}, {kv} B KVs"), ("sans-serif", 22))
                    .margin(12)
                    .x_label_area_size(40)
                    .y_label_area_size(50)
                    .build_cartesian_2d(0.0f64..0.95, 0.0f64..ymax * 1.1)?;
                chart
                    .configure_mesh()
                    .x_desc("memory utilization")
                    .y_desc("lines / op")
                    .draw()?;
                for (i, s) in sel.iter().enumerate() {
                    let c = colors[i % colors.len()];
                    let pts: Vec<(f64, f64)> = s["points"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter_map(|p| Some((p["utilization"].as_f64()?, p[metric].as_f64()?)))
                        .filter(|p| p.1.is_finite() && p.0 <= 0.9 + 1e-9)
                        .collect();
                    chart
                        .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
                        .label(format!(
                            "ratio {} inline {}",
                            s["hash_index_ratio"], s["inline_threshold"]
                        ))
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                        });
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .position(SeriesLabelPosition::UpperLeft)
                    .draw()?;
                root.present()?;
            }
        }
    }
    // Throughput bars.
    let path = dir.join("engine_throughput.png");
    let root = BitMapBackend::new(&path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let groups = [
        ("GET uniform", "uniform", "get"),
        ("GET zipf .99", "zipf099", "get"),
        ("PUT uniform", "uniform", "put"),
        ("PUT zipf .99", "zipf099", "put"),
    ];
    let impls = [
        ("engine batched", "engine"),
        ("engine per-op", "nobatch"),
        ("hashbrown", "hashbrown"),
    ];
    let mut ymax: f64 = 1.0;
    for (_, d, op) in groups {
        for (_, im) in impls {
            ymax = ymax.max(
                v["throughput"][d][format!("{im}_{op}_mops")]
                    .as_f64()
                    .unwrap_or(0.0),
            );
        }
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Single-core throughput, 10 M KVs of 10 B at 50% utilization (median)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0f64..(groups.len() as f64 * 4.0), 0.0f64..ymax * 1.15)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let g = (x / 4.0).floor() as usize;
            if (x - (g as f64 * 4.0 + 1.5)).abs() < 0.6 && g < groups.len() {
                groups[g].0.to_string()
            } else {
                String::new()
            }
        })
        .y_desc("Mops")
        .draw()?;
    for (k, (label, im)) in impls.iter().enumerate() {
        let c = colors[k];
        let bars: Vec<Rectangle<(f64, f64)>> = groups
            .iter()
            .enumerate()
            .map(|(g, (_, d, op))| {
                let y = v["throughput"][*d][format!("{im}_{op}_mops")]
                    .as_f64()
                    .unwrap_or(0.0);
                let x0 = g as f64 * 4.0 + 0.3 + k as f64;
                Rectangle::new([(x0, 0.0), (x0 + 0.9, y)], c.filled())
            })
            .collect();
        chart
            .draw_series(bars)?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Reference: random 64 B line reads in a 192 MiB region, dependent
/// (pointer chase), independent, and with 32 prefetches in flight.
fn memlat() -> Value {
    let bytes = 192usize << 20;
    let mut r = region(bytes);
    let lines = bytes / 64;
    let mem = r.as_mut_slice();
    // A random cyclic permutation of lines (Sattolo).
    let mut perm: Vec<u32> = (0..lines as u32).collect();
    let mut rng = SplitMix64::new(99);
    for i in (1..lines).rev() {
        let j = rng.below(i as u64) as usize;
        perm.swap(i, j);
    }
    for i in 0..lines {
        mem[i * 64..i * 64 + 4].copy_from_slice(&perm[i].to_le_bytes());
    }
    let n = 5_000_000usize;
    let t = Instant::now();
    let mut p = 0usize;
    for _ in 0..n {
        p = u32::from_le_bytes(mem[p * 64..p * 64 + 4].try_into().unwrap()) as usize;
    }
    std::hint::black_box(p);
    let dep = n as f64 / t.elapsed().as_secs_f64() / 1e6;
    let idx: Vec<usize> = (0..n)
        .map(|_| rng.below(lines as u64) as usize * 64)
        .collect();
    let t = Instant::now();
    let mut sum = 0u64;
    for &o in &idx {
        sum += u64::from(mem[o]);
    }
    std::hint::black_box(sum);
    let indep = n as f64 / t.elapsed().as_secs_f64() / 1e6;
    let t = Instant::now();
    let mut sum = 0u64;
    for (k, &o) in idx.iter().enumerate() {
        if let Some(&f) = idx.get(k + 32) {
            kvengine::batch::prefetch_hint(mem, f);
        }
        sum += u64::from(mem[o]);
    }
    std::hint::black_box(sum);
    let pf = n as f64 / t.elapsed().as_secs_f64() / 1e6;
    eprintln!(
        "memlat: dependent {dep:.1} M/s, independent {indep:.1} M/s, prefetch-32 {pf:.1} M/s"
    );
    json!({"dependent_mlines_s": dep, "independent_mlines_s": indep, "prefetch32_mlines_s": pf})
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("lines") => lines_mode(&args),
        Some("throughput") => throughput_mode(&args),
        Some("getloop") => {
            // Profiling aid: load, then only batched GETs.
            let n: u64 = arg(&args, "--n")
                .map(|s| s.parse().unwrap())
                .unwrap_or(10_000_000);
            let mem = ((n as f64 * 20.0) as usize).next_multiple_of(2 << 20);
            let cfg = EngineConfig {
                mem_bytes: mem,
                hash_index_ratio: 0.8,
                inline_threshold: 20,
                max_slab_class: 4096,
            };
            let mut e = Engine::new(region(mem), &cfg).unwrap();
            let all: Vec<[u8; 8]> = (0..n).map(key_of).collect();
            engine_batched(&mut e, &all, Some(1));
            let mut rng = SplitMix64::new(5);
            let nops: usize = arg(&args, "--ops")
                .map(|s| s.parse().unwrap())
                .unwrap_or(10_000_000);
            let seq: Vec<[u8; 8]> = (0..nops).map(|_| key_of(rng.below(n))).collect();
            macro_rules! variant {
                ($name:expr, $a:expr, $b:expr) => {{
                    let mut sink = Sink::default();
                    let mut ops: Vec<BatchOp<'_>> = Vec::with_capacity(BATCH);
                    let t = Instant::now();
                    for chunk in seq.chunks(BATCH) {
                        ops.clear();
                        ops.extend(chunk.iter().map(|k| BatchOp::get(k)));
                        e.execute_pipelined::<$a, $b, _>(&ops, &mut sink);
                    }
                    eprint!(
                        "{} {:.2}  ",
                        $name,
                        seq.len() as f64 / t.elapsed().as_secs_f64() / 1e6
                    );
                }};
            }
            if std::env::var("AB").is_ok() {
                // A/B aid: default pipeline GET and batched PUT, 3 runs each.
                let mut g = Vec::new();
                let mut p = Vec::new();
                for r in 0..3 {
                    g.push(engine_batched(&mut e, &seq, None).0);
                    p.push(engine_batched(&mut e, &seq, Some(r as u8)).0);
                }
                println!("get {:.2} put {:.2}", median(g), median(p));
                return;
            }
            if std::env::var("PUTLOOP").is_ok() {
                for _ in 0..5 {
                    let (p, _) = engine_batched(&mut e, &seq, Some(3));
                    eprintln!("put {p:.2}");
                }
                return;
            }
            for _ in 0..3 {
                variant!("16/8", 16, 8);
                variant!("24/8", 24, 8);
                variant!("32/8", 32, 8);
                variant!("32/12", 32, 12);
                variant!("40/8", 40, 8);
                variant!("48/12", 48, 12);
                variant!("48/16", 48, 16);
                let (g, _) = engine_batched_with(&mut e, &seq, None, BATCH, true);
                eprintln!("grouped {g:.2}");
            }
        }
        Some("memlat") => {
            memlat();
        }
        _ => {
            eprintln!("usage: engine_bench {{lines|throughput|memlat|getloop}} [--out FILE] [--lines FILE] [--n KVS] [--ops N] [--reps R] [--ratio F] [--inline B] [--cmd TEXT]");
            std::process::exit(2);
        }
    }
}
