//! Slab service benchmark: the worker's throughput on a put/delete churn
//! (which drives the slab cache's refills and spills) with a service thread
//! merging and balancing the shared pool continuously, against no service
//! thread, in the same process, alternating, median of repeated runs.
//!
//! ```text
//! cargo build --release -p kvengine --example slab_bench
//! target/release/examples/slab_bench --reps 5 --ops 2000000 [--out results/slab_service.json] [--no-pin]
//! ```
//!
//! The worker is pinned to CPU 0 and the service thread to CPU 1 (unless
//! `--no-pin`); on a 2-core machine shared with other work both cores may
//! also run other processes, which the JSON records (`loadavg`).

use kvengine::{Engine, EngineConfig, Region, SlabService, Status, WorkerContention};
use kvload::{RandomSource, SplitMix64};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Pins the calling thread to `cpu`; false when that fails.
fn pin(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and
    // sched_setaffinity only read/write that local set (pid 0 = this thread).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// CPU time of the calling thread, seconds.
fn thread_cpu_s() -> f64 {
    // SAFETY: clock_gettime writes only the local timespec.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    }
}

struct Churn {
    e: Engine,
    live: Vec<u64>,
    next: u64,
    rng: SplitMix64,
    buf: Vec<u8>,
}

impl Churn {
    /// `ops` operations: half delete a random live key, half insert a new
    /// key with a 20..1020 B value. Returns (Mops, OOM count, share of
    /// the wall time the worker thread was on a CPU).
    fn run(&mut self, ops: usize) -> (f64, u64, f64) {
        let mut oom = 0;
        let t = Instant::now();
        let cpu0 = thread_cpu_s();
        for _ in 0..ops {
            if self.rng.next_u64() & 1 == 0 && !self.live.is_empty() {
                let i = self.rng.below(self.live.len() as u64) as usize;
                let k = self.live.swap_remove(i);
                let st = self.e.delete(&k.to_le_bytes());
                debug_assert_eq!(st, Status::Ok);
            } else {
                let len = 20 + self.rng.below(1000) as usize;
                match self.e.put(&self.next.to_le_bytes(), &self.buf[..len]) {
                    Status::Ok => self.live.push(self.next),
                    _ => oom += 1,
                }
                self.next += 1;
            }
        }
        let wall = t.elapsed().as_secs_f64();
        (ops as f64 / wall / 1e6, oom, (thread_cpu_s() - cpu0) / wall)
    }
}

fn diff(a: WorkerContention, b: WorkerContention) -> serde_json::Value {
    json!({
        "busy_refills": b.busy_refills - a.busy_refills,
        "busy_spills": b.busy_spills - a.busy_spills,
        "local_splits": b.local_splits - a.local_splits,
        "waits": b.waits - a.waits,
        "detached_waits": b.detached_waits - a.detached_waits,
        "wait_ns_total": b.wait_ns_total - a.wait_ns_total,
        "wait_ns_max_so_far": b.wait_ns_max,
    })
}

// A benchmark or test scenario read top to bottom: exempt from the function-length
// guard (Cargo.toml [workspace.lints]), which is for library and binary code.
#[allow(clippy::too_many_lines)]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = arg(&args, "--reps").map_or(5, |s| s.parse().unwrap());
    let ops: usize = arg(&args, "--ops").map_or(2_000_000, |s| s.parse().unwrap());
    let mem_mib: usize = arg(&args, "--mem-mib").map_or(64, |s| s.parse().unwrap());
    let do_pin = !args.iter().any(|a| a == "--no-pin");
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (worker_cpu, service_cpu) = (0usize, 1usize.min(ncpu - 1));
    let worker_pinned = do_pin && pin(worker_cpu);

    let cfg = EngineConfig {
        mem_bytes: mem_mib << 20,
        hash_index_ratio: 0.1,
        inline_threshold: 20,
        max_slab_class: 4096,
    };
    let e = Engine::new(Region::owned(cfg.mem_bytes), &cfg).unwrap();
    let mut w = Churn {
        e,
        live: Vec::new(),
        next: 0,
        rng: SplitMix64::new(42),
        buf: (0..1100u32).map(|i| i as u8).collect(),
    };
    // Fill until the frontier is used up (or memory is full), then delete
    // 30 % at random: refills must come from the lists and from splits.
    loop {
        let len = 20 + w.rng.below(1000) as usize;
        if w.e.put(&w.next.to_le_bytes(), &w.buf[..len]) != Status::Ok {
            break;
        }
        w.live.push(w.next);
        w.next += 1;
        if w.next % 1024 == 0 && w.e.stats().frontier_bytes == 0 {
            break;
        }
    }
    for _ in 0..w.live.len() * 3 / 10 {
        let i = w.rng.below(w.live.len() as u64) as usize;
        let k = w.live.swap_remove(i);
        w.e.delete(&k.to_le_bytes());
    }
    let st = w.e.stats();
    eprintln!(
        "slab_bench: {} MiB, {} live KVs, utilization {:.3}, frontier {} B; {reps} reps x {ops} ops",
        mem_mib,
        w.live.len(),
        st.memory_utilization,
        st.frontier_bytes
    );
    w.run(ops / 4); // warm-up

    let svc: SlabService = w.e.slab_service();
    let (mut no_merge, mut during, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut runs = Vec::new();
    let mut cpu_ratios = Vec::new();
    let mut merges_total = 0u64;
    let mut service_pinned = false;
    for r in 0..reps {
        // Alternate the order so drift in the engine's state cancels out.
        let mut pair = [0.0f64; 2];
        let mut cpu_pair = [0.0f64; 2];
        let mut run_json = json!({"rep": r});
        for phase in 0..2 {
            let with_service = (phase == 0) == (r % 2 == 1);
            let c0 = w.e.stats().contention;
            let p0 = w.e.stats().pool;
            let (mops, oom, cpu_share, merges, balance_splits, max_hold_ns) = if with_service {
                let stop = Arc::new(AtomicBool::new(false));
                let h = {
                    let (svc, stop) = (svc.clone(), Arc::clone(&stop));
                    std::thread::spawn(move || {
                        let pinned = do_pin && pin(service_cpu);
                        let (mut n, mut splits, mut hold) = (0u64, 0u64, 0u128);
                        while !stop.load(Ordering::Relaxed) {
                            let m = svc.merge_now();
                            let b = svc.balance();
                            n += 1;
                            splits += b.splits;
                            hold = hold
                                .max(m.max_lock_hold.as_nanos())
                                .max(b.max_lock_hold.as_nanos());
                        }
                        (n, splits, hold, pinned)
                    })
                };
                let (mops, oom, share) = w.run(ops);
                stop.store(true, Ordering::Relaxed);
                let (n, splits, hold, pinned) = h.join().unwrap();
                service_pinned = pinned;
                (mops, oom, share, n, splits, hold)
            } else {
                let (mops, oom, share) = w.run(ops);
                (mops, oom, share, 0, 0, 0)
            };
            let c1 = w.e.stats().contention;
            let p1 = w.e.stats().pool;
            let key = if with_service {
                "during_merge"
            } else {
                "no_merge"
            };
            run_json[key] = json!({
                "mops": mops, "worker_cpu_share": cpu_share,
                "mops_per_worker_cpu_second": mops / cpu_share,
                "oom": oom, "merges": merges,
                "balance_splits": balance_splits,
                "service_max_lock_hold_ns": max_hold_ns,
                "refills": p1.refills - p0.refills, "spills": p1.spills - p0.spills,
                "worker_splits_in_refill": p1.splits - p0.splits - balance_splits,
                "contention": diff(c0, c1),
            });
            pair[usize::from(with_service)] = mops;
            cpu_pair[usize::from(with_service)] = mops / cpu_share;
            merges_total += merges;
            eprintln!("  rep {r} {key}: {mops:.3} Mops (worker on CPU {:.0} % of the time), {merges} merges, oom {oom}", cpu_share * 100.0);
        }
        no_merge.push(pair[0]);
        during.push(pair[1]);
        ratios.push(pair[1] / pair[0]);
        cpu_ratios.push(cpu_pair[1] / cpu_pair[0]);
        runs.push(run_json);
    }
    let st = w.e.stats();
    w.e.check_invariants()
        .expect("invariants after the benchmark");
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let (a, b) = (median(no_merge.clone()), median(during.clone()));
    let v = json!({
        "command": args.join(" "),
        "workload": format!("{mem_mib} MiB region, ratio 0.1, inline 20, filled until the frontier is used up, 30 % deleted; then per run {ops} ops: 50 % delete a random live key, 50 % insert a new 8 B key with a 20..1020 B value"),
        "service_loop": "merge_now() then balance(), back to back, no sleep",
        "churn_mops_no_merge": a,
        "churn_mops_during_merge": b,
        "ratio": b / a,
        "ratio_median_per_run": median(ratios.clone()),
        "ratio_per_worker_cpu_second_median_per_run": median(cpu_ratios.clone()),
        "merges_completed": merges_total,
        "reps": reps,
        "no_merge_runs": no_merge,
        "during_merge_runs": during,
        "ratios_per_run": ratios,
        "runs": runs,
        "worker_contention_total": diff(WorkerContention::default(), st.contention),
        "machine": {
            "nproc": ncpu,
            "worker_cpu": if worker_pinned { json!(worker_cpu) } else { json!(null) },
            "service_cpu": if service_pinned { json!(service_cpu) } else { json!(null) },
            "note": "2 vCPUs shared with other processes: the service thread has its own CPU only if nproc >= 2 and nothing else runs there",
            "loadavg_at_end": loadavg.trim(),
        },
    });
    let text = serde_json::to_string_pretty(&v).unwrap();
    if let Some(out) = arg(&args, "--out") {
        std::fs::write(&out, &text).unwrap();
        eprintln!("wrote {out}");
    }
    println!("{text}");
}
