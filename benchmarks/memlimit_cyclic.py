"""A program that needs more memory than it gets: a file read by mmap pass after pass.

``workloads/cyclic_scan.c`` reads one byte of every page of a FILE_MIB file, in file order,
PASSES times, in a LIMIT memory cgroup (the kernel's LRU evicts exactly the part needed
next, so every pass reads the whole file again). Per round, each from a cold page cache,
interleaved:

- ``kernel``: ``pagecast run --memory LIMIT`` (the kernel alone under the limit: the baseline);
- ``pagecast``: ``pagecast run --memory LIMIT --plan P``, the plan made by ``pagecast plan
  --memory`` from two recordings of the same program under the limit (``pagecast record
  --memory``), an unmodified program;
- ``in-process``: the program managing its own memory (``--keep KEEP_MIB --chunk 8``: the first
  KEEP_MIB stay, each 8 MiB chunk of the rest paged out with MADV_PAGEOUT right after use and
  the next asked for with MADV_WILLNEED), what the mechanisms give without the distance of
  doing it from outside.

Printed: per strategy the median time and bytes read per pass over every pass after the
first of every round, and the ratio to the kernel's.

    PYTHONPATH=src python benchmarks/memlimit_cyclic.py [--file-mib 512] [--limit 384M]
        [--passes 6] [--rounds 3] [--keep-mib 320] [--json]

The file is written under native/build (the repository's disk: tmpfs pages cannot be dropped).
Needs root (memory cgroups, process_madvise on the program).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from pagecast.bench.workloads import build_workload  # noqa: E402
from pagecast.util.pagecache import make_cold  # noqa: E402

PAGECAST = [sys.executable, "-m", "pagecast"]


def write_file(path: Path, mib: int) -> None:
    if path.exists() and path.stat().st_size == mib << 20:
        return
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())


def passes_of(stderr: str) -> list[tuple[float, int]]:
    """(seconds, bytes read) of every 'pass N SECONDS READ' line the program printed."""
    out = []
    for line in stderr.splitlines():
        f = line.split()
        if len(f) == 4 and f[0] == "pass":
            out.append((float(f[2]), int(f[3])))
    return out


def run(argv: list[str], data: Path) -> tuple[list[tuple[float, int]], dict]:
    make_cold([data])
    p = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(argv)}\n{p.stderr[-2000:]}")
    rep = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
    return passes_of(p.stderr), rep


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file-mib", type=int, default=512)
    ap.add_argument("--limit", default="384M")
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep-mib", type=int, default=320, help="in-process reference: the part kept")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: memory cgroups and process_madvise on the program")
    prog = build_workload("cyclic_scan")
    base = REPO / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    data = base / f"memlimit-cyclic-{args.file_mib}.bin"
    write_file(data, args.file_mib)
    work = Path(tempfile.mkdtemp(prefix="memlimit-"))
    cmd = [str(prog), str(data), str(args.passes)]
    recs = []
    for i in range(2):
        t = work / f"r{i}.parquet"
        make_cold([data])
        rec = [*PAGECAST, "record", "--memory", args.limit, "-o", str(t), "--", str(prog), str(data), "3"]
        subprocess.run(rec, check=True, capture_output=True)
        recs.append(str(t))
    plan = work / "cyclic.plan"
    planned = subprocess.run([*PAGECAST, "plan", "--memory", args.limit, *recs, "-o", str(plan), "--explain"],
                             check=True, capture_output=True, text=True)  # fmt: skip
    strategies = {
        "kernel": [*PAGECAST, "run", "--json", "--memory", args.limit, "--", *cmd],
        "pagecast": [*PAGECAST, "run", "--json", "--memory", args.limit, "--plan", str(plan), "--", *cmd],
        "in-process": [*PAGECAST, "run", "--json", "--memory", args.limit, "--", *cmd, "--keep",
                       str(args.keep_mib), "--chunk", "8"],
    }  # fmt: skip
    per: dict[str, list[tuple[float, int]]] = {k: [] for k in strategies}
    totals: dict[str, list[int]] = {k: [] for k in strategies}
    for _ in range(args.rounds):
        for name, argv in strategies.items():
            passes, rep = run(argv, data)
            per[name] += passes[1:]
            totals[name].append(int(rep.get("memory", {}).get("read_bytes") or 0))
    rows = []
    kernel_s = statistics.median(s for s, _ in per["kernel"])
    for name, ps in per.items():
        med = statistics.median(s for s, _ in ps)
        rows.append({"strategy": name, "passes": len(ps), "median_pass_s": round(med, 4),
                     "median_pass_read_mib": round(statistics.median(b for _, b in ps) / (1 << 20), 1),
                     "run_read_mib": round(statistics.median(totals[name]) / (1 << 20), 1),
                     "speedup_vs_kernel": round(kernel_s / med, 2)})  # fmt: skip
    if args.json:
        print(json.dumps({"file_mib": args.file_mib, "limit": args.limit, "rows": rows, "plan": planned.stdout}))
        return 0
    print(f"cyclic mmap scan: {args.file_mib} MiB file, {args.limit} limit, {args.passes} passes x "
          f"{args.rounds} rounds, cold; medians over the passes after the first")  # fmt: skip
    print(planned.stdout.strip())
    print(planned.stderr.strip().splitlines()[-1])
    print(f"{'strategy':<12} {'passes':>6} {'s/pass':>8} {'MiB/pass':>9} {'MiB/run':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['strategy']:<12} {r['passes']:>6} {r['median_pass_s']:>8.4f} {r['median_pass_read_mib']:>9.1f} "
              f"{r['run_read_mib']:>8.1f} {r['speedup_vs_kernel']:>5.2f}x")  # fmt: skip
    print(f"baseline (kernel alone under the limit): {kernel_s:.4f} s a pass")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
