"""Apply predictions to file-backed pages: posix_fadvise(WILLNEED) from outside the program.

The page cache is shared, so a read started here satisfies the program's later fault
(it then costs a minor fault or none). WILLNEED only submits the reads and returns, so
issuing many pages keeps a deep queue on the device while the program waits on one page
at a time. Consecutive predicted pages (gaps up to ``gap`` pages) are merged into one
range: one request per range instead of per page, paid for with the gap pages' bytes.

Anonymous, heap and stack pages cannot be prefetched from another process; predictions
for them are counted and dropped (``skipped``).
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.trace.regions import Region
from pagecast.util.native import build

PAGE = PAGE_SIZE
CHUNK_RANGES = 64  # ranges per work item: lets several threads share one large burst


@dataclass
class Issued:
    """Pages whose read was submitted: when, and which fault (time seen, time taken) caused it."""

    t_issue: np.ndarray  # int64, monotonic ns relative to the run's t0
    region: np.ndarray  # int32
    page: np.ndarray  # int64
    t_fault: np.ndarray  # int64: t_ns of the causing fault
    t_seen: np.ndarray  # int64: when the daemon received that fault
    t_submit: np.ndarray  # int64: when the predictor handed the page to the injector


def merge_ranges(
    region: np.ndarray, page: np.ndarray, gap: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split an ordered page list into ranges: (range start index, region, first page, npages).

    A new range starts where the region changes or the next page is not 1..gap+1 pages
    above the previous one.
    """
    n = len(page)
    if n == 0:
        e = np.empty(0, np.int64)
        return e, e.astype(np.int32), e, e
    d = np.diff(page)
    brk = np.ones(n, bool)
    brk[1:] = (region[1:] != region[:-1]) | (d < 1) | (d > gap + 1)
    starts = np.nonzero(brk)[0]
    ends = np.append(starts[1:], n)  # exclusive
    first = page[starts]
    last = page[ends - 1]
    return starts, region[starts].astype(np.int32), first, last - first + 1


_LIB = None


def _lib() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL(str(build("pc_inject", ["live/inject.c"])))
        p = ctypes.c_void_p
        lib.pc_willneed.argtypes = [p, p, p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, p]
        lib.pc_willneed.restype = ctypes.c_int
        _LIB = lib
    return _LIB


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


class FileInjector:
    """Thread pool issuing WILLNEED on file regions; records every page it issued."""

    def __init__(self, t0_mono_ns: int, *, threads: int = 2, gap: int = 4):
        self.t0 = int(t0_mono_ns)
        self.gap = int(gap)
        self._fds: dict[int, int] = {}
        self._paths: dict[int, str] = {}
        self._q: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._done: list[Issued] = []
        self.skipped = 0
        self.errors = 0
        self.ranges = 0
        self.range_pages = 0
        _lib()  # build/load before the program starts, not at its first fault
        self._threads = [
            threading.Thread(target=self._work, name=f"pagecast-inject-{i}", daemon=True)
            for i in range(max(1, threads))
        ]
        for t in self._threads:
            t.start()

    def set_regions(self, regions: Sequence[Region]) -> None:
        for r in regions:
            if r.kind == "file" and r.path and r.id not in self._paths:
                self._paths[r.id] = r.path

    def add_paths(self, paths: dict[int, str]) -> None:
        """Files known before the program maps them (encoded region ids, see sources.encode_old)."""
        self._paths.update(paths)

    def _fd(self, region: int) -> int:
        fd = self._fds.get(region)
        if fd is None:
            path = self._paths.get(region)
            if path is None:
                return -1
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                fd = -1
            self._fds[region] = fd
        return fd

    def submit(self, region: np.ndarray, page: np.ndarray, t_fault: np.ndarray, t_seen: np.ndarray) -> None:
        is_file = np.isin(region, np.fromiter(self._paths, np.int64, len(self._paths)))
        self.skipped += int((~is_file).sum())
        region, page, t_fault, t_seen = region[is_file], page[is_file], t_fault[is_file], t_seen[is_file]
        if not len(page):
            return
        t_sub = time.monotonic_ns() - self.t0
        starts, rreg, first, npages = merge_ranges(region, page, self.gap)
        bounds = np.append(starts, len(page))
        for c in range(0, len(starts), CHUNK_RANGES):
            sl = slice(c, min(c + CHUNK_RANGES, len(starts)))
            lo, hi = int(bounds[sl.start]), int(bounds[sl.stop])
            self._q.put(
                (
                    rreg[sl],
                    first[sl],
                    npages[sl],
                    bounds[sl.start : sl.stop + 1] - lo,
                    region[lo:hi],
                    page[lo:hi],
                    t_fault[lo:hi],
                    t_seen[lo:hi],
                    t_sub,
                )
            )

    def _work(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                self._q.task_done()
                return
            rreg, first, npages, bounds, region, page, t_fault, t_seen, t_sub = item
            fds = np.asarray([self._fd(int(r)) for r in rreg], np.int32)
            t_range = np.empty(len(rreg), np.int64)
            first = np.ascontiguousarray(first, np.int64)
            npages = np.ascontiguousarray(npages, np.int64)
            # one foreign call per chunk: the GIL is released while the kernel queues the reads
            errors = _lib().pc_willneed(_ptr(fds), _ptr(first), _ptr(npages), len(rreg), PAGE, self.t0, _ptr(t_range))
            t_issue = np.repeat(t_range, np.diff(bounds))
            with self._lock:
                self.errors += int(errors)
                self.ranges += len(rreg)
                self.range_pages += int(npages.sum())
                self._done.append(
                    Issued(
                        t_issue,
                        region.astype(np.int32),
                        page.astype(np.int64),
                        t_fault,
                        t_seen,
                        np.full(len(page), t_sub, np.int64),
                    )
                )
            self._q.task_done()

    def take(self) -> list[Issued]:
        with self._lock:
            out, self._done = self._done, []
        return out

    def close(self) -> None:
        """Finish queued work, stop the threads, close the files."""
        for _ in self._threads:
            self._q.put(None)
        for t in self._threads:
            t.join()
        for fd in self._fds.values():
            if fd >= 0:
                os.close(fd)
        self._fds.clear()
