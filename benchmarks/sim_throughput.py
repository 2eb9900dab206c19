"""Simulator throughput, scaling and memory (targets in DESIGN.md §8).

Prints, measured in this run on one pinned core (rates per wall second and per CPU
second of this process: on a shared machine wall time includes waiting for the core):
  * accesses/s of ``simulate`` (LRU, no prefetch; whole call: Parquet decode + simulation)
    on a 10 M-access trace, beside a plain-Python OrderedDict LRU on the same trace
    (its first 1 M accesses: the pure-Python loop would take minutes on all 10 M) → ratio;
  * accesses/s in UVM mode with the tree prefetcher on a 10 M-access GPU fault trace;
  * time at 1 M, 3 M and 10 M accesses (linear growth → flat per-access time);
  * peak RSS of a fresh process simulating 10 M and 100 M accesses with the same set
    of distinct pages (the 100 M trace is written to disk in chunks).

    PYTHONPATH=src python benchmarks/sim_throughput.py [--quick] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from pagecast.trace.regions import Region
from pagecast.trace.schema import Kind
from pagecast.trace.writer import TraceWriter

UNIVERSE = 1 << 20  # distinct pages (4 GiB of 4 KiB pages)
CHUNK = 1 << 21


def _pages(rng: np.random.Generator, n: int) -> np.ndarray:
    """70 % skewed reuse of a hot set, 30 % sequential runs, bounded to UNIVERSE pages."""
    hot = (rng.zipf(1.2, n) * 2654435761) % UNIVERSE
    starts = rng.integers(0, UNIVERSE, n // 256 + 1)
    seq = (np.repeat(starts, 256)[:n] + np.tile(np.arange(256), n // 256 + 1)[:n]) % UNIVERSE
    return np.where(rng.random(n) < 0.7, hot, seq).astype(np.int64)


def _stream_pages(rng: np.random.Generator, n: int) -> np.ndarray:
    """Array streaming: sweeps over 64 Ki pages (256 MiB), each page touched 4 times in a
    row (several warps/threads per page), with 10 % random accesses mixed in."""
    pos = np.arange(n, dtype=np.int64) // 4
    pages = pos % (1 << 16)
    return np.where(rng.random(n) < 0.1, rng.integers(0, 1 << 16, n), pages)


def write_bench_trace(path: Path, n: int, *, gpu: bool = False, seed: int = 0, stream: bool = False) -> Path:
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    gen = _stream_pages if stream else _pages
    kind = int(Kind.FAULT_GPU) if gpu else int(Kind.ACCESS)
    region = Region(0, "bench", kind="managed" if gpu else "anon", base=1 << 32, length=UNIVERSE * 4096)
    with TraceWriter(path, regions=[region], source="benchmark") as w:
        for start in range(0, n, CHUNK):
            m = min(CHUNK, n - start)
            t = (np.arange(start, start + m, dtype=np.int64)) * 50
            w.write(t_ns=t, region=0, page=gen(rng, m), kind=kind)
    return path


def python_lru(path: Path, capacity: int, limit: int) -> tuple[int, float]:
    import pyarrow.parquet as pq

    pages = pq.read_table(path, columns=["page"]).column(0).to_numpy()[:limit].tolist()
    t0 = time.process_time()
    cache: OrderedDict = OrderedDict()
    faults = 0
    for p in pages:
        if p in cache:
            cache.move_to_end(p)
        else:
            faults += 1
            if len(cache) >= capacity:
                cache.popitem(last=False)
            cache[p] = True
    return faults, time.process_time() - t0


def read_only(path: Path) -> tuple[float, float]:
    """(wall, CPU) seconds to read and decode the demand stream alone (the I/O share)."""
    from pagecast.sim.stream import as_trace, demand_chunks

    t0, c0 = time.perf_counter(), time.process_time()
    for _ in demand_chunks(as_trace(path)):
        pass
    return time.perf_counter() - t0, time.process_time() - c0


def timed_simulate(path: Path, capacity: int, uvm: bool = False) -> tuple[float, dict]:
    """Wall seconds and the result; the result's ``cpu_s`` is this process's CPU time
    (on a shared machine wall time includes waiting for the core)."""
    from pagecast.sim import SimConfig, simulate

    cfg = SimConfig(capacity=capacity, uvm=uvm)
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate(path, cfg, "tree" if uvm else "none")
    d = r.to_dict()
    d["cpu_s"] = time.process_time() - c0
    return time.perf_counter() - t0, d


def child_rss(path: Path, capacity: int) -> dict:
    """Simulate in a fresh process; return its peak RSS and accesses."""
    code = (
        "import json,resource,sys,time\n"
        "from pagecast.sim import SimConfig, simulate\n"
        "t=time.perf_counter(); r=simulate(sys.argv[1], SimConfig(capacity=int(sys.argv[2])))\n"
        "print(json.dumps({'accesses': r.accesses, 'faults': r.faults, 'wall_s': time.perf_counter()-t,\n"
        "  'peak_rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path), str(capacity)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="where to keep the generated traces (default: a temp dir)")
    ap.add_argument("--quick", action="store_true", help="skip the 100 M-access memory run")
    args = ap.parse_args()
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    except (AttributeError, OSError):
        pass
    import pyarrow as pa

    pa.set_cpu_count(1)
    d = Path(args.dir or tempfile.mkdtemp(prefix="pagecast-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    cap = UNIVERSE // 4
    print(f"traces in {d}; capacity {cap:,} pages (25 % of {UNIVERSE:,} distinct)")
    t10 = write_bench_trace(d / "lru_10M.parquet", 10_000_000)  # skewed
    small = write_bench_trace(d / "warm.parquet", 10_000)
    timed_simulate(small, 100)  # JIT warm-up (or load from cache)
    timed_simulate(write_bench_trace(d / "warm_gpu.parquet", 10_000, gpu=True), cap, uvm=True)

    s10 = write_bench_trace(d / "stream_10M.parquet", 10_000_000, stream=True, seed=2)
    pf, psec = python_lru(t10, cap, 1_000_000)
    prate = 1_000_000 / psec
    print(f"\nplain-Python LRU (baseline): 1,000,000 accesses of skewed.10M in {psec:.2f} s CPU = {prate / 1e6:.2f} M accesses/s")
    print("rates: wall | CPU time of this process (the core is shared: wall includes waiting for it)")
    print("\n## LRU, no prefetch (target >= 20 M accesses/s)")
    for label, path, c in (("skewed (1 Mi pages, 4 GiB)", t10, cap), ("streaming (64 Ki pages)", s10, 1 << 14)):
        sec, r = timed_simulate(path, c)
        io, iocpu = read_only(path)
        rate = r["accesses"] / sec
        crate = r["accesses"] / r["cpu_s"]
        krate = r["accesses"] / max(r["cpu_s"] - iocpu, 1e-9)
        print(f"{label:28s}: {r['accesses']:,} accesses in {sec:.2f} s wall = {rate / 1e6:5.1f} M/s | "
              f"{r['cpu_s']:.2f} s CPU = {crate / 1e6:5.1f} M/s end to end ({crate / prate:.1f}x Python); "
              f"without Parquet decode ({iocpu:.2f} s CPU) {krate / 1e6:5.1f} M/s ({krate / prate:.1f}x); faults {r['faults']:,}")

    print("\n## UVM mode, tree prefetcher (target >= 5 M accesses/s)")
    g_stream = write_bench_trace(d / "uvm_stream_10M.parquet", 10_000_000, gpu=True, stream=True, seed=3)
    g_skew = write_bench_trace(d / "uvm_skewed_10M.parquet", 10_000_000, gpu=True, seed=1)
    for label, path, c in (("streaming, 256 MiB in 512 MiB", g_stream, 1 << 17), ("streaming, 256 MiB on 128 MiB", g_stream, 1 << 15),
                           ("skewed, 4 GiB on 2 GiB", g_skew, UNIVERSE // 2)):
        usec, ur = timed_simulate(path, c, uvm=True)
        io, iocpu = read_only(path)
        urate = ur["accesses"] / usec
        crate = ur["accesses"] / ur["cpu_s"]
        krate = ur["accesses"] / max(ur["cpu_s"] - iocpu, 1e-9)
        print(f"{label:30s}: {ur['accesses']:,} in {usec:.2f} s wall = {urate / 1e6:5.1f} M/s | {ur['cpu_s']:.2f} s CPU = "
              f"{crate / 1e6:5.1f} M/s end to end ({crate / prate:.1f}x Python); without decode {krate / 1e6:5.1f} M/s "
              f"({ur['fault_batches']:,} batches, {ur['prefetches']:,} pages prefetched, {ur['evictions']:,} chunk evictions)")

    print("\n## Scaling (LRU, no prefetch)")
    for n in (1_000_000, 3_000_000, 10_000_000):
        p = t10 if n == 10_000_000 else write_bench_trace(d / f"lru_{n // 1_000_000}M.parquet", n)
        s, rr = timed_simulate(p, cap)
        print(f"{n:>12,} accesses: {s:6.2f} s wall, {rr['cpu_s']:6.2f} s CPU = {rr['cpu_s'] / n * 1e9:5.1f} ns/access")

    print("\n## Peak RSS (fresh process, same distinct pages)")
    sizes = [10_000_000] + ([] if args.quick else [100_000_000])
    for n in sizes:
        p = write_bench_trace(d / f"lru_{n // 1_000_000}M.parquet", n)
        res = child_rss(p, cap)
        print(f"{n:>12,} accesses: peak RSS {res['peak_rss_mib']:7.0f} MiB, {res['wall_s']:.1f} s, faults {res['faults']:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
