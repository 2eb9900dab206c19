"""Synthetic traces and obviously-correct reference caches for the simulator tests."""

from __future__ import annotations

from collections import OrderedDict, deque
from pathlib import Path

import numpy as np

from pagecast.trace.regions import Region
from pagecast.trace.writer import TraceWriter


def write_trace(path: Path, pages, regions=None, region=0, t_step=1_000, kind=0, page_size=4096, row_group_rows=1 << 20) -> Path:
    pages = np.asarray(pages, np.int64)
    if regions is None:
        regions = [Region(0, "r0", kind="anon", length=int(max(pages.max(initial=0) + 1, 1)) * page_size)]
    with TraceWriter(path, regions=regions, page_size=page_size, source="test", row_group_rows=row_group_rows) as w:
        w.write(t_ns=np.arange(len(pages), dtype=np.int64) * t_step, region=region, page=pages, kind=kind)
    return path


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
