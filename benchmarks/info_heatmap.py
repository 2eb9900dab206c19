"""`pagecast info` / `pagecast heatmap` computation on a 10 M-row trace vs the I/O floor.

Writes a fault-like trace (as benchmarks/trace_io.py), then times summarize() and the
heatmap grids (compute(), without drawing) against the baseline of just reading the
columns they need with pyarrow (the floor for any streaming summary).

    PYTHONPATH=src python benchmarks/info_heatmap.py [--rows 10000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagecast.report.heatmap import HeatmapConfig, compute  # noqa: E402
from pagecast.report.summary import summarize  # noqa: E402
from pagecast.trace import Region, TraceWriter, open_trace  # noqa: E402
from trace_io import make_rows  # noqa: E402


def med(fn, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="pagecast-info-"))
    path = d / "t.parquet"
    cols = make_rows(a.rows)
    regions = [Region(id=0, name=f"r{i}", kind="anon", length=100_000 * 4096) for i in range(8)]
    with TraceWriter(path, regions=regions, source="bench") as w:
        for i in range(0, a.rows, 1 << 20):
            w.write(**{k: v[i : i + (1 << 20)] for k, v in cols.items()})
    t = open_trace(path)
    floor_info = med(lambda: pq.read_table(path, columns=["t_ns", "region", "page", "kind", "bytes"]), a.repeat)
    info = med(lambda: summarize(t), a.repeat)
    floor_heat = med(lambda: pq.read_table(path, columns=["t_ns", "region", "page", "kind"]), a.repeat)
    heat = med(lambda: compute(t, HeatmapConfig(top=4)), a.repeat)
    shutil.rmtree(d, ignore_errors=True)
    n = a.rows
    print(f"{n:,} rows, median of {a.repeat}")
    print(f"  read info's columns (floor)   {floor_info:6.2f} s  {n / floor_info / 1e6:6.1f} M rows/s")
    print(
        f"  summarize (pagecast info)     {info:6.2f} s  {n / info / 1e6:6.1f} M rows/s  ratio {info / floor_info:.2f}x floor"
    )
    print(f"  read heatmap's columns (floor){floor_heat:6.2f} s  {n / floor_heat / 1e6:6.1f} M rows/s")
    print(
        f"  heatmap grids (2 passes)      {heat:6.2f} s  {n / heat / 1e6:6.1f} M rows/s  ratio {heat / floor_heat:.2f}x floor"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
