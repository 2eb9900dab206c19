"""Page-cache control for one file: make it cold or warm without touching global state."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    import numpy as np


def drop_file(path: str | Path, sync: bool = True) -> None:
    """Evict a file's clean pages from the page cache (posix_fadvise DONTNEED).

    Only effective once no process maps the file: mapped pages stay cached. Dirty pages
    are written back first so they can be dropped; ``sync=False`` skips that for files
    known to be clean (it costs a journal round trip per file, which adds up over the
    thousands of files of a package).
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        if sync:
            os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident(path: str | Path) -> "np.ndarray":
    """Which pages of a file are in the page cache now (mincore on a read-only mapping).

    Mapping the file does not read it, so asking does not change the answer.
    """
    import ctypes
    import mmap

    import numpy as np

    size = os.path.getsize(path)
    npages = -(-size // mmap.PAGESIZE)
    if npages == 0:
        return np.zeros(0, bool)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vec = (ctypes.c_ubyte * npages)()
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return np.frombuffer(bytes(vec), np.uint8) & 1 == 1
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def reads_in_flight(devs: Iterable[int]) -> int:
    """Read requests the block devices ``devs`` (``st_dev`` numbers) have in flight now, from
    ``/sys/dev/block/MAJ:MIN/inflight``; a device without that file counts 0."""
    total = 0
    for d in set(devs):
        try:
            with open(f"/sys/dev/block/{os.major(d)}:{os.minor(d)}/inflight") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def wait_reads_done(devs: Iterable[int], timeout_s: float = 2.0) -> bool:
    """Wait until ``devs`` have no read in flight (at most ``timeout_s``); whether one was."""
    import time

    devs = list(devs)
    end = time.monotonic() + timeout_s
    waited = False
    while reads_in_flight(devs) and time.monotonic() < end:
        waited = True
        time.sleep(0.002)
    return waited


def make_cold(files: Iterable[str | Path], sync: bool = False) -> None:
    """DONTNEED each file, skipping those that cannot be opened (nothing of them to drop).

    Inputs of a measured run are read-only, so no write-back first unless ``sync`` (a file
    just written has dirty pages, which DONTNEED leaves cached: sync once, after writing).

    A page whose read is in flight is locked, and DONTNEED leaves it: it lands afterwards
    and stays cached. A stream of a 384 MiB file queued by WILLNEED takes 8 ms to issue and
    ~0.1 s to arrive, so after a run that ended while its prefetch was still arriving, one
    DONTNEED pass left 86,693 of the file's 98,306 pages cached for the next run. So the
    reads in flight on the files' devices are waited for first (at most 2 s), and if some
    were in flight during the pass (a prefetcher's last request), the files are dropped
    again once those have landed."""
    files = list(files)
    devs = []
    for f in files:
        try:
            devs.append(os.stat(f).st_dev)
        except OSError:
            pass
    for attempt in range(2):
        wait_reads_done(devs)
        for f in files:
            try:
                drop_file(f, sync=sync and attempt == 0)
            except OSError:
                pass
        if not reads_in_flight(devs):
            return
