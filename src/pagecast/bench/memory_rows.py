"""Rows of ``pagecast bench`` / ``pagecast demo`` under a memory limit.

The same workload run in a memory cgroup smaller than its working set: the kernel alone
(``pagecast run --memory LIMIT``) and the memory plan (``pagecast plan --memory`` on the
training prompts recorded under the limit, then ``pagecast run --memory LIMIT --plan``)
through each backend (the kernel's page cache with the controller, and the userfaultfd
pager) on the held-out prompt, each from a cold page cache. ``auto`` limits leave the program its own
memory and a share (60 %) of the weights it reads every token.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Callable

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
LIMIT_CASE = "dense pass under a memory limit"  # its rows' baseline: the kernel alone under the limit
OWN_SLACK = 4 << 20


def dense_workload(tokens: int) -> Callable[[Path, int], wl.WorkloadConfig]:
    """The workload's dense pass: every token reads every row (a dense model's weights, the
    case of a limit below the file), with the kernel's default read-around, which suits a
    sequential pass. The sparse rows' pages hardly recur between tokens: a limit gives a plan
    nothing to keep there (MIN read 21 % less than LRU on the demo's quick run)."""

    def workload(weights: Path, prompt: int) -> wl.WorkloadConfig:
        return wl.WorkloadConfig(weights, prompt=prompt, tokens=tokens, advice="normal", extra=["--dense"])

    return workload


def own_bytes(traces: list[Path]) -> int:
    """The most anonymous memory one recording used, in bytes: the program's own, beside
    the data it reads."""
    return max((read_run(t, {}).anon_pages * PAGE_SIZE for t in traces), default=0)


def resolve_limit(spec: str, traces: list[Path], data_bytes: int) -> int:
    """``auto``: the program's own memory (from ``traces``, the same program's recordings)
    and ``AUTO_SHARE`` of the ``data_bytes`` it reads, with ``OWN_SLACK`` for its binary and
    libraries: every pass of the dense workload reads all of its weights."""
    if spec == "auto":
        want = own_bytes(traces) + OWN_SLACK + int(data_bytes * AUTO_SHARE)
        return max(MIN_LIMIT, want // PAGE_SIZE * PAGE_SIZE)
    return parse_limit(spec)


def record_under_limit(argv: list[str], limit: int, out: Path) -> Path:
    with MemoryCgroup(limit) as cg:
        res = record_faults(cg.wrap(argv), out, stdout=subprocess.DEVNULL, meta={"command": argv}, every_read=True)
    if res.exit_status != 0:
        raise PagecastError(f"recording under the limit failed with status {res.exit_status}")
    return out


def limited_run(
    argv: list[str], limit: int, plan: Path | None, weights: Path, backend: str | None = None
) -> tuple[wl.RunOutcome, dict]:
    wl.drop_cache(weights)
    with tempfile.TemporaryFile() as out:
        rep = run_under_limit(argv, limit, str(plan) if plan else None, stdout=out, backend=backend)
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
    memory plan from them, and three strategies (kernel, the plan through each backend) on
    the test prompt."""

    def rows(traces: list[Path], weights: Path) -> list[tuple[str, Callable[[int], RunRow]]]:
        limit = resolve_limit(limit_spec, traces, weights.stat().st_size)
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

        def make(name: str, kind: str, p: Path | None, backend: str | None) -> tuple[str, Callable[[int], RunRow]]:
            def fn(rnd: int) -> RunRow:
                o, _ = limited_run(workload(weights, test_prompt).argv(), limit, p, weights, backend)
                return workload_row(name, kind, rnd, o.result, o.bytes_cached, o.major_faults, case=LIMIT_CASE)

            return name, fn

        rows = [
            make(f"kernel: under a {mib} MiB limit", "kernel", None, None),
            make(f"pagecast: memory plan, {mib} MiB limit", "pagecast", plan_path, "kernel"),
        ]
        if plan.backend != "kernel":  # a plan that leaves the program to the kernel has nothing for the pager
            rows.append(make(f"pagecast: memory plan via pager, {mib} MiB limit", "pagecast", plan_path, "pager"))
        return rows

    return rows
