"""Shared pieces of scripts/reproduce.sh: the run context (mode, output folder,
binaries), machine facts, the platform stall probe, and writing one figure (JSON with
the command, date, machine and a `plot` object; the PNG drawn from it by the
`paper_plot` binary).

Every figure JSON has: figure, title, paper (ref, claim, source), command, date,
machine, mode, config, numbers (the headline figures: each finite and positive),
numbers_doc (what each is, with its unit), differs (one line: software vs FPGA),
data (everything measured) and plot; latency figures also carry platform_stalls.
"""
import json
import math
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # scripts/: benchlib


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Ctx:
    """The run: quick or full, where results go, which binaries run."""

    def __init__(self, quick, out, bin_dir, command):
        self.quick = quick
        self.out = out
        self.paper_dir = os.path.join(out, "paper")
        self.bin = bin_dir
        self.command = command
        self.tmp = None
        os.makedirs(self.paper_dir, exist_ok=True)

    @property
    def mode(self):
        return "quick" if self.quick else "full"

    def exe(self, name):
        return os.path.join(self.bin, name)

    def pick(self, quick, full):
        """`quick` in quick mode, `full` otherwise."""
        return quick if self.quick else full


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def loadavg():
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return []


def machine():
    """CPU model, cores, kernel, memory and the load average right now."""
    mem_gib = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "kernel": platform.release(),
            "mem_gib": mem_gib, "loadavg": loadavg()}


def stall_probe(ctx, secs):
    """The platform stall probe (pktgen's cpu_stalls) on every core at once: the share
    of time a clock-reading busy loop lost, and its longest gap. Run next to every
    latency figure: gaps the probe sees are the floor under any poll loop's tail."""
    procs = [subprocess.Popen(["taskset", "-c", str(c), ctx.exe("cpu_stalls"), str(secs)],
                              stdout=subprocess.PIPE, text=True)
             for c in range(os.cpu_count() or 1)]
    out = {}
    for c, p in enumerate(procs):
        stdout, _ = p.communicate()
        out[f"cpu{c}"] = json.loads(stdout)
    return out


def stalls_summary(st):
    """One line of the probe's figures."""
    return ", ".join(f"{c}: {100 * s['stalled_share']:.2f}% stalled, longest {s['longest_gap_us']:.0f} us"
                     for c, s in st.items())


def finite_positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def spread(runs):
    """The error bar of repeated runs: [min, max], or None for fewer than two."""
    runs = [r for r in runs or [] if r is not None]
    return [min(runs), max(runs)] if len(runs) > 1 else None


def _series(s, key, values):
    """One plotted series: (name, values) or (name, values, [spread per value])."""
    out = {"name": s[0], key: values}
    if len(s) > 2 and any(e is not None for e in s[2]):
        out["errors"] = [e if e is not None else None for e in s[2]]
    return out


def line(title, x_label, y_label, series, x_log2=False, y_log=False, legend="upper_left"):
    """A line panel: series = [(name, [(x, y), ...][, [[lo, hi] or None per point]]), ...];
    the optional third item draws error bars (the spread of the reps)."""
    return {"kind": "line", "title": title, "x_label": x_label, "y_label": y_label,
            "x_log2": x_log2, "y_log": y_log, "legend": legend,
            "series": [_series(s, "points", [[x, y] for x, y in s[1]]) for s in series]}


def bars(title, y_label, categories, series, y_log=False):
    """A grouped-bar panel: series = [(name, [value per category][, [[lo, hi] or None
    per category]]), ...]. On a log axis the values are drawn as dots, not bars."""
    return {"kind": "bar", "title": title, "y_label": y_label, "y_log": y_log,
            "categories": list(categories),
            "series": [_series(s, "values", list(s[1])) for s in series]}


def write_figure(ctx, fid, fig, path=None):
    """Writes figure `fid` (JSON + PNG) into the paper folder (or `path`); returns the
    JSON path. Adds command, date, machine and mode. Every number in `numbers` must
    be finite and positive: a figure that measured nothing is an error, not a file."""
    bad = {k: v for k, v in fig["numbers"].items() if not finite_positive(v)}
    if bad:
        raise RuntimeError(f"{fid}: numbers not finite and positive: {bad}")
    doc = {"figure": fid, "command": ctx.command,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": machine(), "mode": ctx.mode}
    doc.update(fig)
    path = path or os.path.join(ctx.paper_dir, f"{fid}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    png = path[:-5] + ".png"
    r = subprocess.run([ctx.exe("paper_plot"), path, png], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{fid}: paper_plot failed: {r.stdout}")
    return path


def run_json(cmd, timeout=900):
    """Runs `cmd` (a tool that prints progress on stderr); raises with its output when
    it fails."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}")
    return r.stdout


def rel(path):
    """`path` relative to the repository (for commands recorded in JSON)."""
    try:
        return os.path.relpath(path, ROOT)
    except ValueError:
        return path
