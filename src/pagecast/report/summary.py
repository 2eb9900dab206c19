"""``pagecast info``: what a trace holds, computed in one streaming pass."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pagecast.trace.keys import PAGE_BITS, PAGE_MASK, page_keys
from pagecast.trace.pageset import FileUsage, file_usage, read_page_sets
from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.schema import DEMAND_KINDS, FAULT_KINDS, RANGE_KINDS, Kind

BITMAP_MAX_PAGES = 1 << 30  # 1 GiB of bitmap at most; beyond, sort-based counting


# metadata keys `pagecast info` shows (gem5_stats: the summary of the run's stats.txt)
_META_SHOWN = (
    "command",
    "cwd",
    "exit_status",
    "lost",
    "page_size",
    "time_unit",
    "recorder",
    "tick_freq",
    "gem5_commands",
    "gem5_stats",
    "damo_format",
    "damo_intervals",
)


@dataclass
class RegionSummary:
    id: int
    name: str
    kind: str
    rows: int
    unique_pages: int
    length_pages: int
    touched_pct: float | None  # None when the region's length is unknown


@dataclass
class TraceSummary:
    path: str
    source: str
    format_version: int
    rows: int
    row_groups: int
    kinds: dict[str, int]
    regions: int
    unique_pages: int
    unmapped_rows: int
    duration_s: float | None  # None when the trace's clock is not in ns (lackey, cycles)
    time_unit: str
    span: int  # last - first t_ns, in time_unit
    faults: int
    fault_rate_per_s: float | None
    demand_rows: int
    bytes_moved: int
    meta: dict[str, Any] = field(default_factory=dict)
    top_regions: list[RegionSummary] = field(default_factory=list)
    # per file: pages the run used (page-set rows; fault rows in a --faults-only trace)
    files: list[FileUsage] = field(default_factory=list)
    files_source: str | None = None  # "pageset" or "faults"; None: no file regions

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mark_ranges(
    seen: np.ndarray,
    offsets: np.ndarray,
    reg: np.ndarray,
    page: np.ndarray,
    npages: np.ndarray,
    lim: np.ndarray,
    sel: np.ndarray,
) -> None:
    """seen[offset + page : offset + min(page + npages, length)] = True for the selected rows."""
    if not sel.any():
        return
    lo = offsets[reg[sel]] + page[sel]
    hi = offsets[reg[sel]] + np.minimum(page[sel] + np.maximum(npages[sel].astype(np.int64), 1), lim[sel])
    edge = np.zeros(len(seen) + 1, np.int64)
    np.add.at(edge, lo, 1)
    np.add.at(edge, hi, -1)
    seen |= np.cumsum(edge[:-1]) > 0


def summarize(
    path_or_trace: str | Path | Trace,
    *,
    top: int = 20,
    batch_rows: int = 1 << 21,
    on_rows: Callable[[int], None] | None = None,
) -> TraceSummary:
    t = path_or_trace if isinstance(path_or_trace, Trace) else open_trace(path_or_trace)
    kind_counts = np.zeros(256, np.int64)
    nreg = len(t.regions)
    region_rows = np.zeros(nreg + 1, np.int64)  # index 0: region -1
    # Pages inside a region's known length are counted in one bitmap (no sorting); the
    # rest (unknown region, page beyond the length) fall back to sorted unique keys.
    lengths = np.array([r.pages for r in t.regions], np.int64)
    if lengths.sum() > BITMAP_MAX_PAGES:
        lengths[:] = 0
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    seen = np.zeros(int(offsets[-1]), bool)
    uniq: list[np.ndarray] = []
    tmin, tmax = None, None
    nbytes = 0
    range_rows = np.zeros(256, bool)
    range_rows[[int(k) for k in RANGE_KINDS]] = True
    # range rows (meta "range_rows") cover ip pages each; other traces skip reading ip
    cols = ["t_ns", "region", "page", "kind", "bytes"] + (["ip"] if t.meta.get("range_rows") else [])
    for b in t.iter_batches(cols, batch_rows):
        kind_counts += np.bincount(b["kind"], minlength=256)
        reg = b["region"].astype(np.int64)
        reg = np.where((reg >= -1) & (reg < nreg), reg, -1)
        region_rows += np.bincount(reg + 1, minlength=nreg + 1)
        uniq = _mark_pages(b, reg, lengths, offsets, seen, uniq, range_rows, batch_rows)
        if len(b["t_ns"]):
            lo, hi = int(b["t_ns"].min()), int(b["t_ns"].max())
            tmin = lo if tmin is None else min(tmin, lo)
            tmax = hi if tmax is None else max(tmax, hi)
        nbytes += int(b["bytes"].sum(dtype=np.uint64))
        if on_rows:
            on_rows(len(reg))
    keys = np.unique(np.concatenate(uniq)) if uniq else np.empty(0, np.int64)
    per_region_unique = np.bincount(keys >> PAGE_BITS, minlength=nreg + 1)  # by region + 1
    nz = np.flatnonzero(lengths > 0)
    if len(nz):
        per_region_unique[1 + nz] += np.add.reduceat(seen, offsets[nz], dtype=np.int64)
    unit = str(t.meta.get("time_unit", "ns"))
    span = (tmax - tmin) if tmin is not None else 0
    duration = span / 1e9 if unit == "ns" else None
    kinds = {Kind(k).name: int(c) for k, c in enumerate(kind_counts) if c and k in Kind._value2member_map_}
    kinds.update({f"kind{k}": int(c) for k, c in enumerate(kind_counts) if c and k not in Kind._value2member_map_})
    faults = int(sum(kind_counts[int(k)] for k in FAULT_KINDS))
    demand = int(sum(kind_counts[int(k)] for k in DEMAND_KINDS))
    files, files_source = [], None
    if any(r.kind == "file" for r in t.regions):
        sets = read_page_sets(t, batch_rows=batch_rows)
        files, files_source = file_usage(sets), sets.source
    regs = _top_regions(t, region_rows, per_region_unique, top)
    return TraceSummary(
        path=str(t.path),
        source=t.source,
        format_version=t.version,
        rows=t.num_rows,
        row_groups=t.num_row_groups,
        kinds=kinds,
        regions=nreg,
        unique_pages=int(per_region_unique.sum()),
        unmapped_rows=int(region_rows[0]),
        duration_s=round(duration, 6) if duration is not None else None,
        time_unit=unit,
        span=int(span),
        faults=faults,
        fault_rate_per_s=round(faults / duration, 1) if duration else None,
        demand_rows=demand,
        bytes_moved=nbytes,
        meta={k: v for k, v in t.meta.items() if k in _META_SHOWN},
        top_regions=regs,
        files=files,
        files_source=files_source,
    )


def _mark_pages(
    b: dict,
    reg: np.ndarray,
    lengths: np.ndarray,
    offsets: np.ndarray,
    seen: np.ndarray,
    uniq: list[np.ndarray],
    range_rows: np.ndarray,
    batch_rows: int,
) -> list[np.ndarray]:
    """One batch's pages: those inside a region's known length set in the bitmap ``seen``,
    the others added to the sorted unique keys (returned, merged when they grow)."""
    page = b["page"]
    lim = lengths[np.maximum(reg, 0)]
    inside = (reg >= 0) & (page >= 0) & (page < lim)
    ranged = range_rows[b["kind"]]
    if ranged.any() and "ip" in b:  # a range row touches its ip pages when accessed, none when idle
        accessed = ranged & (b["kind"] == Kind.RANGE_ACCESSED)
        _mark_ranges(seen, offsets, reg, page, b["ip"], lim, inside & accessed)
        point_in = inside & ~ranged
        out = ~inside & (~ranged | accessed)
    else:
        point_in, out = inside, ~inside
    seen[offsets[reg[point_in]] + page[point_in]] = True
    if out.any():
        key = page_keys(reg[out], page[out].astype(np.int64) & PAGE_MASK)
        uniq.append(np.unique(key))
        if sum(len(u) for u in uniq) > 4 * batch_rows:
            uniq = [np.unique(np.concatenate(uniq))]
    return uniq


def _top_regions(t: Trace, region_rows: np.ndarray, per_region_unique: np.ndarray, top: int) -> list[RegionSummary]:
    """The ``top`` regions with the most rows, most first."""
    regs = []
    for rid in np.argsort(-region_rows[1:], kind="stable")[:top]:
        if region_rows[rid + 1] == 0:
            break
        r = t.regions[rid]
        u = int(per_region_unique[rid + 1])
        regs.append(
            RegionSummary(
                id=int(rid),
                name=r.name,
                kind=r.kind,
                rows=int(region_rows[rid + 1]),
                unique_pages=u,
                length_pages=r.pages,
                touched_pct=round(100.0 * u / r.pages, 2) if r.pages else None,
            )
        )
    return regs
