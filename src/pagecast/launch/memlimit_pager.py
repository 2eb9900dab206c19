"""``pagecast run --memory LIMIT --plan P --backend pager``: a memory plan applied by the
userfaultfd pager.

The program's read-only mappings of the plan's files are served by the pager's shim
(``native/pager/shim.c``) into anonymous regions of a fixed page budget, inside the memory
cgroup of the limit. The regions' pages are anonymous memory charged to the cgroup, which
reclaim cannot take (no swap), so the budgets together are what the limit leaves after the
plan's reserve (the program's own memory), its prefetch window (read ahead into the page
cache) and a margin for the page cache the pager reads through and its own tables: the pager
never drives the cgroup to the OOM killer. Each file gets a map of its pages' classes
(keep / stream / other) and the plan's ``next`` chain (``PAGECAST_PAGER_PLAN``, format in
``native/pager/pager.h``): the C core pins keep pages, evicts a streamed chunk's pages as
soon as the program moved past it, prefetches along the chain and runs CLOCK for the rest
(``native/policy/pc_evict_plan.h``).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pagecast.plan.format import FileIdentity
from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan

PAGE = 4096
MIB = 1 << 20
MAP_MAGIC = b"PGCMAP1\0"  # PGR_MAP_MAGIC + PGR_MAP_VERSION (native/pager/pager.h)
CLASS_OTHER, CLASS_KEEP, CLASS_STREAM = 0, 1, 2  # PC_CLASS_* (native/policy/pc_evict_plan.h)
MAX_DEPTH = 256  # pages per fault batch, at most half a chunk: a fault in every chunk keeps evict-after-use informed


@dataclass
class PagedFile:
    path: str
    budget_bytes: int
    keep_bytes: int  # of its keep set, what the budget pins


@dataclass
class PagerBudget:
    total_bytes: int  # all regions together
    margin_bytes: int
    depth: int  # pages per fault batch
    files: list[PagedFile]


def margin_bytes(plan: MemoryPlan, files: list[FileMemoryPlan], depth: int) -> int:
    """Beside the regions: the page cache of the chunks in flight (the one passed, whose
    copies are dropped with it, and those the program is in) and the slack the kernel needs
    to read, 8 MiB; the pager's tables per file (a state, class and slot entry a page, two
    ring entries and a service-time sample a frame at most, its batch buffer)."""
    tables = 0
    for f in files:
        npages = -(-os.path.getsize(f.path) // PAGE)
        tables += npages * 6 + npages * 16 + (1 << 22) + (depth + 2) * PAGE
    return 8 * MIB + 3 * plan.chunk_bytes + tables


def batch_depth(plan: MemoryPlan) -> int:
    return max(1, min(MAX_DEPTH, plan.chunk_bytes // PAGE // 2))


def plan_budget(plan: MemoryPlan, limit: int, files: list[FileMemoryPlan]) -> PagerBudget | None:
    """The regions' budgets under ``limit``: None when the limit leaves no room for them.

    A file's budget is its keep set plus a share of the rest in proportion to its pages
    outside the keep set; a keep set larger than the budget leaves for streaming (three
    chunks and two fault batches a file) is pinned only in part (the C core serves the rest as
    other pages)."""
    depth = batch_depth(plan)
    margin = margin_bytes(plan, files, depth)
    total = limit - plan.reserve_bytes - plan.prefetch_chunks * plan.chunk_bytes - margin
    total -= total % PAGE
    # evict-after-use frees a chunk once the program is two chunks on: the chunk before the
    # one it is in, that one and the batch reaching into the next stay resident
    stream_min = 3 * plan.chunk_bytes + 2 * (depth + 1) * PAGE
    if not files or total < len(files) * stream_min:
        return None
    sizes = [max(PAGE, os.path.getsize(f.path)) for f in files]
    keep = [min(f.keep_chunks() * plan.chunk_bytes, s) for f, s in zip(files, sizes)]
    over = sum(keep) - (total - len(files) * stream_min)
    if over > 0:  # the first files keep theirs longest, as for_limit trims them
        for i in reversed(range(len(files))):
            cut = min(keep[i], over)
            keep[i] -= cut
            over -= cut
    rest = total - sum(keep)
    outside = [s - k for s, k in zip(sizes, keep)]
    weight = sum(outside) or 1
    out = []
    for f, k, o in zip(files, keep, outside):
        share = max(stream_min, rest * o // weight)
        out.append(PagedFile(f.path, (k + share) // PAGE * PAGE, k))
    while sum(p.budget_bytes for p in out) > total:  # the floors pushed it over: shave the largest
        big = max(out, key=lambda p: p.budget_bytes - p.keep_bytes)
        big.budget_bytes -= PAGE
    return PagerBudget(total, margin, depth, out)


def page_classes(f: FileMemoryPlan, chunk_bytes: int, npages: int) -> np.ndarray:
    cls = np.zeros(npages, np.uint8)
    cp = chunk_bytes // PAGE
    for ranges, c in ((f.stream, CLASS_STREAM), (f.keep, CLASS_KEEP)):
        for a, n in ranges:
            cls[a * cp : (a + n) * cp] = c
    return cls


def pin_limit(cls: np.ndarray, keep_pages: int) -> np.ndarray:
    """Keep pages past the first ``keep_pages`` (in file order) are streamed, as
    ``for_limit`` streams the chunks it drops from a keep set."""
    idx = np.flatnonzero(cls == CLASS_KEEP)
    cls[idx[keep_pages:]] = CLASS_STREAM
    return cls


def write_plan_map(out: Path, f: FileMemoryPlan, plan: MemoryPlan, keep_bytes: int) -> Path:
    """The file's plan map for the pager (format: PGR_MAP_MAGIC in native/pager/pager.h)."""
    npages = max(1, -(-os.path.getsize(f.path) // PAGE))
    cp = plan.chunk_bytes // PAGE
    nchunks = -(-npages // cp)
    cls = pin_limit(page_classes(f, plan.chunk_bytes, npages), keep_bytes // PAGE)
    nxt = np.full(nchunks, -1, np.int64)
    for a, b in f.next.items():
        if 0 <= a < nchunks and 0 <= b < nchunks:
            nxt[a] = b
    head = MAP_MAGIC + struct.pack("<4Q", npages, cp, min(plan.prefetch_chunks, nchunks), nchunks)
    pad = b"\0" * (-npages % 8)
    body = head + cls.tobytes() + pad + nxt.astype("<i8").tobytes() + os.fsencode(os.path.realpath(f.path)) + b"\0"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(body)
    return out


def usable_files(plan: MemoryPlan) -> tuple[list[FileMemoryPlan], list[str]]:
    """The plan's files with something to keep or stream, as they were planned, and one
    warning per such file that changed. A file the plan has no chunks of (the program's
    binary and libraries, which the recordings saw too) is left to the kernel: paging it
    would only take budget from the others."""
    ok, warnings = [], []
    for f in plan.files:
        if not f.keep and not f.stream:
            continue
        try:
            same = FileIdentity.of(f.path) == f.identity
        except OSError:
            same = False
        if same:
            ok.append(f)
        else:
            warnings.append(f"{f.path} changed since the plan was made: not acted on")
    return ok, warnings
