"""Rows of ``pagecast bench`` / ``pagecast demo`` under a memory limit.

The same workload run in a memory cgroup smaller than its working set: the kernel alone
(``pagecast run --memory LIMIT``) and the memory plan (``pagecast plan --memory`` on the
training prompts recorded under the limit, then ``pagecast run --memory LIMIT --plan``) on
the held-out prompt, each from a cold page cache. ``auto`` limits are a share (60 %) of
the working set the training recordings show: the distinct file pages they used.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from pagecast.bench import sparse_weights as wl
from pagecast.bench.harness import workload_row
from pagecast.bench.results import RunRow
from pagecast.collect.record import record_faults
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.launch.memlimit import run_under_limit
from pagecast.plan.memory import MemoryPlanConfig, plan_for_limit, read_run
from pagecast.plan.memory_format import write_memory_plan
from pagecast.util.memcg import MIN_LIMIT, MemoryCgroup, parse_limit

AUTO_SHARE = 0.6


def working_set_bytes(traces: list[Path]) -> int:
    """The most distinct pages one recording used (file and anonymous), in bytes."""
    best = 0
    for t in traces:
        r = read_run(t, {})
        pages = len(np.unique(r.file * (1 << 40) + r.page)) + r.anon_pages
        best = max(best, pages * PAGE_SIZE)
    return best


def resolve_limit(spec: str, traces: list[Path]) -> int:
    if spec == "auto":
        return max(MIN_LIMIT, int(working_set_bytes(traces) * AUTO_SHARE) // PAGE_SIZE * PAGE_SIZE)
    return parse_limit(spec)


def record_under_limit(argv: list[str], limit: int, out: Path) -> Path:
    with MemoryCgroup(limit) as cg:
        res = record_faults(cg.wrap(argv), out, stdout=subprocess.DEVNULL, meta={"command": argv}, every_read=True)
    if res.exit_status != 0:
        raise PagecastError(f"recording under the limit failed with status {res.exit_status}")
    return out


def limited_run(argv: list[str], limit: int, plan: Path | None, weights: Path) -> tuple[wl.RunOutcome, dict]:
    wl.drop_cache(weights)
    with tempfile.TemporaryFile() as out:
        rep = run_under_limit(argv, limit, str(plan) if plan else None, stdout=out)
        out.seek(0)
        res = wl.parse_result(out.read().decode(errors="replace"))
    if rep.exit_status != 0 or not res:
        raise PagecastError(f"workload under a {limit >> 20} MiB limit failed (status {rep.exit_status})")
    m = rep.memory
    return wl.RunOutcome(0, res, res["wall_s"], m["major_faults"], 0, int(m["read_bytes"] or 0)), rep.to_dict()


def memory_rows(
    out_dir: Path,
    limit_spec: str,
    workload: Callable[[Path, int], wl.WorkloadConfig],
    train_prompts: tuple[int, ...],
    test_prompt: int,
    log: Callable[[str], None],
) -> Callable[[list[Path], Path], list[tuple[str, Callable[[int], RunRow]]]]:
    """``extra_rows`` for ``run_bench``: the training prompts recorded under the limit, a
    memory plan from them, and two strategies (kernel, plan) on the test prompt."""

    def rows(traces: list[Path], weights: Path) -> list[tuple[str, Callable[[int], RunRow]]]:
        limit = resolve_limit(limit_spec, traces)
        mib = limit >> 20
        recs = []
        for p in train_prompts:
            log(f"recording training prompt {p} under {mib} MiB")
            wl.drop_cache(weights)
            argv = workload(weights, p).argv()
            recs.append(record_under_limit(argv, limit, Path(out_dir) / f"memory_train_prompt{p}.parquet"))
        plan = plan_for_limit(recs, MemoryPlanConfig(limit))
        plan_path = Path(out_dir) / "memory.plan"
        write_memory_plan(plan, plan_path)
        log(f"memory plan for {mib} MiB: keep {plan.keep_bytes() >> 20} MiB ({plan.backend})")

        def make(name: str, kind: str, p: Path | None) -> tuple[str, Callable[[int], RunRow]]:
            def fn(rnd: int) -> RunRow:
                o, _ = limited_run(workload(weights, test_prompt).argv(), limit, p, weights)
                return workload_row(name, kind, rnd, o.result, o.bytes_cached, o.major_faults)

            return name, fn

        return [
            make(f"kernel: under a {mib} MiB limit", "kernel", None),
            make(f"pagecast: memory plan, {mib} MiB limit", "pagecast", plan_path),
        ]

    return rows
