"""Cold test files on the repository's disk (not tmpfs, whose pages cannot be dropped), and
which of their pages a run brought into the page cache."""

from __future__ import annotations

import os
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from pagecast.util.pagecache import drop_file, resident

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


@contextmanager
def cyclic_scan_and_file(tag: str, mib: int) -> Iterator[tuple[Path, Path]]:
    """``workloads/cyclic_scan.c`` built, and a cold file of ``mib`` MiB for it to scan."""
    from pagecast.bench.workloads import build_workload

    prog = build_workload("cyclic_scan")
    with cold_file_maker(tag) as make:
        yield prog, make(mib * (1 << 20) // PAGE)


class ResidencyWatch:
    """The union of files' resident pages, polled every millisecond from a thread while a
    test runs a program: a page seen once was read.

    The host runs DAMON pageout on physical memory: a page just read into a frame of a
    region DAMON found cold can be evicted within its next aggregation interval (0.5 s
    here), before a test that looks after the program exited sees it. Polling from before
    the run catches every page the run brought in (and an extra page too: exact both ways)."""

    def __init__(self, *paths: Path, interval_s: float = 0.001) -> None:
        self._paths = [Path(p) for p in paths]
        self._interval = interval_s
        self._seen = {p: np.zeros(0, bool) for p in self._paths}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _poll(self) -> None:
        for p in self._paths:
            now = resident(p)
            with self._lock:
                old = self._seen[p]
                self._seen[p] = now | old if len(old) == len(now) else now

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poll()
            time.sleep(self._interval)

    def __enter__(self) -> "ResidencyWatch":
        self._poll()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def seen(self, path: Path, want: np.ndarray | None = None, timeout_s: float = 60.0) -> np.ndarray:
        """Every page of ``path`` seen resident so far. With ``want``: first wait until all of
        them were (the launcher's prefetcher runs at low priority, which a busy disk can hold
        back for seconds), then 50 ms more, when a page past them would have landed."""
        p = Path(path)
        if want is not None:
            end = time.monotonic() + timeout_s
            while time.monotonic() < end:
                with self._lock:
                    if len(self._seen[p]) == len(want) and self._seen[p][want].all():
                        break
                time.sleep(0.005)
            time.sleep(0.05)
        self._poll()
        with self._lock:
            return self._seen[p].copy()
