"""``pagecast run --memory LIMIT --plan P --backend pager``: a memory plan applied by the
userfaultfd pager.

The program's mappings of the plan's files are served by the pager's shim
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

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.plan.format import FileIdentity
from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan
from pagecast.util.elf import is_elf

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
    copies are dropped with it, and those the program is in) and 4 MiB of slack for the
    kernel to read through (the plan's reserve already holds the program's headroom); the
    pager's tables per file (a state, class and slot entry a page, two ring entries a frame at
    most, service-time samples, at most 4 MiB, its batch buffer)."""
    tables = 0
    for f in files:
        npages = -(-os.path.getsize(f.path) // PAGE_SIZE)
        tables += npages * 22 + min(1 << 22, 32 * npages) + (MAX_DEPTH + 2) * PAGE_SIZE
    return 4 * MIB + 3 * plan.chunk_bytes + tables


def batch_depth(plan: MemoryPlan) -> int:
    """Pages per fault batch while evicting after use (the C core's cap: half a chunk)."""
    return max(1, min(MAX_DEPTH, plan.chunk_bytes // PAGE_SIZE // 2))


def plan_budget(plan: MemoryPlan, limit: int, files: list[FileMemoryPlan]) -> PagerBudget | None:
    """The regions' budgets under ``limit``: None when the limit leaves no room for them.

    Every file first gets its floor, the room to stream through it (three chunks and two
    fault batches: the chunk passed, the one the program is in, the batch reaching into the
    next), or all of it if it is smaller; then its keep set, the keep sets cut from the last
    files when they do not fit (the cut pages are streamed); the rest is shared in proportion
    to the files' pages outside their keep sets. No budget exceeds its file."""
    depth = batch_depth(plan)
    margin = margin_bytes(plan, files, depth)
    total = limit - plan.reserve_bytes - plan.prefetch_chunks * plan.chunk_bytes - margin
    total -= total % PAGE_SIZE
    # evict-after-use frees a chunk once the program is two chunks on
    stream_min = 3 * plan.chunk_bytes + 2 * (depth + 1) * PAGE_SIZE
    sizes = [-(-max(1, os.path.getsize(f.path)) // PAGE_SIZE) * PAGE_SIZE for f in files]
    floor = [min(s, stream_min) for s in sizes]
    if not files or total < sum(floor):
        return None
    keep = [min(f.keep_chunks() * plan.chunk_bytes, s) for f, s in zip(files, sizes)]
    base = [min(s, k + fl) for s, k, fl in zip(sizes, keep, floor)]
    over = sum(base) - total
    for i in reversed(range(len(files))):  # the first files keep theirs longest, as for_limit trims them
        cut = min(base[i] - floor[i], max(0, over))
        base[i] -= cut
        keep[i] = min(keep[i], base[i] - floor[i]) // PAGE_SIZE * PAGE_SIZE
        over -= cut
    rest = total - sum(base)
    outside = [s - b for s, b in zip(sizes, base)]
    weight = sum(outside) or 1
    out = [
        PagedFile(f.path, min(s, b + rest * o // weight) // PAGE_SIZE * PAGE_SIZE, k)
        for f, s, b, k, o in zip(files, sizes, base, keep, outside)
    ]
    return PagerBudget(total, margin, depth, out)


def page_classes(f: FileMemoryPlan, chunk_bytes: int, npages: int) -> np.ndarray:
    cls = np.zeros(npages, np.uint8)
    cp = chunk_bytes // PAGE_SIZE
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
    npages = max(1, -(-os.path.getsize(f.path) // PAGE_SIZE))
    cp = plan.chunk_bytes // PAGE_SIZE
    nchunks = -(-npages // cp)
    cls = pin_limit(page_classes(f, plan.chunk_bytes, npages), keep_bytes // PAGE_SIZE)
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
    warning per such file that changed. A file the plan has no chunks of is left to the
    kernel, and so are the program's binary and libraries, which the recordings saw too:
    the dynamic loader maps them with its own system calls, which the shim never sees, so a
    budget for them would only be taken from the others."""
    ok, warnings = [], []
    for f in plan.files:
        if (not f.keep and not f.stream) or is_elf(f.path):
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


def pager_setup(plan: MemoryPlan, limit: int, tmp: Path, warnings: list[str]) -> tuple[dict | None, dict | None]:
    """The program's environment under the pager and the report's ``pager`` object, or
    (None, None) and a warning when the limit leaves the pager no room: the kernel alone."""
    from pagecast.pager.runtime import PolicySpec, encode_list, pager_env, probe

    files, changed = usable_files(plan)
    warnings.extend(changed)
    budget = plan_budget(plan, limit, files)
    if budget is None:
        if files:
            warnings.append(
                f"the limit leaves the pager no room beside the plan's reserve of "
                f"{plan.reserve_bytes >> 20} MiB: the program runs with the kernel alone"
            )
        return None, None
    try:
        probe()
    except PagecastError as e:
        warnings.append(f"{e}: the program runs with the kernel alone")
        return None, None
    (tmp / "stats").mkdir()
    maps = [
        write_plan_map(tmp / f"{i}.map", f, plan, pf.keep_bytes) for i, (f, pf) in enumerate(zip(files, budget.files))
    ]
    specs = [(pf.path, pf.budget_bytes) for pf in budget.files]
    # the policy as a spec, not a name to parse: parsing loads every policy of the registry
    # (numba among them), 0.4 s before a program the plan drives alone
    env = pager_env(specs, PolicySpec(), stats_dir=tmp / "stats", strict=False)
    env["PAGECAST_PAGER_PLAN"] = encode_list(maps)
    env["PAGECAST_PAGER_DEPTH"] = str(MAX_DEPTH)  # the C core batches half a chunk while evicting after use
    info = {
        "budget_bytes": budget.total_bytes,
        "margin_bytes": budget.margin_bytes,
        "depth": budget.depth,
        "files": [vars(pf) for pf in budget.files],
        "specs": specs,
    }
    return env, info


def pager_report(info: dict, tmp: Path, warnings: list[str]) -> dict:
    stats = [json.loads(p.read_text()) for p in sorted((tmp / "stats").glob("*.json"))]
    specs = info.pop("specs")
    mapped = {os.path.realpath(st.get("path", "")) for st in stats}
    missed = [p for p, _ in specs if os.path.realpath(p) not in mapped]
    if missed:  # one line, however many: a program that reads its data with read() misses them all
        names = ", ".join(missed[:3]) + (f" and {len(missed) - 3} more" if len(missed) > 3 else "")
        warnings.append(
            f"the program never mapped {names} with mmap (read() instead?): the kernel served "
            f"{'it' if len(missed) == 1 else 'them'} under the limit, without the plan"
        )
    info["regions"] = stats
    return info
