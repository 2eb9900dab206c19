"""Trace write/read throughput (rows/s) against raw baselines measured in the same run.

Writes N rows of a fault-like trace (sorted times, few regions, clustered pages) with
TraceWriter (streaming row groups, per-column encodings of trace/writer.py), reads it
back whole and in batches, and compares with np.save/np.load of the same columns
(uncompressed, the memory-bandwidth ceiling), with pyarrow.parquet.write_table/read_table
of one in-memory table (pyarrow defaults + zstd), and with ParquetWriter using the
encodings pagecast used before (lz4 on every column, PLAIN ip) on the same row groups.
Each write goes to a fresh name (the previous output is deleted outside the timer, so
freeing the old file's blocks is not counted as writing).

    PYTHONPATH=src python benchmarks/trace_io.py [--rows 10000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pagecast.trace import COLUMNS, TraceWriter, open_trace
from pagecast.trace.schema import ACCESS_SCHEMA


def make_rows(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    region = rng.integers(0, 8, n).astype(np.int32)
    page = (np.cumsum(rng.integers(-3, 5, n)) % 100_000).astype(np.int64)
    return {
        "t_ns": np.cumsum(rng.integers(100, 5000, n)).astype(np.int64),
        "region": region,
        "page": page,
        "kind": rng.choice([1, 2], n, p=[0.9, 0.1]).astype(np.uint8),
        "flags": np.zeros(n, np.uint8),
        "tid": rng.integers(1000, 1004, n).astype(np.int32),
        "ip": (0x400000 + rng.integers(0, 4096, n) * 4).astype(np.uint64),
        "bytes": np.zeros(n, np.uint32),
    }


def best(fn, repeat: int, before=None) -> tuple[float, float]:
    """Median wall and CPU seconds (this process, all threads) of ``repeat`` runs."""
    runs = [_t(fn, before) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def _t(fn, before=None) -> tuple[float, float]:
    if before is not None:
        before()
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    n = a.rows
    cols = make_rows(n)
    d = Path(tempfile.mkdtemp(prefix="pagecast-io-"))
    chunk = 1 << 20

    def pc_write():
        with TraceWriter(d / "t.parquet", source="bench") as w:
            for i in range(0, n, chunk):
                w.write(**{k: v[i:i + chunk] for k, v in cols.items()})

    def pc_read():
        open_trace(d / "t.parquet").read()

    def pc_iter():
        s = 0
        for b in open_trace(d / "t.parquet").iter_batches(batch_rows=chunk):
            s += len(b["page"])
        assert s == n

    def np_write():
        for k, v in cols.items():
            np.save(d / f"{k}.npy", v)

    def np_read():
        for k in cols:
            np.load(d / f"{k}.npy")

    table = pa.table({k: cols[k] for k in COLUMNS}, schema=ACCESS_SCHEMA)

    def pq_write():
        pq.write_table(table, d / "raw.parquet", compression="zstd", row_group_size=chunk)

    batches = [table.slice(i, chunk) for i in range(0, n, chunk)]
    old_encoding = {c: "DELTA_BINARY_PACKED" for c in ("t_ns", "page", "region", "tid")}
    old_encoding.update({c: "PLAIN" for c in ("kind", "flags", "ip", "bytes")})

    def pq_old_write():
        w = pq.ParquetWriter(d / "old.parquet", ACCESS_SCHEMA, compression="lz4", use_dictionary=False,
                             column_encoding=old_encoding, write_statistics=["t_ns"])
        for b in batches:
            w.write_table(b, row_group_size=chunk)
        w.close()

    def pq_read():
        pq.read_table(d / "raw.parquet")

    def clean(*names: str):
        def remove() -> None:
            for name in names:
                (d / name).unlink(missing_ok=True)
        return remove

    cleanup = {"pagecast write": clean("t.parquet"), "np.save": clean(*(f"{k}.npy" for k in cols)),
               "pyarrow write_table zstd": clean("raw.parquet"), "previous encodings (lz4 all)": clean("old.parquet")}
    res = {}
    for name, fn in [("pagecast write", pc_write), ("pagecast read (all columns)", pc_read),
                     ("pagecast iter_batches", pc_iter), ("np.save", np_write), ("np.load", np_read),
                     ("pyarrow write_table zstd", pq_write), ("pyarrow read_table", pq_read),
                     ("previous encodings (lz4 all)", pq_old_write)]:
        s, cpu = best(fn, a.repeat, cleanup.get(name))
        res[name] = {"seconds": round(s, 4), "rows_per_s": round(n / s), "cpu_seconds": round(cpu, 4),
                     "rows_per_cpu_s": round(n / cpu)}
    size = {"pagecast_mib": round((d / "t.parquet").stat().st_size / 2**20, 1),
            "previous_encodings_mib": round((d / "old.parquet").stat().st_size / 2**20, 1),
            "pyarrow_zstd_mib": round((d / "raw.parquet").stat().st_size / 2**20, 1),
            "npy_mib": round(sum((d / f"{k}.npy").stat().st_size for k in cols) / 2**20, 1)}
    shutil.rmtree(d, ignore_errors=True)
    ratios = {
        "write vs np.save": res["pagecast write"]["rows_per_s"] / res["np.save"]["rows_per_s"],
        "read vs np.load": res["pagecast read (all columns)"]["rows_per_s"] / res["np.load"]["rows_per_s"],
        "write vs previous encodings": res["pagecast write"]["rows_per_s"]
        / res["previous encodings (lz4 all)"]["rows_per_s"],
        "write vs pyarrow": res["pagecast write"]["rows_per_s"] / res["pyarrow write_table zstd"]["rows_per_s"],
        "read vs pyarrow": res["pagecast read (all columns)"]["rows_per_s"] / res["pyarrow read_table"]["rows_per_s"],
    }
    # On a shared machine wall time includes waiting for a core; CPU seconds do not.
    load = os.getloadavg()
    if a.json:
        print(json.dumps({"rows": n, "results": res, "ratios": ratios, "size": size, "loadavg": load}, indent=2))
        return 0
    print(f"{n:,} rows, median of {a.repeat} (target: >= 10M rows/s write and read); "
          f"load average {load[0]:.1f} on {os.cpu_count()} cores")
    print(f"  {'':30s} {'wall s':>8s}  {'M rows/s':>8s}  {'CPU s':>8s}  {'M rows/CPU-s':>12s}")
    for k, v in res.items():
        print(f"  {k:30s} {v['seconds']:8.3f}  {v['rows_per_s'] / 1e6:8.1f}  {v['cpu_seconds']:8.3f}  "
              f"{v['rows_per_cpu_s'] / 1e6:12.1f}")
    for k, v in ratios.items():
        print(f"  ratio {k:24s} {v:.2f}")
    print(f"  file size: pagecast {size['pagecast_mib']} MiB, previous encodings {size['previous_encodings_mib']} MiB, "
          f"pyarrow zstd {size['pyarrow_zstd_mib']} MiB, npy {size['npy_mib']} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
