"""valgrind lackey ``--trace-mem=yes`` output → trace of ACCESS rows.

Lines: ``I  addr,size`` (instruction fetch), `` L addr,size`` (load), `` S addr,size``
(store), `` M addr,size`` (modify = load + store, one row flagged write). valgrind's
own ``==pid==`` / ``--pid--`` lines are skipped. lackey has no clock, so ``t_ns`` is the
number of instructions executed before the access (1 "ns" per instruction, recorded as
``meta["time_unit"] = "instructions"``). ``bytes`` holds the access size. Regions come
from clustering the touched addresses (see ``importers/_cluster.py``): lackey does not
report mappings. Two passes over the file: the first finds the regions, the second
writes rows; memory stays bounded by the block size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from pagecast.errors import PagecastError, check_readable, from_os_error
from pagecast.importers._cluster import AddressClusters
from pagecast.importers._text import Lines, fail_at, iter_lines, parse_uint
from pagecast.trace.schema import FLAG_EXEC, FLAG_WRITE, Kind
from pagecast.trace.writer import TraceWriter

_I, _L, _S, _M, _SP, _EQ, _DASH = (ord(c) for c in "ILSM =-")


def _parse(path: Path, lines: Lines) -> dict[str, np.ndarray]:
    buf, s, e = lines.buf, lines.starts, lines.ends
    n = e - s
    c0 = buf[s]
    c1 = buf[np.minimum(s + 1, len(buf) - 1)]
    c2 = buf[np.minimum(s + 2, len(buf) - 1)]
    skip = (n == 0) | ((c0 == _EQ) & (c1 == _EQ)) | ((c0 == _DASH) & (c1 == _DASH))
    instr = (n >= 5) & (c0 == _I) & (c1 == _SP) & (c2 == _SP)
    data = (n >= 5) & (c0 == _SP) & ((c1 == _L) | (c1 == _S) | (c1 == _M)) & (c2 == _SP)
    bad = ~(skip | instr | data)
    if bad.any():
        fail_at(path, lines, bad, "not a lackey --trace-mem line")
    rec = instr | data
    s, e, c1, instr = s[rec], e[rec], c1[rec], instr[rec]
    commas = np.flatnonzero(buf == ord(","))
    k = np.searchsorted(commas, s)
    comma = commas[np.minimum(k, len(commas) - 1)] if len(commas) else np.full(len(s), -1)
    has = (k < len(commas)) & (comma < e) if len(commas) else np.zeros(len(s), bool)
    addr, ok_a = parse_uint(buf, s + 3, np.where(has, comma, s + 3), 16)
    size, ok_s = parse_uint(buf, np.where(has, comma + 1, e), e, 10)
    bad = ~(has & ok_a & ok_s & (size <= np.uint64(0xFFFFFFFF)))  # bytes is a uint32 column
    if bad.any():
        idx = np.flatnonzero(rec)[np.flatnonzero(bad)[0]]
        mask = np.zeros(len(lines), bool)
        mask[idx] = True
        fail_at(path, lines, mask, "bad address or size")
    return {"addr": addr, "size": size, "instr": instr, "op": c1}


def _blocks(path: Path, on_bytes: Callable[[int], None] | None = None) -> Iterator[dict[str, np.ndarray]]:
    check_readable(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise from_os_error(e, "cannot read", path) from None
    with f:
        for lines in iter_lines(f, on_bytes=on_bytes):
            yield _parse(path, lines)


def import_trace(
    src: str | Path,
    out: str | Path,
    *,
    instructions: bool = False,
    source: str = "import:lackey",
    meta: dict[str, Any] | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Import ``src``; ``on_bytes`` sees bytes read (the file is read twice)."""
    src, out = Path(src), Path(out)
    clusters = AddressClusters()
    records = 0
    for b in _blocks(src, on_bytes):
        sel = b["addr"] if instructions else b["addr"][~b["instr"]]
        clusters.add(sel)
        records += len(b["addr"])
    if records == 0:
        raise PagecastError(
            "no lackey --trace-mem records (was valgrind run with --tool=lackey --trace-mem=yes?)", path=src
        )
    regions = clusters.build(kind="anon", name="range")
    info = {"time_unit": "instructions", "lackey_file": str(src)}
    info.update(meta or {})
    rows = loads = stores = 0
    icount = 0
    with TraceWriter(out, regions=regions, source=source, meta=info) as w:
        for b in _blocks(src, on_bytes):
            instr = b["instr"]
            # instructions executed before each record (lackey prints the fetch before its data accesses)
            t = icount + np.cumsum(instr) - instr
            icount += int(instr.sum())
            keep = np.ones(len(instr), bool) if instructions else ~instr
            addr = b["addr"][keep]
            region, page = clusters.translate(addr)
            op = b["op"][keep]
            flags = np.where((op == _S) | (op == _M), FLAG_WRITE, 0).astype(np.uint8)
            flags |= np.where(instr[keep], FLAG_EXEC, 0).astype(np.uint8)
            w.write(
                t_ns=t[keep].astype(np.int64),
                region=region,
                page=page,
                kind=int(Kind.ACCESS),
                flags=flags,
                bytes=b["size"][keep].astype(np.uint32),
            )
            rows += int(keep.sum())
            loads += int(np.count_nonzero((op == _L) | (op == _M)))
            stores += int(np.count_nonzero((op == _S) | (op == _M)))
    return {
        "trace": str(out),
        "rows": rows,
        "instructions": icount,
        "loads": loads,
        "stores": stores,
        "regions": len(regions),
    }
