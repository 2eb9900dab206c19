"""What a plan that warms many files before the program starts costs in front of it.

`plan --measure` keeps `willneed` (every file the recordings used, WILLNEED whole, `issue
before`) for programs that read thousands of small files (`grep -r` over 13,000). Every such
file costs the launcher an open, an identity check (`fstat`), the advice and a close before
the program is exec'd. The baseline is what the kernel strategy "WILLNEED whole files" of
`benchmarks/real_programs.py` does for the same files: a loop of open, `posix_fadvise
(WILLNEED)` and close, no identity check, then the program.

Rows, interleaved round by round, every file made cold before every run: the loop then
`true`, and `pagecast-launch PLAN -- true` (the launcher alone, as `pagecast run --plan`
execs it). Prints medians of the wall time and the launcher's ratio to the loop.

    PYTHONPATH=src python benchmarks/issue_before.py [--files 13000] [--rounds 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pagecast.bench.sparse_weights import cache_dir
from pagecast.launch.binary import launcher_path
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan
from pagecast.util.pagecache import make_cold


def tree(n: int) -> list[Path]:
    """``n`` files of 8 KiB under the benchmark cache, made once (100 to a directory)."""
    root = cache_dir() / "issue-before"
    files = [root / f"d{i // 100:04d}" / f"f{i:05d}" for i in range(n)]
    for i, f in enumerate(files):
        if not f.exists():
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(bytes([i % 251]) * 8192)
    return files


def loop_then_true(files: list[Path]) -> float:
    t0 = time.perf_counter()
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)
    subprocess.run(["true"], check=True)
    return time.perf_counter() - t0


def launcher_then_true(plan: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([launcher_path(), str(plan), "--", "true"], check=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=13000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    files = tree(args.files)
    plan = cache_dir() / "issue-before.plan"
    write_plan(plan, PlanDoc([FilePlan(str(f), FileIdentity.of(f), "warm", [(0, 2)]) for f in files], issue="before"))
    make_cold([*map(str, files), str(plan)], sync=True)  # once with write-back: the tree and plan may be new
    rows: dict[str, list[float]] = {
        "loop of open + WILLNEED + close, then true": [],
        "pagecast-launch PLAN -- true": [],
    }
    for _ in range(args.rounds):
        for name in rows:
            make_cold([*map(str, files), str(plan)])
            rows[name].append(loop_then_true(files) if name.startswith("loop") else launcher_then_true(plan))
    med = {k: statistics.median(v) for k, v in rows.items()}
    base, launch = med.values()
    report = {
        "files": len(files),
        "rounds": args.rounds,
        "median_s": med,
        "launcher_vs_loop": launch / base,
        "machine": {"cpus": os.cpu_count(), "load": os.getloadavg()},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{len(files)} files, {args.rounds} rounds, every file cold before every run, load {os.getloadavg()[0]:.1f}")
    for k, v in med.items():
        print(f"  {k}: {v * 1000:.1f} ms")
    print(f"  the launcher's time / the loop's: {launch / base:.2f} (below 1: cheaper in front of the program)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
