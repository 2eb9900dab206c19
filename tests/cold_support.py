"""Cold test files on the repository's disk (not tmpfs, whose pages cannot be dropped)."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from pagecast.util.pagecache import drop_file

PAGE = 4096


@contextmanager
def cold_file_maker(tag: str) -> Iterator[Callable[[int], Path]]:
    """``make(pages)`` writes a file of random bytes of that many pages and drops it from the
    page cache; every file made is removed afterwards."""
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata" / f"{tag}-{os.getpid()}"
    base.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []

    def make(pages: int) -> Path:
        p = base / f"f{len(made)}.bin"
        p.write_bytes(np.random.default_rng(len(made)).integers(0, 256, pages * PAGE, dtype=np.uint8).tobytes())
        made.append(p)
        drop_file(p)
        return p

    try:
        yield make
    finally:
        shutil.rmtree(base, ignore_errors=True)
