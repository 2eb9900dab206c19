"""userfaultfd pager benchmark.

1. Fault service time. The pager's native handler (read message → page installed, incl.
   the fault-log write) against the kernel serving the same access: a major fault on a
   cold file (pages 64 apart so read-around cannot cover the next one) and, for the
   pager's own overhead, a minor fault on a warm file. Per-access times are measured in
   the program (workloads/llm, -t), the handler's p50/p99 by the pager itself.
2. Sparse workload (the BowerAccess `llm`): two passes over a sorted random 10 % of a
   64 MiB file with a 1 MiB budget, cold file at start: faults per pass and wall time for
   the plain kernel mapping, the pager without prefetch, next-N and sparse-monotonic.
3. Write-back: one 8-byte write per page, two passes over an 8192-page warm file with a
   256-page budget (every fault a write that evicts a dirty page, written back as the
   bytes changed since the page was read): the pager in this process against a kernel
   MAP_SHARED mapping of the same file (writes + msync). `--wb-runs N` writes N places
   1/N page apart in each page instead (N runs of changed bytes per write-back: the
   write-back reads the span between the first and the last and writes it in one pwrite).

    PYTHONPATH=src python benchmarks/pager_bench.py [--pages 16384] [--reps 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pagecast.pager import runtime as pg
from pagecast.trace.reader import open_trace
from pagecast.trace.schema import Kind
from pagecast.util.pagecache import drop_file

PS = os.sysconf("SC_PAGESIZE")


def _ra_kb(path: Path) -> str:
    try:
        dev = os.stat(path).st_dev
        p = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
        for cand in (p / "queue/read_ahead_kb", p.resolve().parent / "queue/read_ahead_kb"):
            if cand.exists():
                return cand.read_text().strip()
    except OSError:
        pass
    return "?"


def make_warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def run_llm(args: list[str]) -> dict:
    cmd = [str(pg.llm_path()), *args, "-t", "-q"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_llm_paged(args: list[str], specs, policy: str, trace=None, learn=None) -> tuple[dict, list[dict]]:
    """The program under the pager, keeping its own timing line."""
    cmd = [str(pg.llm_path()), *args, "-t", "-q"]
    with tempfile.TemporaryDirectory() as td:
        e = pg.pager_env(specs, policy, stats_dir=Path(td), log_dir=Path(td) if trace else None, learn_dir=learn)
        p = subprocess.run(cmd, capture_output=True, text=True, env=e, check=True)
        stats = [json.loads(x.read_text()) for x in Path(td).glob("*.json")]
        if trace:
            pg.logs_to_trace(sorted(Path(td).glob("*.pglog")), trace)
    return json.loads(p.stdout.strip().splitlines()[-1]), stats


def fault_service(path: Path, npages: int, reps: int) -> dict:
    pages = ",".join(str(p) for p in range(0, npages, 64))
    args = ["-n", str(npages), "-p", pages, "-m", "read", str(path)]
    spec = [(str(path), 1 << 20)]
    keys = (
        "kernel_major",
        "kernel_readaround",
        "pager_cold",
        "kernel_minor",
        "pager_warm",
        "handler_p50",
        "handler_p99",
        "handler_p50_cold",
    )
    rows: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(reps):
        drop_file(path)
        rows["kernel_major"].append(run_llm([*args, "-R"])["access_ns_p50"])
        drop_file(path)
        rows["kernel_readaround"].append(run_llm(args)["access_ns_p50"])
        drop_file(path)
        r, st = run_llm_paged(args, spec, "none")
        rows["pager_cold"].append(r["access_ns_p50"])
        rows["handler_p50_cold"].append(st[0]["service_ns_p50"])
        make_warm(path)
        rows["kernel_minor"].append(run_llm(args)["access_ns_p50"])
        r, st = run_llm_paged(args, spec, "none")
        rows["pager_warm"].append(r["access_ns_p50"])
        rows["handler_p50"].append(st[0]["service_ns_p50"])
        rows["handler_p99"].append(st[0]["service_ns_p99"])
    return {k: statistics.median(v) / 1000 for k, v in rows.items()}  # µs


def _passes(trace: Path) -> tuple[int, int]:
    c = open_trace(trace).read(["kind", "page", "flags"])
    faults = c["page"][(c["kind"] == int(Kind.FAULT)) & ((c["flags"] & 4) == 0)]
    cut = np.flatnonzero(np.diff(faults) < 0)
    f1 = int(cut[0] + 1) if len(cut) else len(faults)
    return f1, len(faults) - f1


def sparse_passes(path: Path, npages: int, reps: int, tmp: Path) -> list[dict]:
    """Two passes in one run: the sparse policy learns the set in pass 1."""
    args = ["-n", str(npages), "-g", "11:100", "-r", "2", "-m", "read", str(path)]
    spec = [(str(path), 1 << 20)]
    out = []
    for name, policy in [
        ("kernel mmap (no budget)", None),
        ("pager none", "none"),
        ("pager next:16", "next:16"),
        ("pager sparse:16", "sparse:16"),
    ]:
        times, f1, f2 = [], None, None
        for _ in range(reps):
            drop_file(path)
            if policy is None:
                r = run_llm(args)
            else:
                r, _ = run_llm_paged(args, spec, policy, trace=tmp / "s.parquet")
                f1, f2 = _passes(tmp / "s.parquet")
            times.append(r["ns"] / 1e9)
        out.append({"config": name, "faults_pass1": f1, "faults_pass2": f2, "time_s": statistics.median(times)})
    return out


def sparse_cold_start(path: Path, npages: int, reps: int, tmp: Path) -> list[dict]:
    """One pass on a cold file; the sparse policy uses the set learned by an earlier run."""
    args = ["-n", str(npages), "-g", "11:100", "-m", "read", str(path)]
    spec = [(str(path), 1 << 20)]
    learn = tmp / "learn"
    drop_file(path)
    run_llm_paged(args, spec, "sparse:16", learn=learn)  # the earlier run that learns
    out = []
    for name, policy in [
        ("kernel mmap (no budget)", None),
        ("pager none", "none"),
        ("pager sparse:16 learned", "sparse:16"),
    ]:
        times, faults = [], None
        for _ in range(reps):
            drop_file(path)
            if policy is None:
                r = run_llm(args)
            else:
                r, st = run_llm_paged(args, spec, policy, learn=learn if "learned" in name else None)
                faults = st[0]["faults"]
            times.append(r["ns"] / 1e9)
        out.append({"config": name, "faults": faults, "time_s": statistics.median(times)})
    return out


def write_back(tmp: Path, reps: int, npages: int = 8192, budget: int = 256, runs: int = 1) -> dict:
    f = tmp / "wb.bin"
    np.zeros(npages * PS, np.uint8).tofile(f)
    kernel, pager, p50, p99 = [], [], [], []
    for _ in range(reps):
        m = np.memmap(f, np.uint8, "r+")
        t = time.perf_counter()
        for k in range(2):
            _write_pass(m, npages, runs, k * 8, 1 + k)
        m.flush()
        kernel.append(time.perf_counter() - t)
        del m
        r = pg.open_paged(f, budget * PS, flush_ms=0)
        a = r.array()
        t = time.perf_counter()
        for k in range(2):
            _write_pass(a, npages, runs, k * 8 + 16, 3 + k)
        st = r.close()
        pager.append(time.perf_counter() - t)
        p50.append(st.service_ns_p50 / 1e3)
        p99.append(st.service_ns_p99 / 1e3)
    med = statistics.median
    return {"pages": npages, "budget_pages": budget, "runs_per_page": runs, "kernel_s": med(kernel), "pager_s": med(pager),
            "handler_p50_us": med(p50), "handler_p99_us": med(p99)}  # fmt: skip


def _write_pass(a: np.ndarray, npages: int, runs: int, off: int, value: int) -> None:
    """One byte at ``off`` of every page (runs == 1), or at ``runs`` places 1/runs page apart, page by page."""
    if runs == 1:
        a[off::PS] = value
    else:
        a.reshape(npages, runs, PS // runs)[:, :, off] = value  # basic indexing: page after page


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=16384, help="file size in pages (default 16384 = 64 MiB)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--wb-runs", type=int, default=1, help="write-back: places written per page (default 1)")
    a = ap.parse_args()
    pg.probe()
    with tempfile.TemporaryDirectory(dir=os.environ.get("PAGECAST_BENCH_DIR", "/var/tmp")) as td:
        tmp = Path(td)
        f = tmp / "weights.bin"
        with open(f, "wb") as fh:
            rng = np.random.default_rng(0)
            for _ in range(0, a.pages, 4096):
                fh.write(rng.integers(0, 256, 4096 * PS, dtype=np.uint8).tobytes())
            fh.truncate(a.pages * PS)
        fs = fault_service(f, a.pages, a.reps)
        fs["read_ahead_kb"] = _ra_kb(f)
        sp = sparse_passes(f, a.pages, a.reps, tmp)
        cs = sparse_cold_start(f, a.pages, a.reps, tmp)
        wb = write_back(tmp, a.reps, runs=a.wb_runs)
    for rows in (sp, cs):
        for row in rows:
            row["vs_kernel"] = rows[0]["time_s"] / row["time_s"]
    if a.json:
        print(
            json.dumps(
                {"fault_service_us": fs, "sparse_passes": sp, "sparse_cold_start": cs, "write_back": wb}, indent=2
            )
        )
        return 0
    print(f"fault service, {a.pages // 64} faults 64 pages apart, median of {a.reps} runs (µs):")
    print(
        f"  pager handler p50 / p99, warm file          {fs['handler_p50']:7.2f} / {fs['handler_p99']:.2f}   (target <= 10)"
    )
    print(f"  pager handler p50, cold file (incl. read)   {fs['handler_p50_cold']:7.2f}")
    print("  per access as the program sees it (p50):")
    print(
        f"    cold file: kernel major fault (MADV_RANDOM) {fs['kernel_major']:8.2f}   pager {fs['pager_cold']:8.2f}   kernel/pager {fs['kernel_major'] / fs['pager_cold']:.2f}x"
    )
    print(
        f"    cold file: kernel default read-around       {fs['kernel_readaround']:8.2f}   (read_ahead_kb={fs['read_ahead_kb']} KiB: most touches hit pages read by an earlier fault)"
    )
    print(
        f"    warm file: kernel minor fault               {fs['kernel_minor']:8.2f}   pager {fs['pager_warm']:8.2f}   kernel/pager {fs['kernel_minor'] / fs['pager_warm']:.2f}x"
    )
    print(f"sparse llm: {a.pages} pages, sorted random 10 % touched, 1 MiB budget, cold file, median of {a.reps}")
    print("  two passes in one run (access-loop time):")
    print(f"    {'config':26s} {'faults p1':>9s} {'faults p2':>9s} {'time s':>8s} {'kernel/x':>9s}")
    for r in sp:
        f1 = "-" if r["faults_pass1"] is None else str(r["faults_pass1"])
        f2 = "-" if r["faults_pass2"] is None else str(r["faults_pass2"])
        print(f"    {r['config']:26s} {f1:>9s} {f2:>9s} {r['time_s']:8.3f} {r['vs_kernel']:8.2f}x")
    print("  cold start, one pass, set learned by an earlier run:")
    print(f"    {'config':26s} {'faults':>9s} {'time s':>8s} {'kernel/x':>9s}")
    for r in cs:
        print(
            f"    {r['config']:26s} {'-' if r['faults'] is None else r['faults']:>9} {r['time_s']:8.3f} {r['vs_kernel']:8.2f}x"
        )
    print(
        f"write-back: {wb['runs_per_page']} write(s) per page, 2 passes, {wb['pages']} pages, {wb['budget_pages']}-page budget, median of {a.reps}:"
    )
    print(
        f"  kernel MAP_SHARED + msync {wb['kernel_s']:8.3f} s   pager {wb['pager_s']:8.3f} s   kernel/pager {wb['kernel_s'] / wb['pager_s']:.2f}x"
    )
    print(
        f"  pager handler p50 / p99 {wb['handler_p50_us']:7.2f} / {wb['handler_p99_us']:.2f} µs (each fault evicts a dirty page)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
