"""Regions: what a page number is relative to.

A raw virtual address means nothing in the next run (ASLR, allocator order), so every
page in a trace is an index inside a region. File-backed regions are named by the file:
page = file offset // page size, whatever address the file was mapped at. Anonymous,
heap, managed and device regions are named by their kind, the order in which they were
created among regions of that kind, and their length: the third 64 MiB managed
allocation of one run matches the third 64 MiB managed allocation of the next.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE

REGION_KINDS = ("file", "anon", "heap", "stack", "managed", "device", "host", "code", "other")


@dataclass
class Region:
    id: int
    name: str
    kind: str = "anon"
    path: str | None = None
    file_offset: int = 0  # byte offset in the file of the region's page 0 (file regions)
    base: int = 0  # virtual address of page 0 in the recorded run (informative only)
    length: int = 0  # bytes
    page_size: int = PAGE_SIZE
    created_ns: int = 0
    freed_ns: int = -1  # -1: never freed during the trace
    device: int = -1  # CUDA device, -1 for host memory
    order: int = -1  # creation order among regions of the same kind (cross-run identity)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pages(self) -> int:
        return -(-self.length // self.page_size) if self.length else 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Region":
        """A region from its JSON form; ValueError if a field has the wrong type or range."""
        if not isinstance(d, dict):
            raise ValueError(f"a region is a JSON object, not {type(d).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        for k, v in d.items():
            f = known.get(k)
            if f is not None and not _field_ok(f.name, v):
                raise ValueError(f"region field {k!r} has a bad value {str(v)[:40]!r}")
        if "id" not in d or "name" not in d:
            raise ValueError("a region needs an id and a name")
        extra = {k: v for k, v in d.items() if k not in known}
        kw = {k: v for k, v in d.items() if k in known}
        region = cls(**kw)
        region.extra.update(extra)
        return region


_INT_FIELDS = {
    "id": 0,
    "file_offset": 0,
    "base": 0,
    "length": 0,
    "page_size": 1,
    "created_ns": None,
    "freed_ns": -1,
    "device": -1,
    "order": -1,
}  # field → smallest valid value (None: any)
_I64 = 1 << 63


def _field_ok(name: str, v: Any) -> bool:
    if name in _INT_FIELDS:
        lo = _INT_FIELDS[name]
        return isinstance(v, int) and not isinstance(v, bool) and -_I64 <= v < 2 * _I64 and (lo is None or v >= lo)
    if name in ("name", "kind"):
        return isinstance(v, str)
    if name == "path":
        return v is None or isinstance(v, str)
    if name == "extra":
        return isinstance(v, dict)
    return True


def regions_to_json(regions: Sequence[Region]) -> str:
    return json.dumps([r.to_dict() for r in regions], separators=(",", ":"))


def regions_from_json(text: str | bytes) -> list[Region]:
    """Regions stored as a JSON list (index == id); ValueError if the text is not that."""
    items = json.loads(text)
    if not isinstance(items, list):
        raise ValueError("regions are not a JSON list")
    regions = [Region.from_dict(d) for d in items]
    if any(r.id != i for i, r in enumerate(regions)):
        raise ValueError("region ids are not 0, 1, 2, ...")
    return regions


def region_key(region: Region) -> tuple:
    """Identity of a region across runs of the same program."""
    if region.kind == "file" and region.path:
        return ("file", region.path)
    return (region.kind, region.order if region.order >= 0 else region.id, region.length)


def region_hashes(regions: Sequence[Region]) -> np.ndarray:
    """Per region id, a 32-bit hash of ``region_key``: the same number for the same region
    in every run of a program (ids follow the order regions appeared in, which varies)."""
    import hashlib

    out = np.zeros(max((r.id for r in regions), default=-1) + 1, np.int64)
    for r in regions:
        digest = hashlib.blake2b(repr(region_key(r)).encode(), digest_size=4).digest()
        out[r.id] = int.from_bytes(digest, "little")
    return out


def row_region_hashes(regions: Sequence[Region], region: np.ndarray) -> np.ndarray:
    """``region_hashes`` of each row's region id (an id the table lacks keeps its own
    number, negated, so it never matches a known region)."""
    table = region_hashes(regions)
    region = np.asarray(region, np.int64)
    known = (region >= 0) & (region < len(table))
    return np.where(known, table[np.clip(region, 0, max(len(table) - 1, 0))] if len(table) else 0, -1 - region)


def match_regions(old: Sequence[Region], new: Sequence[Region]) -> dict[int, int]:
    """Map region ids of an earlier run to the ids of the same regions in a later run.

    Exact keys first; anonymous/managed regions that changed length fall back to the
    same (kind, order).
    """
    by_key = {region_key(r): r.id for r in new}
    by_order = {(r.kind, r.order if r.order >= 0 else r.id): r.id for r in new if r.kind != "file"}
    out: dict[int, int] = {}
    for r in old:
        k = region_key(r)
        if k in by_key:
            out[r.id] = by_key[k]
        elif r.kind != "file":
            alt = by_order.get((r.kind, r.order if r.order >= 0 else r.id))
            if alt is not None:
                out[r.id] = alt
    return out


class RegionMap:
    """Vectorised address → (region, page) translation over a set of mappings.

    A mapping is a virtual address interval [start, end) that shows region ``region``
    starting at page ``first_page`` (for a file mapping: its file offset // page size).
    Several mappings may show the same region (a file mapped twice).
    """

    def __init__(self, page_size: int = PAGE_SIZE):
        if page_size & (page_size - 1):
            raise ValueError(f"page size {page_size} is not a power of two")
        self.page_size = page_size
        self.shift = page_size.bit_length() - 1
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._regions: list[int] = []
        self._first_pages: list[int] = []
        self._arrays: tuple[np.ndarray, ...] | None = None

    def add(self, start: int, end: int, region: int, first_page: int = 0) -> None:
        """Add a mapping; a newer mapping replaces any older overlap (like mmap MAP_FIXED)."""
        self.remove(start, end)
        self._starts.append(start)
        self._ends.append(end)
        self._regions.append(region)
        self._first_pages.append(first_page)
        self._arrays = None

    def remove(self, start: int, end: int) -> None:
        """Unmap [start, end): trims or splits mappings that overlap it."""
        keep_s, keep_e, keep_r, keep_p = [], [], [], []
        changed = False
        for s, e, r, p in zip(self._starts, self._ends, self._regions, self._first_pages):
            if e <= start or s >= end:
                keep_s.append(s), keep_e.append(e), keep_r.append(r), keep_p.append(p)
                continue
            changed = True
            if s < start:
                keep_s.append(s), keep_e.append(start), keep_r.append(r), keep_p.append(p)
            if e > end:
                keep_s.append(end), keep_e.append(e), keep_r.append(r)
                keep_p.append(p + ((end - s) >> self.shift))
        if changed:
            self._starts, self._ends, self._regions, self._first_pages = keep_s, keep_e, keep_r, keep_p
            self._arrays = None

    def __len__(self) -> int:
        return len(self._starts)

    def copy(self) -> "RegionMap":
        """An independent copy (a forked process starts with its parent's mappings)."""
        new = RegionMap(self.page_size)
        new._starts, new._ends = list(self._starts), list(self._ends)
        new._regions, new._first_pages = list(self._regions), list(self._first_pages)
        return new

    def _sorted(self) -> tuple[np.ndarray, ...]:
        if self._arrays is None:
            order = np.argsort(np.asarray(self._starts, dtype=np.uint64), kind="stable")
            self._arrays = (
                np.asarray(self._starts, dtype=np.uint64)[order],
                np.asarray(self._ends, dtype=np.uint64)[order],
                np.asarray(self._regions, dtype=np.int32)[order],
                np.asarray(self._first_pages, dtype=np.int64)[order],
            )
        return self._arrays

    def translate(self, addrs: np.ndarray | Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """Return (region, page) arrays; region -1 and page = addr // page_size where unmapped."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        starts, ends, regions, first = self._sorted()
        raw_page = (addrs >> np.uint64(self.shift)).astype(np.int64)
        if len(starts) == 0:
            return np.full(addrs.shape, -1, np.int32), raw_page
        idx = np.searchsorted(starts, addrs, side="right").astype(np.int64) - 1
        safe = np.clip(idx, 0, len(starts) - 1)
        hit = (idx >= 0) & (addrs < ends[safe])
        region = np.where(hit, regions[safe], -1).astype(np.int32)
        offset = ((addrs - starts[safe]) >> np.uint64(self.shift)).astype(np.int64)
        page = np.where(hit, first[safe] + offset, raw_page)
        return region, page
