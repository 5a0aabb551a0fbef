#!/usr/bin/env python3
"""Checks the output of `scripts/reproduce.sh` (scripts/test.sh runs it after
`reproduce.sh --quick --out TMP`): every expected figure JSON and PNG exists and
parses, carries its command, date, machine and the paper's claim, every headline
number and every plotted value is finite and positive, latency figures carry the
platform stall probe, peers.json has its three ratios, README.md lists every
figure, and every passage a claim quotes (in double quotes) is word for word in the
papers (../shared/papers, or KVD_PAPERS; whitespace aside; skipped, and said so, where
the papers are not on the machine). Usage: check.py OUT. Prints `reproduce-check: N passed, M failed`; exit 1 on
any failure.
"""
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from readme import FIGURES  # noqa: E402

LATENCY = {"fig15", "fig16", "fig17", "ycsb", "peers"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAPERS = os.environ.get("KVD_PAPERS", os.path.join(os.path.dirname(ROOT), "shared", "papers"))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def papers_text():
    """All the papers' text with whitespace removed, or None without the papers."""
    try:
        names = sorted(n for n in os.listdir(PAPERS) if n.endswith((".txt", ".tex")))
    except OSError:
        return None
    return "".join("".join(open(os.path.join(PAPERS, n), encoding="utf-8").read().split())
                   for n in names) or None


def unquoted(claim, papers):
    """The passages of `claim` in double quotes that are not in the papers."""
    return [q for q in re.findall(r'"([^"]+)"', claim) if "".join(q.split()) not in papers]


def reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def check_figure(out, fid, path, readme):
    """The problems of one figure (empty: it passes)."""
    errs = []
    full = os.path.join(out, path)
    try:
        with open(full) as f:
            fig = json.load(f, parse_constant=reject_constant)
    except (OSError, ValueError) as e:
        return [f"{path}: {e}"]
    for k in ("command", "date", "machine", "paper", "numbers", "differs", "plot", "title"):
        if k not in fig:
            errs.append(f"{path}: no '{k}'")
    if errs:
        return errs
    if not fig["command"].startswith("scripts/reproduce.sh"):
        errs.append(f"{path}: command {fig['command']!r}")
    m = fig["machine"]
    if not m.get("cpu") or not positive(m.get("cores")):
        errs.append(f"{path}: machine {m}")
    if not fig["paper"].get("ref") or not fig["paper"].get("claim"):
        errs.append(f"{path}: paper claim missing")
    elif PAPER_TEXT is not None:
        for q in unquoted(fig["paper"]["claim"], PAPER_TEXT):
            errs.append(f"{path}: quoted as the paper's but not in {PAPERS}: \"{q[:80]}\"")
    if not fig["numbers"]:
        errs.append(f"{path}: no numbers")
    errs += [f"{path}: numbers.{k} = {v!r} is not finite and positive" for k, v in fig["numbers"].items()
             if not positive(v)]
    panels = fig["plot"].get("panels") or []
    if not panels:
        errs.append(f"{path}: plot has no panels")
    for i, p in enumerate(panels):
        vals = []
        for s in p.get("series", []):
            if p.get("kind") == "line":
                vals += [pt[1] for pt in s.get("points", [])] + [pt[0] for pt in s.get("points", [])
                                                                 if p.get("x_log2")]
                if not s.get("points"):
                    errs.append(f"{path}: panel {i} series {s.get('name')!r} is empty")
            else:
                vals += s.get("values", [])
        if not vals:
            errs.append(f"{path}: panel {i} has no values")
        errs += [f"{path}: panel {i} value {v!r} is not finite and positive" for v in vals if not positive(v)]
    if fid in LATENCY:
        st = fig.get("platform_stalls") or {}
        if not st or not all("stalled_share" in s and "longest_gap_us" in s for s in st.values()):
            errs.append(f"{path}: latency figure without the platform stall probe")
    if fid == "peers":
        errs += [f"{path}: {k} = {fig.get(k)!r}" for k in ("ratio_vs_redis_per_core", "ratio_vs_memcached_per_core",
                                                           "share_of_testpmd_io_limit") if not positive(fig.get(k))]
    png = full[:-5] + ".png"
    try:
        with open(png, "rb") as f:
            head = f.read(8)
        if head != PNG_MAGIC or os.path.getsize(png) < 2000:
            errs.append(f"{png}: not a PNG image")
    except OSError as e:
        errs.append(f"{png}: {e}")
    if f"]({path[:-5]}.png)" not in readme:
        errs.append(f"README.md: no picture of {fid}")
    if f"`{path}`" not in readme or f"## {fig['title']}" not in readme:
        errs.append(f"README.md: no section for {fid}")
    return errs


PAPER_TEXT = papers_text()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check.py OUT")
    out = sys.argv[1]
    try:
        readme = open(os.path.join(out, "README.md")).read()
    except OSError as e:
        readme = ""
        print(f"README.md: {e}")
    if PAPER_TEXT is None:
        print(f"SKIP paper quotes: no papers at {PAPERS} (set KVD_PAPERS)")
    passed = failed = 0
    for fid, path in FIGURES:
        errs = check_figure(out, fid, path, readme)
        if errs:
            failed += 1
            print(f"FAIL {fid}:\n  " + "\n  ".join(errs))
        else:
            passed += 1
    if not readme:
        failed += 1
    try:
        with open(os.path.join(out, "paper/run.json")) as f:
            run = json.load(f, parse_constant=reject_constant)
        if not run["command"].startswith("scripts/reproduce.sh") or f"`{run['command']}`" not in readme:
            raise ValueError("its command is not the index's last run")
        passed += 1
    except (OSError, ValueError, KeyError) as e:
        failed += 1
        print(f"FAIL run.json: {e}")
    print(f"reproduce-check: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
