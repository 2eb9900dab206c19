"""Grids of simulations (trace × capacity × eviction × prefetcher), run in parallel.

Local runs use a process pool over the machine's cores; ``ray_address`` runs the same
jobs as Ray tasks on an existing cluster. Each job is independent and returns a plain
dict, so the results are the same whichever way they ran.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from pagecast.errors import PagecastError


@dataclass(frozen=True)
class Job:
    trace: str
    capacity: str
    eviction: str
    prefetcher: str
    uvm: bool = False
    options: tuple = ()  # SimConfig overrides as (name, value) pairs


def grid(
    traces: Sequence[str],
    capacities: Sequence[str],
    evictions: Sequence[str],
    prefetchers: Sequence[str],
    uvm: bool = False,
    options: dict[str, Any] | None = None,
) -> list[Job]:
    opts = tuple(sorted((options or {}).items()))
    return [Job(t, str(c), e, p, uvm, opts) for t in traces for c in capacities for e in evictions for p in prefetchers]


def run_job(job: Job) -> dict[str, Any]:
    """One simulation → a flat result row (runs in a worker process or a Ray task)."""
    from pagecast.sim.config import SimConfig
    from pagecast.sim.simulate import resolve_capacity, simulate

    cap = resolve_capacity(job.capacity, job.trace)
    cfg = SimConfig(capacity=cap, eviction=job.eviction, uvm=job.uvm, **dict(job.options))
    r = simulate(job.trace, cfg, job.prefetcher)
    row = r.to_dict()
    row.pop("extra", None)
    row.update(capacity=job.capacity, prefetcher=job.prefetcher, eviction=job.eviction if not job.uvm else r.eviction)
    return row


def run_local(
    jobs: Sequence[Job], workers: int | None = None, on_done: Callable[[], None] | None = None
) -> list[dict[str, Any]]:
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(jobs) == 1:
        out = []
        for j in jobs:
            out.append(run_job(j))
            if on_done:
                on_done()
        return out
    results: dict[int, dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as ex:
        futs = {ex.submit(run_job, j): i for i, j in enumerate(jobs)}
        for f in as_completed(futs):
            results[futs[f]] = f.result()
            if on_done:
                on_done()
    return [results[i] for i in range(len(jobs))]


def run_ray(jobs: Sequence[Job], address: str, on_done: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Run the jobs as Ray tasks on the cluster at ``address`` ('auto', 'ray://…', 'host:port')."""
    try:
        import ray
    except ImportError:
        raise PagecastError("--ray needs the ray package (pip install 'pagecast[ray]')") from None
    started_here = False
    if not ray.is_initialized():
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise PagecastError(f"cannot connect to Ray at {address!r}: {str(e).splitlines()[0][:160]}") from None
        started_here = True
    try:
        task = ray.remote(run_job)
        refs = [task.remote(j) for j in jobs]
        index = {r: i for i, r in enumerate(refs)}
        results: dict[int, dict[str, Any]] = {}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for r in done:
                results[index[r]] = ray.get(r)
                if on_done:
                    on_done()
        return [results[i] for i in range(len(jobs))]
    finally:
        if started_here:
            ray.shutdown()


def plot(rows: Iterable[dict[str, Any]], path: str, metric: str = "faults") -> None:
    """One line per (trace, eviction, prefetcher): ``metric`` against capacity in pages."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pagecast.util.atomic import atomic_output

    rows = list(rows)
    traces = sorted({r["trace"] for r in rows})
    fig, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 4.2), squeeze=False)
    for ax, tr in zip(axes[0], traces):
        lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for r in rows:
            if r["trace"] == tr:
                lines.setdefault((r["eviction"], r["prefetcher"]), []).append((r["capacity_pages"], r[metric]))
        for (ev, pf), pts in sorted(lines.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{pf} / {ev}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("fast-tier capacity (pages)")
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_title(os.path.basename(tr))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    suffix = os.path.splitext(path)[1] or ".png"
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format=suffix.lstrip("."), dpi=120)
    plt.close(fig)
