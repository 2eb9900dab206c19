"""File pages cached before a run under a memory limit are not under that limit.

The kernel charges a page-cache page to the memory cgroup of the task that brought it in.
A page already cached when the program starts (read by an earlier run, written by the
program that made the file, copied) stays charged where it is: a program entered into a new
cgroup reads it without the limit ever counting it. Its data then fits whatever the limit,
the kernel alone looks fast, a recording shows no page read twice and a plan finds nothing
to do. Nothing in the cgroup's counters tells this apart from a program that fits, so
pagecast checks the files it knows of: before ``run --memory`` and ``record --memory`` the
plan's files and those named on the command line, after ``record --memory`` the
recording's file pages against the cgroup's peak.

``--cold FILE`` (``record``, ``run``) drops a file's cached pages before the program starts
(written back, then ``posix_fadvise(DONTNEED)``), so its pages are read again and charged to
the limit. The pages a running process maps stay cached: ``cold_files`` says which.

No numpy here: ``run --memory`` forks its controller from the process that asks.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from pagecast.errors import PagecastError
from pagecast.util.elf import is_elf
from pagecast.util.memcg import limit_reached, near_limit_bytes
from pagecast.util.pagecache import make_cold, mincore_vector

MIB = 1 << 20
# a file smaller than this is left out: libraries and scripts the program loads anyway
DATA_FILE_BYTES = MIB


@dataclass(frozen=True)
class Cached:
    path: str
    bytes: int  # of its pages, cached now


def cached_bytes(path: str | Path) -> int:
    """Bytes of ``path`` in the page cache now; 0 for anything but a regular file that can be
    opened and mapped (a device is never opened: that can have effects)."""
    if not os.path.isfile(path):
        return 0
    try:
        vec = mincore_vector(path)
    except (OSError, ValueError):
        return 0
    # mincore sets only the low bit of a page's byte (the others are reserved, 0)
    return (len(vec) - vec.count(0)) * mmap.PAGESIZE


def cached_files(paths: Iterable[str | Path], min_bytes: int = DATA_FILE_BYTES) -> list[Cached]:
    """The data files among ``paths`` with at least ``min_bytes`` cached now, most first.
    Programs and libraries (ELF) are left out: every process running them maps them, so
    they are always cached and no ``--cold`` can drop them."""
    out = [
        Cached(str(p), n)
        for p in dict.fromkeys(map(str, paths))
        if _size(p) >= min_bytes and (n := cached_bytes(p)) >= max(1, min_bytes) and not is_elf(p)
    ]
    return sorted(out, key=lambda c: -c.bytes)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _main(cached: Sequence[Cached], n: int = 3) -> list[Cached]:
    """The files that make the bulk: at least a quarter of the largest's bytes, at most ``n``."""
    return [c for c in cached[:n] if c.bytes * 4 >= cached[0].bytes] if cached else []


def _names(cached: Sequence[Cached]) -> str:
    main = _main(cached)
    return ", ".join(f"{c.path} ({c.bytes / MIB:.0f} MiB)" for c in main) + (
        f" and {len(cached) - len(main)} smaller" if len(cached) > len(main) else ""
    )


def _cold_args(cached: Sequence[Cached]) -> str:
    return " ".join(f"--cold {c.path}" for c in _main(cached))


def argv_files(argv: Sequence[str]) -> list[str]:
    """The program's arguments that name regular files (``--opt=FILE`` too): the data a run
    is most often given."""
    out = []
    for a in argv[1:]:
        for cand in (a, a.split("=", 1)[1] if a.startswith("-") and "=" in a else None):
            if cand and os.path.isfile(cand):
                out.append(cand)
    return out


def before_run(paths: Iterable[str | Path], limit: int, what: str = "the plan's files") -> str | None:
    """One line when the files a run will read (``what``: a plan's, or those named on its
    command line) are cached beyond ``near_limit_bytes`` of the limit: those pages are charged outside the
    limit, and the program reads them as if it had no limit. None otherwise."""
    cached = cached_files(paths)
    total = sum(c.bytes for c in cached)
    if total < near_limit_bytes(limit):
        return None
    return (
        f"{total / MIB:.0f} MiB of {what} are cached already, charged outside the {limit / MIB:.0f} MiB "
        f"limit, and the program reads them as if it had none: {_names(cached)}; make them cold first "
        f"({_cold_args(cached)})"
    )


def after_record(touched_bytes: int, limit: int, failcnt: int, peak_bytes: int, files: Iterable[str]) -> str | None:
    """One line when a recording under ``limit`` touched more file bytes than the limit
    holds while the cgroup never reached it: the pages came from the page cache, charged
    elsewhere, and the recording shows the program without its limit. ``files``: the
    recording's files; their data must still be cached (charged elsewhere, reclaim under
    the limit never took it), and the largest of it is named."""
    if touched_bytes <= limit or limit_reached(limit, peak_bytes, failcnt):
        return None
    cached = cached_files(files)
    if sum(c.bytes for c in cached) < near_limit_bytes(limit):
        return None  # the data is not cached now: the program dropped its own pages, none were kept elsewhere
    where = f": {_names(cached)}; record again with them cold ({_cold_args(cached)})"
    return (
        f"the program touched {touched_bytes / MIB:.0f} MiB of file pages but its cgroup peaked at "
        f"{peak_bytes / MIB:.0f} MiB of the {limit / MIB:.0f} MiB limit: they were cached already, charged outside "
        f"the limit, so the recording shows the program without it{where}"
    )


def cold_files(paths: Sequence[str | Path]) -> list[str]:
    """``--cold``: drop each file's cached pages before the program starts. Every path must
    be a regular file (one line naming the first that is not); returns a line for each file
    that keeps a sixteenth or more of its pages cached (mapped by a running process)."""
    for p in paths:
        if not os.path.isfile(p):
            why = "no such file" if not os.path.exists(p) else "not a regular file"
            raise PagecastError(f"--cold {p}: {why}")
    make_cold([str(p) for p in paths], sync=True)  # written back first: DONTNEED leaves dirty pages
    left = []
    for p in paths:
        size = os.path.getsize(p)
        n = cached_bytes(p)
        if size and n * 16 >= size and n >= mmap.PAGESIZE:
            left.append(
                f"--cold {p}: {n / MIB:.1f} of its {size / MIB:.1f} MiB stay cached (pages a running process "
                "maps are not dropped)"
            )
    return left
