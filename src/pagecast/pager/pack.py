"""Page packs: a learned cold start read as one sequential stream.

Scattered 4 KiB reads of a cold file are bound by the device's random-read rate whatever
the queue depth (BENCHMARKS.md), so prefetching them into the page cache cannot come
close to a warm cache. A pack stores the pages an earlier run needed, *contiguously, in the order
the program first used them*; the userfaultfd pager's loader thread
(``native/pager/pack.c``, ``pgr_pack_start``) streams it with large sequential reads and
maps each page into the program's region with UFFDIO_COPY ahead of the program. Pages not
in the pack fault and are read from the file as usual.

File layout (little-endian; the C header ``native/pager/pack.h`` is the reference):

    header, 4096 bytes: b"PGCPACK1", u32 version=1, u32 page_size, u64 npages,
        u64 block_pages, u64 index_offset=4096, u64 data_offset, u64 src_size,
        i64 src_mtime_ns, i64 src_ctime_ns, u64 src_ino, u64 src_dev, u64 index_sum,
        source path (UTF-8, NUL-terminated)
    index: i64 file_page[npages] (first-use order), u64 block_sum[ceil(npages/block_pages)]
    data at data_offset (page aligned): the pages' bytes in index order

The source's identity (size, mtime, ctime, inode, device) is checked before any byte is
used: a pack of a file that changed since is *stale* and ignored with a warning (ctime
moves on every write and cannot be set back by user space). Each block of pages carries a
checksum verified before its pages are mapped, so a corrupted pack stops the loader
instead of serving wrong bytes.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.trace.schedule import Schedule
from pagecast.util.atomic import atomic_output

MAGIC = b"PGCPACK1"
HEADER = 4096
VERSION = 1
BLOCK_PAGES = 64  # 256 KiB: the checksum granule, and the loader's first (latency-bound) read
# The header's fields before the path, mirrored from pgr_pack_header in native/pager/pager.h
# (tests/test_binary_layouts.py compares the two).
HEADER_FIXED = struct.Struct("<8sIIQQQQQqqQQQ")
HEADER_FIELDS = (
    "magic",
    "version",
    "page_size",
    "npages",
    "block_pages",
    "index_offset",
    "data_offset",
    "src_size",
    "src_mtime_ns",
    "src_ctime_ns",
    "src_ino",
    "src_dev",
    "index_sum",
)
_SUM_KEY = np.uint64(0x9E3779B97F4A7C15)


def pack_sum(words: np.ndarray) -> int:
    """The pack checksum over 64-bit words (same as ``pgr_pack_sum`` in C; wraps mod 2^64)."""
    w = np.ascontiguousarray(words).view(np.uint64)
    odd = np.arange(len(w), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int((np.uint64(len(w)) + ((w ^ _SUM_KEY) * odd).sum(dtype=np.uint64)) & np.uint64(0xFFFFFFFFFFFFFFFF))


@dataclass
class PackInfo:
    path: Path
    source: str
    page_size: int
    npages: int
    block_pages: int
    data_offset: int
    src_size: int
    src_mtime_ns: int
    src_ctime_ns: int
    src_ino: int
    src_dev: int
    pages: np.ndarray  # file pages, first-use order

    @property
    def nbytes(self) -> int:
        return self.data_offset + self.npages * self.page_size

    def stale_reason(self) -> str | None:
        """Why the source no longer matches the pack, or None if it does."""
        try:
            st = os.stat(self.source)
        except OSError as e:
            return f"source {self.source} is gone ({e.strerror})"
        diffs = [
            name
            for name, a, b in (
                ("size", st.st_size, self.src_size),
                ("mtime", st.st_mtime_ns, self.src_mtime_ns),
                ("ctime", st.st_ctime_ns, self.src_ctime_ns),
                ("inode", st.st_ino, self.src_ino),
                ("device", st.st_dev, self.src_dev),
            )
            if a != b
        ]
        return f"{self.source} changed since the pack was built ({'/'.join(diffs)} differ)" if diffs else None


def _data_offset(npages: int, block_pages: int) -> int:
    nblocks = -(-npages // block_pages)
    return -(-(HEADER + 8 * (npages + nblocks)) // PAGE_SIZE) * PAGE_SIZE


def build_pack(
    source: str | Path,
    pages: np.ndarray,
    out: str | Path,
    *,
    block_pages: int = BLOCK_PAGES,
    page_size: int = PAGE_SIZE,
) -> PackInfo:
    """Write a pack of ``source``'s ``pages`` (file pages, first-use order; duplicates and
    pages past the end dropped, first occurrence kept). Written to a temp name, renamed."""
    source = Path(source).resolve()
    st = os.stat(source)
    pages = np.asarray(pages, np.int64)
    _, first = np.unique(pages, return_index=True)
    pages = pages[np.sort(first)]
    pages = pages[(pages >= 0) & (pages * page_size < st.st_size)]
    n = len(pages)
    if n == 0:
        raise PagecastError("no pages of the file to pack (the schedule does not touch it)", path=source)
    nblocks = -(-n // block_pages)
    data_off = _data_offset(n, block_pages)
    size = st.st_size
    with open(source, "rb") as f:
        mm = np.memmap(f, np.uint8, "r", shape=(size,))
        full = size // page_size
        padded = np.zeros((n, page_size), np.uint8)
        whole = pages < full
        padded[whole] = mm[: full * page_size].reshape(full, page_size)[pages[whole]]
        # the last page may be partial: zero-padded, as the pager serves it
        tail = size - full * page_size
        padded[~whole, :tail] = mm[full * page_size :]
        padded = padded.reshape(-1)
        del mm
    words = padded.view(np.uint64).reshape(-1)
    wpb = block_pages * page_size // 8
    sums = np.array([pack_sum(words[b * wpb : (b + 1) * wpb]) for b in range(nblocks)], np.uint64)
    index = np.concatenate([pages.view(np.uint64), sums])
    st2 = os.stat(source)
    if (st2.st_mtime_ns, st2.st_ctime_ns, st2.st_size) != (st.st_mtime_ns, st.st_ctime_ns, st.st_size):
        raise PagecastError("the file changed while the pack was being built; try again", path=source)
    path_b = str(source).encode()
    if len(path_b) >= HEADER - HEADER_FIXED.size:
        raise PagecastError("source path too long for a pack header", path=source)
    head = HEADER_FIXED.pack(
        MAGIC,
        VERSION,
        page_size,
        n,
        block_pages,
        HEADER,
        data_off,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_ino,
        st.st_dev,
        pack_sum(index),
    )
    head += path_b + b"\0" * (HEADER - HEADER_FIXED.size - len(path_b))
    with atomic_output(Path(out)) as tmp:
        with open(tmp, "wb") as f:
            f.write(head)
            f.write(index.tobytes())
            f.write(b"\0" * (data_off - HEADER - index.nbytes))
            f.write(padded.tobytes())
    return read_pack(out)


def read_pack(path: str | Path) -> PackInfo:
    """Header and index of a pack, checked (structure, size, index checksum); the data is
    not read, so a cold pack stays cold. Bad input → PagecastError naming the file."""
    from pagecast.util.regular import NotRegularFile, open_regular

    path = Path(path)
    try:
        with open_regular(path) as f:  # a FIFO in the pack's place must not block the run
            head = f.read(HEADER)
            size = os.fstat(f.fileno()).st_size
            if len(head) < HEADER or head[:8] != MAGIC:
                raise PagecastError("not a page pack (bad or short header)", path=path)
            (_, ver, ps, n, bp, ioff, doff, ssize, mt, ct, ino, dev, isum) = HEADER_FIXED.unpack_from(head)
            if ver != VERSION:
                raise PagecastError(f"page pack version {ver} not supported (this pagecast reads {VERSION})", path=path)
            if (
                ps < 512
                or ps & (ps - 1)
                or not 1 <= bp <= 1 << 16
                or ioff != HEADER
                or n >= 2**31
                or doff != _data_offset(n, bp)
            ):
                raise PagecastError(f"malformed page pack header (page size {ps})", path=path)
            if size != doff + n * ps:
                raise PagecastError(
                    f"truncated or padded page pack: {size} bytes, the header says {doff + n * ps}", path=path
                )
            nblocks = -(-n // bp)
            index = np.frombuffer(f.read(8 * (n + nblocks)), np.uint64)
    except NotRegularFile:
        raise PagecastError("cannot read page pack (not a regular file)", path=path) from None
    except OSError as e:
        raise PagecastError(f"cannot read page pack ({e.strerror})", path=path) from None
    if len(index) != n + nblocks or pack_sum(index) != isum:
        raise PagecastError("page pack index fails its checksum (corrupted)", path=path)
    source = head[HEADER_FIXED.size :].split(b"\0", 1)[0].decode(errors="replace")
    return PackInfo(path, source, ps, n, bp, doff, ssize, mt, ct, ino, dev, index[:n].view(np.int64).copy())


def pages_from_schedule(schedule: Schedule, source: str | Path, page_size: int = PAGE_SIZE) -> np.ndarray:
    """File pages of ``source`` named by a schedule (rows in trigger order = first use),
    via the schedule's regions (region page + the region's file offset)."""
    src = Path(source).resolve()
    s = schedule.sorted()
    out = []
    for reg in schedule.regions:
        if reg.kind != "file" or not reg.path:
            continue
        try:
            same = Path(reg.path).resolve() == src or os.path.samefile(reg.path, src)
        except OSError:
            same = False
        if not same:
            continue
        sel = s.region == reg.id
        out.append((np.nonzero(sel)[0], s.page[sel] + reg.file_offset // page_size))
    if not out:
        raise PagecastError(f"the schedule has no rows for {src}", path=src)
    rows = np.concatenate([r for r, _ in out])
    pages = np.concatenate([p for _, p in out])
    return pages[np.argsort(rows, kind="stable")]


def pack_from_schedules(
    schedules: Sequence[Schedule], source: str | Path, out: str | Path, min_runs: int = 1
) -> PackInfo:
    """One pack from the merged first-use order of several runs' schedules, keeping pages
    that at least ``min_runs`` of them touched (see ``merge_schedules``)."""
    from pagecast.live.sources import merge_schedules

    sched = schedules[0] if len(schedules) == 1 else merge_schedules(list(schedules), min_runs)
    return build_pack(source, pages_from_schedule(sched, source), out)


def usable_packs(paths: Sequence[str | Path], warn=None) -> list[PackInfo]:
    """Check packs before a run: malformed → PagecastError (one line, names the file);
    stale → a warning and the pack is left out (the run goes on without it)."""
    out = []
    for p in paths:
        info = read_pack(p)
        why = info.stale_reason()
        if why:
            if warn:
                warn(f"pagecast: warning: page pack {p} is stale: {why}; running without it")
            continue
        out.append(info)
    return out
