"""Speed of the placement gym: trace preprocessing (accesses/s) and env stepping (steps/s).

Baselines measured in the same run:
  * preprocessing: a per-access Python loop like the original MemAI's (dict of (window, page)
    counts, window times from the first/last row), on a subset of the same trace;
  * stepping: the same step logic written with per-chunk Python loops.
Targets: >= 1 M accesses/s preprocessing, >= 10 k env steps/s.

    PYTHONPATH=src python benchmarks/gym_speed.py [--accesses 4000000] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pagecast.gym.env import EnvConfig, TieredPlacementEnv
from pagecast.gym.estimator import WindowConfig, Windows
from pagecast.gym.tracegen import HotsetConfig, write_pair


def naive_preprocess(slow: dict, fast: dict, size: int) -> tuple[list, list, dict]:
    """Per-access Python loop (the baseline, not used by pagecast)."""
    counts: dict = defaultdict(int)
    t_slow, t_fast = [], []
    n = len(slow["t_ns"])
    ts, tf, rg, pg = slow["t_ns"].tolist(), fast["t_ns"].tolist(), slow["region"].tolist(), slow["page"].tolist()
    for i in range(n):
        w = i // size
        counts[(w, rg[i], pg[i])] += 1
        if i % size == 0:
            end = min(i + size, n - 1)
            t_slow.append(ts[end] - ts[i])
            t_fast.append(tf[end] - tf[i])
    return t_slow, t_fast, counts


def naive_step(ep, resident: list[bool], target: list[bool], t: int, ns_per_byte: float) -> float:
    """One env step with per-chunk Python loops (the baseline)."""
    cap, used, placed = ep.capacity_pages, 0, []
    for c in range(len(target)):
        if target[c] and resident[c] and used + ep.chunk_pages[c] <= cap:
            placed.append(c)
            used += ep.chunk_pages[c]
    for c in range(len(target)):
        if target[c] and not resident[c] and used + ep.chunk_pages[c] <= cap:
            placed.append(c)
            used += ep.chunk_pages[c]
    new = [False] * len(target)
    for c in placed:
        new[c] = True
    moved = sum(int(ep.chunk_pages[c]) for c in range(len(target)) if new[c] != resident[c])
    nh = sum(float(ep.num[t][c]) for c in range(len(target)) if new[c])
    f = nh / ep.den[t]
    est = ep.t_slow[t] * (1 - f) + ep.t_fast[t] * f
    resident[:] = new
    return -(est + moved * ep.page_size * ns_per_byte) / ep.scale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accesses", type=int, default=4_000_000)
    ap.add_argument("--baseline-accesses", type=int, default=300_000)
    ap.add_argument("--steps", type=int, default=50_000)
    ap.add_argument("--chunks", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res: dict = {}
    with tempfile.TemporaryDirectory() as d:
        cfg = HotsetConfig(pages=65536, accesses=args.accesses, phase_accesses=400_000, seed=1)
        slow, fast = write_pair(cfg, Path(d) / "s.parquet", Path(d) / "f.parquet")
        win = WindowConfig("accesses", 10_000)

        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            w = Windows.from_pair(slow, fast, win)
            times.append(time.perf_counter() - t0)
        pre = float(np.median(times))
        res["preprocess_accesses"] = args.accesses
        res["preprocess_s"] = pre
        res["preprocess_accesses_per_s"] = args.accesses / pre

        cols = ["t_ns", "region", "page"]
        s_tab = pq.read_table(slow, columns=cols).slice(0, args.baseline_accesses)
        f_tab = pq.read_table(fast, columns=cols).slice(0, args.baseline_accesses)
        s = {c: s_tab.column(c).to_numpy() for c in cols}
        f = {c: f_tab.column(c).to_numpy() for c in cols}
        t0 = time.perf_counter()
        naive_preprocess(s, f, 10_000)
        base = time.perf_counter() - t0
        res["baseline_preprocess_accesses_per_s"] = args.baseline_accesses / base
        res["preprocess_speedup"] = res["preprocess_accesses_per_s"] / res["baseline_preprocess_accesses_per_s"]

        env = TieredPlacementEnv([w], EnvConfig(n_chunks=args.chunks, window=win))
        rng = np.random.default_rng(0)
        actions = rng.integers(0, 2, size=(1024, args.chunks), dtype=np.int8)
        env.reset(seed=0)
        t0 = time.perf_counter()
        for i in range(args.steps):
            _, _, done, _, _ = env.step(actions[i & 1023])
            if done:
                env.reset()
        res["env_steps_per_s"] = args.steps / (time.perf_counter() - t0)
        res["env_windows"] = env.ep.n_windows

        ep = env.ep
        resident = [False] * args.chunks
        n_base = min(args.steps, 20_000)
        t0 = time.perf_counter()
        t = 0
        for i in range(n_base):
            naive_step(ep, resident, actions[i & 1023].astype(bool).tolist(), t, 0.1)
            t = (t + 1) % ep.n_windows
        res["baseline_steps_per_s"] = n_base / (time.perf_counter() - t0)
        res["step_speedup"] = res["env_steps_per_s"] / res["baseline_steps_per_s"]
    if args.json:
        json.dump(res, sys.stdout, indent=2)
        print()
        return 0
    print(
        f"preprocessing ({args.accesses:,} accesses, slow+fast pair, Parquet read included): "
        f"{res['preprocess_accesses_per_s'] / 1e6:.2f} M accesses/s (target >= 1 M/s)"
    )
    print(
        f"  baseline per-access Python loop ({args.baseline_accesses:,} accesses): "
        f"{res['baseline_preprocess_accesses_per_s'] / 1e6:.3f} M accesses/s -> ratio {res['preprocess_speedup']:.1f}x"
    )
    print(f"env steps ({args.chunks} chunks, random actions): {res['env_steps_per_s']:,.0f} steps/s (target >= 10,000)")
    print(
        f"  baseline per-chunk Python loop step: {res['baseline_steps_per_s']:,.0f} steps/s "
        f"-> ratio {res['step_speedup']:.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
