"""Predicted I/O time of one run of a program on one cold file, under a plan candidate.

The planner compares candidates by this number, so it only has to rank them honestly,
not to predict wall time to the millisecond. Every request costs a positioning term and
a transfer term:

    time(request of n pages at queue depth q) = 1 / iops(q) + n * 4096 / seq_bytes_per_s

with ``iops(q)`` the device's random 4 KiB read rate at depth q and ``seq_bytes_per_s``
its sequential bandwidth (``pagecast calibrate``). The program's own reads are
synchronous (depth 1). The prefetcher's ``stream`` keeps exactly ``depth`` preads in
flight, so its requests pay ``1 / iops(depth)``; ``warm`` calls
``posix_fadvise(WILLNEED)``, which queues the reads and returns, so the device sees a deep
queue: its requests pay ``1 / iops`` at the deepest calibrated depth.

The program's reads of pages not in the cache, by advice:

- ``random`` (read-ahead off): a fault through a mapping reads its page alone; a read()
  asks for what it asks for, and the recordings do not hold read sizes, so it is priced
  as one request per page (the pessimistic side for turning read-ahead off).
- ``default``: a fault through a mapping reads the read-around window of
  ``read_ahead_kb`` around it, approximated as the aligned window ``page // W`` (W =
  read_ahead_kb / 4 pages): each window the run touches is one request of W pages (less
  the pages already cached), capped at the file's end. When the calibration measured
  read-around faults (a fault in each of 16 distinct windows back to back, total time per
  page brought in), the transfer is priced at that measured cost per page instead (it
  includes the streaming of each window's tail behind the next fault); each window still
  pays ``1 / iops(1)`` for its first read, which dominates for small files. A read() of a lone page reads that
  page; along a run of L consecutive pages the read-ahead window starts small and doubles
  up to W: about log2(min(L, W)) + 1 requests (one more per further W pages), reading
  min(W, 2L) pages past the run's end.

Candidates:
- ``nothing`` / ``nothing+random``: the program reads everything it uses itself.
- ``warm+default`` / ``warm+random``: the prefetcher reads the planned pages S (merged
  ranges cut into ``chunk_kib`` requests at ``depth``); the program reads the rest
  (its pages not in S) itself, with the advice.
- ``stream``: the prefetcher reads the whole file in ``chunk_kib`` requests at ``depth``.
- ``whole``: the prefetcher warms the whole file (WILLNEED, deepest queue): for small
  files one request, which also covers pages a new input uses beyond the recorded ones.

Warming and the program share one device, so per file their times add: no credit is taken
for warming hidden behind the program's CPU work (``CostParams.overlap``, default 0). That
is the conservative side: a plan chosen under this model wins even for a program that
does nothing but wait on its file. The planner applies the overlap once, for the whole
run (``pagecast.plan.planner.overlap_upgrades`` and the small-files group): the
prefetcher's extra time is hidden up to a share of the program's measured CPU time, one
budget for all files. ``Prediction.pre_s`` and ``prog_s`` are kept apart for that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from pagecast.errors import PagecastError
from pagecast.plan.format import PAGE_SIZE
from pagecast.util.device_model import DEFAULT_READ_AHEAD_KB, DeviceModel, read_ahead_kb_of


@dataclass(frozen=True)
class DeviceCosts:
    """What the cost model needs of a device; ``source`` says where the numbers came from."""

    seq_bytes_per_s: float
    iops_by_depth: tuple[tuple[int, float], ...]  # (queue depth, random 4 KiB reads/s), ascending depth
    read_ahead_kb: int = DEFAULT_READ_AHEAD_KB
    source: str = "built-in"
    readaround_s_per_page: float | None = None  # measured cost of default-advice faults, per page read
    pager_fill_s: float | None = None  # measured userfaultfd miss served by pread (the pack's misses)

    def iops(self, depth: int) -> float:
        """Random read rate at ``depth``: linear between measured depths, flat beyond them."""
        d = np.array([q for q, _ in self.iops_by_depth], float)
        r = np.array([x for _, x in self.iops_by_depth], float)
        return float(np.interp(depth, d, r))

    @property
    def deepest(self) -> int:
        return max(q for q, _ in self.iops_by_depth)

    @property
    def window_pages(self) -> int:
        return max(1, self.read_ahead_kb * 1024 // PAGE_SIZE)


# A slow SATA SSD-like device with a single effective queue: conservative for prefetching
# (little gain from depth), used when no calibration is stored for the file's device.
BUILTIN = DeviceCosts(seq_bytes_per_s=200e6, iops_by_depth=((1, 4000.0), (4, 8000.0)), source="built-in")


def device_costs_for(path: str, dev: int) -> DeviceCosts:
    """Costs of the device holding ``path``: ``pagecast calibrate``'s model if stored, else built-in."""
    from pagecast.util.device_model import load_model, model_path

    ra = read_ahead_kb_of(dev)
    try:
        m = load_model(model_path(os.path.dirname(path) or "."))
    except (PagecastError, OSError):
        return DeviceCosts(
            BUILTIN.seq_bytes_per_s, BUILTIN.iops_by_depth, ra, "built-in (no `pagecast calibrate` model)"
        )
    rr = tuple(sorted((r.queue_depth, r.iops) for r in m.random_reads if r.iops > 0))
    if not rr or m.seq_read_bytes_per_s <= 0:
        return DeviceCosts(BUILTIN.seq_bytes_per_s, BUILTIN.iops_by_depth, ra, "built-in (calibration incomplete)")
    return from_model(m, ra, f"pagecast calibrate ({m.device})")


