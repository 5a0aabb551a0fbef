"""Writes OUT/README.md, the results index: a summary table (the paper's claim against
ours), then one section per figure or table with its picture, our numbers, the
paper's claim (with its figure number and where the wording comes from) and what
differs. Built from the JSON files on disk, so figures of an earlier run that a
`--only` run did not redo stay listed (with their own dates).
"""
import glob
import json
import os
import subprocess

from common import stalls_summary
from paper import claim

# Sections in order: (figure id, JSON path relative to OUT).
FIGURES = [("fig06", "paper/fig06.json"), ("fig09", "paper/fig09.json"), ("fig10", "paper/fig10.json"),
           ("fig11", "paper/fig11.json"), ("fig12", "paper/fig12.json"), ("fig13", "paper/fig13.json"),
           ("table2", "paper/table2.json"), ("fig14", "paper/fig14.json"), ("fig15", "paper/fig15.json"),
           ("fig16", "paper/fig16.json"), ("fig17", "paper/fig17.json"), ("ycsb", "paper/ycsb.json"),
           ("fig20", "paper/fig20.json"), ("peers", "peers.json")]

# A stall share above this at the start marks the run as taken on a busy machine.
BUSY_SHARE = 0.05

TABLE_TITLES = {"table5_optimal_dispatch_ratio": "Table 5 analog: optimal load dispatch ratio (model)",
                "table6_gain_over_pcie_only": "Table 6 analog: throughput at the optimal ratio over PCIe only (model)",
                "table2_gbps": "Table 2 analog: GB/s of vector data updated"}

NOT_REPRODUCIBLE = [
    "**Absolute rates.** The paper's 180 Mops per NIC comes from an FPGA pipeline at its clock rate with "
    "PCIe DMA to host memory; here one general-purpose core of a shared 2-vCPU VM does all the work, and "
    "the load generator runs on the other. Compare ratios within one run, not absolute numbers.",
    "**PCIe and the NIC's DRAM.** There is no PCIe hop between the KV processor and host memory and no NIC "
    "DRAM: memory cost is counted as distinct 64 B lines (Figs. 6-11), the load dispatcher (Fig. 14, "
    "Tables 5-6) is an analytic model, and the out-of-order engine's gain (Fig. 13) is small because a "
    "stalled op waits for CPU work, not a PCIe round trip.",
    "**Scale.** The slab merge (Fig. 12) runs on stores of at most 512 MiB (this VM's hugepages), and its "
    "4 G-slot figure is an extrapolation; multi-NIC scaling (Fig. 20) stops at 2 worker lcores on 2 cores, "
    "with the load generator sharing a core.",
    "**Tail latency.** The paper's sub-10 us tail is a property of dedicated hardware; on this VM the "
    "platform itself takes the CPU away for 0.1-35 ms now and then (the stall probe beside every latency "
    "figure), and the p99 follows those gaps.",
    "**YCSB E** needs range scans, which neither KV-Direct nor this protocol has; D has no inserts (the "
    "key set is fixed) and F is the server-side fetch-add.",
]


def fmt(v):
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 1:
            return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
        return f"{v:.3g}"
    return str(v)


def load(out, path):
    try:
        with open(os.path.join(out, path)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def headline(fig, n=2):
    items = list(fig["numbers"].items())[:n]
    return "; ".join(f"{k} = {fmt(v)}" for k, v in items)


def section(fid, path, fig):
    p = fig["paper"]
    lines = [f"## {fig['title']}", "",
             f"![{fid}]({path[:-5]}.png)", "",
             f"**Paper ({p['ref']}; source: {p['source']}):** {p['claim']}", "",
             "**Ours:**", "", "| figure | value | what |", "|---|---:|---|"]
    for k, v in fig["numbers"].items():
        lines.append(f"| `{k}` | {fmt(v)} | {fig.get('numbers_doc', {}).get(k, '')} |")
    for name, t in fig.get("tables", {}).items():
        lines += ["", f"*{TABLE_TITLES.get(name, name)}*", "", "| " + " | ".join(t["columns"]) + " |",
                  "|" + "---|" * len(t["columns"])]
        lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in t["rows"]]
    lines += ["", f"**What differs:** {fig['differs']}", ""]
    if "platform_stalls" in fig:
        lines += [f"Platform stall probe (cpu_stalls, same step): {stalls_summary(fig['platform_stalls'])}.", ""]
    m = fig["machine"]
    lines += [f"`{path}` — `{fig['command']}` ({fig['mode']}, {fig['date']}, {m['cpu']}, {m['cores']} cores, "
              f"load {m['loadavg']})", ""]
    return lines


