"""Live prefetching on the sparse-weights workload vs the kernel's strategies (target:
"live cold start, sparse weight streaming: >= 3x faster than the best kernel strategy").

Runs `pagecast bench` (cold page cache every run, strategies interleaved round by round,
medians) and prints each strategy's median program wall time with its ratio to the best
kernel strategy measured in the same run. The rows include the page pack of the training
runs (userfaultfd pager streaming one sequential file; docs/pager.md "Page packs"), the
pager without a pack, and the oracle pack; `--no-pack` leaves them out.

    PYTHONPATH=src python benchmarks/live_prefetch.py [--runs 5] [--size-mib 1024] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys

from pagecast.bench.harness import run_bench
from pagecast.cli.bench import add_bench_args, config_from_args, print_report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_args(p, runs=5, size_mib=1024)
    args = p.parse_args()
    cfg = config_from_args(args, "bench-live")
    report = run_bench(cfg, log=lambda m: print(f"[bench] {m}", file=sys.stderr))
    print_report(report, args.json)
    best = report["best_kernel"]
    print(
        f"\nbaseline (best kernel strategy, same run): {best}; load average {report['load_average_start']} -> "
        f"{report['load_average_end']}"
    )
    for s in report["strategies"]:
        print(f"  {s['strategy']:<36} {s['wall_s']:.3f} s   {s['vs_best_kernel']:.2f}x vs baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
