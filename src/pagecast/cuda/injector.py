"""Prefetch CUDA managed memory in a running program from a schedule.

``run_cuda(cmd, schedule=..., out_dir=...)`` writes the schedule as the injector's
predictions file and runs the program with ``libpagecast_cuda.so`` preloaded; the
injector inside the process issues cuMemPrefetchAsync for the listed pages (see
``native/cuda/injector.c`` and docs/cuda.md).

Predictions file (``pagecast-prefetch 1``), one page per line, best first::

    pagecast-prefetch 1
    managed <order> <page> <score>

``order`` is the allocation's creation order among the process's managed allocations:
the region's ``order`` in the trace the schedule was computed from, so the schedule of
one run names the same allocation in the next, whatever address it gets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pagecast.errors import PagecastError
from pagecast.trace.keys import page_keys
from pagecast.trace.regions import Region
from pagecast.trace.schedule import Schedule, read_schedule
from pagecast.util.atomic import atomic_output

PREFETCH_KINDS = ("managed", "device")
RAW_PATTERNS = (
    "metrics.*.csv",
    "timeline.*.csv",
    "allocs.*.csv",
    "injector.*.json",
    "messages.*.log",
    "session.*.json",
    "cupti.*.bin",
    "kernels.*.tsv",
    "*.tmp",
)


def schedule_to_lines(schedule: Schedule, regions: Sequence[Region] | None = None) -> tuple[list[str], dict[str, int]]:
    """Lines of the predictions file: first occurrence of each (region, page) in trigger order."""
    regions = list(regions if regions is not None else schedule.regions)
    s = schedule.sorted()
    # allocation identity: (kind, order); regions without an order get their rank among their kind
    kinds, orders = [], []
    seen: dict[str, int] = {}
    for r in regions:
        rank = seen.get(r.kind, 0)
        seen[r.kind] = rank + 1
        kinds.append(r.kind)
        orders.append(r.order if r.order >= 0 else rank)
    valid = (s.region >= 0) & (s.region < len(regions)) & (s.page >= 0)
    if len(regions):
        ok_kind = np.array([k in PREFETCH_KINDS for k in kinds], bool)
        valid &= ok_kind[np.clip(s.region, 0, len(regions) - 1)]
    else:
        valid &= False
    rid, page, score = s.region[valid], s.page[valid], s.score[valid]
    _, first = np.unique(page_keys(rid, page), return_index=True)
    first.sort()
    lines = [
        f"{kinds[r]} {orders[r]} {p} {sc:.4g}"
        for r, p, sc in zip(rid[first].tolist(), page[first].tolist(), score[first].tolist())
    ]
    stats = {"schedule_rows": int(len(s)), "pages": len(lines), "dropped_not_gpu": int(np.count_nonzero(~valid))}
    return lines, stats


def replay_schedule(trace: str | Path) -> Schedule:
    """Every GPU-memory page the recorded run demanded, once, in first-demand order.

    The schedule of perfect knowledge from a previous run (all rows trigger 0: prefetch
    at the first launch); the reference a learned schedule is compared with on a GPU.
    """
    from pagecast.trace import open_trace
    from pagecast.trace.demand import read_demand_columns

    t = open_trace(trace)
    d = read_demand_columns(t, ["t_ns", "region", "page"])
    gpu = np.array([r.kind in PREFETCH_KINDS for r in t.regions] or [False], bool)
    m = d["region"] >= 0
    m &= gpu[np.clip(d["region"], 0, len(gpu) - 1)]
    region, page, t_ns = d["region"][m], d["page"][m], d["t_ns"][m]
    _, first = np.unique(page_keys(region, page), return_index=True)
    first.sort()
    n = len(first)
    return Schedule(
        np.zeros(n),
        t_ns[first],
        region[first],
        page[first],
        np.ones(n),
        regions=t.regions,
        meta={"kind": "replay", "from": str(trace)},
    )


def write_prefetch_file(
    schedule: Schedule,
    path: str | Path,
    regions: Sequence[Region] | None = None,
    pre_evict: Schedule | None = None,
) -> dict[str, int]:
    """Write the injector's predictions file atomically (the injector reloads on rename).

    ``pre_evict`` names pages to send to the host ahead of need (``evict`` lines: the
    injector issues them as cuMemPrefetchAsync to the CPU, before the prefetches)."""
    lines, stats = schedule_to_lines(schedule, regions)
    if pre_evict is not None:
        ev_lines, ev_stats = schedule_to_lines(pre_evict, regions)
        lines = [f"evict {line}" for line in ev_lines] + lines
        stats = {**stats, **{f"evict_{k}": v for k, v in ev_stats.items()}}
    with atomic_output(path) as tmp:
        tmp.write_text(
            "pagecast-prefetch 1\n# <kind> <allocation order> <page> <score>\n"
            + "\n".join(lines)
            + ("\n" if lines else "")
        )
    return stats


def pre_evict_from_model(
    model: str | Path, trace: str | Path, capacity: int | str = "50%", threshold: float = 0.5
) -> Schedule:
    """A pre-eviction plan from a learned eviction (``pagecast train --target eviction``)
    played over a previous recording of the program, in DeepUM's manner (evict what is not
    needed soon): every access of the recording is scored at the GPU's ``capacity`` (pages,
    or a size or share of the recording's distinct pages, as ``simulate --capacity``), in
    one batch as the simulator's ``learned`` eviction does, and each page whose *last*
    access there scores below ``threshold`` (MIN would not keep it until a next use) is
    named once, triggered at that access. Rows keep the recording's region ids and regions,
    so the injector names allocations by their creation order."""
    from pagecast.learn.eviction import EvictionModel, dense_ids, read_run
    from pagecast.sim.simulate import resolve_capacity
    from pagecast.trace import open_trace

    if not 0 < threshold < 1:
        raise PagecastError(f"pre-eviction threshold must be in (0, 1), not {threshold}")
    m = EvictionModel.load(model)
    d = read_run(trace)
    cap = resolve_capacity(capacity, trace)
    p = m.scores(d, cap)
    ids, n_ids = dense_ids(d["region"], d["page"])
    last = np.full(n_ids, -1, np.int64)
    last[ids] = np.arange(len(ids))  # later rows overwrite: each page's last access
    rows = np.sort(last[p[last] < threshold])
    return Schedule(
        rows,
        d["t"][rows],
        d["region"][rows],
        d["page"][rows],
        1.0 - p[rows],
        regions=open_trace(trace).regions,
        meta={"kind": "pre-evict", "model": str(model), "from": str(trace), "capacity_pages": int(cap)},
    )


def _is_eviction_model(path: Schedule | str | Path) -> bool:
    return not isinstance(path, Schedule) and Path(path).suffix.lower() in (".pt", ".pth")


def _load_schedule(schedule: Schedule | str | Path) -> Schedule | Path:
    if isinstance(schedule, Schedule):
        return schedule
    path = Path(schedule)
    if path.suffix.lower() in (".csv", ".txt"):
        return path  # AI4Mem's predictions.csv or a ready predictions file: the injector reads it
    return read_schedule(path)


def run_cuda(cmd: Sequence[str], *, json_out: bool = False, **options: Any) -> int:
    """Run ``cmd`` with the prefetch injector, print its summary; returns the program's exit status.

    ``options`` are ``run_cuda_summary``'s (schedule, model, out_dir, trace, top_k,
    poll_ms, record, repeat, pre_evict), which documents them.
    """
    from pagecast.collect.cuda import print_summary

    rc, summary = run_cuda_summary(cmd, json_out=json_out, **options)
    print_summary(summary, json_out)
    return rc


def _predicted_schedule(
    cmd: Sequence[str],
    model: str | Path,
    trace: str | Path | None,
    out_dir: Path,
    top_k: int,
    json_out: bool,
    info: dict[str, Any],
) -> tuple[Schedule, list[Region] | None]:
    """The model's schedule from ``trace`` (recorded first when none is given), and the
    regions its rows name when it carries none."""
    from pagecast.collect.cuda import record_cuda
    from pagecast.learn.predict import predict_schedule  # lazy: torch only when a model is used

    if trace is None:
        trace = out_dir / "profile.parquet"
        record_cuda(cmd, trace, json_out=json_out)
    schedule = predict_schedule(str(model), str(trace), top_k=top_k)
    info["predicted_from"] = str(trace)
    regions = None
    if not schedule.regions:  # rows name the trace's region ids
        from pagecast.trace import open_trace

        regions = open_trace(trace).regions
    return schedule, regions


def _pre_evict_from(model: str | Path, trace: str | Path | None, capacity: int | str, info: dict[str, Any]) -> Schedule:
    """An eviction model's pre-eviction plan from ``trace`` at the GPU capacity ``capacity``."""
    if trace is None:
        raise PagecastError("a pre-eviction model needs a previous recording of the program (--trace)")
    plan = pre_evict_from_model(model, trace, capacity)
    info["pre_evict_capacity_pages"] = plan.meta["capacity_pages"]
    return plan


