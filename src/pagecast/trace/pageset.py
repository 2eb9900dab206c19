"""File page sets of a recording: which pages of which file the run used, in first-use order.

A page-set recording (``pagecast record``) holds one ``FILE_MAPPED`` row per file page
first touched through a mapping and one ``FILE_READ`` row per file page first read by a
system call. ``file_page_sets`` merges both kinds: each page once, at its first use by
either way. A trace without page-set rows (``--faults-only``, older recordings) falls
back to its fault rows in file regions, which miss what read-ahead, fault-around and
read() brought in; ``PageSets.source`` says which one was used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pagecast.trace.keys import page_keys
from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.regions import Region
from pagecast.trace.schema import FAULT_KINDS, PAGESET_KINDS, Kind


@dataclass
class PageSets:
    pages: dict[str, np.ndarray]  # file key -> int64 page indices, first-use order, each once
    mapped: dict[str, int]  # file key -> pages first used through a mapping
    read: dict[str, int]  # file key -> pages first used through a read-family call
    regions: dict[str, Region]  # file key -> (first) region of that file
    source: str  # "pageset" (FILE_MAPPED/FILE_READ rows) or "faults" (fault rows only)


def file_key(region: Region) -> str:
    """A file's name across runs: its path (a file only seen by inode is named by it)."""
    return region.path or region.name


def read_page_sets(path_or_trace: str | Path | Trace, batch_rows: int = 1 << 21) -> PageSets:
    t = path_or_trace if isinstance(path_or_trace, Trace) else open_trace(path_or_trace)
    # the recorder's own shim is mapped into the program but is not part of the run
    files = [r for r in t.regions if r.kind == "file" and not r.extra.get("recorder")]
    nreg = len(t.regions)
    is_file = np.zeros(nreg + 1, bool)
    is_file[[r.id for r in files]] = True
    wanted_ps = np.zeros(256, bool)
    wanted_ps[[int(k) for k in PAGESET_KINDS]] = True
    wanted_f = np.zeros(256, bool)
    wanted_f[[int(k) for k in FAULT_KINDS]] = True
    ps_parts: list[tuple[np.ndarray, ...]] = []
    fault_parts: list[tuple[np.ndarray, ...]] = []
    for b in t.iter_batches(["region", "page", "kind"], batch_rows):
        reg = b["region"]
        ok = (reg >= 0) & (reg < nreg)
        ok[ok] = is_file[reg[ok]]
        ps = ok & wanted_ps[b["kind"]]
        if ps.any():
            ps_parts.append((reg[ps], b["page"][ps], b["kind"][ps]))
        if not ps_parts:  # fault rows only matter while no page-set row was seen
            fs = ok & wanted_f[b["kind"]]
            if fs.any():
                fault_parts.append(_first_of(reg[fs], b["page"][fs], b["kind"][fs]))
    source = "pageset" if ps_parts else "faults"
    parts = ps_parts or fault_parts
    if parts:
        reg, page, kind = (np.concatenate([p[i] for p in parts]) for i in range(3))
        reg, page, kind = _first_of(reg, page, kind)
    else:
        reg = page = np.empty(0, np.int64)
        kind = np.empty(0, np.uint8)
    by_key: dict[str, list[int]] = {}
    for r in files:
        by_key.setdefault(file_key(r), []).append(r.id)
    out, mapped, read, regions = {}, {}, {}, {}
    for key, ids in by_key.items():
        sel = np.isin(reg, ids) if len(ids) > 1 else reg == ids[0]
        if not sel.any():
            continue
        p, k = page[sel], kind[sel]
        if len(ids) > 1:  # one file seen under several regions: each page once, first use first
            _, first = np.unique(p, return_index=True)
            first.sort()
            p, k = p[first], k[first]
        out[key] = p.astype(np.int64)
        mapped[key] = int(np.count_nonzero(k != Kind.FILE_READ))
        read[key] = int(np.count_nonzero(k == Kind.FILE_READ))
        regions[key] = t.regions[ids[0]]
    return PageSets(out, mapped, read, regions, source)


def _first_of(reg: np.ndarray, page: np.ndarray, kind: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows whose (region, page) occurs for the first time, in their order."""
    _, first = np.unique(page_keys(reg, page), return_index=True)
    first.sort()
    return reg[first], page[first], kind[first]


def file_page_sets(path_or_trace: str | Path | Trace) -> dict[str, np.ndarray]:
    """File path -> int64 array of the file's 4 KiB page indices the run used, in first-use
    order (each once), over mappings and read-family calls."""
    return read_page_sets(path_or_trace).pages


@dataclass
class FileUsage:
    file: str
    pages_used: int
    bytes_used: int
    file_pages: int  # pages of the file as recorded (its size when first seen, or the furthest mapping)
    fraction: float | None  # pages_used / file_pages, None when the size is unknown
    mapped_pages: int
    read_pages: int


def file_usage(sets: PageSets) -> list[FileUsage]:
    """Per file: pages used, bytes, and how much of the file that is (most pages first)."""
    rows = []
    for key, pages in sets.pages.items():
        r = sets.regions[key]
        n = len(pages)
        size = r.pages
        rows.append(
            FileUsage(
                file=key,
                pages_used=n,
                bytes_used=n * r.page_size,
                file_pages=size,
                fraction=round(n / size, 4) if size else None,
                mapped_pages=sets.mapped[key],
                read_pages=sets.read[key],
            )
        )
    rows.sort(key=lambda u: (-u.pages_used, u.file))
    return rows
