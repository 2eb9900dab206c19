"""Page-cache control for one file: make it cold or warm without touching global state."""

from __future__ import annotations

import os
import time
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


def mincore_vector(path: str | Path) -> bytes:
    """mincore's answer for a file: one byte a page, its low bit set where the page is in
    the page cache now (on a read-only mapping: mapping the file does not read it, so asking
    does not change the answer). No numpy, for callers that fork a controller after."""
    import ctypes
    import mmap

    size = os.path.getsize(path)
    npages = -(-size // mmap.PAGESIZE)
    if npages == 0:
        return b""
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
            return bytes(vec)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def resident(path: str | Path) -> "np.ndarray":
    """Which pages of a file are in the page cache now (``mincore_vector``)."""
    import numpy as np

    return np.frombuffer(mincore_vector(path), np.uint8) & 1 == 1


def _read_counters(devs: Iterable[int]) -> tuple[int, int]:
    """(sectors read so far, read requests in flight) summed over the block devices ``devs``
    (``st_dev`` numbers), from ``/sys/dev/block/MAJ:MIN/stat`` and ``inflight`` (reads only:
    a program's writes do not make a file warm); a device without them counts 0."""
    sectors = inflight = 0
    for d in devs:
        base = f"/sys/dev/block/{os.major(d)}:{os.minor(d)}"
        try:
            with open(f"{base}/stat") as f:
                sectors += int(f.read().split()[2])
            with open(f"{base}/inflight") as f:
                inflight += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return sectors, inflight


def wait_reads_done(devs: Iterable[int], quiet_s: float = 0.01, timeout_s: float = 1.0) -> bool:
    """Wait until the devices ``devs`` have had no read in flight and finished none for
    ``quiet_s`` (at most ``timeout_s``); whether any read was seen under way.

    "In flight" alone was not always enough (a test once found pages left cached after it
    read 0): it counts the requests the driver has started, not those still queued in the
    I/O scheduler behind them. A quiet interval in which no read completes covers both."""
    devs = set(devs)  # one per device, not per file: this is read every 2 ms
    end = time.monotonic() + timeout_s
    last, _ = _read_counters(devs)
    quiet_since = time.monotonic()
    busy = False
    while time.monotonic() < end:
        time.sleep(0.002)
        sectors, inflight = _read_counters(devs)
        if inflight or sectors != last:
            busy, quiet_since, last = True, time.monotonic(), sectors
        elif time.monotonic() - quiet_since >= quiet_s:
            return busy
    return True


def make_cold(files: Iterable[str | Path] | str | Path, sync: bool = False) -> None:
    """DONTNEED each file, skipping those that cannot be opened (nothing of them to drop).
    One path alone is one file (a string is not a list of one-letter names, each skipped).

    Inputs of a measured run are read-only, so no write-back first unless ``sync`` (a file
    just written has dirty pages, which DONTNEED leaves cached: sync once, after writing).

    A page whose read is in flight is locked, and DONTNEED leaves it: it lands afterwards
    and stays cached. A whole-file stream queued by WILLNEED arrives over ~0.1 s, so right
    after it one DONTNEED pass left up to 36,864 of a 384 MiB file's 98,304 pages cached
    (``benchmarks/cold_drop.py``): the next run would start partly warm. So the files'
    devices are first let go quiet (``wait_reads_done``: no read under way for 10 ms, at
    most 1 s), the files dropped, and dropped again while reads were seen under way since
    (a prefetcher's last request)."""
    files = [files] if isinstance(files, (str, Path)) else list(files)
    devs: set[int] = set()
    for f in files:
        try:
            devs.add(os.stat(f).st_dev)
        except OSError:
            pass
    for attempt in range(3):
        if not wait_reads_done(devs) and attempt > 0:
            return  # nothing was read since the last pass
        for f in files:
            try:
                drop_file(f, sync=sync and attempt == 0)
            except OSError:
                pass
