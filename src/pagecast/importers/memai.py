"""MemAI PEBS traces (feather: Timestamp in cycles, Vaddr, Phase, Instrs) → trace.

Each row is a sampled load (PEBS), an ACCESS event. Time: cycles since the first
sample, or ns with ``cpu_ghz``. ``Phase`` (the application's phase id) is kept as a
list of phase intervals in the trace's kernels list (name ``phase N``, start/end), the
same place GPU kernels go, so consumers can cut windows by phase. Regions: runs of
touched 2 MiB granules. The file is read in record batches (bounded memory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from pagecast.errors import PagecastError, check_readable, from_os_error
from pagecast.importers._cluster import AddressClusters
from pagecast.importers._text import check_cpu_ghz, cycles_to_ns
from pagecast.trace.schema import Kind
from pagecast.trace.writer import TraceWriter

REQUIRED = ("Timestamp", "Vaddr", "Phase", "Instrs")


def _batches(path: Path) -> Iterator[dict[str, np.ndarray]]:
    try:
        reader = ipc.open_file(pa.memory_map(str(path), "r"))
    except PermissionError as e:
        raise from_os_error(e, "cannot read", path) from None
    except (pa.ArrowException, OSError, ValueError) as e:
        raise PagecastError(f"not a feather (Arrow IPC) file: {_short(e)}", path=path) from None
    missing = [c for c in REQUIRED if c not in reader.schema.names]
    if missing:
        raise PagecastError(f"MemAI trace lacks columns {missing} (has {reader.schema.names})", path=path)
    row = 0
    for i in range(reader.num_record_batches):
        try:
            b = reader.get_batch(i)
            # IPC reading trusts the file's buffer sizes and offsets; check them before use
            b.validate(full=True)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise PagecastError(f"record batch {i} is damaged: {_short(e)}", path=path) from None
        out = {}
        for c in REQUIRED:
            col = b.column(b.schema.get_field_index(c))
            if col.null_count:
                bad = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                raise PagecastError(f"null {c}", path=path, line=row + bad + 1)
            if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
                raise PagecastError(f"column {c} is {col.type}, want a number", path=path)
            out[c] = col.to_numpy(zero_copy_only=False)
        _check_range(path, row, out["Timestamp"], "Timestamp", 0, 2.0**63)
        _check_range(path, row, out["Vaddr"], "Vaddr", 0, 2.0**64)
        _check_range(path, row, out["Phase"], "Phase", -(2.0**63), 2.0**63)
        row += b.num_rows
        yield out


def _check_range(path: Path, row: int, v: np.ndarray, name: str, lo: float, hi: float) -> None:
    """Values must be finite integers-to-be within [lo, hi): NaN, inf or 2^63 cycles would become nonsense times."""
    if v.dtype.kind == "f":
        bad = ~(np.isfinite(v) & (v >= lo) & (v < hi))
    elif v.dtype.kind == "u":
        bad = v >= np.uint64(min(hi, 2.0**64 - 1)) if hi < 2.0**64 else np.zeros(len(v), bool)
    else:
        bad = v < lo
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PagecastError(
            f"{name} {v[i]} is out of range (want {lo:g} <= {name} < {hi:g})", path=path, line=row + i + 1
        )


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:100]


def import_trace(src: str | Path, out: str | Path, *, cpu_ghz: float | None = None) -> dict[str, Any]:
    src = check_readable(src)
    cpu_ghz = check_cpu_ghz(cpu_ghz)
    clusters = AddressClusters()
    t0, n = None, 0
    for b in _batches(src):
        clusters.add(b["Vaddr"].astype(np.uint64))
        if len(b["Timestamp"]):
            m = int(b["Timestamp"].min())
            t0 = m if t0 is None else min(t0, m)
        n += len(b["Timestamp"])
    if n == 0:
        raise PagecastError("no samples", path=src)
    regions = clusters.build(kind="anon", name="range")
    meta = {"time_unit": "ns" if cpu_ghz else "cycles", "cpu_ghz": cpu_ghz, "t0_cycles": t0, "memai_file": str(src)}
    phases: list[list[int]] = []  # [phase, start, end]
    with TraceWriter(out, regions=regions, source="import:memai", meta=meta) as w:
        for b in _batches(src):
            t = cycles_to_ns(b["Timestamp"].astype(np.int64) - t0, cpu_ghz, src)
            region, page = clusters.translate(b["Vaddr"].astype(np.uint64))
            w.write(t_ns=t, region=region, page=page, kind=int(Kind.ACCESS))
            ph = b["Phase"].astype(np.int64)
            cut = np.flatnonzero(np.diff(ph)) + 1
            for s, e in zip(np.r_[0, cut], np.r_[cut, len(ph)]):
                if phases and phases[-1][0] == ph[s]:
                    phases[-1][2] = int(t[e - 1])
                else:
                    phases.append([int(ph[s]), int(t[s]), int(t[e - 1])])
        for p, s, e in phases:
            w.add_kernel(f"phase {p}", s, e, phase=p)
    return {"trace": str(out), "rows": n, "regions": len(regions), "phases": len(phases)}
