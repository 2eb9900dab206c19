"""Prediction sources for the live loop: what to prefetch after each batch of faults.

Each source turns a batch of faults (arrays) into an ordered list of (region, page) to
prefetch, in the *live* run's region ids. Three kinds:

- ``PolicySource``: any ``Prefetcher`` (classic policies from ``pagecast.policies``,
  learned ones from ``pagecast.policies.learned.load_predictor``), one ``observe`` per fault.
- ``ReplaySource``: a schedule from an earlier run, paced by the faults this run takes.
  A fault on a page the schedule knows, at most ``lookahead`` rows ahead, moves the
  cursor to that page's position; any other fault advances it by one. Everything up to ``cursor + lookahead`` is issued, so
  the prefetch wave runs that many pages ahead of the program: the kernel's fault path is
  synchronous, so only a deep queue of outstanding reads beats it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pagecast.errors import PagecastError
from pagecast.policies.base import Prefetcher
from pagecast.trace.demand import read_demand_columns
from pagecast.trace.keys import page_keys
from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.regions import Region, match_regions
from pagecast.trace.schedule import Schedule
from pagecast.trace.schema import Kind


@dataclass
class Predictions:
    """Pages to prefetch, best/earliest first, with the batch index of the fault that caused them."""

    cause: np.ndarray  # int64 index into the batch
    region: np.ndarray  # int32
    page: np.ndarray  # int64

    @classmethod
    def empty(cls) -> "Predictions":
        return cls(np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.int64))

    def __len__(self) -> int:
        return len(self.page)


class Source:
    name = "none"

    def set_regions(self, regions: Sequence[Region]) -> None:
        """Called whenever the live run's region list grew."""

    def on_batch(self, t_ns: np.ndarray, region: np.ndarray, page: np.ndarray, kind: np.ndarray) -> Predictions:
        return Predictions.empty()

    def take_pending(self) -> Predictions:
        """Pages that became issuable outside a fault batch (a region appeared)."""
        return Predictions.empty()

    def initial(self) -> tuple[Predictions, dict[int, str]]:
        """Pages to read before the program's first fault, named by *encoded* region ids
        (``-2 - id`` of a region of the source's own region list) with their file paths."""
        return Predictions.empty(), {}

    def warm_up(self) -> None:
        """Do once, before the program starts, what the first fault batch would pay for."""


def encode_old(region: np.ndarray) -> np.ndarray:
    """Region ids of an earlier run, kept apart from live ids (which are >= -1)."""
    return (-2 - np.asarray(region, np.int64)).astype(np.int32)


