"""Plans that do exactly what the kernel's own strategies do, for the files the recordings used.

``pagecast plan --measure`` times the predicted plan against these, all through the same
launcher, so a plan is kept only when it beats what a user gets from the kernel without
pagecast. Each names the same files as the predicted plan (``recorded_files``: every file
some run used that still exists, with the identity the planner stores):

    default      every file ``nothing``: the kernel's read-ahead as it is
    random       every file ``nothing`` with advice ``random`` (read-ahead off, through
                 the launcher's advice shim, on the program's own opens and mappings)
    sequential   every file ``nothing`` with advice ``sequential`` (read-ahead doubled)
    willneed     every file ``warm`` over pages [0, min(file pages, W)), issued ``before``
                 the program starts (plan option ``issue before``: the launcher calls
                 WILLNEED itself, synchronously, then execs the program): what
                 ``posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED)`` on every file before the
                 program does. The kernel clamps one WILLNEED to W pages from its start (the
                 larger of the device's read_ahead_kb and its largest request:
                 ``willneed_window_kb``), so "WILLNEED the whole file" reads the first 8 MiB
                 of a file on a disk set to 8192 KiB, not the file. One request per file
                 (chunk = W, one thread), as one call is.
    willneed-beside  the same ranges issued ``beside`` the program by the launcher's
                 low-priority prefetcher (how every other warm plan is issued): the
                 program starts at once and the reads overlap it.

Two variants of a learned plan are made here too, as they take a kernel plan's per-file
entries: ``with_willneed`` (the kernel's WILLNEED for the files the plan leaves alone) and
``with_stream`` (every file read whole beside the program, in requests of the WILLNEED
window: what the kernel would do if one WILLNEED were not clamped).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Sequence

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.plan.format import FilePlan, PlanDoc
from pagecast.plan.shared_pages import RecordedFile, file_pages, recorded_files
from pagecast.util.device_model import willneed_window_kb

KERNEL_CANDIDATES = ("default", "random", "sequential", "willneed", "willneed-beside")
# the plan the launcher reads caps one request at 1 GiB (format._check)
_MAX_CHUNK_KIB = 1 << 20


def willneed_ranges(file_pages: int, window_kb: int) -> list[tuple[int, int]]:
    """The pages one WILLNEED of the whole file reads: [0, min(file pages, window))."""
    n = min(file_pages, max(1, window_kb * 1024 // PAGE_SIZE))
    return [(0, n)] if n > 0 else []


def kernel_plan(
    name: str, files: Sequence[RecordedFile], window_kb: Callable[[int], int] = willneed_window_kb
) -> PlanDoc:
    """The plan doing what the kernel strategy ``name`` does (``KERNEL_CANDIDATES``) to ``files``;
    ``window_kb(st_dev)`` is what one WILLNEED reads on that device."""
    if name not in KERNEL_CANDIDATES:
        raise PagecastError(f"unknown kernel strategy {name!r} (valid: {', '.join(KERNEL_CANDIDATES)})")
    doc = PlanDoc(issue="before" if name == "willneed" else "beside")
    for rf in files:
        # the reason is the plan's name only: the launcher reads the plan cold before the program
        # starts, and git's 1,500-file plan was 223 KiB with a sentence per file
        fp = FilePlan(rf.path, rf.identity, reason=f"kernel:{name}")
        if name in ("random", "sequential"):
            fp.advice = name
        elif name.startswith("willneed"):
            kb = window_kb(rf.dev)
            fp.ranges = willneed_ranges(rf.pages, kb)
            if fp.ranges:
                fp.strategy, fp.depth = "warm", 1
                fp.chunk_kib = min(_MAX_CHUNK_KIB, max(4, kb))
        doc.files.append(fp)
    return doc


def kernel_plans(
    traces: Sequence[str | Path],
    on_rows: Callable[[int], None] | None = None,
    window_kb: Callable[[int], int] = willneed_window_kb,
) -> dict[str, PlanDoc]:
    """Every kernel-equivalent plan for the files the recordings ``traces`` used."""
    if not traces:
        raise PagecastError("no recordings given")
    files = recorded_files(traces, [file_pages(t, on_rows) for t in traces])
    return {name: kernel_plan(name, files, window_kb) for name in KERNEL_CANDIDATES}


def with_willneed(plan: PlanDoc, willneed: PlanDoc) -> PlanDoc:
    """``plan`` with every file it leaves alone (``nothing``, default advice) given the
    ``willneed`` plan's entry for it, the whole plan issued before the program starts: the
    learned ranges where the planner chose to act, the kernel's strategy elsewhere."""
    kernel = {f.path: f for f in willneed.files}
    out = PlanDoc(issue="before", note=plan.note)
    for f in plan.files:
        idle = f.strategy == "nothing" and f.advice == "default"
        out.files.append(kernel[f.path] if idle and f.path in kernel else f)
    return out


def page_cache_budget() -> int:
    """Half of the memory the kernel reports available (``MemAvailable``): what a stream may
    fill without pushing out the pages it read before the program used them. 0 if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except (OSError, ValueError, IndexError):
        pass
    return 0


def with_stream(
    plan: PlanDoc, window_kb: Callable[[int], int] = willneed_window_kb, budget_bytes: int | None = None
) -> PlanDoc:
    """``plan`` with every file it does not pack or serve per fault read whole into the page
    cache beside the program: the files of at most one WILLNEED window first (in plan order:
    they are read in one request each), then the larger ones, each in requests of its
    device's WILLNEED window (``posix_fadvise`` queues a window's reads and returns, so one
    thread keeps the device busy, as the kernel's read-ahead does).

    For a program that reads a sparse share of a large file in roughly file order (a model
    reader walking its tensors), the stream stays ahead of it and its reads hit the page
    cache; for one whose reads are few and short (point lookups) it is a whole file read
    for nothing. Which it is, only a measurement tells: this is a measured candidate.

    The files read whole add up to at most ``budget_bytes`` (default ``page_cache_budget``),
    taken in plan order: a file that would pass it keeps the plan's entry, since a stream
    larger than the page cache evicts its own head before the program reads it."""
    left = page_cache_budget() if budget_bytes is None else budget_bytes
    first: list[FilePlan] = []  # kept entries and files of one request, in plan order
    streams: list[FilePlan] = []  # files of more than one window, after them
    for f in plan.files:
        pages = -(-f.identity.size // PAGE_SIZE)
        if f.strategy in ("pack", "per-fault") or pages * PAGE_SIZE > left:
            first.append(f)
            continue
        left -= pages * PAGE_SIZE
        kb = min(_MAX_CHUNK_KIB, max(4, window_kb(f.identity.dev)))
        whole = dataclasses.replace(
            f,
            strategy="warm" if pages else "nothing",
            ranges=[(0, pages)] if pages else [],
            depth=1,
            chunk_kib=kb,
            reason="stream:whole",
        )
        (streams if pages * PAGE_SIZE > kb * 1024 else first).append(whole)
    return PlanDoc(files=first + streams, issue="beside", note=plan.note)
