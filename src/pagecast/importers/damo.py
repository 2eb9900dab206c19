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

Memory: the record is streamed: decompressed 64 KiB at a time, parsed by ijson (yajl)
event by event, each snapshot built alone and turned at once into one uint64 array of
its regions (24 bytes a region); neither the JSON text nor its Python objects are ever
held whole. The per-target region union is merged 64K rows at a time. A JSON error is
placed (line, column) by reading again, the failing 64 KiB byte by byte.
"""

from __future__ import annotations

import codecs
import zlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterator

import ijson
import numpy as np
from ijson.common import ObjectBuilder

from pagecast.errors import PagecastError
from pagecast.trace.regions import Region, RegionMap
from pagecast.trace.schema import Kind
from pagecast.trace.writer import TraceWriter

GRANULE_SHIFT = 21
PAGE_SHIFT = 12
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
CHUNK = 1 << 16
NOT_DAMO = (
    "not a damo record (want JSON or zlib-compressed JSON; perf-script and perf.data "
    "records can be converted with `damo convert_record_format json_compressed`)"
)


class _Stream:
    """The record's JSON text as a file, decompressed on the fly, UTF-8 checked, with the
    line and column of the last byte handed out (so a parser error can be placed).

    From ``slow_from`` on it hands out one byte per read: the parser then fails on the
    very byte that is wrong, which the error path uses to find the line."""

    def __init__(self, path: Path, on_bytes: Callable[[int], None] | None = None, slow_from: int | None = None):
        self.path, self.on_bytes, self.slow_from = path, on_bytes, slow_from
        self.failed = False
        try:
            self.f = open(path, "rb")
            head = self.f.read(CHUNK)
        except OSError as e:
            raise PagecastError(f"cannot read: {e.strerror}", path=path) from None
        self._count_raw(head)
        if len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
            self.kind, self.where, self.z = "json_compressed", " of the decompressed JSON", zlib.decompressobj()
            try:
                self.buf = self._inflate(head)
            except PagecastError:
                self.f.close()
                raise
        elif head.lstrip()[:1] in (b"[", b"{"):
            self.kind, self.where, self.z, self.buf = "json", "", None, head
        else:
            self.f.close()
            raise PagecastError(NOT_DAMO, path=path)
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.pos = self.lines = self.line_start = 0  # bytes handed out, newlines among them, offset after the last one
        self.chunk_start = 0
        self.last = (0, 0, 0)  # (offset, lines before it, line start) of the last byte handed out

    def _fail(self, msg: str) -> PagecastError:
        self.failed = True  # the parser stops here: nothing further can be read
        return PagecastError(msg, path=self.path)

    def _count_raw(self, raw: bytes) -> None:
        if self.on_bytes and raw:
            self.on_bytes(len(raw))

    def _inflate(self, data: bytes) -> bytes:
        try:
            return self.z.decompress(data, CHUNK)
        except zlib.error as e:
            raise self._fail(f"corrupt zlib stream: {e}") from None

    def _fill(self) -> None:
        while not self.buf:
            if self.z is not None and self.z.unconsumed_tail:
                self.buf = self._inflate(self.z.unconsumed_tail)
                continue
            if self.z is not None and self.z.eof:
                return  # bytes after the end of the compressed stream are ignored, as zlib.decompress does
            raw = self.f.read(CHUNK)
            self._count_raw(raw)
            if not raw:
                if self.z is not None:
                    raise self._fail("truncated zlib stream (the file ends before the end of the compressed data)")
                return
            self.buf = raw if self.z is None else self._inflate(raw)

    def read(self, n: int = -1) -> bytes:
        if n == 0:  # ijson's probe for bytes or str
            return b""
        self._fill()
        if self.slow_from is not None and self.pos >= self.slow_from:
            n = 1
        out, self.buf = (self.buf, b"") if n < 0 or n >= len(self.buf) else (self.buf[:n], self.buf[n:])
        if not out:
            return out
        try:
            self.utf8.decode(out)
        except UnicodeDecodeError as e:
            raise self._fail(f"not UTF-8 at byte {self.pos + e.start}{self.where}") from None
        k = len(out) - 1
        nl_before_last = out.count(b"\n", 0, k)
        self.last = (
            self.pos + k,
            self.lines + nl_before_last,
            self.line_start if not nl_before_last else self.pos + out.rfind(b"\n", 0, k) + 1,
        )
        self.lines += out.count(b"\n")
        nl = out.rfind(b"\n")
        if nl >= 0:
            self.line_start = self.pos + nl + 1
        self.chunk_start = self.pos
        self.pos += len(out)
        return out

    def close(self) -> None:
        self.f.close()


def _json_error(path: Path, msg: str, chunk_start: int) -> PagecastError:
    """Re-read up to the failing chunk, then byte by byte, to place the parser's error."""
    s = _Stream(path, slow_from=chunk_start)
    try:
        for _ in ijson.basic_parse(s, buf_size=CHUNK):
            pass
    except ijson.JSONError:
        pass
    finally:
        s.close()
    off, lines, line_start = s.last
    return PagecastError(f"bad JSON at column {off - line_start + 1}{s.where}: {msg}", path=path, line=lines + 1)


