"""Bounded memory for training: a long demand stream is sampled in stretches.

Training draws ``windows_per_epoch`` windows (8,192 × 32 events by default) per epoch, so
a trace of tens of millions of accesses holds far more events than an epoch can use,
while encoding all of them costs about a kilobyte per event (horizon labels, their
generic twins, the page table's successor pairs). Above ``max_events`` demand events the
stream is therefore read as ``stretches`` contiguous stretches spread evenly over the
trace, read chunk by chunk so the whole stream is never in memory; each stretch is
a piece of the program's own order, so windows, labels and page successors are taken
inside one stretch, never across the joints. The first ``WARMUP`` events of a stretch
(after the first) set the per-region "last page" state and start no window.

``memory_check`` turns the estimate into one line before a run that would not fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pagecast.errors import PagecastError
from pagecast.trace.demand import demand_batches, demand_mask
from pagecast.trace.reader import Trace, open_trace

MAX_TRAIN_EVENTS = 2_000_000
STRETCHES = 64
WARMUP = 256
# Peak resident bytes per encoded training event (measured by benchmarks/train_memory.py
# at the default horizon 10: ~0.5 KB; kept with headroom) and the fixed cost of torch,
# numba and the model.
BYTES_PER_EVENT = 800
BASE_BYTES = 600 << 20


@dataclass
class SamplePlan:
    """Which demand events of one trace are read: ``stretches`` as [start, stop) indices."""

    total: int
    stretches: list[tuple[int, int]] = field(default_factory=list)

    @property
    def events(self) -> int:
        return sum(b - a for a, b in self.stretches)

    @property
    def sampled(self) -> bool:
        return self.events < self.total


def count_demand(trace: Trace) -> int:
    """Demand events of a trace (one pass over its kind column)."""
    return sum(int(np.count_nonzero(demand_mask(b["kind"]))) for b in trace.iter_batches(["kind"], 1 << 22))


def plan_sample(total: int, budget: int, stretches: int = STRETCHES) -> SamplePlan:
    """All events if they fit ``budget``, else ``stretches`` equal stretches spread evenly."""
    if total <= budget:
        return SamplePlan(total, [(0, total)] if total else [])
    n = max(1, min(stretches, budget // (4 * WARMUP)))
    size = budget // n
    gap = total / n
    return SamplePlan(total, [(int(i * gap), int(i * gap) + size) for i in range(n)])


def read_sampled(trace: Trace | str | Path, plan: SamplePlan, batch_rows: int = 1 << 20):
    """The planned stretches of ``trace``'s demand stream as one ``DemandStream`` whose
    ``segments`` name where each stretch's usable part lies in it."""
    from pagecast.learn.dataset import DemandStream

    t = trace if isinstance(trace, Trace) else open_trace(trace)
    cols = ("t_ns", "region", "page", "ip")
    parts: dict[str, list[np.ndarray]] = {c: [] for c in cols}
    pos = 0
    todo = list(plan.stretches)
    for b in demand_batches(t, list(cols), batch_rows):
        m = len(b["page"])
        for a, z in todo:
            lo, hi = max(a, pos), min(z, pos + m)
            if lo < hi:
                for c in cols:
                    parts[c].append(b[c][lo - pos : hi - pos].copy())
        pos += m
        todo = [(a, z) for a, z in todo if z > pos]
        if not todo:
            break
    out = {c: np.concatenate(v) if v else np.empty(0) for c, v in parts.items()}
    segs, off = [], 0
    for i, (a, z) in enumerate(plan.stretches):
        n = min(z, plan.total) - a
        segs.append((off + (WARMUP if i else 0), off + n))
        off += n
    return DemandStream.from_columns(out, t, segs if plan.sampled else None)


def split_budget(counts: list[int], budget: int) -> list[int]:
    """Per-trace event budgets: everything when it fits, else shares proportional to size."""
    total = sum(counts)
    if total <= budget:
        return list(counts)
    return [min(c, max(4 * WARMUP, int(budget * c / total))) for c in counts]


def estimate_bytes(events: int, horizon: int, per_event: int | None = None) -> int:
    per = BYTES_PER_EVENT + 48 * max(0, horizon - 10) if per_event is None else per_event
    return BASE_BYTES + events * per


def available_bytes() -> int:
    """Memory this process may still use: MemAvailable, or less under a cgroup limit."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3 and "memory" in parts[1].split(","):
                base = Path("/sys/fs/cgroup/memory") / parts[2].lstrip("/")
                limit = int((base / "memory.limit_in_bytes").read_text())
                used = int((base / "memory.usage_in_bytes").read_text())
                if limit < 1 << 60:
                    avail = min(avail or limit, limit - used)
    except (OSError, ValueError):
        pass
    return avail if avail is not None else 1 << 62


def memory_check(events: int, horizon: int, what: str = "training", per_event: int | None = None) -> int:
    """The estimated peak; one clear error before starting when it does not fit."""
    need = estimate_bytes(events, horizon, per_event)
    have = available_bytes()
    if need > have:
        hint = "lower --max-events" if what == "training" else "on a full access trace, pass --capacity"
        raise PagecastError(
            f"{what} on {events:,} demand events needs about {need / 2**30:.1f} GiB and "
            f"{have / 2**30:.1f} GiB is available; {hint}"
        )
    return need
