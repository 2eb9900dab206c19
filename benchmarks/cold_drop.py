"""Does a file made cold stay cold when its reads are still arriving?

A prefetcher's stream (WILLNEED of a whole file in 8 MiB requests) is queued in a few ms
and arrives over ~0.1 s. A page whose read is in flight is locked, and posix_fadvise(DONTNEED)
skips it: it lands afterwards and stays cached. This queues a file's whole-file stream,
then makes it cold three ways, and counts the pages left cached (mincore), per try:

- ``one DONTNEED``: a single pass, as the harness once did (the baseline);
- ``in-flight count``: wait until ``/sys/dev/block/MAJ:MIN/inflight`` reads 0, drop, drop
  again if reads are in flight after (the first fix, which misses requests still queued in
  the I/O scheduler);
- ``make_cold``: ``pagecast.util.pagecache.make_cold`` (no read in flight and none
  finished for 10 ms, drop, again while reads were seen).

    PYTHONPATH=src python benchmarks/cold_drop.py [--mib 64] [--tries 30] [--json]

The file is written under native/build (the repository's disk: tmpfs pages cannot be dropped).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from pagecast.util.pagecache import drop_file, make_cold, resident  # noqa: E402

WINDOW = 8 << 20


def queue_whole_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in range(0, os.fstat(fd).st_size, WINDOW):
            os.posix_fadvise(fd, off, WINDOW, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def reads_in_flight(dev: int) -> int:
    with open(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/inflight") as f:
        return int(f.read().split()[0])


def in_flight_count(path: Path) -> None:
    dev = os.stat(path).st_dev
    for _ in range(2):
        end = time.monotonic() + 2.0
        while reads_in_flight(dev) and time.monotonic() < end:
            time.sleep(0.002)
        drop_file(path, sync=False)
        if not reads_in_flight(dev):
            return


WAYS = {
    "one DONTNEED": lambda p: drop_file(p, sync=False),
    "in-flight count": in_flight_count,
    "make_cold": lambda p: make_cold([p]),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64, help="file size (default 64)")
    ap.add_argument("--tries", type=int, default=30, help="tries per way, interleaved (default 30)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    base = REPO / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"cold-drop-{os.getpid()}.bin"
    try:
        path.write_bytes(os.urandom(args.mib << 20))
        drop_file(path)
        left: dict[str, list[int]] = {w: [] for w in WAYS}
        for _ in range(args.tries):
            for way, cold in WAYS.items():
                queue_whole_file(path)
                cold(path)
                left[way].append(int(resident(path).sum()))
                make_cold([path])  # the next try starts cold whatever this way left
    finally:
        path.unlink(missing_ok=True)
    pages = args.mib << 8
    out = {
        w: {"tries": len(v), "tries_left_warm": sum(1 for x in v if x), "max_pages_left": max(v), "file_pages": pages}
        for w, v in left.items()
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{args.mib} MiB file ({pages} pages), whole-file WILLNEED queued, then made cold; {args.tries} tries each")
    for w, r in out.items():
        print(f"  {w:16s} left pages cached in {r['tries_left_warm']:3d} of {r['tries']} tries "
              f"(at most {r['max_pages_left']:,} pages)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