# (start ns, uint64 array of shape (3, regions): starts, ends, nr_accesses)
Snapshot = tuple[int, np.ndarray]


@dataclass
class _Record:
    target_id: Any = None
    intervals: Any = None
    snapshots: list[Snapshot] | None = None


def _build(events: Iterator[tuple[str, Any]], ev: str, val: Any) -> Any:
    """The whole JSON value that starts with event ``ev`` (one snapshot, one intervals object)."""
    if ev not in ("start_map", "start_array"):
        return val
    b = ObjectBuilder()
    b.event(ev, val)
    depth = 1
    for ev, val in events:
        b.event(ev, val)
        depth += ev in ("start_map", "start_array")
        depth -= ev in ("end_map", "end_array")
        if not depth:
            return b.value
    raise AssertionError("the parser ended inside a value")  # it raises premature EOF first


def _plain(v: Any) -> Any:
    """Decimals as floats (as json.loads gives them), so the value can go into the trace's JSON meta."""
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _skip(events: Iterator[tuple[str, Any]], ev: str) -> None:
    depth = ev in ("start_map", "start_array")
    while depth:
        ev, _ = next(events)
        depth += ev in ("start_map", "start_array")
        depth -= ev in ("end_map", "end_array")


def _record(path: Path, rec_i: int, events: Iterator[tuple[str, Any]]) -> _Record:
    """One record, after its start_map: each snapshot becomes arrays as soon as it is read."""
    rec = _Record()
    for ev, key in events:
        if ev == "end_map":
            if rec.snapshots is None:
                raise PagecastError(f"record {rec_i}: snapshots is not a list", path=path)
            return rec
        ev, val = next(events)
        if key == "snapshots":
            if ev != "start_array":
                raise PagecastError(f"record {rec_i}: snapshots is not a list", path=path)
            rec.snapshots = []
            for ev, val in events:
                if ev == "end_array":
                    break
                rec.snapshots.append(_snapshot(path, rec_i, len(rec.snapshots), _build(events, ev, val)))
        elif key in ("target_id", "intervals"):
            setattr(rec, key, _plain(_build(events, ev, val)))
        else:
            _skip(events, ev)
    raise AssertionError("the parser ended inside a record")


def _records(path: Path, events: Iterator[tuple[str, Any]]) -> list[_Record]:
    ev, _ = next(events)
    if ev == "start_map":  # damo_record_ver 1: {"damo_records": {"damon_records": {"record_list": [...]}}}
        want = ("damo_records", "damon_records", "record_list")
        seen_wrapper = False
        out: list[_Record] | None = None

        def walk_map(level: int) -> None:
            nonlocal out, seen_wrapper
            for ev, key in events:
                if ev == "end_map":
                    return
                ev, val = next(events)
                if level == 0 and key == want[0]:
                    seen_wrapper = True
                if out is None and key == want[level] and level < 2 and ev == "start_map":
                    walk_map(level + 1)
                elif out is None and key == want[level] and level == 2 and ev == "start_array":
                    out = _record_list(path, events)
                else:
                    _skip(events, ev)

        walk_map(0)
        if out is None:
            if seen_wrapper:
                raise PagecastError(
                    "damo_record_ver 1 document without damo_records.damon_records.record_list", path=path
                )
            raise PagecastError("not a damo record: want a JSON list of records", path=path)
        records = out
    elif ev == "start_array":
        records = _record_list(path, events)
    else:
        raise PagecastError("not a damo record: want a JSON list of records", path=path)
    for _ in events:  # the parser checks that nothing but whitespace follows
        pass
    return records


