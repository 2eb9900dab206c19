"""Prefetch injection on a real GPU: faults and kernel time without and with prefetching.

For each workload in workloads/cuda: (1) record it (CUPTI + interposer) — the baseline;
(2) build the replay schedule of that recording (every demanded GPU page, first-demand
order) and run again with the injector and CUPTI; print GPU faults, demand-migrated
bytes, prefetched bytes and the program's own kernel time for both, and the ratios.
On a machine without a GPU it says so and measures nothing.

    PYTHONPATH=src python benchmarks/cuda_prefetch_gpu.py [--out DIR] [--factor 1.5]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np


def has_gpu() -> bool:
    if shutil.which("nvidia-smi"):
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    return Path("/dev/nvidia0").exists()


def counts(trace: Path) -> dict[str, float]:
    from pagecast.trace import Kind, open_trace
    from pagecast.trace.schema import subkind

    d = open_trace(trace).read(["kind", "flags", "bytes"])
    htod = d["kind"] == int(Kind.MIGRATE_HTOD)
    cause = subkind(d["flags"])
    return {
        "gpu_faults": int(np.count_nonzero(d["kind"] == int(Kind.FAULT_GPU))),
        "demand_htod_mb": float(d["bytes"][htod & (cause == 2)].sum()) / 2**20,
        "user_prefetch_mb": float(d["bytes"][htod & (cause == 1)].sum()) / 2**20,
    }


def run(cmd: list[str], env: dict[str, str]) -> float:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}): {p.stderr.strip()[:300]}")
    m = re.search(r"kernel_ms=([0-9.]+)", p.stdout)
    return float(m.group(1)) if m else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="cuda-prefetch-bench")
    ap.add_argument("--factor", default="1.5", help="oversubscription factor for workloads/cuda/oversub")
    args = ap.parse_args()
    if not has_gpu():
        print("no NVIDIA GPU on this machine: nothing measured (see docs/cuda.md for what was verified without one)")
        return 0
    from pagecast.collect import cuda_native as cn
    from pagecast.collect.cuda import cuda_env
    from pagecast.collect.cupti_records import convert_dir
    from pagecast.cuda.injector import replay_schedule, write_prefetch_file

    tk = cn.find_toolkit()
    lib, cupti, exes = cn.build_interposer(tk), cn.build_cupti_collector(tk), cn.build_workloads(tk=tk)
    # vector_add rewrites its arrays on the host before every launch: re-prefetch each time.
    cases = {"vector_add": ([str(exes["vector_add"]), str(1 << 24), "10"], "1")}
    for pat in ("stream", "strided", "gather"):
        cases[f"oversub-{pat}"] = ([str(exes["oversub"]), pat, "--factor", args.factor], "0")
    out = Path(args.out)
    for name, (cmd, repeat) in cases.items():
        base_dir, pf_dir = out / name / "baseline", out / name / "prefetch"
        for d in (base_dir, pf_dir):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        t_base = run(cmd, cuda_env(lib, base_dir, cupti))
        convert_dir(base_dir, base_dir / "trace.parquet", command=cmd)
        sched = replay_schedule(base_dir / "trace.parquet")
        write_prefetch_file(sched, pf_dir / "prefetch.txt")
        env = cuda_env(lib, pf_dir, cupti)
        env.update(PREDICTIONS_FILE=str(pf_dir / "prefetch.txt"), PREFETCH_POLL_MS="50", PREFETCH_REPEAT=repeat)
        t_pf = run(cmd, env)
        convert_dir(pf_dir, pf_dir / "trace.parquet", command=cmd)
        b, p = counts(base_dir / "trace.parquet"), counts(pf_dir / "trace.parquet")
        print(f"{name}: schedule {len(sched)} pages")
        print(
            f"  baseline : kernel {t_base:10.3f} ms  GPU faults {b['gpu_faults']:9d}  demand HtoD {b['demand_htod_mb']:9.1f} MiB"
        )
        print(
            f"  prefetch : kernel {t_pf:10.3f} ms  GPU faults {p['gpu_faults']:9d}  demand HtoD {p['demand_htod_mb']:9.1f} MiB"
            f"  prefetched {p['user_prefetch_mb']:9.1f} MiB"
        )
        print(
            f"  ratio    : time {t_base / t_pf if t_pf else float('nan'):.2f}x faster, faults x{p['gpu_faults'] / max(b['gpu_faults'], 1):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
