"""How fast can a prefetcher read a whole cold file into the page cache, and at what CPU cost?

Three ways to read a file whole, each in requests of 8 MiB from one thread:

- ``WILLNEED windows`` (the baseline: how a plan's ``warm`` requests read, and so how
  ``predicted+stream`` reads a whole file): ``posix_fadvise(WILLNEED)`` per window, all
  queued at once; done when the last page of every window can be read (a one-byte pread
  waits for a page whose read is in flight);
- ``pread into a buffer`` (how the launcher's ``stream`` strategy used to read):
  every byte copied into the reader;
- ``sendfile to /dev/null`` (how the launcher's ``stream`` strategy reads now): the
  kernel's own sequential read-ahead, and nothing copied.

Then the whole file as a plan's ``warm`` entry and as its ``stream`` entry (8 MiB
requests, one thread) through the real launcher (``pagecast-launch --prefetch-only``: the
prefetcher forked, low priority), timed until every page of the file is resident (mincore
every 2 ms).

A page missing right after a way finished was read and evicted since (a host running a
DAMON pageout scheme on physical memory can evict freshly read pages), or, for the
launcher, never seen resident before the 30 s limit: the last column gives the most of any
try. The launcher ways are done when every page has been seen resident at least once.

    PYTHONPATH=src python benchmarks/stream_read.py [--mib 384] [--tries 7] [--json]

The file is written under native/build (the repository's disk: tmpfs pages cannot be
dropped) and made cold before every try with ``make_cold``; the ways are interleaved in
a fresh seeded order per try. Medians; ratios are the baseline's time over the way's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from pagecast.launch.binary import launcher_path  # noqa: E402
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan  # noqa: E402
from pagecast.util.pagecache import make_cold, resident  # noqa: E402

WINDOW = 8 << 20
BASELINE = "WILLNEED windows"


def willneed_windows(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for off in range(0, size, WINDOW):
            os.posix_fadvise(fd, off, WINDOW, os.POSIX_FADV_WILLNEED)
        for off in range(0, size, WINDOW):
            os.pread(fd, 1, min(size, off + WINDOW) - 1)
    finally:
        os.close(fd)


def pread_buffer(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    buf = bytearray(WINDOW)
    try:
        off = 0
        while n := os.preadv(fd, [buf], off):
            off += n
    finally:
        os.close(fd)


def sendfile_null(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        off, size = 0, os.fstat(fd).st_size
        while off < size and (n := os.sendfile(null, fd, off, WINDOW)):
            off += n
    finally:
        os.close(fd)
        os.close(null)


def launcher_way(plan: Path) -> Callable[[Path], None]:
    def run(p: Path) -> None:
        subprocess.run([launcher_path(), "--prefetch-only", str(plan)], check=True)
        # done when every page has been seen resident, not all at once: a page read and
        # evicted again (see above) was read all the same
        seen = resident(p)
        end = time.monotonic() + 30
        while not seen.all() and time.monotonic() < end:
            time.sleep(0.002)
            seen |= resident(p)

    return run


def cold_file(mib: int) -> Path:
    """A new file of random bytes on the repository's disk (tmpfs pages cannot be dropped), cold."""
    (REPO / "native" / "build" / "testdata").mkdir(parents=True, exist_ok=True)
    path = REPO / "native" / "build" / "testdata" / f"stream-read-{os.getpid()}.bin"
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
    make_cold([path], sync=True)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=384, help="file size (default 384)")
    ap.add_argument("--tries", type=int, default=7, help="tries per way, interleaved (default 7)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="pagecast-stream-read-"))
    path = cold_file(args.mib)
    try:
        pages = (os.path.getsize(path) + 4095) // 4096
        plans = {}
        for strategy in ("warm", "stream"):
            plans[strategy] = scratch / f"{strategy}.plan"
            entry = FilePlan(str(path), FileIdentity.of(path), strategy, [(0, pages)], depth=1, chunk_kib=WINDOW >> 10)
            write_plan(plans[strategy], PlanDoc([entry]))
        ways: dict[str, Callable[[Path], None]] = {
            BASELINE: willneed_windows,
            "pread into a buffer": pread_buffer,
            "sendfile to /dev/null": sendfile_null,
            "launcher: warm (WILLNEED)": launcher_way(plans["warm"]),
            "launcher: stream (sendfile)": launcher_way(plans["stream"]),
        }
        sendfile_null(path)  # one untimed pass: the first read of a new file is the device's own business
        wall: dict[str, list[float]] = {w: [] for w in ways}
        cpu: dict[str, list[float]] = {w: [] for w in ways}
        missing: dict[str, list[int]] = {w: [] for w in ways}
        for t in range(args.tries):
            for w in random.Random(t).sample(list(ways), len(ways)):
                make_cold([path])
                c0, t0 = time.thread_time(), time.perf_counter()
                ways[w](path)
                wall[w].append(time.perf_counter() - t0)
                cpu[w].append(time.thread_time() - c0)
                missing[w].append((os.path.getsize(path) + 4095) // 4096 - int(resident(path).sum()))
    finally:
        path.unlink(missing_ok=True)
        for p in scratch.iterdir():
            p.unlink()
        scratch.rmdir()
    b = statistics.median(wall[BASELINE])
    out = {
        w: {
            "wall_s": statistics.median(v),
            "wall_min_s": min(v),
            "wall_max_s": max(v),
            "mib_per_s": args.mib / statistics.median(v),
            "reader_cpu_s": None if w.startswith("launcher") else statistics.median(cpu[w]),
            "vs_baseline": b / statistics.median(v),
            "pages_not_resident_after_max": max(missing[w]),
        }
        for w, v in wall.items()
    }
    if args.json:
        print(json.dumps({"mib": args.mib, "tries": args.tries, "ways": out}, indent=2))
        return 0
    print(f"{args.mib} MiB cold file read whole, {args.tries} interleaved tries each (medians); "
          f"baseline: {BASELINE}")  # fmt: skip
    print("| way | wall s | min–max | MiB/s | reader CPU s | vs baseline | pages not resident after (most) |")
    print("|---|---|---|---|---|---|---|")
    for w, r in out.items():
        c = "—" if r["reader_cpu_s"] is None else f"{r['reader_cpu_s']:.3f}"
        print(f"| {w} | {r['wall_s']:.3f} | {r['wall_min_s']:.3f}–{r['wall_max_s']:.3f} | {r['mib_per_s']:.0f} | "
              f"{c} | {r['vs_baseline']:.2f}× | {r['pages_not_resident_after_max']:,} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
