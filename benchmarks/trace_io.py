"""Trace write/read throughput (rows/s) against raw baselines measured in the same run.

Writes N rows of a fault-like trace (sorted times, few regions, clustered pages) with
TraceWriter (streaming row groups, per-column encodings of trace/writer.py) twice: the
default ``write()`` (copies into the writer's reused row-group buffers, so the caller may
reuse its arrays) and ``write(copy=False)`` (hands the arrays over). Reads it back whole
and in batches. Baselines, same rows, same run: pyarrow's ParquetWriter alone (no
pagecast code) with the encodings of the previous release (DELTA_BINARY_PACKED on five
columns, lz4; a lower bound of the previous writer's cost, which also copied every
input) and with the current encodings, on the same 1 Mi-row groups, and reading that
file back; the same ParquetWriter with page checksums (the trace writer writes them) and
the trace read by pyarrow without verifying them (what checksums cost);
pyarrow.parquet.write_table/read_table with its defaults + zstd;
np.save/np.load (uncompressed, the memory-bandwidth ceiling). The writes take turns
(rounds alternate direction; medians of --repeat rounds), then the reads do (after one
untimed pass), and each run starts settled: its previous output deleted, dirty pages
synced and Arrow's pool released, outside the timer. The previous release's TraceWriter itself (its writer.py taken from
git at ``--against``, default ``PREVIOUS_RELEASE``) is run as a baseline too
when git can supply it. ``--trace FILE`` re-encodes the rows of an existing trace instead of
the synthetic ones.

    PYTHONPATH=src python benchmarks/trace_io.py [--rows 10000000] [--repeat 5] [--trace T.parquet]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pagecast.trace import COLUMNS, TraceWriter, open_trace
from pagecast.trace.schema import ACCESS_SCHEMA, FORMAT_VERSION, META_VERSION
from pagecast.trace.writer import COLUMN_ENCODING, COMPRESSION, STATISTICS_COLUMNS


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


def interleaved(runs, repeat: int) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds (this process, all threads) per run.

    The runs take turns, so a change of load on the shared machine hits all of them
    alike, and every other round goes backwards: what a run finds left behind (memory
    the allocators kept or gave back, dirty file pages) then does not always favour the
    same one. Round 0 goes forwards, so every file a read needs exists from then on.
    """
    times: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in runs}
    for r in range(repeat):
        for name, fn, before in runs if r % 2 == 0 else runs[::-1]:
            times[name].append(_t(fn, before))
    return {name: (statistics.median(r[0] for r in t), statistics.median(r[1] for r in t)) for name, t in times.items()}


def _t(fn, before=None) -> tuple[float, float]:
    if before is not None:
        before()
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


PREVIOUS_ENCODING = {c: "DELTA_BINARY_PACKED" for c in ("t_ns", "region", "page", "tid", "ip")}
PREVIOUS_ENCODING.update({c: "PLAIN" for c in ("kind", "flags", "bytes")})
TARGET = 10e6
PREVIOUS_RELEASE = "cd70740"  # main before the writer was changed to meet the target


