"""Peak memory and time of `pagecast train` (and optionally `pagecast eval --model`) on a
long full access trace.

The trace is a lackey recording of ``sort -n`` over shuffled numbers (36,000 by default:
46.7 M loads and stores over 588 distinct pages), recorded with
``pagecast record --lackey`` on first use and cached in ``--cache``; ``--trace`` uses an
existing one. Each command runs as a child process; its peak resident set is the
children's ``ru_maxrss`` (``resource.getrusage``), measured one command at a time.
The targets are printed beside the figures: a peak under 2 GiB and training under
5 minutes on 2 cores (before sampling, the same kind of trace took 23.7 GB and 8 minutes).

    PYTHONPATH=src python benchmarks/train_memory.py [--numbers 36000] [--epochs 20] [--eval]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_BYTES = 2 << 30
TARGET_TRAIN_S = 300.0


def pagecast() -> list[str]:
    return [sys.executable, "-m", "pagecast"]


def record(numbers: int, cache: Path) -> Path:
    out = cache / f"sort-{numbers}.lackey.parquet"
    if out.exists():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    data = cache / f"numbers-{numbers}.txt"
    xs = list(range(numbers))
    random.Random(1).shuffle(xs)
    data.write_text("\n".join(map(str, xs)) + "\n")
    t0 = time.perf_counter()
    subprocess.run(
        [*pagecast(), "record", "--lackey", "-o", str(out), "--", "sort", "-n", str(data)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    print(f"recorded {out} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return out


def synthesize(path: Path, rows: int, chunk: int = 1 << 20) -> Path:
    """A full access trace of ``rows`` ACCESS rows in the trace format, written chunk by
    chunk: instruction pages (120, looping), a stack (8 pages) and a heap (300 pages) walked
    in passes, interleaved code, heap, stack as a sort's loads and stores are."""
    import numpy as np

    from pagecast.trace.regions import Region
    from pagecast.trace.writer import TraceWriter

    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    regions = [
        Region(0, "code", kind="file", path="/usr/bin/sort", length=120 << 12, order=0),
        Region(1, "stack", kind="stack", length=8 << 12, order=0),
        Region(2, "heap", kind="heap", length=300 << 12, order=0),
    ]
    with TraceWriter(path, regions=regions, page_size=4096, source="synthetic") as w:
        for a in range(0, rows, chunk):
            i = np.arange(a, min(rows, a + chunk), dtype=np.int64)
            which = i % 3
            code = (i // 400) % 120
            stack = (i // 3000) % 8
            heap_pass = i // (300 * 512)
            heap = ((i // 512) * (1 + heap_pass % 3)) % 300
            page = np.where(which == 0, code, np.where(which == 1, heap, stack))
            w.write(t_ns=i, region=which.astype(np.int32), page=page, kind=0)
    return path


def measured(cmd: list[str]) -> tuple[float, int, float, str]:
    """(wall seconds, peak RSS bytes of the child, its CPU seconds, its stderr). One child at a time, so
    RUSAGE_CHILDREN's maximum is this child's whenever it exceeds every earlier one; a
    fresh interpreter per command keeps that true (``measure_one``)."""
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, __file__, "--measure-one", "--", *cmd], capture_output=True, text=True, env=os.environ
    )
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    peak, cpu = p.stdout.strip().splitlines()[-1].split()
    return wall, int(peak), float(cpu), p.stderr


def measure_one(cmd: list[str]) -> None:
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=sys.stderr)
    if p.returncode != 0:
        sys.exit(p.returncode)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(ru.ru_maxrss * 1024, ru.ru_utime + ru.ru_stime)  # ru_maxrss is in KiB on Linux


def main() -> None:
    if "--measure-one" in sys.argv:
        measure_one(sys.argv[sys.argv.index("--") + 1 :])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", help="an existing trace (default: record sort under lackey)")
    ap.add_argument(
        "--synthetic",
        type=int,
        metavar="ROWS",
        help="synthesize a trace of ROWS accesses in the trace format instead of recording (recording under "
        "lackey takes tens of minutes on a busy machine)",
    )
    ap.add_argument("--numbers", type=int, default=36000, help="numbers sort sorts (default: 36000)")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "pagecast" / "train-memory"))
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--eval", action="store_true", help="also measure `pagecast eval --model` at 10 % and 50 %")
    args = ap.parse_args()
    if args.trace:
        trace = Path(args.trace)
    elif args.synthetic:
        trace = synthesize(Path(args.cache) / f"synthetic-{args.synthetic}.parquet", args.synthetic)
    else:
        trace = record(args.numbers, Path(args.cache))

    from pagecast.trace.reader import open_trace

    rows = open_trace(trace).num_rows
    print(f"trace {trace}: {rows:,} rows; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as d:
        model = Path(d) / "m.pt"
        wall, peak, cpu, err = measured(
            [*pagecast(), "train", str(trace), "-o", str(model), "--epochs", str(args.epochs)]
        )
        notes = [ln for ln in err.splitlines() if "training on" in ln]
        print(notes[0] if notes else "(trained on every event)")
        # CPU seconds as well as wall: on a shared machine the wall clock measures the neighbours
        print(
            f"train: {wall:.0f} s wall, {cpu:.0f} CPU-s ({cpu / TARGET_TRAIN_S:.2f} of the 5 min target), peak RSS "
            f"{peak / 2**30:.2f} GiB ({peak / TARGET_BYTES:.2f} of the 2 GiB target; before sampling: 23.7 GB)"
        )
        if args.eval:
            for cap in ("10%", "50%"):
                wall, peak, cpu, _ = measured(
                    [*pagecast(), "eval", str(trace), "--model", str(model), "--capacity", cap, "--json"]
                )
                print(f"eval --model at {cap}: {wall:.0f} s wall, {cpu:.0f} CPU-s, peak RSS {peak / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
