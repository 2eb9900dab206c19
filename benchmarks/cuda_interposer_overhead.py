"""Cost the CUDA interposer adds to a driver call, measured against the driver TEST DOUBLE.

There is no GPU here, so this measures only what libpagecast_cuda.so adds (wrapper,
metrics counters, timeline line, injector fast path) on top of a driver call that does
nothing: N cuLaunchKernel calls through cuGetProcAddress_v2, as static cudart makes them.
Baseline: the same calls without the interposer, in the same run. A real cuLaunchKernel
costs a few microseconds, so the added nanoseconds are what matters.

    PYTHONPATH=src python benchmarks/cuda_interposer_overhead.py [--calls N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def per_call(client: Path, double: Path, calls: int, preload: Path | None, **env_extra: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAGECAST_", "PREDICTIONS_", "PREFETCH_"))}
    env["PAGECAST_CUDA_DRIVER"] = str(double)  # no PAGECAST_TEST_DOUBLE_LOG: the double does not log
    if preload:
        env["LD_PRELOAD"] = str(preload)
    env.update(env_extra)
    out = subprocess.run(
        [str(client), "resolve", "gpa2", "launches", str(calls)], env=env, capture_output=True, text=True, check=True
    ).stdout
    line = next(l for l in out.splitlines() if l.startswith("launches "))
    return float(line.split()[3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from pagecast.collect import cuda_native as cn

    # the test double's builders are test code (tests/_cuda_double.py)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _cuda_double import build_driver_client, build_test_double

    tk = cn.find_toolkit()
    lib, double, client = cn.build_interposer(tk), build_test_double(tk), build_driver_client(tk)
    results: dict[str, list[float]] = {
        "baseline (no interposer)": [],
        "interposer, metrics only": [],
        "interposer, metrics + timeline": [],
    }
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.repeats):
            results["baseline (no interposer)"].append(per_call(client, double, args.calls, None))
            results["interposer, metrics only"].append(
                per_call(client, double, args.calls, lib, PAGECAST_CUDA_OUT=d, PAGECAST_CUDA_TIMELINE="0")
            )
            results["interposer, metrics + timeline"].append(
                per_call(client, double, args.calls, lib, PAGECAST_CUDA_OUT=d)
            )
    base = statistics.median(results["baseline (no interposer)"])
    print(f"{args.calls:,} cuLaunchKernel calls, median of {args.repeats} runs (ns per call)")
    for name, xs in results.items():
        med = statistics.median(xs)
        print(f"  {name:34s} {med:8.1f} ns   added {med - base:7.1f} ns   ratio {med / base:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
