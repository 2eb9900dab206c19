"""How this machine's disk serves one cold file read in chunks by several readers.

The page-pack loader (native/pager/pack.c) keeps one 256 KiB read in flight at a time.
This measures why: the time to read a cold file with O_DIRECT for each (readers, chunk
size), readers taking chunks in file order, file made cold with posix_fadvise(DONTNEED)
before every read. If one reader at 256 KiB is as fast as several, a deeper queue adds
nothing but wait for a demand miss queued behind it. The last column is that wait: the
latency of one 4 KiB O_DIRECT read at a random offset issued while the stream runs. The
second table is a lone miss: 4 KiB reads at random offsets of the cold file, back to back
or with the disk idle 0.2 / 1 ms before each (a page fault between computations).

    PYTHONPATH=src python benchmarks/read_depth.py [FILE] [--reps 3] [--json]

FILE defaults to a 24 MiB file of random bytes written under /tmp once.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import threading
import time
from pathlib import Path

from pagecast.util.pagecache import drop_file

READERS = (1, 2, 3, 4, 6)
CHUNKS_KIB = (64, 256, 1024, 2048)


def _default_file() -> Path:
    path = Path("/tmp/pagecast_read_depth.bin")
    if not path.exists() or path.stat().st_size != 24 << 20:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(os.urandom(24 << 20))
        tmp.replace(path)
    return path


def stream(path: Path, readers: int, chunk: int) -> tuple[float, list[float]]:
    """Seconds to read the cold file, and the latencies of 4 KiB reads issued meanwhile."""
    drop_file(path)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    size = os.fstat(fd).st_size
    nxt = [0]
    lock = threading.Lock()
    done = threading.Event()
    lat: list[float] = []

    def reader() -> None:
        buf = mmap.mmap(-1, chunk)  # page aligned, as O_DIRECT wants
        while True:
            with lock:
                off = nxt[0]
                nxt[0] += chunk
            if off >= size:
                return
            os.preadv(fd, [buf], off)

    def prober() -> None:
        buf = mmap.mmap(-1, 4096)
        k = 1
        while not done.is_set():
            off = (k * 2654435761 % (size // 4096)) * 4096  # scattered pages
            t = time.perf_counter()
            os.preadv(fd, [buf], off)
            lat.append(time.perf_counter() - t)
            k += 1
            time.sleep(0.0005)

    threads = [threading.Thread(target=reader) for _ in range(readers)]
    p = threading.Thread(target=prober)
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    p.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    done.set()
    p.join()
    os.close(fd)
    return elapsed, lat


def isolated(path: Path, gap_s: float, n: int = 150) -> tuple[float, float]:
    """p50 and p90 latency (µs) of 4 KiB O_DIRECT reads at scattered offsets, gap_s apart."""
    drop_file(path)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    pages = os.fstat(fd).st_size // 4096
    buf = mmap.mmap(-1, 4096)
    lat = []
    for k in range(1, n + 1):
        off = (k * 2654435761 % pages) * 4096
        t = time.perf_counter()
        os.preadv(fd, [buf], off)
        lat.append(time.perf_counter() - t)
        if gap_s:
            time.sleep(gap_s)
    os.close(fd)
    lat.sort()
    return lat[n // 2] * 1e6, lat[int(n * 0.9)] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", help="file to read (default: a 24 MiB file under /tmp)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    path = Path(a.file) if a.file else _default_file()
    mib = path.stat().st_size / (1 << 20)
    rows = []
    for rep in range(a.reps):  # interleaved, so a slow phase of a shared disk hits every cell
        for r in READERS:
            for c in CHUNKS_KIB:
                s, lat = stream(path, r, c << 10)
                rows.append(
                    {
                        "rep": rep,
                        "readers": r,
                        "chunk_kib": c,
                        "s": s,
                        "miss_p50_us": statistics.median(lat) * 1e6 if lat else None,
                        "miss_max_us": max(lat) * 1e6 if lat else None,
                    }
                )
    table = []
    for r in READERS:
        for c in CHUNKS_KIB:
            cell = [x for x in rows if x["readers"] == r and x["chunk_kib"] == c]
            s = statistics.median(x["s"] for x in cell)
            p50 = [x["miss_p50_us"] for x in cell if x["miss_p50_us"] is not None]
            table.append(
                {
                    "readers": r,
                    "chunk_kib": c,
                    "ms": round(s * 1e3, 1),
                    "mb_s": round(mib * 1.048576 / s),
                    "miss_p50_us": round(statistics.median(p50)) if p50 else None,
                }
            )
    base = next(t for t in table if t["readers"] == 1 and t["chunk_kib"] == 256)
    for t in table:
        t["vs_1x256k"] = round(t["ms"] / base["ms"], 2)
    lone = []
    for gap in (0.0, 0.0002, 0.001):
        runs = [isolated(path, gap) for _ in range(a.reps)]
        lone.append(
            {
                "idle_ms": gap * 1e3,
                "p50_us": round(statistics.median(r[0] for r in runs)),
                "p90_us": round(statistics.median(r[1] for r in runs)),
            }
        )
    if a.json:
        print(
            json.dumps(
                {
                    "file": str(path),
                    "mib": mib,
                    "reps": a.reps,
                    "table": table,
                    "lone_miss": lone,
                    "load": os.getloadavg(),
                },
                indent=2,
            )
        )
        return
    print(
        f"{path} ({mib:.0f} MiB), cold O_DIRECT reads in file order, median of {a.reps}; "
        f"a 4 KiB read at a random offset every 0.5 ms meanwhile (its p50 latency)"
    )
    print(f"{'readers':>7} {'chunk KiB':>9} {'ms':>7} {'MB/s':>6} {'vs 1x256K':>9} {'4K read p50 us':>14}")
    for t in table:
        print(
            f"{t['readers']:>7} {t['chunk_kib']:>9} {t['ms']:>7} {t['mb_s']:>6} {t['vs_1x256k']:>9} "
            f"{t['miss_p50_us'] if t['miss_p50_us'] is not None else '-':>14}"
        )
    print("\nlone 4 KiB reads at scattered offsets (no stream), the disk idle before each:")
    for x in lone:
        print(f"  idle {x['idle_ms']:.1f} ms: p50 {x['p50_us']} us, p90 {x['p90_us']} us")


if __name__ == "__main__":
    main()
