"""How steady the page pack's lead over the best kernel strategy is, set after set.

The disk and CPU of this shared VM change speed from minute to minute (MADV_RANDOM moved
between 0.23 and 0.75 s within one hour), so one `pagecast bench` gives one sample of the
ratio. This repeats it: SETS sets, each of ROUNDS rounds that interleave MADV_RANDOM
(the best kernel strategy on this workload in every bench so far) with page packs built
from recorded training runs, and prints each set's ratio of medians and their spread.

Rows (all packs from training prompts other than the benchmarked one):
  - union3: every page of the first three training runs (the pack before --min-runs);
  - minK:   the pages at least K of all training runs touched (the default, K = 2);
  - minK T×C: the minK pack with T loader threads reading C 64-page blocks at a time
    (`--loader 2:1,4:1`; the default loader is 4 threads x 8 blocks);
  - union3@SRC, minK@SRC: the same packs through another checkout's code (`--also-src`,
    e.g. a `git worktree` of an earlier commit), each run in a subprocess.
Before the sets it prints what the packs hold: pages, and how many of the benchmarked
prompt's pages each misses; and per support s, the pages exactly s training runs touched
and how many of them the benchmarked prompt used.

    PYTHONPATH=src python benchmarks/pack_sets.py [--sets 10] [--rounds 5] [--train 101-108]
        [--min-runs 2] [--loader T:C,...] [--also-src DIR] [--weights W] [--out DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Callable

from pagecast.bench import sparse_weights as wl
from pagecast.bench.harness import BenchConfig, _pager, _plain, record_run
from pagecast.cli.bench import parse_prompts
from pagecast.live.sources import schedule_from_trace
from pagecast.pager.pack import pack_from_schedules, pages_from_schedule, read_pack

# one page-pack run with another checkout's code: prints the program's wall time
_OTHER = (
    "import sys; from pathlib import Path; from pagecast.bench.harness import BenchConfig, _pager; "
    "c = BenchConfig(out_dir=Path(sys.argv[3]), test_prompt=int(sys.argv[4])); "
    "print(_pager(c, Path(sys.argv[1]), Path(sys.argv[2]), 'x', 0).wall_s)"
)


def _coverage(scheds: list, test, weights: Path, packs: dict[str, Path]) -> dict:
    """What the packs hold, in pages of the weights file (the traces also have libraries' pages)."""
    sets = [set(pages_from_schedule(s, weights).tolist()) for s in scheds]
    test_pages = set(pages_from_schedule(test, weights).tolist())
    support = Counter(p for s in sets for p in s)
    by_support = {
        k: {
            "pages": sum(1 for c in support.values() if c == k),
            "used_by_test": sum(1 for p, c in support.items() if c == k and p in test_pages),
        }
        for k in range(1, len(sets) + 1)
    }
    pack_rows = {}
    for name, path in packs.items():
        pages = set(read_pack(path).pages.tolist())
        pack_rows[name] = {
            "pages": len(pages),
            "mib": round(path.stat().st_size / 2**20, 1),
            "test_pages_missed": len(test_pages - pages),
            "pages_unused_by_test": len(pages - test_pages),
        }
    return {"test_pages": len(test_pages), "packs": pack_rows, "by_support": by_support}


def _row_runners(a, cfg, weights, packs, out) -> dict[str, Callable[[int], float]]:
    rows: dict[str, Callable[[int], float]] = {"random": lambda r: _plain(cfg, weights, "random", "random", r).wall_s}
    for k, pack in packs.items():
        rows[k] = lambda r, p=pack, k=k: _pager(cfg, weights, p, k, r).wall_s
    main = f"min{a.min_runs}"
    for spec in filter(None, (a.loader or "").split(",")):
        t, c = spec.split(":")

        def run(r: int, t=t, c=c) -> float:
            os.environ.update(PAGECAST_PAGER_PACK_THREADS=t, PAGECAST_PAGER_PACK_CHUNK=c)
            try:
                return _pager(cfg, weights, packs[main], main, r).wall_s
            finally:
                os.environ.pop("PAGECAST_PAGER_PACK_THREADS", None)
                os.environ.pop("PAGECAST_PAGER_PACK_CHUNK", None)

        rows[f"{main} {t}x{c}"] = run
    if a.also_src:
        src = Path(a.also_src).resolve()
        env = dict(os.environ, PYTHONPATH=str(src / "src"))
        for k, pack in packs.items():

            def other(r: int, p=pack) -> float:
                o = subprocess.run(
                    [sys.executable, "-c", _OTHER, str(weights), str(p), str(out), str(a.prompt)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                return float(o.stdout.strip().splitlines()[-1])

            rows[f"{k}@{src.name}"] = other
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--train", default="101-108", help="training prompts (default 101-108)")
    ap.add_argument("--prompt", type=int, default=7, help="benchmarked prompt (default 7)")
    ap.add_argument("--min-runs", type=int, default=2)
    ap.add_argument("--loader", help="extra rows: the minK pack with loader THREADS:CHUNK_BLOCKS, comma-separated")
    ap.add_argument("--also-src", help="another checkout: its code runs the union3 and minK packs too")
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
    test = schedule_from_trace(str(record_run(cfg, weights, a.prompt, out / f"test{a.prompt}.parquet")))
    packs = {
        "union3": pack_from_schedules(scheds[:3], weights, out / "union3.pack").path,
        f"min{a.min_runs}": pack_from_schedules(scheds, weights, out / f"min{a.min_runs}.pack", a.min_runs).path,
    }
    cover = _coverage(scheds, test, weights, packs)
    runners = _row_runners(a, cfg, weights, packs, out)

    rows = []
    for s in range(a.sets):
        walls: dict[str, list[float]] = {k: [] for k in runners}
        for r in range(a.rounds):  # interleaved: a slow phase of the shared disk hits every row
            for k, fn in runners.items():
                walls[k].append(fn(r))
        med = {k: statistics.median(v) for k, v in walls.items()}
        row = {
            "set": s,
            "load": round(os.getloadavg()[0], 2),
            **{f"{k}_s": round(v, 4) for k, v in med.items()},
            **{f"{k}_ratio": round(med["random"] / med[k], 2) for k in runners if k != "random"},
        }
        rows.append(row)
        if not a.json:
            print("  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    summary = {
        k: {
            "min": min(r[f"{k}_ratio"] for r in rows),
            "median": round(statistics.median(r[f"{k}_ratio"] for r in rows), 2),
            "max": max(r[f"{k}_ratio"] for r in rows),
            "median_wall_s": round(statistics.median(r[f"{k}_s"] for r in rows), 4),
            "sets_at_least_3x": sum(r[f"{k}_ratio"] >= 3 for r in rows),
        }
        for k in runners
        if k != "random"
    }
    if a.json:
        print(json.dumps({"coverage": cover, "sets": rows, "summary": summary}, indent=2))
        return 0
    print(f"\nprompt {a.prompt} touches {cover['test_pages']} pages of the weights file")
    for k, v in cover["packs"].items():
        print(
            f"  pack {k:>7}: {v['pages']} pages, {v['mib']} MiB; misses {v['test_pages_missed']} of the prompt's pages, "
            f"{v['pages_unused_by_test']} of its pages unused"
        )
    print(
        "  pages exactly s of the training runs touched (used by the prompt): "
        + ", ".join(f"s={s} {v['pages']} ({v['used_by_test']})" for s, v in cover["by_support"].items())
    )
    print(
        f"\nbaseline: MADV_RANDOM (median {statistics.median(r['random_s'] for r in rows):.3f} s over the sets), "
        f"median of {a.rounds} cold runs per set, interleaved with the packs"
    )
    for k, v in summary.items():
        print(
            f"{k:>16}: median wall {v['median_wall_s']:.3f} s; ratio to MADV_RANDOM min {v['min']} median {v['median']} "
            f"max {v['max']}; {v['sets_at_least_3x']}/{len(rows)} sets >= 3x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
