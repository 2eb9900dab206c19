"""How many pages to prefetch per prediction, chosen for a capacity on a training run.

Ten pages per miss suit a fast tier of thousands of pages and evict the working set of a
tier of fifteen. ``choose_top_k`` simulates the model's schedule on a run it was trained
on, at the capacity it will be used with, for k = 1, 2, 4, 10, 16, 32 and keeps the k with the
fewest faults; if no k makes fewer faults than no prefetching there, it returns 0 (do not
prefetch at all), so a model tuned this way does not make a tier it has seen worse.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pagecast.learn.predict import predict_schedule
from pagecast.learn.train import LoadedModel
from pagecast.sim.config import SimConfig
from pagecast.sim.misses import has_accesses, miss_events
from pagecast.sim.simulate import resolve_capacity, simulate
from pagecast.trace.schedule import Schedule

TOP_KS = (1, 2, 4, 10, 16, 32)


def choose_top_k(
    model: str | Path | LoadedModel, run: str | Path, capacity: int | str, ks: tuple[int, ...] = TOP_KS
) -> tuple[int, dict[int, int]]:
    """(best k, faults per k with 0 = no prefetching) on ``run`` at ``capacity``
    (pages, bytes or percent of ``run``'s distinct pages). Ties go to the smaller k."""
    cap = resolve_capacity(capacity, run)
    events = miss_events(run, cap) if has_accesses(run) else None
    cfg = SimConfig(capacity=cap)
    faults = {0: simulate(run, cfg, None).faults}
    for k in ks:
        faults[k] = simulate(run, cfg, predict_schedule(model, run, top_k=k, events=events)).faults
    best = min(faults, key=lambda k: (faults[k], k))
    return best, faults


def schedule_with_budget(
    model: str | Path | LoadedModel, trace: str | Path, top_k: int, events: np.ndarray | None = None
) -> Schedule:
    """``predict_schedule`` with ``top_k`` pages per prediction; k = 0 gives an empty schedule."""
    if top_k <= 0:
        s = Schedule.empty()
        s.meta = {"source": "pagecast.learn", "top_k": 0}
        return s
    return predict_schedule(model, trace, top_k=top_k, events=events)
