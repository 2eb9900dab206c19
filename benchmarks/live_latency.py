"""Live loop latency (fault → prefetch issued) and program wall time: native fast path vs
the Python path, same run, interleaved (target: "online prediction p99 <= 100 us
per fault").

Records cold training runs of the sparse-weights workload (prompts 101-103), merges them
into a replay schedule, then round by round (order alternating) runs the test prompt
cold (posix_fadvise DONTNEED before every run) under `pagecast run --schedule` with the
Python path (--no-fast) and with the native fast path, at a short lookahead (most
prefetches are triggered by faults: the latency rows) and at the default lookahead (the
wall-time rows). Prints per-configuration medians over runs of the per-run p50/p99, the
baseline (Python path) beside the fast path, and their ratios.

    PYTHONPATH=src python benchmarks/live_latency.py [--runs 5] [--size-mib 1024] [--json]
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
from typing import Any

from pagecast.bench import sparse_weights as wl
from pagecast.live.loop import LiveConfig, run_live
from pagecast.live.sources import merge_schedules, schedule_from_trace
from pagecast.live.worker import SourceSpec
from pagecast.trace.schedule import write_schedule


def _argv(weights: Path, prompt: int, tokens: int) -> list[str]:
    return wl.WorkloadConfig(weights, prompt=prompt, tokens=tokens, advice="random").argv()


def _run(weights: Path, argv: list[str], spec: SourceSpec, fast: bool, trace: Path | None = None) -> tuple[Any, dict]:
    wl.drop_cache(weights)
    r, w = os.pipe()  # the workload's one JSON line
    res = run_live(LiveConfig(argv, spec, trace_out=trace, stdout=w, fast=fast))
    os.close(w)
    with os.fdopen(r) as f:
        out = wl.parse_result(f.read())
    if res.returncode != 0 or not out:
        raise SystemExit(f"live_latency: workload failed (status {res.returncode})")
    return res, out


def _row(name: str, res: Any, out: dict) -> dict[str, Any]:
    fp = res.fast_path if res.fast_path.get("state") == "on" else {}
    w = res.worker or {}
    own50 = fp["handler_ns_p50"] / 1e3 if fp else w.get("predict_us_per_fault_p50")
    own99 = fp["handler_ns_p99"] / 1e3 if fp else w.get("predict_us_per_fault_p99")
    return {
        "config": name,
        "fault_p50": res.latency_fault_us["p50"],
        "fault_p99": res.latency_fault_us["p99"],
        "seen_p50": res.latency_seen_us["p50"],
        "seen_p99": res.latency_seen_us["p99"],
        "n": res.latency_fault_us["n"],
        "own_p50": own50,
        "own_p99": own99,
        "wall_s": out["wall_s"],
        "major": res.faults_major,
        "prefetched": res.prefetch_pages,
        "used": res.prefetch_used,
        "late": res.prefetch_late,
    }


def _median(rows: list[dict], key: str) -> float | None:
    v = [r[key] for r in rows if r[key] is not None]
    return round(statistics.median(v), 3) if v else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="rounds (each runs every configuration once, cold)")
    p.add_argument("--size-mib", type=int, default=1024, help="weights file size")
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--prompt", type=int, default=7, help="test prompt")
    p.add_argument("--train-prompts", type=int, nargs="+", default=[101, 102, 103])
    p.add_argument("--lookahead", type=int, default=256, help="lookahead of the latency rows")
    p.add_argument(
        "--wall-lookahead", type=int, default=8192, help="lookahead of the wall-time rows (pagecast run default)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args()

    load0 = os.getloadavg()
    weights = wl.ensure_weights(size_mib=args.size_mib)
    with tempfile.TemporaryDirectory(prefix="pagecast-latency-") as d:
        return _measure(args, weights, Path(d), load0)


def _measure(args: argparse.Namespace, weights: Path, tmp: Path, load0: tuple[float, ...]) -> int:
    traces = []
    for pr in args.train_prompts:
        t = tmp / f"train{pr}.parquet"
        _run(weights, _argv(weights, pr, args.tokens), SourceSpec(), fast=False, trace=t)
        traces.append(t)
    sched = write_schedule(
        tmp / "replay.schedule.parquet", merge_schedules([schedule_from_trace(str(t)) for t in traces])
    )
    argv = _argv(weights, args.prompt, args.tokens)
    configs = [
        (f"python la={args.lookahead}", args.lookahead, False),
        (f"fast la={args.lookahead}", args.lookahead, True),
        (f"python la={args.wall_lookahead}", args.wall_lookahead, False),
        (f"fast la={args.wall_lookahead}", args.wall_lookahead, True),
    ]
    rows: list[dict[str, Any]] = []
    for rnd in range(args.runs):
        order = configs if rnd % 2 == 0 else configs[::-1]
        for name, la, fast in order:
            res, out = _run(weights, argv, SourceSpec("schedule", "replay", str(sched), lookahead=la), fast)
            rows.append(dict(_row(name, res, out), round=rnd))
            print(
                f"[latency] round {rnd} {name}: fault->issue p50 {rows[-1]['fault_p50']} us p99 {rows[-1]['fault_p99']} us, "
                f"wall {out['wall_s']:.3f} s",
                file=sys.stderr,
            )
    load1 = os.getloadavg()
    keys = ("fault_p50", "fault_p99", "seen_p50", "seen_p99", "own_p50", "own_p99", "wall_s", "major", "used", "late")
    summary = {name: {k: _median([r for r in rows if r["config"] == name], k) for k in keys} for name, _, _ in configs}

    def ratio(a: str, b: str, k: str) -> float | None:
        x, y = summary[a][k], summary[b][k]
        return round(x / y, 2) if x and y else None

    lat_py, lat_fast = configs[0][0], configs[1][0]
    wall_py, wall_fast = configs[2][0], configs[3][0]
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "runs": args.runs,
        "size_mib": args.size_mib,
        "loadavg_start": [round(x, 2) for x in load0],
        "loadavg_end": [round(x, 2) for x in load1],
        "summary": summary,
        "rows": rows,
        "ratios_python_over_fast": {
            "fault_p50": ratio(lat_py, lat_fast, "fault_p50"),
            "fault_p99": ratio(lat_py, lat_fast, "fault_p99"),
            "seen_p50": ratio(lat_py, lat_fast, "seen_p50"),
            "seen_p99": ratio(lat_py, lat_fast, "seen_p99"),
            f"wall_s la={args.lookahead}": ratio(lat_py, lat_fast, "wall_s"),
            f"wall_s la={args.wall_lookahead}": ratio(wall_py, wall_fast, "wall_s"),
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"load average {load0[0]:.2f} at start, {load1[0]:.2f} at end; {args.runs} cold runs per configuration, medians"
    )
    print(
        f"{'configuration':<18} {'fault->issue p50/p99 (us)':>26} {'seen->issue p50/p99 (us)':>25} "
        f"{'own time/fault p50/p99 (us)':>28} {'wall s':>7} {'major':>6}"
    )
    for name, _, _ in configs:
        s = summary[name]
        print(
            f"{name:<18} {s['fault_p50']!s:>12} / {s['fault_p99']!s:<11} {s['seen_p50']!s:>11} / {s['seen_p99']!s:<11} "
            f"{s['own_p50']!s:>13} / {s['own_p99']!s:<12} {s['wall_s']!s:>7} {s['major']!s:>6}"
        )
    print("\nbaseline = the Python path (same run); ratio = baseline / fast path")
    for k, v in report["ratios_python_over_fast"].items():
        print(f"  {k:<20} {v}x")
    print(
        "own time/fault: fast path = its handler per fault (lookup + posix_fadvise calls); "
        "Python path = the predictor's compute per fault (without the injector)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
