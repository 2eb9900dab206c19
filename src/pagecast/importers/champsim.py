"""ML-DPC / ChampSim load traces → trace, and prefetch files → schedule.

Load trace lines: ``instr_id, cycle, load_addr, pc, llc_hit`` (addresses hex, with or
without 0x; fields separated by commas and optional spaces). Rows become ACCESS events,
``ip`` = pc, flags subkind (bits 4-7) = 1 where the load hit the LLC. Time: cycles, or
nanoseconds when ``cpu_ghz`` is given (``t_ns = cycle / GHz``). Regions: runs of touched
2 MiB granules (``importers/_cluster.py``); two passes, bounded memory.

Prefetch files (the ML-DPC competition format): ``instr_id hex_addr`` per line; a
prefetch issued at the load with that instr_id. As a schedule, trigger = index (in the
trace's demand stream) of the last load whose instr_id ≤ the prefetch's instr_id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from pagecast.errors import PagecastError, check_readable, from_os_error
from pagecast.importers._cluster import AddressClusters
from pagecast.importers._text import (
    INT64_MAX,
    Lines,
    check_cpu_ghz,
    cycles_to_ns,
    iter_lines,
    parse_uint,
    split_fields,
    strip_bounds,
)
from pagecast.trace.reader import Trace
from pagecast.trace.regions import RegionMap
from pagecast.trace.schedule import Schedule
from pagecast.trace.schema import FLAG_SUBKIND_SHIFT, Kind
from pagecast.trace.writer import TraceWriter


def _hex(lines: Lines, st: np.ndarray, sp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    buf = lines.buf
    pre = (sp - st >= 2) & (buf[st] == ord("0")) & ((buf[np.minimum(st + 1, len(buf) - 1)] | 0x20) == ord("x"))
    return parse_uint(buf, st + 2 * pre, sp, 16)


def _bad(path: Path, lines: Lines, idx: np.ndarray, ok: np.ndarray, what: str) -> None:
    if not ok.all():
        i = int(idx[np.flatnonzero(~ok)[0]])
        text = bytes(lines.buf[lines.starts[i] : lines.ends[i]][:80]).decode("utf-8", "replace")
        raise PagecastError(f"{what}: {text!r}", path=path, line=lines.first_line + i)


def _open(path: Path):
    check_readable(path)
    try:
        return open(path, "rb")
    except OSError as e:
        raise from_os_error(e, "cannot read", path) from None


def iter_loads(path: str | Path, on_bytes: Callable[[int], None] | None = None) -> Iterator[dict[str, np.ndarray]]:
    path = Path(path)
    with _open(path) as f:
        for lines in iter_lines(f, on_bytes=on_bytes):
            idx = np.flatnonzero(
                (lines.ends > lines.starts) & (lines.buf[np.minimum(lines.starts, len(lines.buf) - 1)] != ord("#"))
            )
            if not len(idx):
                continue
            st, sp = split_fields(path, lines, idx, 5, what="load trace row (instr_id, cycle, load_addr, pc, llc_hit)")
            st, sp = strip_bounds(lines.buf, st, sp)
            iid, ok1 = parse_uint(lines.buf, st[0], sp[0], 10)
            cyc, ok2 = parse_uint(lines.buf, st[1], sp[1], 10)
            addr, ok3 = _hex(lines, st[2], sp[2])
            pc, ok4 = _hex(lines, st[3], sp[3])
            hit, ok5 = parse_uint(lines.buf, st[4], sp[4], 10)
            _bad(path, lines, idx, ok1 & (iid <= INT64_MAX), "bad instr_id (a decimal below 2^63)")
            _bad(path, lines, idx, ok2 & (cyc <= INT64_MAX), "bad cycle (a decimal below 2^63)")
            _bad(path, lines, idx, ok3, "bad load address")
            _bad(path, lines, idx, ok4, "bad pc")
            _bad(path, lines, idx, ok5 & (hit <= 1), "bad llc_hit (0 or 1)")
            yield {"instr_id": iid, "cycle": cyc, "addr": addr, "pc": pc, "hit": hit}


def import_trace(
    src: str | Path, out: str | Path, *, cpu_ghz: float | None = None, on_bytes: Callable[[int], None] | None = None
) -> dict[str, Any]:
    src = Path(src)
    cpu_ghz = check_cpu_ghz(cpu_ghz)
    clusters = AddressClusters()
    n = 0
    c0 = None
    for b in iter_loads(src, on_bytes):
        clusters.add(b["addr"])
        n += len(b["addr"])
        c0 = int(b["cycle"].min()) if c0 is None else min(c0, int(b["cycle"].min()))
    if n == 0:
        raise PagecastError("no load records", path=src)
    regions = clusters.build(kind="anon", name="range")
    meta = {"time_unit": "ns" if cpu_ghz else "cycles", "cpu_ghz": cpu_ghz, "t0_cycle": c0, "champsim_file": str(src)}
    with TraceWriter(out, regions=regions, source="import:champsim", meta=meta) as w:
        for b in iter_loads(src, on_bytes):
            t = cycles_to_ns(b["cycle"] - np.uint64(c0), cpu_ghz, src)
            region, page = clusters.translate(b["addr"])
            w.write(
                t_ns=t,
                region=region,
                page=page,
                kind=int(Kind.ACCESS),
                ip=b["pc"],
                flags=(b["hit"].astype(np.uint8) << FLAG_SUBKIND_SHIFT),
            )
    return {"trace": str(out), "rows": n, "regions": len(regions), "sorted_by_time": w.sorted}


def read_prefetch_file(path: str | Path, trace: Trace, loads: str | Path) -> Schedule:
    """Prefetch file → schedule against ``trace`` (imported from the load trace ``loads``)."""
    path = Path(path)
    parts = [b["instr_id"] for b in iter_loads(loads)]
    if not parts:
        raise PagecastError("no load records", path=loads)
    iids = np.concatenate(parts)
    t = trace.read(["t_ns"])["t_ns"]
    if len(t) != len(iids):
        raise PagecastError(f"trace has {len(t)} rows but the load trace {loads} has {len(iids)}", path=trace.path)
    rm = RegionMap()
    for r in trace.regions:
        rm.add(r.base, r.base + r.length, r.id, 0)
    parts_i, parts_a = [], []
    with _open(path) as f:
        for lines in iter_lines(f):
            idx = np.flatnonzero(lines.ends > lines.starts)
            if not len(idx):
                continue
            st, sp = split_fields(path, lines, idx, 2, sep=ord(" "), what="prefetch row (instr_id hex_addr)")
            iid, ok1 = parse_uint(lines.buf, st[0], sp[0], 10)
            addr, ok2 = _hex(lines, st[1], sp[1])
            _bad(path, lines, idx, ok1 & (iid <= INT64_MAX), "bad instr_id (a decimal below 2^63)")
            _bad(path, lines, idx, ok2, "bad prefetch address")
            parts_i.append(iid)
            parts_a.append(addr)
    if not parts_i:
        raise PagecastError("no prefetch rows", path=path)
    pid, paddr = np.concatenate(parts_i), np.concatenate(parts_a)
    trig = np.searchsorted(iids, pid, side="right") - 1
    if np.any(np.diff(iids.astype(np.int64)) < 0):
        raise PagecastError("load trace instr_ids are not increasing", path=loads)
    keep = trig >= 0
    region, page = rm.translate(paddr[keep])
    return Schedule(
        trigger=trig[keep],
        t_ns=t[trig[keep]],
        region=region,
        page=page,
        score=np.ones(int(keep.sum()), np.float32),
        regions=list(trace.regions),
        meta={"source": "champsim-prefetch", "file": str(path), "dropped_before_first_load": int((~keep).sum())},
    )