def _record_list(path: Path, events: Iterator[tuple[str, Any]]) -> list[_Record]:
    records = []
    for ev, _ in events:
        if ev == "end_array":
            return records
        if ev != "start_map":
            raise PagecastError("not a damo record: want a JSON list of records", path=path)
        records.append(_record(path, len(records), events))
    raise AssertionError("the parser ended inside the record list")


def read_records(path: str | Path, on_bytes: Callable[[int], None] | None = None) -> tuple[list[_Record], str]:
    """The record's targets (snapshots as arrays) and its file type (``json`` or ``json_compressed``).

    ijson (yajl) gives numbers as int or, with a fraction or exponent, Decimal (without
    ``use_float`` it takes integers of any size: old damo wrote kernel pointers as target ids)."""
    path = Path(path)
    s = _Stream(path, on_bytes)
    events = iter(ijson.basic_parse(s, buf_size=CHUNK))
    try:
        try:
            return _records(path, events), s.kind
        except PagecastError:
            if s.failed:
                raise
            for _ in events:  # a syntax error further on is the first thing to report, as for a whole parse
                pass
            raise
    except ijson.JSONError as e:
        raise _json_error(path, str(e).splitlines()[0] if str(e) else type(e).__name__, s.chunk_start) from None
    finally:
        s.close()


def _num(v: Any, where: str, what: str, path: Path) -> int:
    if isinstance(v, bool):
        raise PagecastError(f"{where}: bad {what} {v!r}", path=path)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    # ijson: numbers with a fraction or exponent. A huge exponent would make a number of
    # millions of digits: anything past 2^64 is refused by the callers' range checks anyway.
    if isinstance(v, Decimal) and v.is_finite() and v.adjusted() < 40 and v == v.to_integral_value():
        return int(v)
    if isinstance(v, str):
        t = v.replace(",", "").strip()
        if t.isascii() and t.isdigit() and len(t) <= 40:  # str.isdigit also takes "²", which int() refuses
            return int(t)
    raise PagecastError(f"{where}: bad {what} {v!r} (want a whole number)", path=path)


def _snapshot(path: Path, rec_i: int, s_i: int, s: Any) -> Snapshot:
    """One snapshot: (start ns, rows of region starts, ends, nr_accesses), validated."""
    where = f"record {rec_i}, snapshot {s_i}"
    if not isinstance(s, dict) or not isinstance(s.get("regions"), list):
        raise PagecastError(f"{where}: want an object with a regions list", path=path)
    t = _num(s.get("start_time"), where, "start_time", path)
    _num(s.get("end_time"), where, "end_time", path)
    n = len(s["regions"])
    rows = np.empty((3, n), np.uint64)  # one array per snapshot: numpy's per-array overhead counts at millions
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
        if k > INT32_MAX:  # the trace keeps it in the 32-bit tid column: refused, never clipped
            raise PagecastError(f"{rw}: bad nr_accesses {k} (too large, over 2^31-1)", path=path)
        rows[0, r_i], rows[1, r_i], rows[2, r_i] = a, b, k
    return t, rows


UNION_BATCH = 1 << 16  # rows merged at a time: the working arrays stay small next to the rows themselves


