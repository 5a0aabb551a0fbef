#!/usr/bin/env python3
"""Hardening figures (called by scripts/bench.sh hardening): the long live-fuzz run
(scripts/e2e/fuzz_live.sh with --fuzz FRAMES beside a verify workload, the accounting
invariant checked on the live dataplane afterwards), the soak (scripts/soak.py,
MINUTES), and the decoder fuzzers' last run (results/fuzz.json, from scripts/fuzz.sh).
Writes results/hardening.json; exits 1 when a run failed."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=10_000_000)
    ap.add_argument("--per-flush", type=int, default=32)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--out", default=os.path.join(ROOT, "results/hardening.json"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kvd-hardening-")
    fz = os.path.join(tmp, "fuzz_live.json")
    env = dict(os.environ, FUZZ_JSON=fz, FUZZ_PER_FLUSH=str(a.per_flush),
               FUZZ_DURATION=str(max(60, a.frames // 20_000)), FUZZ_SEED="11")
    t0 = time.time()
    live = subprocess.run([os.path.join(ROOT, "scripts/e2e/fuzz_live.sh"), str(a.frames)], env=env,
                          capture_output=True, text=True)
    print(live.stdout[-3000:], file=sys.stderr)
    live_ok = live.returncode == 0 and os.path.exists(fz)
    live_json = json.load(open(fz)) if live_ok else {"error": live.stdout[-2000:] + live.stderr[-2000:]}
    soak_out = os.path.join(ROOT, "results/soak.json")
    soak = subprocess.run([sys.executable, os.path.join(ROOT, "scripts/soak.py"), "--minutes", str(a.minutes),
                           "--out", soak_out])
    s = json.load(open(soak_out))
    fuzz_path = os.path.join(ROOT, "results/fuzz.json")
    decoders = json.load(open(fuzz_path)) if os.path.exists(fuzz_path) else {}
    out = {
        "command": "scripts/bench.sh hardening " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpus": os.cpu_count()},
        "fuzz_frames": live_json.get("fuzz_frames", 0),
        # fuzz_live.sh fails (and no summary is written) on a crash, an invariant
        # failure, a verify mismatch or a leak: the counts below are of the run it made.
        "crashes": 0 if live_ok else 1,
        "accounting_mismatches": 0 if live_ok else None,
        "verify_mismatches": live_json.get("verify_mismatches", 0) + s["verify_mismatches"],
        "mbuf_leak": live_json.get("mbuf_leak", 0) + s["mbuf_leak"],
        "soak_minutes": s["soak_minutes"],
        "soak_ops": s["soak_ops"],
        "soak_rss_growth_mb": s["soak_rss_growth_mb"],
        "soak_accounting_check": s["accounting_check"],
        "soak_failures": s["failures"],
        "fuzz_execs_per_target": decoders.get("fuzz_execs_per_target"),
        "fuzz_decoder_crashes": sum(t.get("crashes", 0) for t in decoders.get("targets", {}).values())
        if isinstance(decoders.get("targets"), dict) else None,
        "live_fuzz": live_json,
        "seconds": round(time.time() - t0),
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"hardening: {out['fuzz_frames']} fuzz frames, crashes {out['crashes']}, verify mismatches "
          f"{out['verify_mismatches']}, mbuf leak {out['mbuf_leak']}, soak {s['soak_ops']} ops in "
          f"{s['soak_minutes']} min, RSS growth {s['soak_rss_growth_mb']} MB -> {a.out}", file=sys.stderr)
    return 0 if live_ok and soak.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
