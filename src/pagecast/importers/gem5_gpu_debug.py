"""gem5 GPU (GCN3/VEGA compute unit) debug traces → trace of ACCESS rows.

gem5 prints debug messages as ``<tick>: <object>: <message>``. Two flags of the GPU
model print one line per memory access of a wavefront lane with its address:

- ``--debug-flags=GPUTLB`` (virtual addresses, the default ``address="virtual"``):
  ``CU<c>: WF[<simd>][<slot>]: Translation for addr <vaddr> from instruction <disasm> sent!``
  (``ComputeUnit::DataPort`` sends each lane's translation to the CU's L1 TLB);
- ``--debug-flags=GPUPort`` (physical addresses, ``address="physical"``):
  ``CU<c>: WF[<simd>][<slot>]: gpuDynInst: <seq>, [index <i>,] addr <paddr> data req sent!``.

Every other line (other flags' messages, the simulator's banner) is skipped. Mapping:
``t_ns`` from the tick (gem5's default 1 THz tick unless ``tick_freq`` says otherwise;
debug output does not record it); ``tid`` = (CU << 16) | (SIMD << 8) | wavefront slot;
flags bit 0 = write when the instruction's mnemonic stores or is atomic (virtual lines
only: the physical line names no instruction); ``bytes`` = 0 (not printed). Regions
from 2 MiB granules, two passes.

Parsing: a compiled regular expression runs over 16 MiB blocks of whole lines (the loop
over matches is in C) and the captured fields are decoded as numpy byte arrays.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from pagecast.errors import PagecastError
from pagecast.importers._cluster import AddressClusters
from pagecast.importers._text import line_blocks
from pagecast.importers.gem5 import tick_to_ns
from pagecast.trace.schema import FLAG_WRITE, Kind
from pagecast.trace.writer import TraceWriter

BLOCK = 16 << 20
_PREFIX = rb"^[ \t]*(\S+): (\S+): CU(\S*?): WF\[(\S*?)\]\[(\S*?)\]: "
PATTERNS = {
    "virtual": re.compile(_PREFIX + rb"Translation for addr (\S*) from instruction (.*?) sent!\r?$", re.M),
    "physical": re.compile(_PREFIX + rb"gpuDynInst: (\S*?),(?: index \S*?,)? addr (\S*) data req sent!\r?$", re.M),
}
_WRITE_WORDS = re.compile(rb"store|atomic|_st_|^st|write", re.I)

_HEX = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def _decode(fields: list[bytes], base: int) -> tuple[np.ndarray, np.ndarray]:
    """Unsigned numbers from byte strings (hex with optional 0x, or decimal), vectorised: (values, ok)."""
    width = 18 if base == 16 else 20
    a = np.array(fields, dtype=f"S{width + 1}")
    m = a.view(np.uint8).reshape(len(a), width + 1)
    n = (m != 0).sum(axis=1)
    start = np.zeros(len(a), np.int64)
    if base == 16:
        pre = (n >= 2) & (m[:, 0] == ord("0")) & ((m[:, 1] | 0x20) == ord("x"))
        start = np.where(pre, 2, 0)
    digits = n - start
    lim = 16 if base == 16 else 19
    ok = (digits >= 1) & (digits <= lim)
    val = np.zeros(len(a), np.uint64)
    for k in range(width):
        col = start + k
        active = ok & (col < n)
        if not active.any():
            break
        d = _HEX[m[np.arange(len(a)), np.minimum(col, width)]]
        bad = active & ((d == 255) | ((base == 10) & (d > 9)))
        ok &= ~bad
        val = np.where(active & ~bad, val * np.uint64(base) + d.astype(np.uint64), val)
    return val, ok


def _blocks(path: Path, on_bytes: Callable[[int], None] | None) -> Iterator[tuple[bytes, int]]:
    """(block of whole lines, number of its first line)."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise PagecastError(f"cannot read: {e.strerror}", path=path) from None
    with f:
        yield from line_blocks(f, BLOCK, on_bytes)