def from_model(m: DeviceModel, read_ahead_kb: int, source: str) -> DeviceCosts:
    rr = tuple(sorted((r.queue_depth, r.iops) for r in m.random_reads if r.iops > 0))
    if not rr or m.seq_read_bytes_per_s <= 0:
        raise PagecastError(f"device model {source} has no random-read or sequential measurement")
    ra_fill = m.fill("readaround")
    per_page = ra_fill.ns_per_page_batched / 1e9 if ra_fill and ra_fill.ns_per_page_batched else None
    pager = m.fill("pager")
    return DeviceCosts(
        m.seq_read_bytes_per_s,
        rr,
        read_ahead_kb,
        source,
        per_page,
        pager.ns_p50 / 1e9 if pager and pager.ns_p50 else None,
    )


@dataclass(frozen=True)
class CostParams:
    depth: int = 2
    chunk_kib: int = 1024
    overlap: float = 0.0  # fraction of the prefetcher's time hidden behind the program's CPU work


@dataclass
class Prediction:
    seconds: float  # pre_s + prog_s: the prefetcher and the program share the device
    program_requests: int = 0
    program_pages: int = 0  # pages the program's own misses read (including read-around)
    prefetch_pages: int = 0
    notes: list[str] = field(default_factory=list)
    pre_s: float = 0.0  # the prefetcher's device time (before any overlap credit)
    prog_s: float = 0.0  # the program's own synchronous reads


def _t(dev: DeviceCosts, requests: int, pages: int, depth: int) -> float:
    return requests / dev.iops(depth) + pages * PAGE_SIZE / dev.seq_bytes_per_s


def _runs(pages: np.ndarray) -> np.ndarray:
    """Lengths of the runs of consecutive pages in sorted unique ``pages``."""
    if len(pages) == 0:
        return np.empty(0, np.int64)
    breaks = np.nonzero(np.diff(pages) != 1)[0] + 1
    edges = np.concatenate([[0], breaks, [len(pages)]])
    return np.diff(edges)


