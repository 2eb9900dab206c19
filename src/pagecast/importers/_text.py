"""Vectorised helpers for line-oriented text formats: chunked reading and numeric fields.

Importers read big text traces in blocks of whole lines and decode every line of a
block with numpy operations, so the per-line cost is a few array passes, not Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import numpy as np

from pagecast.errors import PagecastError

BLOCK = 16 << 20

_HEX = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i
_DEC = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789"):
    _DEC[_c] = _i


@dataclass
class Lines:
    """A block of whole lines: ``buf`` bytes, line ``starts``/``ends`` (exclusive, no newline)."""

    buf: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    first_line: int  # 1-based number of the block's first line in the file

    def __len__(self) -> int:
        return len(self.starts)


def line_blocks(
    f: BinaryIO, block: int = BLOCK, on_bytes: Callable[[int], None] | None = None
) -> Iterator[tuple[bytes, int]]:
    """(bytes of whole lines, 1-based number of their first line); a last line without a
    newline comes as it is."""
    carry, line_no = b"", 1
    while True:
        data = f.read(block)
        if on_bytes and data:
            on_bytes(len(data))
        if not data:
            if carry:
                yield carry, line_no
            return
        data = carry + data
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        carry = data[cut + 1 :]
        yield data[: cut + 1], line_no
        line_no += data.count(b"\n", 0, cut + 1)


def iter_lines(f: BinaryIO, block: int = BLOCK, on_bytes: Callable[[int], None] | None = None) -> Iterator[Lines]:
    """Yield blocks of complete lines from a binary stream (\\n or \\r\\n endings)."""
    for data, line_no in line_blocks(f, block, on_bytes):
        yield from _split(data if data.endswith(b"\n") else data + b"\n", line_no)


def _split(data: bytes, line_no: int) -> Iterator[Lines]:
    buf = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(buf == 10)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13)
    ends = ends - cr
    yield Lines(buf, starts, ends, line_no)


def parse_uint(buf: np.ndarray, start: np.ndarray, stop: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
    """Decode unsigned hex (base 16) or decimal (base 10) fields buf[start:stop] per row.

    Returns (values as uint64, ok mask). Empty fields, fields longer than 16 hex / 19
    decimal digits and fields with a foreign character are not ok.
    """
    lut, width = (_HEX, 16) if base == 16 else (_DEC, 19)
    n = stop - start
    ok = (n >= 1) & (n <= width)
    nn = np.where(ok, n, 0)
    val = np.zeros(len(start), np.uint64)
    b = np.uint64(base)
    for k in range(width):
        active = nn > k
        if not active.any():
            break
        idx = np.where(active, start + k, 0)
        digit = lut[buf[idx]]
        bad = active & (digit == 255)
        ok &= ~bad
        val = np.where(active, val * b + digit.astype(np.uint64), val)
    return val, ok


def fail_at(path: str | Path, lines: Lines, bad_mask: np.ndarray, what: str) -> None:
    """Raise a one-line error for the first bad line of a block."""
    i = int(np.flatnonzero(bad_mask)[0])
    text = bytes(lines.buf[lines.starts[i] : lines.ends[i]][:60]).decode("utf-8", "replace")
    raise PagecastError(f"{what}: {text!r}", path=path, line=lines.first_line + i)


def split_fields(
    path: str | Path, lines: Lines, idx: np.ndarray, nfields: int, sep: int = ord(","), what: str = "row"
) -> tuple[np.ndarray, np.ndarray]:
    """Field bounds of lines ``idx`` that must have exactly ``nfields`` fields.

    Returns (starts, stops), each shaped (nfields, len(idx)). Consecutive separators
    (e.g. several spaces) are not merged: callers normalise first if they need that.
    """
    buf = lines.buf
    s, e = lines.starts[idx], lines.ends[idx]
    seps = np.flatnonzero(buf == sep)
    k = np.searchsorted(seps, s)
    m = len(seps)
    pos = [seps[np.minimum(k + j, m - 1)] if m else np.full(len(s), -1) for j in range(nfields)]
    ok = np.ones(len(s), bool)
    if nfields > 1:
        ok &= (k + nfields - 2 < m) & (pos[nfields - 2] < e) if m else np.zeros(len(s), bool)
    ok &= (k + nfields - 1 >= m) | (pos[nfields - 1] >= e) if m else ok
    if not ok.all():
        mask = np.zeros(len(lines), bool)
        mask[idx[np.flatnonzero(~ok)[0]]] = True
        fail_at(path, lines, mask, f"{what} needs exactly {nfields} fields")
    starts = np.stack([s] + [pos[j] + 1 for j in range(nfields - 1)])
    stops = np.stack([pos[j] for j in range(nfields - 1)] + [e])
    return starts, stops


def parse_float(buf: np.ndarray, start: np.ndarray, stop: np.ndarray, width: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Decode decimal floats: fields gathered into fixed-width byte strings, converted by numpy."""
    n = stop - start
    ok = (n >= 1) & (n <= width)
    k = np.arange(width)
    idx = start[:, None] + k
    valid = (k < n[:, None]) & ok[:, None]
    raw = np.where(valid, buf[np.minimum(idx, len(buf) - 1)], 0).astype(np.uint8)
    strs = np.ascontiguousarray(raw).view(f"S{width}").ravel()
    try:
        vals = strs.astype(np.float64)
    except ValueError:
        # some field is not a number: find which, row by row (error path only)
        vals = np.zeros(len(strs))
        for i, s in enumerate(strs.tolist()):
            try:
                vals[i] = float(s)
            except ValueError:
                ok[i] = False
    return vals, ok & (n >= 1)


def strip_bounds(buf: np.ndarray, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Trim spaces/tabs around fields (vectorised, up to 8 on each side)."""
    for _ in range(8):
        ws = (start < stop) & (
            (buf[np.minimum(start, len(buf) - 1)] == 32) | (buf[np.minimum(start, len(buf) - 1)] == 9)
        )
        if not ws.any():
            break
        start = start + ws
    for _ in range(8):
        last = np.maximum(stop - 1, 0)
        ws = (start < stop) & ((buf[last] == 32) | (buf[last] == 9))
        if not ws.any():
            break
        stop = stop - ws
    return start, stop


INT64_MAX = np.uint64((1 << 63) - 1)
CPU_GHZ_RANGE = (1e-3, 1e3)


def check_cpu_ghz(cpu_ghz: float | None) -> float | None:
    """A clock rate that turns cycles into nanoseconds sensibly, or None (keep cycles)."""
    if cpu_ghz is None:
        return None
    lo, hi = CPU_GHZ_RANGE
    if not (isinstance(cpu_ghz, (int, float)) and math.isfinite(cpu_ghz) and lo <= cpu_ghz <= hi):
        raise PagecastError(f"--cpu-ghz must be a clock rate from {lo:g} to {hi:g} GHz, got {cpu_ghz!r}")
    return float(cpu_ghz)


def cycles_to_ns(cycles: np.ndarray, cpu_ghz: float | None, path: str | Path) -> np.ndarray:
    """Non-negative int64 cycle counts → int64 times (ns at ``cpu_ghz``, else cycles); refuses overflow."""
    if not cpu_ghz:
        return cycles.astype(np.int64)
    t = cycles / cpu_ghz
    if len(t) and not t.max() < 2.0**63:
        raise PagecastError(f"times do not fit in 64-bit nanoseconds at --cpu-ghz {cpu_ghz:g}", path=path)
    return t.astype(np.int64)
