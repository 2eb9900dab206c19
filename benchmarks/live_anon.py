"""In-process anonymous prefetch (LD_PRELOAD shim, MADV_POPULATE_WRITE) vs none.

Workload: workloads/anon_touch.c (64 MiB private anonymous buffer, 4096 pages touched
in a fixed irregular order, --work rounds of arithmetic per page). Run 1 is recorded
with the fault monitor; then, interleaved round by round, `pagecast run --schedule run1`
with the shim (anon on) and without it (--no-anon: the baseline, same daemon, same
predictor, same schedule), plus the plain program without pagecast. Both pagecast
variants use nice=0 (the program is CPU-bound). Prints the medians of: demand faults on
the 64 MiB buffer (the kernel's minor-fault events), the program's own touching-loop
time (loop_s), pagecast's wall time, and the ratios to the baseline of the same run.

    PYTHONPATH=src python benchmarks/live_anon.py [--runs 5] [--pages 4096] [--work 20000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pagecast.bench.workloads import build_workload
from pagecast.collect.faultmon import read_all
from pagecast.live.loop import LiveConfig, run_live
from pagecast.live.worker import SourceSpec
from pagecast.trace import Kind, open_trace
from pagecast.trace.writer import TraceWriter

BUF = 64 << 20


def _loop_s(err: str) -> float:
    return float(next(ln for ln in err.splitlines() if ln.startswith("anon_touch loop_s=")).split("=")[1])


def _buffer_faults(trace: Path) -> int:
    tr = open_trace(trace)
    rid = next(r.id for r in tr.regions if r.kind == "anon" and r.length == BUF)
    c = tr.read(["region", "kind"])
    return int(
        np.count_nonzero(np.isin(c["kind"], [int(Kind.FAULT_MINOR), int(Kind.FAULT_MAJOR)]) & (c["region"] == rid))
    )


def _record(cmd: list[str], out: Path) -> None:
    b, mon = read_all(cmd, stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    w = TraceWriter(out, regions=list(mon.regions), source="perf")
    w.write(t_ns=b.t_ns, region=b.region, page=b.page, kind=b.kind, tid=b.tid, ip=b.ip)
    w.close()


def _pagecast(cmd: list[str], sched: Path, tmp: Path, anon: bool, i: int) -> dict:
    trace = tmp / f"{'on' if anon else 'off'}{i}.parquet"
    errp = tmp / "err.txt"
    with open(os.devnull, "w") as out, open(errp, "w") as err:
        res = run_live(
            LiveConfig(
                cmd,
                SourceSpec("schedule", "replay", str(sched)),
                trace_out=trace,
                stdout=out,
                stderr=err,
                nice=0,
                anon=anon,
            )
        )
    assert res.returncode == 0
    return {
        "faults": _buffer_faults(trace),
        "loop_s": _loop_s(errp.read_text()),
        "wall_s": res.wall_s,
        "populated": res.anon_prefetch.get("pages_populated"),
        "mode": res.anon_prefetch.get("mode"),
    }


def _plain(cmd: list[str]) -> dict:
    import subprocess

    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return {"loop_s": _loop_s(p.stderr), "wall_s": time.monotonic() - t}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pages", type=int, default=4096)
    ap.add_argument("--work", type=int, default=20000)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cmd = [str(build_workload("anon_touch")), "--pages", str(a.pages), "--work", str(a.work), "--time"]
    runs: dict[str, list[dict]] = {"plain": [], "off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="pagecast-anon-bench-") as d:
        tmp = Path(d)
        sched = tmp / "run1.parquet"
        _record(cmd, sched)
        for i in range(a.runs):
            runs["plain"].append(_plain(cmd))
            runs["off"].append(_pagecast(cmd, sched, tmp, False, i))
            runs["on"].append(_pagecast(cmd, sched, tmp, True, i))
            print(
                f"[bench] round {i + 1}/{a.runs}: faults off={runs['off'][-1]['faults']} on={runs['on'][-1]['faults']}",
                file=sys.stderr,
            )
    med = {
        k: {m: statistics.median(r[m] for r in v) for m in v[0] if isinstance(v[0][m], (int, float))}
        for k, v in runs.items()
    }
    report = {
        "command": cmd,
        "runs": runs,
        "median": med,
        "load_avg": os.getloadavg(),
        "ratio_faults_on_vs_off": round(med["on"]["faults"] / max(med["off"]["faults"], 1), 4),
        "ratio_loop_on_vs_off": round(med["on"]["loop_s"] / med["off"]["loop_s"], 4),
        "ratio_wall_on_vs_off": round(med["on"]["wall_s"] / med["off"]["wall_s"], 4),
    }
    if a.json:
        print(json.dumps(report, indent=1))
        return 0
    o, n, p = med["off"], med["on"], med["plain"]
    print(
        f"median of {a.runs} interleaved rounds, {a.pages} pages touched in a 64 MiB anonymous buffer, "
        f"load avg {report['load_avg'][0]:.1f}"
    )
    print(f"{'':28} {'buffer faults':>14} {'loop_s':>9} {'pagecast wall_s':>16}")
    print(f"{'plain program (no pagecast)':28} {'-':>14} {p['loop_s']:>9.4f} {'-':>16}")
    print(f"{'baseline: run --no-anon':28} {o['faults']:>14.0f} {o['loop_s']:>9.4f} {o['wall_s']:>16.4f}")
    print(f"{'run, anon shim on':28} {n['faults']:>14.0f} {n['loop_s']:>9.4f} {n['wall_s']:>16.4f}")
    print(
        f"ratio on/off: faults {report['ratio_faults_on_vs_off']}  loop time {report['ratio_loop_on_vs_off']}  "
        f"wall {report['ratio_wall_on_vs_off']}  (mode {runs['on'][0]['mode']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
