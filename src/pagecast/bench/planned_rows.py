"""The planned run as a row of ``pagecast bench`` / ``pagecast demo``.

What a user does, with the benchmark's own recordings: ``pagecast plan`` on the training
runs (other prompts), then ``pagecast run --plan`` on the held-out prompt, the workload
run with no advice of its own (the plan's per-file advice reaches it through the
launcher's shim). The row is timed like the kernel rows: the program's own wall time
(its JSON line), major faults from ``wait4`` (the launcher execs the program in its own
process, so that rusage is the program's), and the weights' resident bytes afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from pagecast.bench import sparse_weights as wl
from pagecast.bench.harness import workload_row
from pagecast.bench.results import RunRow
from pagecast.errors import PagecastError
from pagecast.util.signals import SignalRelay

LABEL = "pagecast: planned (pagecast plan + run --plan)"


def make_plan(traces: list[Path], out: Path, min_runs: int) -> dict[str, Any]:
    """``pagecast plan`` on the recordings, as a user runs it; its JSON summary."""
    cmd = [
        sys.executable,
        "-m",
        "pagecast",
        "plan",
        *map(str, traces),
        "-o",
        str(out),
        "--min-runs",
        str(min_runs),
        "--json",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise PagecastError(f"pagecast plan failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {}


def planned_run(plan: Path, workload: wl.WorkloadConfig, status: Path | None = None) -> wl.RunOutcome:
    """One cold run of the workload under ``pagecast run --plan`` (the console fast path);
    ``status``: where the prefetcher writes its report (``--plan-status``)."""
    wl.drop_cache(workload.weights)
    extra = ["--plan-status", str(status)] if status else []
    cmd = [sys.executable, "-m", "pagecast", "run", "--plan", str(plan), *extra, "--", *workload.argv()]
    with SignalRelay() as relay:  # a bench stopped by SIGTERM stops its run too
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        relay.attach(proc.pid)
        out = proc.stdout.read()
        err = proc.stderr.read()
        _, status, ru = os.wait4(proc.pid, 0)
    proc.stdout.close()
    proc.stderr.close()
    rc = os.waitstatus_to_exitcode(status)
    res = wl.parse_result(out.decode())
    if rc != 0 or not res:
        raise PagecastError(f"{LABEL}: workload failed (status {rc}: {err.decode(errors='replace').strip()[:200]})")
    return wl.RunOutcome(
        rc,
        res,
        res["wall_s"],
        ru.ru_majflt,
        ru.ru_minflt,
        int(wl.resident_pages(workload.weights).sum()) * wl.PAGE,
        err.decode(errors="replace"),
    )


def _pages_issued(status: Path, wait_s: float = 2.0) -> int:
    """Pages the prefetcher issued, from its report (written once the program has exited)."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            return int(json.loads(status.read_text())["prefetch"]["pages_issued"])
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.01)
    return 0


def planned_rows(
    out_dir: Path, workload_for: Callable[[Path], wl.WorkloadConfig], min_runs: int, log: Callable[[str], None]
) -> Callable[[list[Path], Path], list]:
    """A hook for ``run_bench(extra_rows=...)``: plan on the training traces, then one row."""

    def rows(traces: list[Path], weights: Path) -> list:
        plan = Path(out_dir) / "demo.plan"
        summary = make_plan(traces, plan, min_runs)
        chosen = ", ".join(
            f"{Path(f['path']).name}: {f['strategy']}"
            + (f"+{f['advice']}" if f.get("advice", "default") != "default" else "")
            for f in summary.get("files", [])
            if f.get("strategy") != "nothing" or f.get("advice", "default") != "default"
        )
        log(f"plan: {chosen or 'nothing for every file'}")

        def one(rnd: int) -> RunRow:
            status = Path(out_dir) / "demo.plan-status.json"
            status.unlink(missing_ok=True)
            o = planned_run(plan, workload_for(weights), status)
            return workload_row(LABEL, "pagecast", rnd, o.result, o.bytes_cached, o.major_faults, _pages_issued(status))

        return [(LABEL, one)]

    return rows
