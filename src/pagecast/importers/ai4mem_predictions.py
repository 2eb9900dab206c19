"""AI4Mem predictions CSV ⇄ schedule.

AI4Mem writes two header variants:
  ``trigger_time_ns,page_addr,page_idx,score`` (its infer.py) and
  ``Timestamp_ns,Prefetch_Address,Confidence`` (its online predictor).
Addresses are absolute (0x...); with ``regions`` they become (region, page) — an
address outside every region keeps region -1 and page = address // 4096. The CSV knows
times, not positions in a demand stream, so ``trigger`` is -1 unless a trace is given
(``attach_triggers``): then trigger = number of the trace's demand events that happened
before the prediction's time, minus one (the event the prediction follows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError, check_readable, from_os_error
from pagecast.importers._text import INT64_MAX, iter_lines, parse_float, parse_uint, split_fields, strip_bounds
from pagecast.trace.demand import read_demand_columns
from pagecast.trace.regions import Region, RegionMap
from pagecast.trace.schedule import Schedule
from pagecast.util.atomic import atomic_output

HEADERS = {
    ("trigger_time_ns", "page_addr", "page_idx", "score"): (0, 1, 3),
    ("timestamp_ns", "prefetch_address", "confidence"): (0, 1, 2),
}


def read_predictions_csv(path: str | Path, regions: Sequence[Region] | None = None) -> Schedule:
    path = check_readable(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise from_os_error(e, "cannot read", path) from None
    cols: dict[str, list[np.ndarray]] = {"t": [], "addr": [], "score": []}
    layout = None
    with f:
        for lines in iter_lines(f):
            idx = np.flatnonzero(lines.ends > lines.starts)
            if layout is None and len(idx):
                i0 = int(idx[0])
                head = bytes(lines.buf[lines.starts[i0] : lines.ends[i0]]).decode("utf-8", "replace")
                key = tuple(h.strip().lower() for h in head.split(","))
                if key not in HEADERS:
                    raise PagecastError(
                        f"unknown predictions header {head!r} (want trigger_time_ns,page_addr,page_idx,score "
                        "or Timestamp_ns,Prefetch_Address,Confidence)",
                        path=path,
                        line=lines.first_line + i0,
                    )
                layout = (len(key), HEADERS[key])
                idx = idx[1:]
            if not len(idx):
                continue
            nf, (ti, ai, si) = layout
            st, sp = split_fields(path, lines, idx, nf, what="predictions row")
            st, sp = strip_bounds(lines.buf, st, sp)
            t, ok_t = parse_uint(lines.buf, st[ti], sp[ti], 10)
            last = len(lines.buf) - 1
            hex_ok = (
                (sp[ai] - st[ai] >= 2)
                & (lines.buf[st[ai]] == ord("0"))
                & ((lines.buf[np.minimum(st[ai] + 1, last)] | 0x20) == ord("x"))
            )
            addr, ok_a = parse_uint(lines.buf, st[ai] + 2, sp[ai], 16)
            score, ok_s = parse_float(lines.buf, st[si], sp[si])
            with np.errstate(over="ignore"):
                score = score.astype(np.float32)
            checks = (
                (ok_t & (t <= INT64_MAX), "bad time (a decimal below 2^63)"),
                (hex_ok & ok_a, "bad address (want 0x... hex)"),
                (ok_s & np.isfinite(score), "bad score (want a finite number)"),
            )
            for ok, what in checks:
                if not ok.all():
                    i = int(idx[np.flatnonzero(~ok)[0]])
                    text = bytes(lines.buf[lines.starts[i] : lines.ends[i]]).decode("utf-8", "replace")
                    raise PagecastError(f"{what}: {text!r}", path=path, line=lines.first_line + i)
            cols["t"].append(t.astype(np.int64))
            cols["addr"].append(addr)
            cols["score"].append(score)
    if layout is None:
        raise PagecastError("empty predictions file (no header)", path=path)
    t = np.concatenate(cols["t"]) if cols["t"] else np.empty(0, np.int64)
    addr = np.concatenate(cols["addr"]) if cols["addr"] else np.empty(0, np.uint64)
    score = np.concatenate(cols["score"]) if cols["score"] else np.empty(0, np.float32)
    region, page = _translate(addr, regions or [])
    return Schedule(
        trigger=np.full(len(t), -1, np.int64),
        t_ns=t,
        region=region,
        page=page,
        score=score,
        regions=list(regions or []),
        meta={"source": "ai4mem-predictions", "file": str(path), "time_base": "as in the file"},
    )


def _translate(addr: np.ndarray, regions: Sequence[Region]) -> tuple[np.ndarray, np.ndarray]:
    rm = RegionMap(regions[0].page_size if regions else PAGE_SIZE)
    for r in regions:
        if r.length:
            rm.add(r.base, r.base + r.length, r.id, 0)
    return rm.translate(addr)


def attach_triggers(schedule: Schedule, trace: Any) -> Schedule:
    """Express a time-stamped schedule against a trace's demand stream.

    Times in the CSV are absolute when the trace was imported from the same collector
    (``meta["t0_ns"]`` holds the trace's time origin); they are shifted onto the trace
    clock, then trigger = index of the last demand event at or before each prediction.
    """
    t0 = int(trace.meta.get("t0_ns", 0))
    t = schedule.t_ns - t0
    demand_t = read_demand_columns(trace, ["t_ns"])["t_ns"]
    trig = np.searchsorted(demand_t, t, side="right") - 1
    regions = schedule.regions or trace.regions
    region, page = schedule.region, schedule.page
    if not schedule.regions and trace.regions:
        # addresses were not translated yet: use the trace's allocations
        addr = np.where(schedule.region < 0, schedule.page << 12, 0).astype(np.uint64)
        region, page = _translate(addr, trace.regions)
    keep = trig >= 0
    return Schedule(
        trigger=trig[keep],
        t_ns=t[keep],
        region=region[keep],
        page=page[keep],
        score=schedule.score[keep],
        regions=list(regions),
        meta={**schedule.meta, "time_base": "trace", "dropped_before_start": int((~keep).sum())},
    )


def write_predictions_csv(schedule: Schedule, path: str | Path, regions: Sequence[Region]) -> Path:
    """Seed layout ``trigger_time_ns,page_addr,page_idx,score``; page_addr from the region's base."""
    path = Path(path)
    base = np.array([r.base for r in regions], np.uint64)
    psize = np.array([r.page_size for r in regions], np.uint64)
    ok = (schedule.region >= 0) & (schedule.region < len(regions))
    if not ok.all():
        bad = int(schedule.region[np.flatnonzero(~ok)[0]])
        raise PagecastError(f"schedule refers to region {bad}, not among the {len(regions)} regions given", path=path)
    r = schedule.region.astype(np.int64)
    addr = base[r] + schedule.page.astype(np.uint64) * psize[r] if len(r) else np.empty(0, np.uint64)
    lines = ["trigger_time_ns,page_addr,page_idx,score"]
    lines += [
        f"{t},0x{a:x},{p},{s:.6g}"
        for t, a, p, s in zip(schedule.t_ns.tolist(), addr.tolist(), schedule.page.tolist(), schedule.score.tolist())
    ]
    with atomic_output(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    return path