class PolicySource(Source):
    """A per-fault ``Prefetcher``: minor faults count as hits, major faults as misses."""

    def __init__(self, prefetcher: Prefetcher, name: str):
        self.p = prefetcher
        self.name = name
        self._known = -1

    def set_regions(self, regions: Sequence[Region]) -> None:
        # Prefetchers map regions at reset (learned ones: region -> model slot), so a new
        # region means a reset. Programs map their files at start-up, before the faults
        # that matter, so little history is lost.
        if len(regions) != self._known:
            self.p.reset(list(regions))
            self._known = len(regions)

    def warm_up(self) -> None:
        """Run the prefetcher on a made-up batch, then forget it. The first call compiles
        (numba kernels, torch/onnx sessions), and in a live run every fault batch queued
        behind it, so markov's and the LSTM's first prefetches arrived long after their faults."""
        self.p.reset([Region(0, "warm-up", kind="file", path="/warm-up", length=1 << 30)])
        rng = np.random.default_rng(0)
        n = 256  # a sequential run, then scattered pages: the hit, miss and predict paths
        page = np.concatenate([np.arange(n // 2), rng.integers(0, 1 << 18, n - n // 2)]).astype(np.int64)
        kind = np.where(np.arange(n) % 3 == 0, int(Kind.FAULT_MINOR), int(Kind.FAULT_MAJOR)).astype(np.uint8)
        self.on_batch(np.arange(n, dtype=np.int64) * 1000, np.zeros(n, np.int32), page, kind)
        self._known = -1  # the run's first region list resets the prefetcher again

    def on_batch(self, t_ns, region, page, kind) -> Predictions:
        causes: list[int] = []
        regs: list[int] = []
        pages: list[int] = []
        observe = self.p.observe
        major = int(Kind.FAULT_MAJOR)
        for i, (t, r, p, k) in enumerate(zip(t_ns.tolist(), region.tolist(), page.tolist(), kind.tolist())):
            if r < 0:
                continue
            out = observe(t, r, p, k != major)
            for rr, pp in out:
                causes.append(i)
                regs.append(rr)
                pages.append(pp)
        return Predictions(np.asarray(causes, np.int64), np.asarray(regs, np.int32), np.asarray(pages, np.int64))


def schedule_from_trace(trace: Trace | str) -> Schedule:
    """The replay schedule of a recorded run: its demand pages in order, first touch only.

    Row i says "after demand event i-1, the page of demand event i is next".
    """
    tr = open_trace(trace) if not isinstance(trace, Trace) else trace
    cols = read_demand_columns(tr, ["t_ns", "region", "page"])
    sel = cols["region"] >= 0
    region, page, t = cols["region"][sel], cols["page"][sel], cols["t_ns"][sel]
    pos = np.flatnonzero(sel)  # trigger = position in the demand stream, as schedules define it
    _, first = np.unique(page_keys(region, page), return_index=True)
    first.sort()
    return Schedule(
        np.maximum(pos[first] - 1, 0),
        t[first],
        region[first],
        page[first],
        np.ones(len(first), np.float32),
        regions=list(tr.regions),
        meta={"source": "replay", "trace": str(tr.path)},
    )


def default_min_runs(n_runs: int) -> int:
    """Support threshold used when none is given: 2 once there are enough runs (4) for a
    page that only one of them touched to be telling, else 1 (keep every page)."""
    return 2 if n_runs >= 4 else 1


def merge_schedules(schedules: Sequence[Schedule], min_runs: int = 1) -> Schedule:
    """Union of several runs' replay schedules, in order of relative position.

    Each run's rows are placed at trigger / (its last trigger), merged, and a page keeps
    its earliest place. Regions are those of the first schedule; the others are matched
    to them (rows of unmatched regions are dropped).

    ``min_runs`` keeps only pages that at least that many runs touched: a page one input
    alone used is most often that input's own (here, the workload's uniformly random tail
    rows), so with enough runs the support threshold drops pages that would be read for
    nothing while keeping the shared working set. The score is the fraction of runs that
    touched the page.
    """
    if not schedules:
        raise PagecastError("no schedules to merge")
    if not 1 <= min_runs <= len(schedules):
        raise PagecastError(f"min_runs must be between 1 and the number of runs ({len(schedules)}), got {min_runs}")
    base = schedules[0]
    frac, reg, page, run = [], [], [], []
    for i, s in enumerate(schedules):
        s2 = s if s is base else s.remap_regions(match_regions(s.regions, base.regions))
        span = max(int(s2.trigger.max()) if len(s2) else 1, 1)
        frac.append(s2.trigger / span)
        reg.append(s2.region)
        page.append(s2.page)
        run.append(np.full(len(s2), i, np.int64))
    f, r, p, k = np.concatenate(frac), np.concatenate(reg), np.concatenate(page), np.concatenate(run)
    o = np.argsort(f, kind="stable")
    f, r, p, k = f[o], r[o], p[o], k[o]
    key = page_keys(r, p)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    # runs per page: distinct (page, run) pairs counted per page
    pair = np.unique(inv.astype(np.int64) * len(schedules) + k)
    support = np.bincount(pair // len(schedules), minlength=len(first))
    keep = np.sort(first[support >= min_runs])
    n = len(keep)
    trig = np.round(f[keep] * max(int(base.trigger.max()) if len(base) else 0, 0)).astype(np.int64)
    score = (support[inv[keep]] / len(schedules)).astype(np.float32)
    return Schedule(
        trig,
        np.zeros(n, np.int64),
        r[keep],
        p[keep],
        score,
        regions=list(base.regions),
        meta={"source": "replay", "merged_runs": len(schedules), "min_runs": min_runs},
    )


def load_replay(path: str | Path) -> Schedule:
    """A schedule file, or a trace of an earlier run (replayed as its first-touch pages)."""
    import pyarrow.parquet as pq

    from pagecast.trace.schedule import META_SCHEDULE, read_schedule
    from pagecast.trace.schema import META_VERSION

    path = Path(path)
    if not path.exists():
        raise PagecastError("no such schedule file", path=path)
    try:
        pf = pq.ParquetFile(str(path))
        kv = dict(pf.schema_arrow.metadata or {})
        kv.update(pf.metadata.metadata or {})
    except Exception:  # not Parquet: read_schedule names the problem
        kv = {}
    if META_SCHEDULE not in kv and META_VERSION in kv:
        return schedule_from_trace(str(path))
    return read_schedule(path)


class ReplaySource(Source):
    """Replay a schedule's pages ahead of the program, paced by its faults."""

    def __init__(self, schedule: Schedule, *, lookahead: int = 8192, name: str = "replay"):
        if len(schedule) == 0:
            raise PagecastError("the schedule is empty: nothing to replay")
        s = schedule.sorted()
        self.name = name
        self.lookahead = int(lookahead)
        self._old_regions = list(schedule.regions)
        self._s_region_old = s.region.astype(np.int32)
        self._s_page = s.page.astype(np.int64)
        self._s_region = np.full(len(s), -1, np.int32)  # live ids, -1 until the region appears
        self._mapped: dict[int, int] = {}
        self._index: dict[int, int] = {}
        self._cursor = -1
        self._issued_upto = 0
        self._pending: list[np.ndarray] = []
        self._pre_upto = 0
        self._sent = np.zeros(len(s), bool)  # rows handed out (issued at start or after a fault)
        if not self._old_regions:
            # A schedule without regions names live region ids directly.
            self._s_region = self._s_region_old.copy()
            self._rebuild_index()

    def set_regions(self, regions: Sequence[Region]) -> None:
        if not self._old_regions:
            return
        mapping = match_regions(self._old_regions, regions)
        if mapping == self._mapped:
            return
        self._mapped = mapping
        lut = {int(k): int(v) for k, v in mapping.items()}
        before = self._s_region
        self._s_region = np.asarray([lut.get(int(r), -1) for r in self._s_region_old], np.int32)
        # rows already passed while their region was unknown (including the start window's
        # non-file rows, e.g. anonymous memory mapped later) are issued at the next batch
        hi = self._issued_upto
        late = np.nonzero((before[:hi] < 0) & (self._s_region[:hi] >= 0) & ~self._sent[:hi])[0]
        if len(late):
            self._sent[late] = True
            self._pending.append(late)
        self._rebuild_index()

    def initial(self) -> tuple[Predictions, dict[int, str]]:
        """The first ``lookahead`` pages of file regions, read as the program starts: the
        file is known by path before the program maps it, so the wave starts at once."""
        import os

        paths = {r.id: r.path for r in self._old_regions if r.kind == "file" and r.path and os.path.exists(r.path)}
        hi = min(len(self._s_page), self.lookahead)
        rows = np.nonzero(np.isin(self._s_region_old[:hi], np.fromiter(paths, np.int32, len(paths))))[0]
        self._pre_upto = self._issued_upto = hi
        self._sent[rows] = True
        enc = {int(-2 - k): v for k, v in paths.items()}
        return Predictions(
            np.full(len(rows), -1, np.int64), encode_old(self._s_region_old[rows]), self._s_page[rows]
        ), enc

    def take_pending(self) -> Predictions:
        if not self._pending:
            return Predictions.empty()
        r = np.concatenate(self._pending)
        self._pending = []
        r = r[self._s_region[r] >= 0]
        return Predictions(np.zeros(len(r), np.int64), self._s_region[r], self._s_page[r])

    def _rebuild_index(self) -> None:
        ok = self._s_region >= 0
        keys = page_keys(self._s_region[ok], self._s_page[ok])
        rows = np.nonzero(ok)[0]
        # first row of each page wins: the position where the earlier run first needed it
        uniq, first = np.unique(keys, return_index=True)
        self._index = dict(zip(uniq.tolist(), rows[first].tolist()))

    def on_batch(self, t_ns, region, page, kind) -> Predictions:
        keys = page_keys(region, page).tolist()
        index = self._index
        causes, rows = [], []
        if self._pending:
            rows += self._pending
            causes += [np.zeros(len(x), np.int64) for x in self._pending]
            self._pending = []
        n = len(self._s_page)
        for i, k in enumerate(keys):
            pos = index.get(k)
            if pos is not None and self._cursor < pos <= self._cursor + self.lookahead:
                self._cursor = pos
            else:
                # unknown page, one already passed, or a jump too far to trust (e.g. a code
                # page the earlier run first touched only at its end): advance by one
                self._cursor += 1
            hi = min(n, self._cursor + 1 + self.lookahead)
            if hi > self._issued_upto:
                rows.append(np.arange(self._issued_upto, hi))
                causes.append(np.full(hi - self._issued_upto, i, np.int64))
                self._issued_upto = hi
        if not rows:
            return Predictions.empty()
        r = np.concatenate(rows)
        c = np.concatenate(causes)
        live = self._s_region[r] >= 0
        r, c = r[live], c[live]
        self._sent[r] = True
        return Predictions(c, self._s_region[r], self._s_page[r])
