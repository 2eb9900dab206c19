"""make_cold against reads still in flight: a page whose read is queued when DONTNEED runs
is locked, survives the drop and lands cached; make_cold must leave the file cold anyway."""

from __future__ import annotations

import os
from pathlib import Path

from cold_support import cold_file_maker
from pagecast.util.pagecache import make_cold, resident

WINDOW = 8 << 20


def _queue_whole_file(path: Path) -> None:
    """WILLNEED the whole file in 8 MiB requests, as the launcher's stream does: queued, not waited for."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in range(0, os.fstat(fd).st_size, WINDOW):
            os.posix_fadvise(fd, off, WINDOW, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def test_make_cold_after_a_queued_whole_file_read_leaves_it_cold():
    with cold_file_maker("pagecache") as make:
        f = make(16384)  # 64 MiB: its reads are still arriving for tens of ms after being queued
        _queue_whole_file(f)
        make_cold([f])
        assert resident(f).sum() == 0
