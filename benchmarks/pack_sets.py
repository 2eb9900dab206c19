"""How steady the page pack's lead over the best kernel strategy is, set after set.

The disk and CPU of this shared VM change speed from minute to minute (MADV_RANDOM moved
between 0.23 and 0.42 s within one hour), so one `pagecast bench` gives one sample of the
ratio. This repeats it: SETS sets, each of ROUNDS rounds that interleave MADV_RANDOM
(the best kernel strategy on this workload in every bench so far) with page packs built
from recorded training runs, and prints each set's ratio of medians and their spread.

Packs compared (all from training prompts other than the benchmarked one):
  - union3: every page of the first three training runs (the pack before --min-runs);
  - minK:  the pages at least K of all training runs touched (the default, K = 2).

    PYTHONPATH=src python benchmarks/pack_sets.py [--sets 10] [--rounds 5] [--train 101-108]
        [--min-runs 2] [--weights W] [--out DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from pagecast.cli.bench import parse_prompts
from pagecast.online import workload as wl
from pagecast.online.bench import BenchConfig, _pager, _plain, record_run
from pagecast.online.pack import pack_from_schedules
from pagecast.online.sources import schedule_from_trace


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--train", default="101-108", help="training prompts (default 101-108)")
    ap.add_argument("--prompt", type=int, default=7, help="benchmarked prompt (default 7)")
    ap.add_argument("--min-runs", type=int, default=2)
    ap.add_argument("--weights", help="weights file (default: the 1 GiB one in ~/.cache/pagecast)")
    ap.add_argument("--out", help="directory for traces and packs (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    train = parse_prompts(a.train)
    out = Path(a.out or tempfile.mkdtemp(prefix="pack_sets."))
    out.mkdir(parents=True, exist_ok=True)
    cfg = BenchConfig(out_dir=out, test_prompt=a.prompt, train_prompts=train)
    wl.binary()
    weights = wl.ensure_weights(Path(a.weights) if a.weights else None, cfg.size_mib)
    scheds = []
    for p in train:
        print(f"[pack_sets] recording training prompt {p}", file=sys.stderr)
        scheds.append(schedule_from_trace(str(record_run(cfg, weights, p, out / f"train{p}.parquet"))))
    packs = {"union3": pack_from_schedules(scheds[:3], weights, out / "union3.pack").path,
             f"min{a.min_runs}": pack_from_schedules(scheds, weights, out / f"min{a.min_runs}.pack", a.min_runs).path}
    sizes = {k: p.stat().st_size >> 10 for k, p in packs.items()}
    print(f"[pack_sets] packs (KiB): {sizes}", file=sys.stderr)

    rows = []
    for s in range(a.sets):
        walls: dict[str, list[float]] = {"random": [], **{k: [] for k in packs}}
        for r in range(a.rounds):
            walls["random"].append(_plain(cfg, weights, "random", "random", r).wall_s)
            for k, pack in packs.items():
                walls[k].append(_pager(cfg, weights, pack, k, r).wall_s)
        med = {k: statistics.median(v) for k, v in walls.items()}
        row = {"set": s, "load": round(os.getloadavg()[0], 2), **{f"{k}_s": round(v, 4) for k, v in med.items()},
               **{f"{k}_ratio": round(med["random"] / med[k], 2) for k in packs}}
        rows.append(row)
        if not a.json:
            print("  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    summary = {k: {"min": min(r[f"{k}_ratio"] for r in rows), "median": round(statistics.median(r[f"{k}_ratio"] for r in rows), 2),
                   "max": max(r[f"{k}_ratio"] for r in rows),
                   "sets_at_least_3x": sum(r[f"{k}_ratio"] >= 3 for r in rows)} for k in packs}
    if a.json:
        print(json.dumps({"packs_kib": sizes, "sets": rows, "summary": summary}, indent=2))
        return 0
    print(f"\nbaseline: MADV_RANDOM, median of {a.rounds} cold runs per set, interleaved with the packs")
    for k, v in summary.items():
        print(f"{k:>8}: ratio to MADV_RANDOM min {v['min']} median {v['median']} max {v['max']}; "
              f"{v['sets_at_least_3x']}/{len(rows)} sets >= 3x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