def _fail(path: Path, block: bytes, first_line: int, rx: re.Pattern[bytes], index: int, what: str) -> None:
    m = next(x for i, x in enumerate(rx.finditer(block)) if i == index)
    line = first_line + block.count(b"\n", 0, m.start())
    text = m.group(0)[:80].decode("utf-8", "replace").strip()
    raise PagecastError(f"{what}: {text!r}", path=path, line=line)


def iter_accesses(
    path: str | Path, address: str = "virtual", on_bytes: Callable[[int], None] | None = None
) -> Iterator[dict[str, np.ndarray]]:
    path = Path(path)
    rx = PATTERNS[address]
    for block, first in _blocks(path, on_bytes):
        rows = rx.findall(block)
        if not rows:
            continue
        cols = list(zip(*rows))
        tick, ok = _decode(list(cols[0]), 10)
        if not ok.all():
            _fail(path, block, first, rx, int(np.flatnonzero(~ok)[0]), "bad tick")
        ids = []
        for j, what in ((2, "CU"), (3, "SIMD"), (4, "wavefront slot")):
            v, ok = _decode(list(cols[j]), 10)
            if not (ok & (v < 256)).all():
                _fail(path, block, first, rx, int(np.flatnonzero(~(ok & (v < 256)))[0]), f"bad {what} number")
            ids.append(v.astype(np.int32))
        acol = 5 if address == "virtual" else 6
        addr, ok = _decode(list(cols[acol]), 16)
        if not ok.all():
            _fail(path, block, first, rx, int(np.flatnonzero(~ok)[0]), "bad address")
        if address == "virtual":
            mnem = [d.split(None, 1)[0] if d.strip() else b"" for d in cols[6]]
            uniq, inv = np.unique(np.array(mnem, dtype=object), return_inverse=True)
            write = np.array([bool(_WRITE_WORDS.search(u)) for u in uniq], bool)[inv]
        else:
            write = np.zeros(len(rows), bool)
        yield {"tick": tick, "tid": (ids[0] << 16) | (ids[1] << 8) | ids[2], "addr": addr, "write": write}


def import_trace(
    src: str | Path,
    out: str | Path,
    *,
    address: str = "virtual",
    tick_freq: int = 10**12,
    stats: dict[str, Any] | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    src = Path(src)
    if address not in PATTERNS:
        raise PagecastError(f"address must be one of {sorted(PATTERNS)}, not {address!r}")
    clusters = AddressClusters()
    n, t0 = 0, None
    cus: set[int] = set()
    for b in iter_accesses(src, address, on_bytes):
        clusters.add(b["addr"])
        n += len(b["addr"])
        m = int(b["tick"].min())
        t0 = m if t0 is None else min(t0, m)
        cus.update(np.unique(b["tid"] >> 16).tolist())
    if n == 0:
        flag = "GPUTLB" if address == "virtual" else "GPUPort"
        raise PagecastError(f"no per-access lines of the GPU model (run gem5 with --debug-flags={flag})", path=src)
    regions = clusters.build(kind="anon", name="range")
    meta: dict[str, Any] = {
        "time_unit": "ns",
        "t0_tick": t0,
        "tick_freq": tick_freq,
        "gem5_file": str(src),
        "gem5_debug_addresses": address,
        "tid_encoding": "(CU << 16) | (SIMD << 8) | wavefront slot",
    }
    if stats is not None:
        meta["gem5_stats"] = stats
    writes = 0
    with TraceWriter(out, regions=regions, source="import:gem5-gpu-debug", meta=meta) as w:
        for b in iter_accesses(src, address, on_bytes):
            region, page = clusters.translate(b["addr"])
            w.write(
                t_ns=tick_to_ns(b["tick"], t0, tick_freq),
                region=region,
                page=page,
                kind=int(Kind.ACCESS),
                flags=np.where(b["write"], FLAG_WRITE, 0).astype(np.uint8),
                tid=b["tid"],
            )
            writes += int(b["write"].sum())
    return {
        "trace": str(out),
        "rows": n,
        "writes": writes,
        "compute_units": len(cus),
        "regions": len(regions),
        "sorted_by_time": w.sorted,
    }
