"""Synthetic traces and obviously-correct reference caches for the simulator tests."""

from __future__ import annotations

from collections import OrderedDict, deque
from pathlib import Path

import numpy as np

from pagecast.trace.regions import Region
from pagecast.trace.writer import TraceWriter


def write_trace(
    path: Path, pages, regions=None, region=0, t_step=1_000, kind=0, page_size=4096, row_group_rows=1 << 20
) -> Path:
    pages = np.asarray(pages, np.int64)
    if regions is None:
        regions = [Region(0, "r0", kind="anon", length=int(max(pages.max(initial=0) + 1, 1)) * page_size)]
    with TraceWriter(path, regions=regions, page_size=page_size, source="test", row_group_rows=row_group_rows) as w:
        w.write(t_ns=np.arange(len(pages), dtype=np.int64) * t_step, region=region, page=pages, kind=kind)
    return path


def scan_trace(path: Path, pages: int, start: int = 0) -> Path:
    """A file read once from ``start`` to the end, one major fault per page."""
    from pagecast.trace.schema import Kind

    file = Region(0, "data.bin", kind="file", path="/data.bin", length=(start + pages) * 4096)
    return write_trace(path, np.arange(start, start + pages), regions=[file], kind=int(Kind.FAULT_MAJOR))


def ref_lru(pages, cap: int) -> int:
    cache: OrderedDict = OrderedDict()
    faults = 0
    for p in pages:
        if p in cache:
            cache.move_to_end(p)
            continue
        faults += 1
        if len(cache) >= cap:
            cache.popitem(last=False)
        cache[p] = True
    return faults


def ref_fifo(pages, cap: int) -> int:
    resident: set = set()
    order: deque = deque()
    faults = 0
    for p in pages:
        if p in resident:
            continue
        faults += 1
        if len(resident) >= cap:
            resident.discard(order.popleft())
        resident.add(p)
        order.append(p)
    return faults


def ref_clock(pages, cap: int) -> int:
    frames: list = []
    ref: dict = {}
    hand = 0
    faults = 0
    for p in pages:
        if p in ref:
            ref[p] = True
            continue
        faults += 1
        if len(frames) < cap:
            frames.append(p)
        else:
            while ref[frames[hand]]:
                ref[frames[hand]] = False
                hand = (hand + 1) % cap
            del ref[frames[hand]]
            frames[hand] = p
            hand = (hand + 1) % cap
        ref[p] = True
    return faults


def ref_belady(pages, cap: int) -> int:
    pages = list(pages)
    resident: set = set()
    faults = 0
    for i, p in enumerate(pages):
        if p in resident:
            continue
        faults += 1
        if len(resident) >= cap:

            def next_use(q):
                for j in range(i + 1, len(pages)):
                    if pages[j] == q:
                        return j
                return len(pages) + 1

            resident.discard(max(resident, key=next_use))
        resident.add(p)
    return faults


def mixed_pages(n: int = 4000, seed: int = 1) -> np.ndarray:
    """Sequential runs, strided runs, a repeating delta pattern and random noise."""
    rng = np.random.default_rng(seed)
    parts = []
    while sum(len(p) for p in parts) < n:
        k = rng.integers(4)
        start = int(rng.integers(0, 3000))
        if k == 0:
            parts.append(np.arange(start, start + 60))
        elif k == 1:
            parts.append(start + 3 * np.arange(40))
        elif k == 2:
            parts.append(start + np.cumsum(np.tile([1, 5, 2], 15)))
        else:
            parts.append(rng.integers(0, 3200, 30))
    return np.concatenate(parts)[:n]


def same_results_both_engines(path, make, capacity: int = 256, eviction: str = "lru") -> dict:
    """Simulate with the compiled prefetcher and with its per-event Python observe."""
    from pagecast.sim import SimConfig, simulate

    fast = simulate(path, SimConfig(capacity=capacity, eviction=eviction, log_prefetches=True), make()).to_dict()
    slow = simulate(
        path, SimConfig(capacity=capacity, eviction=eviction, log_prefetches=True), make(), engine="python"
    ).to_dict()
    for d in (fast, slow):
        d.pop("wall_s")
        log = d.pop("extra")["prefetch_log"]
        d["log"] = [a.tolist() for a in log]
    assert fast == slow
    return fast


def ref_victims(name: str, pages, cap: int, keys=None) -> list:
    """Pages evicted, in order, by an obviously-correct model of ``name`` (lru, fifo,
    clock, lfu), or of a keyed eviction given each access's key (``keys``: the page with
    the largest key leaves; MIN is ``keys`` = next uses). Keyed ties (several residents
    with the largest key) are returned as the set of candidates."""
    pages = list(pages)
    out: list = []
    if name in ("lru", "fifo"):
        cache: OrderedDict = OrderedDict()
        for p in pages:
            if p in cache:
                if name == "lru":
                    cache.move_to_end(p)
                continue
            if len(cache) >= cap:
                out.append(cache.popitem(last=False)[0])
            cache[p] = True
        return out
    if name == "clock":
        frames: list = []
        ref: dict = {}
        hand = 0
        for p in pages:
            if p in ref:
                ref[p] = True
                continue
            if len(frames) < cap:
                frames.append(p)
            else:
                while ref[frames[hand]]:
                    ref[frames[hand]] = False
                    hand = (hand + 1) % cap
                out.append(frames[hand])
                del ref[frames[hand]]
                frames[hand] = p
                hand = (hand + 1) % cap
            ref[p] = True
        return out
    if name == "lfu":
        count: dict = {}
        last: dict = {}
        resident: set = set()
        for i, p in enumerate(pages):
            count[p] = count.get(p, 0) + 1
            last[p] = i
            if p in resident:
                continue
            if len(resident) >= cap:
                v = min(resident, key=lambda q: (count[q], last[q]))
                resident.discard(v)
                out.append(v)
            resident.add(p)
        return out
    raise ValueError(f"no reference model for {name!r} (keyed evictions: check_keyed_victims)")


def check_keyed_victims(pages, cap: int, keys, victims) -> None:
    """Assert that ``victims`` are what a keyed eviction must evict: at each eviction a
    resident page with the largest key (its key from its last access). Among tied pages
    any is right, so the check follows the victims it is given."""
    key: dict = {}
    resident: set = set()
    it = iter(victims)
    n = 0
    for i, p in enumerate(pages):
        key[p] = keys[i]
        if p in resident:
            continue
        if len(resident) >= cap:
            v = next(it)
            top = max(key[q] for q in resident)
            assert v in resident and key[v] == top, f"eviction {n} (row {i}): {v} is not a page of largest key {top}"
            resident.discard(v)
            n += 1
        resident.add(p)
    assert next(it, None) is None, "more victims than evictions"
