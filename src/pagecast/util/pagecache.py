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


def make_cold(files: Iterable[str | Path], sync: bool = False) -> None:
    """DONTNEED each file, skipping those that cannot be opened (nothing of them to drop).

    Inputs of a measured run are read-only, so no write-back first unless ``sync`` (a file
    just written has dirty pages, which DONTNEED leaves cached: sync once, after writing)."""
    for f in files:
        try:
            drop_file(f, sync=sync)
        except OSError:
            pass