def _predictions_file(
    schedule: Schedule | str | Path,
    pre_evict: Schedule | str | Path | None,
    out_dir: Path,
    regions: list[Region] | None,
    info: dict[str, Any],
) -> Path:
    """The file the injector reads: a ready predictions file as given, else the schedule
    (and pre-eviction plan) written as ``out_dir/prefetch.txt``."""
    loaded = _load_schedule(schedule)
    evict = _load_schedule(pre_evict) if pre_evict is not None else None
    if isinstance(evict, Path) or (evict is not None and isinstance(loaded, Path)):
        raise PagecastError(
            "a pre-eviction plan is a schedule (.parquet) given with a schedule or a model, not a predictions file"
        )
    if isinstance(loaded, Path):
        if not loaded.exists():
            raise PagecastError("no such predictions file", path=loaded)
        return loaded.resolve()
    predictions = out_dir / "prefetch.txt"
    info.update(write_prefetch_file(loaded, predictions, regions, pre_evict=evict))
    return predictions


def run_cuda_summary(
    cmd: Sequence[str],
    *,
    schedule: Schedule | str | Path | None = None,
    model: str | Path | None = None,
    out_dir: str | Path,
    trace: str | Path | None = None,
    top_k: int = 10,
    poll_ms: int = 200,
    record: bool = False,
    repeat: bool = False,
    pre_evict: Schedule | str | Path | None = None,
    pre_evict_capacity: int | str = "50%",
    json_out: bool = False,
) -> tuple[int, dict[str, Any]]:
    """Run ``cmd`` with the prefetch injector: (the program's exit status, the summary).

    ``schedule``: a Schedule, a schedule Parquet file, or a predictions file the injector
    reads directly (``pagecast-prefetch 1`` or AI4Mem's predictions.csv). ``model``:
    a trained model; its schedule is predicted from ``trace`` (a previous recording of the
    same program), or, without one, from a recording made first (``record_cuda``).
    With ``record=True`` the injected run is recorded too (CUPTI; needs a GPU); with
    ``repeat=True`` the pages are prefetched again before every kernel launch.
    ``pre_evict``: a Schedule or schedule file of pages to send to the host ahead of need
    (``evict`` lines, issued before the prefetches; not with a ready predictions file),
    or an eviction model (``.pt``): its plan comes from ``trace`` at the GPU capacity
    ``pre_evict_capacity`` (``pre_evict_from_model``).
    ``json_out``: the program's stdout goes to stderr.
    Files: ``out_dir/prefetch.txt``, the interposer's metrics/timeline/injector stats.
    """
    from pagecast.collect.cuda import cuda_env, run_program, summarize_dir
    from pagecast.collect.cuda_native import build_cupti_collector, build_interposer, find_toolkit

    if not cmd:
        raise PagecastError("no command given")
    if (schedule is None) == (model is None):
        raise PagecastError("give exactly one of a schedule or a model")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tk = find_toolkit()
    interposer = build_interposer(tk)
    info: dict[str, Any] = {}
    regions: list[Region] | None = None
    if model is not None:
        schedule, regions = _predicted_schedule(cmd, model, trace, out_dir, top_k, json_out, info)
        trace = info["predicted_from"]  # recorded first when none was given
    if pre_evict is not None and _is_eviction_model(pre_evict):
        pre_evict = _pre_evict_from(pre_evict, trace, pre_evict_capacity, info)
    predictions = _predictions_file(schedule, pre_evict, out_dir, regions, info)
    raw = out_dir
    for pattern in RAW_PATTERNS:  # a previous run's files would be summarised as this one's
        for old in raw.glob(pattern):
            old.unlink()
    env = cuda_env(interposer, raw, build_cupti_collector(tk) if record else None)
    env.setdefault("PREDICTIONS_FILE", str(predictions))
    env.setdefault("PREFETCH_POLL_MS", str(poll_ms))
    if repeat:
        env["PREFETCH_REPEAT"] = "1"
    rc = run_program(cmd, env, quiet_stdout=json_out)
    summary: dict[str, Any] = {
        "exit_status": rc,
        "predictions_file": str(predictions),
        **info,
        "api": summarize_dir(raw),
    }
    if record:
        from pagecast.collect.cupti_records import convert_dir

        summary.update(convert_dir(raw, out_dir / "trace.parquet", command=cmd))
    return rc, summary
