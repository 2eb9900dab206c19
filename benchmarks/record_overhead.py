"""Recording overhead on a fault-heavy program, and the recorder's memory on many faults.

Runs workloads/faultstorm (anonymous memory, one minor fault per page) plain, under
`pagecast record`, and under `perf record -e page-faults -c 1 -d` (the reference tool
doing the same job), interleaved, and prints medians and ratios. Then records a large
number of faults and reports the recorder's peak RSS (bounded: rows stream to disk).

    PYTHONPATH=src python benchmarks/record_overhead.py [--mib 256] [--rounds 4] [--repeat 5] [--big-rounds 40]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pagecast.util.workloads import build_workload


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--big-rounds", type=int, default=40, help="rounds for the memory test (faults = mib*256*rounds)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    prog = str(build_workload("faultstorm"))
    work = [prog, str(args.mib), str(args.rounds)]
    faults = args.mib * 256 * args.rounds
    py = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="pagecast-bench-", dir=Path(__file__).resolve().parents[1] / "native" / "build"))
    rec = [py, "-m", "pagecast", "record", "--json", "-o", str(tmp / "t.parquet"), "--", *work]
    perf = shutil.which("perf")
    times: dict[str, list[float]] = {"plain": [], "pagecast record": []}
    if perf:
        times["perf record -c 1 -d"] = []
    # the Python interpreter start-up is part of `pagecast record`; measure it to show it apart
    startup = [py, "-c", "import pagecast.collect.record"]
    times["python start-up (import)"] = []
    for _ in range(args.repeat):
        times["plain"].append(timed(work))
        times["pagecast record"].append(timed(rec))
        if perf:
            times["perf record -c 1 -d"].append(timed([perf, "record", "-q", "-e", "page-faults", "-c", "1", "-d",
                                                      "-o", str(tmp / "perf.data"), "--", *work]))
        times["python start-up (import)"].append(timed(startup))
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"faults_per_run": faults, "repeat": args.repeat, "median_s": med,
           "ratio_pagecast_vs_plain": med["pagecast record"] / med["plain"]}
    if perf:
        out["ratio_perf_vs_plain"] = med["perf record -c 1 -d"] / med["plain"]
        out["ratio_pagecast_vs_perf"] = med["pagecast record"] / med["perf record -c 1 -d"]
    # memory: many faults, peak RSS of the recorder process
    big = [prog, str(args.mib), str(args.big_rounds)]
    p = subprocess.run([py, "-m", "pagecast", "record", "--json", "-o", str(tmp / "big.parquet"), "--", *big],
                       capture_output=True, text=True, check=True)
    r = json.loads(p.stdout)
    out["big"] = {"faults": r["faults"], "lost": r["lost"], "recorder_peak_rss_mib": r["recorder_peak_rss_mib"],
                  "trace_mib": round(os.path.getsize(tmp / "big.parquet") / 2**20, 1), "duration_s": r["duration_s"]}
    shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"faultstorm {args.mib} MiB x {args.rounds} rounds = {faults:,} faults per run, median of {args.repeat}:")
    for k, v in med.items():
        print(f"  {k:28s} {v:7.3f} s")
    print(f"  ratio pagecast record / plain: {out['ratio_pagecast_vs_plain']:.2f}x (target <= 2x)")
    if perf:
        print(f"  ratio perf record / plain:     {out['ratio_perf_vs_plain']:.2f}x (reference)")
    b = out["big"]
    print(f"memory: {b['faults']:,} faults recorded, {b['lost']} lost, recorder peak RSS {b['recorder_peak_rss_mib']} MiB, "
          f"trace {b['trace_mib']} MiB, {b['duration_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
