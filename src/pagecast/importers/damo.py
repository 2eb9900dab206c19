"""``damo record`` files (DAMON monitoring results) → trace of RANGE_ACCESSED / RANGE_IDLE rows.

damo 3.x writes a record as JSON or as zlib-compressed JSON (``--format json`` /
``json_compressed``, the default); the type is detected from the first byte. The
document is a list of records, one per monitoring target: ``target_id``, optional
``intervals`` (``sample_us``, ``aggr_us``, ``ops_update_us``) and ``snapshots``, each
with ``start_time``/``end_time`` (ns) and ``regions`` (``start``, ``end``,
``nr_accesses.samples``, ``age``). Numbers may be JSON numbers or strings with
thousands separators (older damo). The ``damo_record_ver: 1`` wrapper is accepted.

Mapping: one row per snapshot and DAMON region, snapshots in time order (several
targets interleave). ``t_ns`` = snapshot start − first
snapshot's start (``meta["t0_ns"]`` keeps the origin); ``page`` = the range's first page,
``ip`` = its length in pages, ``tid`` = nr_accesses (samples that found the range
accessed during the aggregation interval); kind RANGE_ACCESSED when nr_accesses > 0
(a demand kind), RANGE_IDLE otherwise. Regions: per target, the union of every
snapshot's ranges rounded to 2 MiB granules (DAMON's virtual-address targets are a few
big ranges separated by the unmapped gaps between heap, mmap area and stack).

Lost: the region's age, the snapshot's end time (snapshots are back to back, each one
aggregation interval long), DAMOS statistics and filters.

Memory: the JSON document is parsed whole (Python's C parser); rows are written in
batches.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pagecast.errors import PagecastError
from pagecast.trace.regions import Region, RegionMap
from pagecast.trace.schema import Kind
from pagecast.trace.writer import TraceWriter

GRANULE_SHIFT = 21
PAGE_SHIFT = 12
INT32_MAX = (1 << 31) - 1


def read_document(path: str | Path, on_bytes: Callable[[int], None] | None = None) -> tuple[Any, str]:
    """The record's JSON document and its file type (``json`` or ``json_compressed``)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PagecastError(f"cannot read: {e.strerror}", path=path) from None
    if on_bytes:
        on_bytes(len(data))
    head = data.lstrip()[:1]
    if len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0:
        kind = "json_compressed"
        d = zlib.decompressobj()
        try:
            text = d.decompress(data) + d.flush()
        except zlib.error as e:
            raise PagecastError(f"corrupt zlib stream: {e}", path=path) from None
        if not d.eof:
            raise PagecastError("truncated zlib stream (the file ends before the end of the compressed data)", path=path)
        where = " of the decompressed JSON"
    elif head in (b"[", b"{"):
        kind, text, where = "json", data, ""
    else:
        raise PagecastError("not a damo record (want JSON or zlib-compressed JSON; perf-script and perf.data "
                            "records can be converted with `damo convert_record_format json_compressed`)", path=path)
    try:
        doc = json.loads(text)
    except UnicodeDecodeError as e:
        raise PagecastError(f"not UTF-8 at byte {e.start}{where}", path=path) from None
    except json.JSONDecodeError as e:
        raise PagecastError(f"bad JSON at column {e.colno}{where}: {e.msg}", path=path, line=e.lineno) from None
    return doc, kind


def _records(path: Path, doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, dict) and "damo_records" in doc:
        try:
            doc = doc["damo_records"]["damon_records"]["record_list"]
        except (KeyError, TypeError):
            raise PagecastError("damo_record_ver 1 document without damo_records.damon_records.record_list",
                                path=path) from None
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise PagecastError("not a damo record: want a JSON list of records", path=path)
    return doc


def _num(v: Any, where: str, what: str, path: Path) -> int:
    if isinstance(v, bool):
        raise PagecastError(f"{where}: bad {what} {v!r}", path=path)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        t = v.replace(",", "").strip()
        if t.isdigit():
            return int(t)
    raise PagecastError(f"{where}: bad {what} {v!r} (want a whole number)", path=path)


