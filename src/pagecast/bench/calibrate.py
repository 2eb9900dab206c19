"""Measure the storage device under a directory: the numbers of a ``DeviceModel``.

- sequential read bandwidth: a cold test file read front to back in 1 MiB calls through
  the page cache (read-ahead on, as programs read);
- random 4 KiB reads at several queue depths: that many threads each issuing one
  ``pread`` at a time at random offsets, with ``O_DIRECT`` where the file system allows
  it (the device, not the page cache);
- the cost of filling the page cache with one page of a cold file, three ways: a major
  fault (mapping with ``MADV_RANDOM``, so one page is read), ``posix_fadvise(WILLNEED)``
  then waiting until ``mincore`` shows the page (and many pages asked at once), and the
  userfaultfd pager serving a fault from the file;
- the cost of a fault with the default advice, which reads the device's read-around
  window (``read_ahead_kb``): per fault, and per page the windows brought in.

Only the test file is made cold (``posix_fadvise(DONTNEED)`` on it); it is deleted at the end.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.util.device_model import DeviceModel, FillCost, RandomRead, device_of, read_ahead_kb_of
from pagecast.util.pagecache import drop_file

PAGE = PAGE_SIZE
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class CalibrateConfig:
    directory: Path
    file_mib: int = 256
    queue_depths: tuple[int, ...] = (1, 4, 16, 32)
    seconds: float = 1.5  # per random-read queue depth
    fill_pages: int = 200  # pages per fill measurement


STEPS = 5  # progress steps: test file, sequential, random reads, fault + fadvise fills, pager fill
FADVISE_TIMEOUT_S = 5.0  # a file system whose WILLNEED reads nothing must not hang calibration


def calibrate(cfg: CalibrateConfig, on_step: Callable[[str], None] | None = None) -> DeviceModel:
    d = Path(cfg.directory)
    if not d.is_dir():
        raise PagecastError("not a directory to measure in", path=d)
    if cfg.file_mib < 16:
        raise PagecastError("the test file must be at least 16 MiB (--file-mib)")
    step = on_step or (lambda _: None)
    with _test_file(d, cfg.file_mib) as f:
        step("write test file")
        rng = np.random.default_rng(0)
        npages = cfg.file_mib * 256
        # distinct pages for every measurement: none finds another's page in the cache
        order = rng.permutation(npages)
        step("sequential read")
        seq = _sequential(f)
        direct = _direct_ok(f)
        step("random reads")
        rand = [_random_reads(f, qd, cfg.seconds, order, direct) for qd in cfg.queue_depths]
        k = cfg.fill_pages
        fills_pages = [order[i * k : (i + 1) * k] for i in range(4)]
        step("fill by fault and fadvise")
        fills = [
            _fill_by_fault(f, fills_pages[0]),
            _fill_by_fadvise(f, fills_pages[1], fills_pages[2]),
            _fill_by_readaround(f, rng),
        ]
        step("fill by the pager")
        fills.append(_fill_by_pager(f, fills_pages[3]))
    from pagecast.trace.writer import host_facts

    return DeviceModel(
        device=device_of(d),
        path=str(d.resolve()),
        measured_unix=time.time(),
        file_mib=cfg.file_mib,
        direct_io=direct,
        seq_read_bytes_per_s=seq,
        random_reads=rand,
        fills=fills,
        host=host_facts(),
    )


@contextlib.contextmanager
def _test_file(d: Path, mib: int) -> Iterator[Path]:
    f = None
    try:
        fd, name = tempfile.mkstemp(prefix=".pagecast-calibrate-", suffix=".bin", dir=d)  # never a planted link
        f = Path(name)
        with os.fdopen(fd, "wb") as out:
            block = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
            for i in range(mib):
                out.write(block[i % 7 :] + block[: i % 7])  # not all blocks equal (dedup, compression)
            out.flush()
            os.fsync(out.fileno())
    except OSError as e:
        if f is not None:
            f.unlink(missing_ok=True)
        raise PagecastError(f"cannot write a {mib} MiB test file: {e.strerror}", path=d) from None
    try:
        yield f
    finally:
        f.unlink(missing_ok=True)


def _sequential(f: Path) -> float:
    drop_file(f)
    size = f.stat().st_size
    buf = bytearray(1 << 20)
    fd = os.open(f, os.O_RDONLY)
    try:
        t = time.perf_counter()
        done = 0
        while done < size:
            n = os.readv(fd, [buf])
            if n <= 0:
                break
            done += n
        dt = time.perf_counter() - t
    finally:
        os.close(fd)
    return done / dt


def _direct_ok(f: Path) -> bool:
    try:
        fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    try:
        buf = mmap.mmap(-1, PAGE)
        os.preadv(fd, [buf], 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _percentiles(ns: np.ndarray) -> tuple[int, int]:
    if not len(ns):
        return 0, 0
    return int(np.percentile(ns, 50)), int(np.percentile(ns, 99))


def _random_reads(f: Path, qd: int, seconds: float, order: np.ndarray, direct: bool) -> RandomRead:
    if not direct:
        drop_file(f)
    fd = os.open(f, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    lats: list[list[int]] = [[] for _ in range(qd)]
    pages = order[::-1]  # the fills use the front of the permutation
    nxt = [0]
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def worker(i: int) -> None:
        buf = mmap.mmap(-1, PAGE)  # page-aligned, as O_DIRECT wants
        out = lats[i]
        while time.perf_counter() < deadline:
            with lock:
                k = nxt[0]
                nxt[0] += 1
            if k >= len(pages):
                return
            t = time.perf_counter_ns()
            os.preadv(fd, [buf], int(pages[k]) * PAGE)
            out.append(time.perf_counter_ns() - t)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(qd)]
    t0 = time.perf_counter()
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - t0
    all_lat = np.concatenate([np.asarray(x, np.int64) for x in lats])
    p50, p99 = _percentiles(all_lat)
    return RandomRead(queue_depth=qd, iops=round(len(all_lat) / elapsed, 1), latency_ns_p50=p50, latency_ns_p99=p99)


def _fill_by_fault(f: Path, pages: np.ndarray) -> FillCost:
    drop_file(f)
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        m.madvise(mmap.MADV_RANDOM)  # no read-around: one page per major fault
        ns = np.empty(len(pages), np.int64)
        for i, p in enumerate(pages.tolist()):
            t = time.perf_counter_ns()
            m[p * PAGE]
            ns[i] = time.perf_counter_ns() - t
    p50, p99 = _percentiles(ns)
    return FillCost("fault", p50, p99, note="major fault on a MADV_RANDOM mapping")


def _fill_by_readaround(f: Path, rng: np.random.Generator, windows: int = 16) -> FillCost:
    """Faults with the kernel's default advice, one in each of ``windows`` distinct
    read-around windows in random order, back to back: what a program that maps a large
    file and touches it sparsely pays per miss. A fault returns once its own page is in,
    the rest of the window keeps streaming and delays the next fault, so the cost per page
    is the total time over the pages the windows brought in (mincore), not one fault's."""
    from pagecast.util.pagecache import resident

    drop_file(f)
    npages = f.stat().st_size // PAGE
    w = max(1, read_ahead_kb_of(os.stat(f).st_dev) * 1024 // PAGE)
    nwin = max(1, npages // w)
    picks = rng.permutation(nwin)[: min(windows, nwin)]
    ns = np.empty(len(picks), np.int64)
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        t0 = time.perf_counter_ns()
        for i, win in enumerate(picks.tolist()):
            t = time.perf_counter_ns()
            m[min(npages - 1, win * w + w // 2) * PAGE]  # the centre: read-around is centred on the fault
            ns[i] = time.perf_counter_ns() - t
        # the last window's tail is still arriving: wait for it, as a program's next fault would
        while True:
            got = int(np.count_nonzero(resident(f)))
            if got >= min(npages, len(picks) * w) or time.perf_counter_ns() - t0 > FADVISE_TIMEOUT_S * 1e9:
                break
            time.sleep(0.001)
        total = time.perf_counter_ns() - t0
    p50, p99 = _percentiles(ns)
    return FillCost(
        "readaround",
        p50,
        p99,
        ns_per_page_batched=int(total / max(1, got)),
        note=f"{len(picks)} faults in distinct {w * PAGE // 1024} KiB read-around windows "
        f"(default advice); batched: total time per page brought in",
    )


def _resident(addr: int, npages: int, vec: ctypes.Array) -> np.ndarray:
    if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(npages * PAGE), vec) != 0:
        raise PagecastError(f"mincore failed: {os.strerror(ctypes.get_errno())}")
    return np.frombuffer(vec, np.uint8) & 1


def _fill_by_fadvise(f: Path, single: np.ndarray, batch: np.ndarray) -> FillCost:
    drop_file(f)
    npages = f.stat().st_size // PAGE
    # a private mapping is writable for ctypes (its address); untouched, mincore shows the file's cache
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY) as m:
        fd = fh.fileno()
        anchor = ctypes.c_char.from_buffer(m)
        addr = ctypes.addressof(anchor)
        vec1 = (ctypes.c_ubyte * 1)()
        ns = np.empty(len(single), np.int64)
        for i, p in enumerate(single.tolist()):
            t = time.perf_counter_ns()
            os.posix_fadvise(fd, p * PAGE, PAGE, os.POSIX_FADV_WILLNEED)
            while not _resident(addr + p * PAGE, 1, vec1)[0]:
                if time.perf_counter_ns() - t > FADVISE_TIMEOUT_S * 1e9:
                    del anchor
                    return FillCost("fadvise", 0, 0, note="not measured: WILLNEED brought no page in")
            ns[i] = time.perf_counter_ns() - t
        vec = (ctypes.c_ubyte * npages)()
        t = time.perf_counter_ns()
        for p in batch.tolist():
            os.posix_fadvise(fd, p * PAGE, PAGE, os.POSIX_FADV_WILLNEED)
        while not _resident(addr, npages, vec)[batch].all():
            if time.perf_counter_ns() - t > FADVISE_TIMEOUT_S * 1e9 * 10:
                del anchor
                return FillCost("fadvise", 0, 0, note="not measured: WILLNEED did not bring the pages in")
            time.sleep(0.0002)
        per_page = (time.perf_counter_ns() - t) // len(batch)
        del anchor
    p50, p99 = _percentiles(ns)
    return FillCost(
        "fadvise",
        p50,
        p99,
        ns_per_page_batched=int(per_page),
        note=f"WILLNEED then mincore; batched: {len(batch)} pages asked at once",
    )


def _fill_by_pager(f: Path, pages: np.ndarray) -> FillCost:
    try:
        from pagecast.pager.runtime import open_paged, probe

        probe()
    except (PagecastError, OSError) as e:
        return FillCost("pager", 0, 0, note=f"not measured: {e}")
    drop_file(f)
    ns = np.empty(len(pages), np.int64)
    with open_paged(f, (len(pages) + 16) * PAGE, "none") as r:
        a = r.array(np.uint8)
        for i, p in enumerate(pages.tolist()):
            t = time.perf_counter_ns()
            a[p * PAGE]
            ns[i] = time.perf_counter_ns() - t
        del a
    p50, p99 = _percentiles(ns)
    return FillCost("pager", p50, p99, note="userfaultfd missing fault served by pread from the file")
