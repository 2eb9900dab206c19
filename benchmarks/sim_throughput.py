"""Simulator throughput, scaling and memory (targets in the README's Status table).

Prints, measured in this run on one pinned core with pyarrow on one thread, as medians
of ``--repeat`` runs, in accesses per CPU second of this process (on a shared machine
wall time includes waiting for the core; wall rates are printed too):
  * LRU, no prefetch, on 10 M-access traces (skewed over 1 Mi pages, and streaming),
    beside a plain-Python OrderedDict LRU on the same trace (its first 1 M accesses: the
    pure-Python loop would take minutes on all 10 M) → ratio. Two figures each:
    "engine" = the simulation alone (CPU time of the whole ``simulate`` call minus the
    CPU time spent reading and decoding the trace, which ``simulate`` measures:
    ``extra["read_cpu_s"]``), and "end to end" = the whole call, Parquet decode included;
  * the same for UVM mode with the tree prefetcher on 10 M-access GPU fault traces;
  * CPU time at 1 M, 3 M and 10 M accesses (linear growth → flat per-access time);
  * peak RSS of a fresh process simulating 10 M and 100 M accesses with the same set
    of distinct pages (the 100 M trace is written to disk in chunks).

    PYTHONPATH=src python benchmarks/sim_throughput.py [--quick] [--dir DIR] [--repeat N] [--json]
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


def timed_simulate(path: Path, capacity: int, uvm: bool = False) -> tuple[float, dict]:
    """Wall seconds and the result; the result's ``cpu_s`` is this process's CPU time for
    the call and ``read_cpu_s`` the part of it spent reading and decoding the trace."""
    from pagecast.sim import SimConfig, simulate

    cfg = SimConfig(capacity=capacity, uvm=uvm)
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate(path, cfg, "tree" if uvm else "none")
    d = r.to_dict()
    d["cpu_s"] = time.process_time() - c0
    d["read_cpu_s"] = r.extra["read_cpu_s"]
    return time.perf_counter() - t0, d


def rates(path: Path, capacity: int, repeat: int, uvm: bool = False) -> dict:
    """Median rates (M accesses/s) over ``repeat`` runs and the last run's result.

    The first run of a trace in this process also pays for growing the allocators'
    pools (page faults of decode buffers and state arrays, kernel time): its end-to-end
    rate is kept in ``end_to_end_runs_mps[0]`` and printed as "first run".
    """
    runs = [timed_simulate(path, capacity, uvm) for _ in range(repeat)]
    r = runs[-1][1]
    n = r["accesses"]
    cpu = [d["cpu_s"] for _, d in runs]
    eng = [d["cpu_s"] - d["read_cpu_s"] for _, d in runs]
    return {
        "accesses": n,
        "faults": r["faults"],
        "result": r,
        "engine_mps": float(np.median([n / max(e, 1e-9) for e in eng])) / 1e6,
        "end_to_end_mps": float(np.median([n / c for c in cpu])) / 1e6,
        "wall_mps": float(np.median([n / w for w, _ in runs])) / 1e6,
        "read_ns_per_access": float(np.median([d["read_cpu_s"] for _, d in runs])) / n * 1e9,
        "engine_runs_mps": [round(n / max(e, 1e-9) / 1e6, 2) for e in eng],
        "end_to_end_runs_mps": [round(n / c / 1e6, 2) for c in cpu],
    }


def child_rss(path: Path, capacity: int) -> dict:
    """Simulate in a fresh process; return its peak RSS and accesses.

    Peak RSS is the child's VmHWM (/proc/self/status), not getrusage's ru_maxrss: Linux
    carries the parent's RSS at spawn (the vfork'd copy before exec) into the child's
    ru_maxrss, so that showed the benchmark process's size, not the simulation's.
    """
    code = (
        "import json,re,sys,time\n"
        "from pagecast.sim import SimConfig, simulate\n"
        "t=time.perf_counter(); c=time.process_time(); r=simulate(sys.argv[1], SimConfig(capacity=int(sys.argv[2])))\n"
        "hwm=int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
        "print(json.dumps({'accesses': r.accesses, 'faults': r.faults, 'wall_s': time.perf_counter()-t,\n"
        "  'cpu_s': time.process_time()-c, 'peak_rss_mib': hwm/1024}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(capacity)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


def _row(label: str, r: dict, prate: float, target: float) -> str:
    ok = lambda x: "meets" if x >= target else "BELOW"  # noqa: E731
    return (
        f"{label:32s}: engine {r['engine_mps']:6.1f} M/s ({ok(r['engine_mps'])} {target:g}; {r['engine_mps'] * 1e6 / prate:5.1f}x Python) | "
        f"end to end {r['end_to_end_mps']:5.1f} M/s ({ok(r['end_to_end_mps'])} {target:g}; {r['end_to_end_mps'] * 1e6 / prate:4.1f}x; "
        f"first run {r['end_to_end_runs_mps'][0]:.1f}) | "
        f"read+decode {r['read_ns_per_access']:4.1f} ns/access | wall {r['wall_mps']:5.1f} M/s | faults {r['faults']:,}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="where to keep the generated traces (default: a temp dir)")
    ap.add_argument("--quick", action="store_true", help="skip the 100 M-access memory run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per throughput figure (the median is printed)")
    ap.add_argument("--json", action="store_true", help="also print every figure as one JSON object at the end")
    args = ap.parse_args()
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    except (AttributeError, OSError):
        pass
    import pyarrow as pa

    pa.set_cpu_count(1)
    out: dict = {"load_average_start": os.getloadavg(), "repeat": args.repeat}
    d = Path(args.dir or tempfile.mkdtemp(prefix="pagecast-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    cap = UNIVERSE // 4
    print(
        f"traces in {d}; capacity {cap:,} pages (25 % of {UNIVERSE:,} distinct); load average {os.getloadavg()[0]:.2f}"
    )
    t10 = write_bench_trace(d / "lru_10M.parquet", 10_000_000)  # skewed
    small = write_bench_trace(d / "warm.parquet", 10_000)
    timed_simulate(small, 100)  # JIT warm-up (or load from cache)
    timed_simulate(write_bench_trace(d / "warm_gpu.parquet", 10_000, gpu=True), cap, uvm=True)

    s10 = write_bench_trace(d / "stream_10M.parquet", 10_000_000, stream=True, seed=2)
    pruns = [python_lru(t10, cap, 1_000_000) for _ in range(args.repeat)]
    psec = float(np.median([s for _, s in pruns]))
    prate = 1_000_000 / psec
    out["python_lru_mps"] = prate / 1e6
    print(
        f"\nplain-Python LRU (baseline): 1,000,000 accesses of the skewed trace in {psec:.2f} s CPU = {prate / 1e6:.2f} M accesses/s"
    )
    print(
        f"rates: M accesses per CPU second, median of {args.repeat} runs; engine = simulation alone, end to end = with Parquet read+decode"
    )
    print("\n## LRU, no prefetch (target >= 20 M accesses/s on one core)")
    out["lru"] = {}
    for key, label, path, c in (
        ("skewed", "skewed (1 Mi pages, 4 GiB), cap 25 %", t10, cap),
        ("streaming", "streaming (64 Ki pages), cap 16 Ki", s10, 1 << 14),
    ):
        r = rates(path, c, args.repeat)
        print(_row(label, r, prate, 20))
        out["lru"][key] = {k: v for k, v in r.items() if k != "result"}

    print("\n## UVM mode, tree prefetcher (target >= 5 M accesses/s)")
    g_stream = write_bench_trace(d / "uvm_stream_10M.parquet", 10_000_000, gpu=True, stream=True, seed=3)
    g_skew = write_bench_trace(d / "uvm_skewed_10M.parquet", 10_000_000, gpu=True, seed=1)
    out["uvm"] = {}
    for key, label, path, c in (
        ("stream_fits", "streaming, 256 MiB in 512 MiB", g_stream, 1 << 17),
        ("stream_over", "streaming, 256 MiB on 128 MiB", g_stream, 1 << 15),
        ("skewed_over", "skewed, 4 GiB on 2 GiB", g_skew, UNIVERSE // 2),
    ):
        r = rates(path, c, args.repeat, uvm=True)
        ur = r["result"]
        print(
            _row(label, r, prate, 5)
            + f" | {ur['fault_batches']:,} batches, {ur['prefetches']:,} prefetched, {ur['evictions']:,} chunk evictions"
        )
        out["uvm"][key] = {k: v for k, v in r.items() if k != "result"} | {
            "batches": ur["fault_batches"],
            "evictions": ur["evictions"],
        }

    print("\n## Scaling (LRU, no prefetch, skewed; CPU time of the whole call, median)")
    out["scaling"] = {}
    for n in (1_000_000, 3_000_000, 10_000_000):
        p = t10 if n == 10_000_000 else write_bench_trace(d / f"lru_{n // 1_000_000}M.parquet", n)
        cpu = float(np.median([timed_simulate(p, cap)[1]["cpu_s"] for _ in range(args.repeat)]))
        print(f"{n:>12,} accesses: {cpu:6.2f} s CPU = {cpu / n * 1e9:5.1f} ns/access")
        out["scaling"][n] = cpu

    print("\n## Peak RSS (fresh process, same 1 Mi distinct pages, LRU cap 25 %; an import-only process for scale)")
    out["rss"] = {}
    res = child_rss(small, 100)
    print(
        f"{'10,000 (warm-up)':>12s} accesses: peak RSS {res['peak_rss_mib']:7.0f} MiB (interpreter, numpy, pyarrow, numba, kernels)"
    )
    out["rss"]["baseline"] = res
    sizes = [10_000_000] + ([] if args.quick else [100_000_000])
    for n in sizes:
        p = write_bench_trace(d / f"lru_{n // 1_000_000}M.parquet", n)
        res = child_rss(p, cap)
        print(
            f"{n:>12,} accesses: peak RSS {res['peak_rss_mib']:7.0f} MiB, {res['cpu_s']:.1f} s CPU, {res['wall_s']:.1f} s wall, faults {res['faults']:,}"
        )
        out["rss"][n] = res
    out["load_average_end"] = os.getloadavg()
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    if args.json:
        print(json.dumps(out, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
