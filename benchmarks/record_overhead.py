"""Recording overhead on fault-heavy programs, and the recorder's memory on many faults.

Workloads, each run plain, under `pagecast record` (default: page sets: the page-set shim
plus the filemap tracepoints), under `pagecast record --faults-only`, and under
`perf record -e page-faults -c 1 -d` (the reference tool doing the fault job), interleaved;
prints medians and ratios to the plain run:

- faultstorm: anonymous memory, one minor fault per page (the fault recorder's worst case);
- filescan: workloads/pageset_touch touching every page of a cached --file-mib file through
  a fresh mapping, then pread()ing every page of it, --file-rounds times (the page-set
  worst case: under the shim every page faults, where fault-around maps 16 pages per
  fault; every pread is sampled).

`pagecast record -- true` is timed too: the recorder's fixed start-up (Python, imports),
which dominates short runs.

Then records a large number of faults and reports the recorder's peak RSS (bounded: rows
stream to disk).

    PYTHONPATH=src python benchmarks/record_overhead.py [--mib 256] [--rounds 4] [--file-mib 256] [--file-rounds 8] [--repeat 5] [--big-rounds 40]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pagecast.bench.workloads import build_workload

# An installed pagecast imports from cached bytecode; an environment that forbids writing
# .pyc files (some sandboxes set PYTHONDONTWRITEBYTECODE) would make every recorder start
# compile its sources again and charge that to the recorder.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds, and CPU seconds (user + system) of the command and all its children:
    on a loaded machine the CPU time is the steadier cost."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_ENV)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(work: list[str], tmp: Path, repeat: int, perf: str | None) -> tuple[dict[str, float], dict[str, float]]:
    py = sys.executable
    rec = [py, "-m", "pagecast", "record", "--json", "-o", str(tmp / "t.parquet"), "--"]
    variants = {
        "plain": work,
        "pagecast record (page sets)": rec + work,
        "pagecast record --faults-only": rec[:4] + ["--faults-only"] + rec[4:] + work,
    }
    if perf:
        variants["perf record -c 1 -d"] = [
            perf,
            "record",
            "-q",
            "-e",
            "page-faults",
            "-c",
            "1",
            "-d",
            "-o",
            str(tmp / "perf.data"),
            "--",
            *work,
        ]
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for cmd in variants.values():
        timed(cmd)  # warm-up, untimed: bytecode written, binaries built, caches filled
    for _ in range(repeat):
        for k, cmd in variants.items():
            times[k].append(timed(cmd))
    wall = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--file-mib", type=int, default=256)
    ap.add_argument("--file-rounds", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--big-rounds", type=int, default=40, help="rounds for the memory test (faults = mib*256*rounds)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    storm = str(build_workload("faultstorm"))
    touch = str(build_workload("pageset_touch"))
    py = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="pagecast-bench-", dir=Path(__file__).resolve().parents[1] / "native" / "build"))
    data = tmp / "scan.bin"
    with open(data, "wb") as f:
        for _ in range(args.file_mib):
            f.write(os.urandom(1 << 20))
    npages = args.file_mib * 256
    data.read_bytes()  # cached: fault-around has neighbours to map
    perf = shutil.which("perf")
    workloads = {
        "faultstorm": ([storm, str(args.mib), str(args.rounds)], args.mib * 256 * args.rounds),
        "filescan": (
            [touch, *[f"mmap:{data}:0-{npages - 1}", f"pread:{data}:0-{npages - 1}"] * args.file_rounds],
            2 * npages * args.file_rounds,
        ),
        "true": (["true"], 0),
    }
    out: dict = {"repeat": args.repeat, "workloads": {}}
    for name, (work, touched) in workloads.items():
        med, cpu = measure(work, tmp, args.repeat, perf)
        out["workloads"][name] = {
            "pages_touched_per_run": touched,
            "median_s": med,
            "median_cpu_s": cpu,
            "ratio_vs_plain": {k: v / med["plain"] for k, v in med.items() if k != "plain"},
            "cpu_ratio_vs_plain": {k: v / max(cpu["plain"], 1e-3) for k, v in cpu.items() if k != "plain"},
        }
    # memory: many faults, peak RSS of the recorder process
    big = [storm, str(args.mib), str(args.big_rounds)]
    p = subprocess.run(
        [py, "-m", "pagecast", "record", "--json", "-o", str(tmp / "big.parquet"), "--", *big],
        capture_output=True,
        text=True,
        check=True,
    )
    r = json.loads(p.stdout)
    out["big"] = {
        "faults": r["faults"],
        "lost": r["lost"],
        "recorder_peak_rss_mib": r["recorder_peak_rss_mib"],
        "trace_mib": round(os.path.getsize(tmp / "big.parquet") / 2**20, 1),
        "duration_s": r["duration_s"],
    }
    shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for name, w in out["workloads"].items():
        print(f"{name}: {w['pages_touched_per_run']:,} page touches per run, median of {args.repeat}:")
        for k, v in w["median_s"].items():
            ratio = "" if k == "plain" else f"  {w['ratio_vs_plain'][k]:6.2f}x plain"
            cratio = "" if k == "plain" else f"  {w['cpu_ratio_vs_plain'][k]:6.2f}x plain"
            print(f"  {k:32s} wall {v:7.3f} s{ratio:16s}  cpu {w['median_cpu_s'][k]:7.3f} s{cratio}")
    print("target: pagecast record <= 2x plain")
    b = out["big"]
    print(
        f"memory: {b['faults']:,} faults recorded, {b['lost']} lost, recorder peak RSS {b['recorder_peak_rss_mib']} MiB, "
        f"trace {b['trace_mib']} MiB, {b['duration_s']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