def _merge(g0: np.ndarray, g1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Granule ranges [g0, g1] merged where they overlap or touch → (firsts, lasts) in address order."""
    order = np.argsort(g0, kind="stable")
    g0, reach = g0[order], np.maximum.accumulate(g1[order])
    new = np.ones(len(g0), bool)
    new[1:] = g0[1:] > reach[:-1] + 1
    firsts = np.flatnonzero(new)
    return g0[firsts], reach[np.r_[firsts[1:], len(g0)] - 1]


def _granule_union(snaps: list[Snapshot]) -> tuple[np.ndarray, np.ndarray]:
    """Union of every snapshot's [start, end) ranges at 2 MiB granularity, merged batch by batch."""
    lo = hi = np.empty(0, np.int64)
    g0: list[np.ndarray] = []
    g1: list[np.ndarray] = []
    n = 0
    for k, (_, rows) in enumerate(snaps):
        st, en = rows[0], rows[1]
        g0.append((st >> np.uint64(GRANULE_SHIFT)).astype(np.int64))
        g1.append(((en - np.uint64(1)) >> np.uint64(GRANULE_SHIFT)).astype(np.int64))
        n += len(st)
        if n >= UNION_BATCH or k == len(snaps) - 1:
            lo, hi = _merge(np.concatenate([lo, *g0]), np.concatenate([hi, *g1]))
            g0, g1, n = [], [], 0
    return lo, hi


def _regions(lo: np.ndarray, hi: np.ndarray, target: int, target_id: Any, first_id: int) -> list[Region]:
    """Merged granule ranges → regions in address order."""
    regions = []
    for i, (f, l) in enumerate(zip(lo.tolist(), hi.tolist())):
        base = f << GRANULE_SHIFT
        end = (l + 1) << GRANULE_SHIFT
        regions.append(
            Region(
                id=first_id + i,
                name=f"target{target}.range{i}",
                kind="anon",
                base=base,
                length=end - base,
                order=first_id + i,
                extra={"damon_target": target, "damon_target_id": str(target_id)},
            )
        )
    return regions


def import_trace(src: str | Path, out: str | Path, *, on_bytes: Callable[[int], None] | None = None) -> dict[str, Any]:
    src = Path(src)
    records, ftype = read_records(src, on_bytes)
    parsed = [r.snapshots for r in records]
    nrows = sum(s[1].shape[1] for p in parsed for s in p)
    if nrows == 0:
        raise PagecastError("no snapshot regions in the record", path=src)
    t0 = min(s[0] for p in parsed for s in p)
    regions: list[Region] = []
    maps: list[RegionMap] = []
    for i, (rec, snaps) in enumerate(zip(records, parsed)):
        m = RegionMap()
        if snaps and sum(s[1].shape[1] for s in snaps):
            for r in _regions(*_granule_union(snaps), i, rec.target_id, len(regions)):
                regions.append(r)
                m.add(r.base, r.base + r.length, r.id, 0)
        maps.append(m)
    intervals = [r.intervals for r in records]
    meta = {
        "time_unit": "ns",
        "t0_ns": t0,
        "damo_file": str(src),
        "damo_format": ftype,
        "damo_targets": [str(r.target_id) for r in records],
        "damo_intervals": intervals if any(v is not None for v in intervals) else None,
        "region_heuristic": "union of DAMON ranges per target, 2 MiB granules",
        "range_rows": True,
    }
    snapshots = accessed = 0
    # several targets: their snapshots interleaved in time order (stable: file order on ties)
    order = sorted(((s[0], i, k) for i, snaps in enumerate(parsed) for k, s in enumerate(snaps)), key=lambda x: x[0])
    with TraceWriter(out, regions=regions, source="import:damo", meta=meta) as w:
        for _, i, k in order:
            t, rows = parsed[i][k]
            st, en, acc = rows[0], rows[1], rows[2].view(np.int64)
            if not len(st):
                continue
            region, page = maps[i].translate(st)
            pages = (en - st + np.uint64((1 << PAGE_SHIFT) - 1)) >> np.uint64(PAGE_SHIFT)
            hot = acc > 0
            w.write(
                t_ns=np.full(len(st), t - t0, np.int64),
                region=region,
                page=page,
                kind=np.where(hot, int(Kind.RANGE_ACCESSED), int(Kind.RANGE_IDLE)).astype(np.uint8),
                ip=pages,
                tid=np.minimum(acc, INT32_MAX).astype(np.int32),
            )
            snapshots += 1
            accessed += int(hot.sum())
    return {
        "trace": str(out),
        "rows": nrows,
        "snapshots": snapshots,
        "targets": len(records),
        "regions": len(regions),
        "accessed_rows": accessed,
        "format": ftype,
        "sorted_by_time": w.sorted,
    }
