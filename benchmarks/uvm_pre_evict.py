"""UVM mode: chunk evictions of the registry and pre-eviction, on the throughput benchmark's
GPU traces (simulated figures: faults, evictions left on the critical path, stall).

    PYTHONPATH=src python benchmarks/uvm_pre_evict.py [--rows N] [--dir DIR]

Each row is one simulation (tree prefetcher) of the streaming trace (64 Ki pages swept
again and again, 10 % random) and of the skewed one, oversubscribed 2:1; the baseline is
the driver's FIFO of chunks, and every other row prints its stall and faults as a ratio
to it. Simulated time, not measured: the numbers are the model's (docs/uvm.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pagecast.sim import SimConfig, UvmParams, simulate  # noqa: E402
from sim_throughput import UNIVERSE, write_bench_trace  # noqa: E402

CASES = [
    ("uvm-fifo", 0),
    ("uvm-fifo", 1),
    ("uvm-fifo", 4),
    ("uvm-lru", 0),
    ("min", 0),
    ("min", 1),
    ("lfu", 0),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000, help="demand rows per trace (default %(default)s)")
    ap.add_argument("--dir", help="where the traces go (default: a temporary directory)")
    args = ap.parse_args()
    d = Path(args.dir or tempfile.mkdtemp(prefix="pagecast-uvm-pre-"))
    traces = [
        ("streaming, 256 MiB on 128 MiB", write_bench_trace(d / f"s{args.rows}.parquet", args.rows, gpu=True,
                                                            stream=True, seed=3), 1 << 15),
        ("skewed, 4 GiB on 2 GiB", write_bench_trace(d / f"k{args.rows}.parquet", args.rows, gpu=True, seed=1),
         UNIVERSE // 2),
    ]  # fmt: skip
    print(f"traces in {d}; {args.rows:,} GPU-fault rows each; tree prefetcher\n")
    head = f"{'eviction':10} {'pre':>3} | {'faults':>10} {'evictions':>9} {'critical':>9} {'pre-ev':>7} {'late':>5}"
    head += f" | {'stall ms':>9} {'x base':>6} | {'faults x':>8} | {'wall s':>6}"
    for label, path, cap in traces:
        print(f"## {label}")
        print(head)
        base = None
        for ev, pre in CASES:
            cfg = SimConfig(capacity=cap, eviction=ev, uvm=True, uvm_params=UvmParams(pre_evict_chunks=pre))
            t0 = time.perf_counter()
            r = simulate(path, cfg, "tree")
            wall = time.perf_counter() - t0
            x = r.extra
            base = base or r
            print(
                f"{ev:10} {pre:>3} | {r.faults:>10,} {r.evictions:>9,} {x['critical_path_evictions']:>9,} "
                f"{x['pre_evictions']:>7,} {x['pre_evictions_late']:>5,} | {r.stall_ns / 1e6:>9.1f} "
                f"{r.stall_ns / base.stall_ns:>6.3f} | {r.faults / base.faults:>8.3f} | {wall:>6.2f}"
            )
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