def previous_writer(rev: str, tmp: Path):
    """TraceWriter as of ``rev`` (loaded from git), or None when git cannot supply it."""
    repo = Path(__file__).resolve().parents[1]
    try:
        src = subprocess.run(
            ["git", "-C", str(repo), "show", f"{rev}:src/pagecast/trace/writer.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = tmp / "previous_writer.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("pagecast.trace._previous_writer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TraceWriter


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--trace", type=Path, help="re-encode this trace's rows (first --rows of them) instead of synthetic rows"
    )
    ap.add_argument("--against", default=PREVIOUS_RELEASE, help="git revision whose TraceWriter is the baseline")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    load_before = os.getloadavg()
    if a.trace:
        full = open_trace(a.trace).read()
        cols = {k: np.ascontiguousarray(v[: a.rows]) for k, v in full.items()}
        del full
    else:
        cols = make_rows(a.rows)
    n = len(cols["t_ns"])
    d = Path(tempfile.mkdtemp(prefix="pagecast-io-"))
    chunk = 1 << 20

    def pc_write(copy: bool):
        def run():
            with TraceWriter(d / "t.parquet", source="bench") as w:
                for i in range(0, n, chunk):
                    w.write(copy=copy, **{k: v[i : i + chunk] for k, v in cols.items()})

        return run

    old_writer = previous_writer(a.against, d)

    def old_write():
        with old_writer(d / "old.parquet", source="bench") as w:
            for i in range(0, n, chunk):
                w.write(**{k: v[i : i + chunk] for k, v in cols.items()})

    def pc_read():
        open_trace(d / "t.parquet").read()

    def prev_read():
        open_trace(d / "prev.parquet").read()

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

    def raw_writer(name: str, encoding: dict[str, str], checksums: bool = False):
        def run():
            w = pq.ParquetWriter(
                d / name,
                ACCESS_SCHEMA,
                compression=COMPRESSION,
                use_dictionary=False,
                column_encoding=encoding,
                write_statistics=STATISTICS_COLUMNS,
                write_page_checksum=checksums,
            )
            for b in batches:
                w.write_table(b, row_group_size=chunk)
            w.add_key_value_metadata({META_VERSION: str(FORMAT_VERSION).encode()})  # readable by open_trace
            w.close()

        return run

    def pq_read():
        pq.read_table(d / "raw.parquet")

    def unverified_read():
        pq.ParquetFile(d / "t.parquet").read(use_threads=True)

    def clean(*names: str):
        def remove() -> None:
            for name in names:
                (d / name).unlink(missing_ok=True)
            settle()

        return remove

    def settle() -> None:
        # Every run starts alike: with the previous runs' files written back and with the
        # memory Arrow's allocator kept given back, as in a fresh process.
        os.sync()
        pa.default_memory_pool().release_unused()

    writes = [
        ("pagecast write (default: copies)", pc_write(True), clean("t.parquet")),
        ("pagecast write (copy=False)", pc_write(False), clean("t.parquet")),
        *([(f"previous TraceWriter ({a.against})", old_write, clean("old.parquet"))] if old_writer else []),
        ("ParquetWriter, previous encodings", raw_writer("prev.parquet", PREVIOUS_ENCODING), clean("prev.parquet")),
        ("ParquetWriter, current encodings", raw_writer("cur.parquet", COLUMN_ENCODING), clean("cur.parquet")),
        ("ParquetWriter, current + checksums", raw_writer("crc.parquet", COLUMN_ENCODING, True), clean("crc.parquet")),
        ("pyarrow write_table zstd", pq_write, clean("raw.parquet")),
        ("np.save", np_write, clean(*(f"{k}.npy" for k in cols))),
    ]
    reads = [
        ("pagecast read (all columns)", pc_read, settle),
        ("pagecast read, previous encodings", prev_read, settle),
        ("pagecast iter_batches", pc_iter, settle),
        ("pyarrow read of it, unverified", unverified_read, settle),
        ("pyarrow read_table", pq_read, settle),
        ("np.load", np_read, settle),
    ]
    timed = interleaved(writes, a.repeat)
    # Reads in rounds of their own, after one untimed pass: the first big read after the
    # writes ran at a third of the speed whichever file it read (the machine's memory
    # state after the writes, not the file), which made the order decide the comparison.
    for _, fn, before in reads:
        before()
        fn()
    timed.update(interleaved(reads, a.repeat))
    res = {}
    for name, (s, cpu) in timed.items():
        res[name] = {
            "seconds": round(s, 4),
            "rows_per_s": round(n / s),
            "cpu_seconds": round(cpu, 4),
            "rows_per_cpu_s": round(n / cpu),
        }
    size = {
        "pagecast_mib": round((d / "t.parquet").stat().st_size / 2**20, 1),
        "previous_encodings_mib": round((d / "prev.parquet").stat().st_size / 2**20, 1),
        "pyarrow_zstd_mib": round((d / "raw.parquet").stat().st_size / 2**20, 1),
        "npy_mib": round(sum((d / f"{k}.npy").stat().st_size for k in cols) / 2**20, 1),
    }
    shutil.rmtree(d, ignore_errors=True)
    w, r = res["pagecast write (default: copies)"], res["pagecast read (all columns)"]
    prev = res["ParquetWriter, previous encodings"]
    old = res.get(f"previous TraceWriter ({a.against})")
    ratios = {
        **(
            {
                "write vs previous TraceWriter": w["rows_per_s"] / old["rows_per_s"],
                "write CPU vs previous TraceWriter": w["rows_per_cpu_s"] / old["rows_per_cpu_s"],
            }
            if old
            else {}
        ),
        "write vs previous encodings": w["rows_per_s"] / prev["rows_per_s"],
        "write CPU vs previous encodings": w["rows_per_cpu_s"] / prev["rows_per_cpu_s"],
        "write vs ParquetWriter current": w["rows_per_s"] / res["ParquetWriter, current encodings"]["rows_per_s"],
        "write copy=False vs default": res["pagecast write (copy=False)"]["rows_per_s"] / w["rows_per_s"],
        "ParquetWriter checksums vs none": res["ParquetWriter, current + checksums"]["rows_per_s"]
        / res["ParquetWriter, current encodings"]["rows_per_s"],
        "read vs unverified pyarrow read": r["rows_per_s"] / res["pyarrow read of it, unverified"]["rows_per_s"],
        "write vs pyarrow zstd": w["rows_per_s"] / res["pyarrow write_table zstd"]["rows_per_s"],
        "write vs np.save": w["rows_per_s"] / res["np.save"]["rows_per_s"],
        "read vs previous encodings": r["rows_per_s"] / res["pagecast read, previous encodings"]["rows_per_s"],
        "read vs pyarrow": r["rows_per_s"] / res["pyarrow read_table"]["rows_per_s"],
        "read vs np.load": r["rows_per_s"] / res["np.load"]["rows_per_s"],
        "size vs previous encodings": size["pagecast_mib"] / size["previous_encodings_mib"],
    }
    target = {"write": w["rows_per_s"] >= TARGET, "read": r["rows_per_s"] >= TARGET}
    # On a shared machine wall time includes waiting for a core; CPU seconds do not.
    load = [round(x, 2) for x in load_before + os.getloadavg()]
    if a.json:
        print(
            json.dumps(
                {
                    "rows": n,
                    "source": str(a.trace or "synthetic"),
                    "results": res,
                    "ratios": ratios,
                    "size": size,
                    "target_met": target,
                    "previous_writer": a.against if old_writer else None,
                    "loadavg_before_after": load,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"{n:,} rows ({a.trace or 'synthetic'}), median of {a.repeat} (target: >= 10M rows/s write and read); "
        f"load average {load[0]:.1f} before, {load[3]:.1f} after, on {os.cpu_count()} cores"
    )
    print(f"  {'':36s} {'wall s':>8s}  {'M rows/s':>8s}  {'CPU s':>8s}  {'M rows/CPU-s':>12s}")
    for k, v in res.items():
        print(
            f"  {k:36s} {v['seconds']:8.3f}  {v['rows_per_s'] / 1e6:8.1f}  {v['cpu_seconds']:8.3f}  "
            f"{v['rows_per_cpu_s'] / 1e6:12.1f}"
        )
    for k, v in ratios.items():
        print(f"  ratio {k:32s} {v:.2f}")
    print(
        f"  file size: pagecast {size['pagecast_mib']} MiB, previous encodings {size['previous_encodings_mib']} MiB, "
        f"pyarrow zstd {size['pyarrow_zstd_mib']} MiB, npy {size['npy_mib']} MiB"
    )
    if not old_writer:
        print(f"  (previous TraceWriter baseline skipped: git cannot show {a.against})")
    print(
        f"  target >= 10M rows/s: write {'met' if target['write'] else 'NOT met'} "
        f"({w['rows_per_s'] / 1e6:.1f} M), read {'met' if target['read'] else 'NOT met'} ({r['rows_per_s'] / 1e6:.1f} M)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