def _snapshot_arrays(path: Path, rec_i: int, snaps: Any) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """Per snapshot: (start ns, region starts, ends, nr_accesses), validated."""
    if not isinstance(snaps, list):
        raise PagecastError(f"record {rec_i}: snapshots is not a list", path=path)
    out = []
    for s_i, s in enumerate(snaps):
        where = f"record {rec_i}, snapshot {s_i}"
        if not isinstance(s, dict) or not isinstance(s.get("regions"), list):
            raise PagecastError(f"{where}: want an object with a regions list", path=path)
        t = _num(s.get("start_time"), where, "start_time", path)
        _num(s.get("end_time"), where, "end_time", path)
        n = len(s["regions"])
        st = np.empty(n, np.uint64)
        en = np.empty(n, np.uint64)
        acc = np.empty(n, np.int64)
        for r_i, r in enumerate(s["regions"]):
            rw = f"{where}, region {r_i}"
            if not isinstance(r, dict):
                raise PagecastError(f"{rw}: not an object", path=path)
            a, b = _num(r.get("start"), rw, "start", path), _num(r.get("end"), rw, "end", path)
            if not 0 <= a < b < (1 << 64):
                raise PagecastError(f"{rw}: empty or reversed range {a:#x}-{b:#x}", path=path)
            if (a | b) & ((1 << PAGE_SHIFT) - 1):
                # DAMON regions are whole pages: anything else is a damaged record, not a rounding matter
                raise PagecastError(f"{rw}: range {a:#x}-{b:#x} is not 4 KiB aligned", path=path)
            na = r.get("nr_accesses")
            samples = na.get("samples") if isinstance(na, dict) else na
            k = _num(samples, rw, "nr_accesses.samples", path)
            if k < 0:
                raise PagecastError(f"{rw}: negative nr_accesses {k}", path=path)
            st[r_i], en[r_i], acc[r_i] = a, b, k
        out.append((t, st, en, acc))
    return out


def _regions(starts: np.ndarray, ends: np.ndarray, target: int, target_id: Any, first_id: int) -> list[Region]:
    """Union of [start, end) ranges at 2 MiB granularity → regions in address order."""
    g0 = np.sort(starts >> np.uint64(GRANULE_SHIFT)).astype(np.int64)
    order = np.argsort(starts >> np.uint64(GRANULE_SHIFT), kind="stable")
    g1 = ((ends - np.uint64(1)) >> np.uint64(GRANULE_SHIFT)).astype(np.int64)[order]
    reach = np.maximum.accumulate(g1)
    new = np.ones(len(g0), bool)
    new[1:] = g0[1:] > reach[:-1] + 1
    firsts = np.flatnonzero(new)
    lasts = np.r_[firsts[1:], len(g0)] - 1
    regions = []
    for i, (f, l) in enumerate(zip(firsts, lasts)):
        base = int(g0[f]) << GRANULE_SHIFT
        end = (int(reach[l]) + 1) << GRANULE_SHIFT
        regions.append(Region(id=first_id + i, name=f"target{target}.range{i}", kind="anon", base=base,
                              length=end - base, order=first_id + i,
                              extra={"damon_target": target, "damon_target_id": str(target_id)}))
    return regions


def import_trace(src: str | Path, out: str | Path, *, on_bytes: Callable[[int], None] | None = None) -> dict[str, Any]:
    src = Path(src)
    doc, ftype = read_document(src, on_bytes)
    records = _records(src, doc)
    parsed = [_snapshot_arrays(src, i, r.get("snapshots")) for i, r in enumerate(records)]
    del doc
    nrows = sum(len(s[1]) for p in parsed for s in p)
    if nrows == 0:
        raise PagecastError("no snapshot regions in the record", path=src)
    t0 = min(s[0] for p in parsed for s in p)
    regions: list[Region] = []
    maps: list[RegionMap] = []
    for i, (rec, snaps) in enumerate(zip(records, parsed)):
        m = RegionMap()
        if snaps and sum(len(s[1]) for s in snaps):
            starts = np.concatenate([s[1] for s in snaps])
            ends = np.concatenate([s[2] for s in snaps])
            for r in _regions(starts, ends, i, rec.get("target_id"), len(regions)):
                regions.append(r)
                m.add(r.base, r.base + r.length, r.id, 0)
        maps.append(m)
    intervals = [r.get("intervals") for r in records]
    meta = {"time_unit": "ns", "t0_ns": t0, "damo_file": str(src), "damo_format": ftype,
            "damo_targets": [str(r.get("target_id")) for r in records],
            "damo_intervals": intervals if any(v is not None for v in intervals) else None,
            "region_heuristic": "union of DAMON ranges per target, 2 MiB granules", "range_rows": True}
    snapshots = accessed = 0
    # several targets: their snapshots interleaved in time order (stable: file order on ties)
    order = sorted(((s[0], i, k) for i, snaps in enumerate(parsed) for k, s in enumerate(snaps)), key=lambda x: x[0])
    with TraceWriter(out, regions=regions, source="import:damo", meta=meta) as w:
        for _, i, k in order:
            t, st, en, acc = parsed[i][k]
            if not len(st):
                continue
            region, page = maps[i].translate(st)
            pages = (en - st + np.uint64((1 << PAGE_SHIFT) - 1)) >> np.uint64(PAGE_SHIFT)
            hot = acc > 0
            w.write(t_ns=np.full(len(st), t - t0, np.int64), region=region, page=page,
                    kind=np.where(hot, int(Kind.RANGE_ACCESSED), int(Kind.RANGE_IDLE)).astype(np.uint8),
                    ip=pages, tid=np.minimum(acc, INT32_MAX).astype(np.int32))
            snapshots += 1
            accessed += int(hot.sum())
    return {"trace": str(out), "rows": nrows, "snapshots": snapshots, "targets": len(records),
            "regions": len(regions), "accessed_rows": accessed, "format": ftype, "sorted_by_time": w.sorted}
