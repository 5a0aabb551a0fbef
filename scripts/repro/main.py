#!/usr/bin/env python3
"""Regenerates the evaluation (called by scripts/reproduce.sh; docs/BENCHMARKS.md):
every KV-Direct figure and table this software can reproduce, YCSB A-F, and the peers
measured on the same machine in the same run. One line per step with progress; each
figure is OUT/paper/<id>.json + .png, the peers OUT/peers.json + .png, and the index
OUT/README.md.

  --quick       small sizes, one repetition (a smoke test of the pipeline, <= 5 min)
  --out DIR     where results go (default: results/)
  --only IDS    comma-separated step ids (e.g. fig09,peers): run those, keep the others
  --index-only  rewrite README.md from the files on disk (OUT/paper/run.json is the
                last run's command, duration and step times), with the paper's claims
                of scripts/repro/paper.py (also written into each figure's `paper`),
                and redraw every PNG from its JSON's `plot` (paper_plot)
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Ctx, log, machine, rel, stall_probe, stalls_summary  # noqa: E402
import engine_figs  # noqa: E402
import live_figs  # noqa: E402
import peers  # noqa: E402
import readme  # noqa: E402
import ycsb_figs  # noqa: E402

# (id, label, function): each returns {figure id: figure dict} (or writes its own).
STEPS = [
    ("fig06", "fig 6: lines vs inline threshold and utilization", engine_figs.fig06),
    ("fig09", "fig 9: lines vs utilization and hash index ratio", engine_figs.fig09),
    ("fig10", "fig 10: optimal hash index ratio", engine_figs.fig10),
    ("fig11", "fig 11: lines by operation type", engine_figs.fig11),
    ("fig12", "fig 12: slab merge time", live_figs.fig12),
    ("fig13", "fig 13a/b + table 2: out-of-order engine, vector ops", live_figs.fig13_table2),
    ("fig14", "fig 14 + tables 5-6: load dispatch model", engine_figs.fig14),
    ("fig15", "fig 15: throughput and latency vs batch size", live_figs.fig15),
    ("fig16", "figs 16-17: YCSB read/write-intensive, uniform/long-tail", ycsb_figs.fig16_17),
    ("ycsb", "YCSB A-F presets", ycsb_figs.ycsb_all),
    ("fig20", "fig 20: worker lcores", live_figs.fig20),
    ("peers", "peers: Redis, memcached, testpmd I/O ceiling", peers.peers),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(common.ROOT, "results"))
    ap.add_argument("--only", default="")
    ap.add_argument("--command", default=None, help="the command to record (set by reproduce.sh)")
    ap.add_argument("--index-only", action="store_true")
    a = ap.parse_args()
    bin_dir = os.environ.get("KVD_BIN_DIR", os.path.join(common.ROOT, "target/release"))
    if a.index_only:
        readme.refresh_claims(os.path.abspath(a.out))
        readme.redraw(os.path.abspath(a.out), os.path.join(bin_dir, "paper_plot"))
        readme.write(os.path.abspath(a.out))
        return
    only = [s for s in a.only.split(",") if s]
    unknown = [s for s in only if s not in {i for i, _, _ in STEPS}]
    if unknown:
        sys.exit(f"reproduce: unknown step(s) {unknown}; steps: {[i for i, _, _ in STEPS]}")
    cmd = a.command or "scripts/reproduce.sh " + " ".join(sys.argv[1:])
    ctx = Ctx(a.quick, os.path.abspath(a.out), bin_dir, cmd)
    ctx.tmp = tempfile.mkdtemp(prefix="kvd-repro-")
    ctx.shared = {}
    steps = [s for s in STEPS if not only or s[0] in only]
    total = len(steps) + 2
    t0 = time.time()
    m = machine()
    log(f"reproduce ({ctx.mode}): {m['cpu']}, {m['cores']} cores, load {m['loadavg']} -> {rel(ctx.out)}")
    log(f"[1/{total}] platform stall probe")
    ctx.stalls = stall_probe(ctx, ctx.pick(1, 3))
    log(f"  {stalls_summary(ctx.stalls)}")
    failed = []
    timings = {}
    for n, (sid, label, fn) in enumerate(steps, start=2):
        ts = time.time()
        log(f"[{n}/{total}] {label} ... ({ts - t0:.0f} s elapsed)")
        try:
            figs = fn(ctx)
            if figs and "numbers" in figs:
                figs = {sid: figs}
            for fid, fig in (figs or {}).items():
                common.write_figure(ctx, fid, fig)
        except Exception as e:  # one failed step must not lose the others
            failed.append(sid)
            log(f"  FAILED: {e}")
            traceback.print_exc()
        timings[sid] = round(time.time() - ts, 1)
        log(f"  done in {timings[sid]:.0f} s")
    log(f"[{total}/{total}] results index")
    run = {"command": ctx.command, "mode": ctx.mode, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
           "seconds": round(time.time() - t0), "step_seconds": timings, "failed": failed,
           "machine_at_start": m, "machine_at_end": machine(), "platform_stalls_at_start": ctx.stalls}
    with open(os.path.join(ctx.paper_dir, "run.json"), "w") as f:
        json.dump(run, f, indent=1)
    readme.write(ctx.out)
    shutil.rmtree(ctx.tmp, ignore_errors=True)
    log(f"reproduce: {len(steps) - len(failed)}/{len(steps)} steps in {time.time() - t0:.0f} s"
        + (f"; FAILED: {', '.join(failed)}" if failed else "") + f" -> {rel(os.path.join(ctx.out, 'README.md'))}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