def refresh_claims(out):
    """Rewrites the `paper` field of every figure on disk from paper.py (text only: the
    claims are not measurements, so a corrected claim needs no new run)."""
    for fid, path in FIGURES:
        fig = load(out, path)
        if fig is not None and fig.get("paper") != claim(fid):
            fig["paper"] = claim(fid)
            with open(os.path.join(out, path), "w") as f:
                json.dump(fig, f, indent=1)


def redraw(out, paper_plot):
    """Redraws every figure's PNG from the `plot` object of its JSON with the
    `paper_plot` binary (a change of the plotting code needs no new run)."""
    for _, path in FIGURES:
        src = os.path.join(out, path)
        if os.path.exists(src):
            r = subprocess.run([paper_plot, src, src[:-len(".json")] + ".png"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"{path}: paper_plot failed: {r.stdout}")


def write(out):
    """Writes OUT/README.md from the figure files and OUT/paper/run.json."""
    figs = [(fid, path, load(out, path)) for fid, path in FIGURES]
    run = load(out, "paper/run.json") or {}
    doc = ["# Results index: the KV-Direct evaluation, reproduced in software", "",
           "Generated by `scripts/reproduce.sh` (docs/BENCHMARKS.md); do not edit by hand. Each figure is a "
           "JSON file (command, date, machine, configuration, every measured number, and the `plot` the PNG "
           "is drawn from) and a PNG. These machines are shared 2-vCPU VMs whose speed moves from run to run: "
           "compare ratios within one run.", ""]
    if run:
        m0, m1 = run["machine_at_start"], run["machine_at_end"]
        doc += [f"Last run: `{run['command']}` ({run['mode']}), started {run['started']}, took "
                f"{run['seconds'] / 60:.1f} min" + (f", failed steps: {', '.join(run['failed'])}" if run["failed"] else "")
                + f"; {m0['cpu']}, {m0['cores']} cores; load average {m0['loadavg']} at the start, "
                f"{m1['loadavg']} at the end.", "",
                f"Platform stall probe at the start: {stalls_summary(run['platform_stalls_at_start'])}.", ""]
        busy = max(st["stalled_share"] for st in run["platform_stalls_at_start"].values())
        if busy > BUSY_SHARE:
            doc += [f"**The machine was busy with other work during this run**: a busy loop lost up to "
                    f"{100 * busy:.0f} % of its time at the start (an idle VM here loses 0.5-2 %), so the absolute "
                    "rates are low and noisy; the ratios within a step are what to compare. Re-run on a quiet "
                    "machine for absolute figures.", ""]
        doc += ["Step durations (s): " + ", ".join(f"{k} {v:.0f}" for k, v in run["step_seconds"].items()) + ".", ""]
    doc += ["## Summary: the paper's claim against ours", "", "| | paper | ours |", "|---|---|---|"]
    for fid, path, fig in figs:
        if fig is None:
            doc.append(f"| {fid} | | not generated |")
            continue
        claim = fig["paper"]["claim"].replace("|", "/")
        doc.append(f"| [{fig['paper']['ref']}](#{anchor(fig)}) | {claim[:160]}{'…' if len(claim) > 160 else ''} | "
                   f"{headline(fig)} |")
    doc += ["", "## What software on this machine cannot reproduce", ""] + [f"- {x}" for x in NOT_REPRODUCIBLE] + [""]
    for fid, path, fig in figs:
        if fig is not None:
            doc += section(fid, path, fig)
    others = sorted(f for f in glob.glob(os.path.join(out, "*.json")) if os.path.basename(f) != "peers.json")
    if others:
        doc += ["## Other results in this folder", "", "| file | command |", "|---|---|"]
        for f in others:
            cmd = (load(out, os.path.basename(f)) or {}).get("command", "")
            doc.append(f"| `{os.path.basename(f)}` | `{cmd}` |")
        doc.append("")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(doc))


def anchor(fig):
    """GitHub's anchor of the section heading."""
    h = fig["title"].lower()
    return "".join(c for c in h.replace(" ", "-") if c.isalnum() or c in "-_")