def program_reads(
    dev: DeviceCosts, misses: np.ndarray, cached: np.ndarray, file_pages: int, advice: str, mapped: bool
) -> tuple[int, int]:
    """(requests, pages read) for the program's own reads of ``misses`` (sorted unique
    pages not in the cache), with ``cached`` (sorted unique) already in the cache."""
    if len(misses) == 0:
        return 0, 0
    if advice == "random":
        # read() sizes are not recorded: a page per request is the pessimistic side for random
        return len(misses), len(misses)
    w = dev.window_pages
    if mapped:
        wins = np.unique(misses // w)
        starts = wins * w
        ends = np.minimum(starts + w, max(file_pages, int(misses[-1]) + 1))
        span = int(np.sum(ends - starts))
        already = int(np.count_nonzero(np.isin(cached // w, wins))) if len(cached) else 0
        return len(wins), max(len(misses), span - already)
    # read(): a lone page is read alone; along a run of L pages the read-ahead window starts
    # small and doubles up to W, so a run costs about log2(min(L, W)) + 1 requests (plus one
    # per further window) and reads ahead of its end by the window it reached, min(W, 2L)
    runs = _runs(misses)
    seq = runs > 1
    steps = 1 + np.where(seq, np.ceil(np.log2(np.minimum(runs, w).clip(1))), 0) + np.maximum(0, runs - w) // w
    ahead = np.where(seq, np.minimum(w, 2 * runs), 0)
    return int(np.sum(steps)), int(min(np.sum(runs + ahead), max(file_pages, len(misses))))


def prefetch_requests(pages: int, nranges: int, chunk_kib: int) -> int:
    per_chunk = max(1, chunk_kib * 1024 // PAGE_SIZE)
    return max(nranges, -(-pages // per_chunk)) if pages else 0


def predict(
    dev: DeviceCosts,
    used: np.ndarray,
    planned: np.ndarray,
    file_pages: int,
    candidate: str,
    mapped: bool,
    p: CostParams = CostParams(),
) -> Prediction:
    """Predicted I/O seconds of a run that uses ``used`` (sorted unique pages) under
    ``candidate`` with ``planned`` (sorted unique pages to warm) as the warm set."""
    if candidate in ("stream", "whole"):
        warm = np.arange(file_pages, dtype=np.int64)
        nranges, advice = 1, "default"
    elif candidate.startswith("warm"):
        warm = planned
        nranges, advice = len(_runs(planned)), candidate.split("+")[1]
    else:
        warm = np.empty(0, np.int64)
        nranges, advice = 0, ("random" if candidate == "nothing+random" else "default")
    nreq = prefetch_requests(len(warm), nranges, p.chunk_kib)
    depth = p.depth if candidate == "stream" else dev.deepest
    t_pre = _t(dev, nreq, len(warm), depth)
    misses = np.setdiff1d(used, warm, assume_unique=True) if len(warm) else used
    r, pages = program_reads(dev, misses, warm, file_pages, advice, mapped)
    if advice == "default" and mapped and dev.readaround_s_per_page:
        # measured per page over whole windows; each fault still waits for its first read,
        # which matters for small files (a one-page window is a full random read)
        t_prog = r / dev.iops(1) + pages * dev.readaround_s_per_page
    else:
        t_prog = _t(dev, r, pages, 1)
    hidden = t_pre * p.overlap
    return Prediction(t_pre - hidden + t_prog, r, pages, len(warm), pre_s=t_pre, prog_s=t_prog)


def predict_pack(dev: DeviceCosts, used: np.ndarray, packed: np.ndarray) -> Prediction:
    """A page pack of ``packed`` (served by the userfaultfd pager): the pack is one
    sequential read (itself cold), every used page outside it one synchronous pager read
    (the calibration's ``pager`` fill when measured, else a random read at depth 1). The
    live machinery's start-up is not in here: it is paid once per run (the planner)."""
    pre = (1.0 / dev.iops(1) + len(packed) * PAGE_SIZE / dev.seq_bytes_per_s) if len(packed) else 0.0
    misses = len(np.setdiff1d(used, packed, assume_unique=True)) if len(packed) else len(used)
    fill = dev.pager_fill_s or 1.0 / dev.iops(1)
    prog = misses * (fill + PAGE_SIZE / dev.seq_bytes_per_s)
    return Prediction(pre + prog, misses, misses, len(packed), pre_s=pre, prog_s=prog)


def predict_extent(dev: DeviceCosts, used: np.ndarray, file_pages: int, p: CostParams = CostParams()) -> Prediction:
    """Per-fault ``extent``: the first fault in the file is a synchronous read, then the
    rest of the file (the object) is fetched behind it at the deepest queue; a run that
    does not use the file costs nothing (where ``whole`` pays for warming it anyway)."""
    if len(used) == 0:
        return Prediction(0.0)
    rest = max(0, file_pages - 1)
    pre = _t(dev, prefetch_requests(rest, 1, p.chunk_kib), rest, dev.deepest) if rest else 0.0
    prog = _t(dev, 1, 1, 1)
    return Prediction(pre + prog, 1, 1, rest, pre_s=pre, prog_s=prog)


SIGNAL_S = 5e-6  # a caught SIGSEGV and an mprotect: what the first touch of an object adds


def predict_objects(dev: DeviceCosts, used: np.ndarray, pages: int, align: int, file_pages: int) -> Prediction:
    """Per-fault ``objects`` (a mapped file read as objects of ``pages`` pages at ``align`` +
    k * ``pages``): the first touch of each object the run uses asks for the whole object at
    once and waits for it, one request of the object's pages; nothing else is read."""
    u = np.asarray(used, np.int64)
    if len(u) == 0:
        return Prediction(0.0)
    ids = np.unique(np.where(u < align, -1, (u - align) // pages))
    sizes = np.where(ids < 0, align, np.minimum(pages, file_pages - (align + ids * pages)))
    prog = len(ids) * (1.0 / dev.iops(1) + SIGNAL_S) + float(sizes.sum()) * PAGE_SIZE / dev.seq_bytes_per_s
    return Prediction(prog, len(ids), int(sizes.sum()), 0, prog_s=prog)
