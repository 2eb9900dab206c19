"""AI4Mem collector CSV (CUPTI unified-memory events) → trace.

Layout: ``Category,EventName,Address,StartTime_ns,EndTime_ns,Duration_ns,Host_Phys_Info,Mapped_File``.
- ``UVM`` rows (GPU_PAGE_FAULT, MIGRATE_HtoD, MIGRATE_DtoH, ...) have exactly 8 fields and
  are decoded in bulk with numpy.
- ``KERNEL`` rows carry a kernel name that may contain commas (``f(float*, int)``) and a
  tail of launch fields; the name is everything up to the first all-numeric tail field,
  and the start/end times are the consecutive pair (start, end) followed by end - start.
  They become KERNEL rows (``ip`` = index into the trace's kernels list).
- Accumulated files (``total_data.csv``) repeat the header after ``# ---- snapshot @ … ----``
  lines, and a later snapshot may repeat events of an earlier one: identical
  (event, address, start time) rows are kept once.

Allocations: the CSV has no allocation records, so addresses are grouped into regions
by 2 MiB granules (``importers/_cluster.py``): cudaMallocManaged allocations are 2 MiB
aligned and the driver's VA blocks are 2 MiB, so each run of touched 2 MiB blocks is one
"managed" region and page = (address - region base) // 4096. On the sample file this
yields its three vector_add arrays. A migration row moves one 4 KiB page (``bytes``
4096): the collector logs one row per migrated page.

Time: ``t_ns`` = StartTime_ns minus the earliest start in the file (kept in
``meta["t0_ns"]``), rows sorted by time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError, check_readable, from_os_error
from pagecast.importers._cluster import AddressClusters
from pagecast.importers._text import INT64_MAX, Lines, iter_lines, parse_uint
from pagecast.trace.schema import FLAG_SUBKIND_SHIFT, Kind
from pagecast.trace.writer import TraceWriter

EVENT_KINDS = {
    b"GPU_PAGE_FAULT": Kind.FAULT_GPU,
    b"MIGRATE_HtoD": Kind.MIGRATE_HTOD,
    b"MIGRATE_DtoH": Kind.MIGRATE_DTOH,
    b"CPU_PAGE_FAULT": Kind.CPU_FAULT,
    b"CPU_PAGE_FAULT_COUNT": Kind.CPU_FAULT,
    b"THRASHING": Kind.THRASHING,
    b"THROTTLING": Kind.THROTTLING,
    b"REMOTE_MAP": Kind.REMOTE_MAP,
}
HEADER = b"Category,EventName,Address,StartTime_ns"
_W = 32  # widest name field decoded in bulk


def _field(buf: np.ndarray, start: np.ndarray, stop: np.ndarray, width: int = _W) -> np.ndarray:
    """Bytes buf[start:stop] of each row as fixed-width byte strings (NUL padded)."""
    k = np.arange(width)
    idx = start[:, None] + k
    valid = k < (stop - start)[:, None]
    out = np.where(valid, buf[np.minimum(idx, len(buf) - 1)], 0).astype(np.uint8)
    return np.ascontiguousarray(out).view(f"S{width}").ravel()


def _uvm_rows(path: Path, lines: Lines, idx: np.ndarray) -> dict[str, np.ndarray]:
    buf = lines.buf
    s, e = lines.starts[idx], lines.ends[idx]
    commas = np.flatnonzero(buf == ord(","))
    k = np.searchsorted(commas, s)
    c = np.stack([commas[np.minimum(k + j, len(commas) - 1)] for j in range(8)])
    nfields_ok = (k + 6 < len(commas)) & (c[6] < e) & ((k + 7 >= len(commas)) | (c[7] >= e))
    _check(path, lines, idx, nfields_ok, "a UVM row needs exactly 8 fields")
    c = c[:7]
    name = _field(buf, c[0] + 1, c[1])
    last = len(buf) - 1
    has0x = (
        (c[2] - c[1] >= 3)
        & (buf[np.minimum(c[1] + 1, last)] == ord("0"))
        & ((buf[np.minimum(c[1] + 2, last)] | 0x20) == ord("x"))
    )
    addr, ok_a = parse_uint(buf, c[1] + 3, c[2], 16)
    _check(path, lines, idx, has0x & ok_a, "bad Address (want 0x... hex)")
    start, ok_t = parse_uint(buf, c[2] + 1, c[3], 10)
    _check(path, lines, idx, ok_t & (start <= INT64_MAX), "bad StartTime_ns (a decimal below 2^63)")
    phys = _field(buf, c[5] + 1, c[6])
    return {"name": name, "addr": addr, "start": start.astype(np.int64), "phys": phys, "line": lines.first_line + idx}


def _check(path: Path, lines: Lines, idx: np.ndarray, ok: np.ndarray, what: str) -> None:
    if not ok.all():
        i = int(idx[np.flatnonzero(~ok)[0]])
        text = bytes(lines.buf[lines.starts[i] : lines.ends[i]][:80]).decode("utf-8", "replace")
        raise PagecastError(f"{what}: {text!r}", path=path, line=lines.first_line + i)


def _is_decimal(f: str) -> bool:
    """ASCII digits only (str.isdigit also takes '²' and other digits int() refuses)."""
    return f.isascii() and f.isdigit()


def _is_time(f: str) -> bool:
    return _is_decimal(f) and int(f) <= int(INT64_MAX)


def _is_num(field: str) -> bool:
    f = field.strip()
    if f.lower().startswith("0x"):
        return len(f) > 2 and all(ch in "0123456789abcdefABCDEF" for ch in f[2:])
    return _is_decimal(f) or (f.startswith("-") and _is_decimal(f[1:]))


def parse_kernel_row(text: str, path: Path, line: int) -> dict[str, Any]:
    fields = text.split(",")
    # the first pair (start, end) directly followed by its own duration (times below 2^63 ns)
    for i in range(2, len(fields) - 2):
        a, b, d = (f.strip() for f in fields[i : i + 3])
        if _is_time(a) and _is_time(b) and _is_time(d) and int(b) - int(a) == int(d) and int(b) >= int(a):
            break
    else:
        raise PagecastError("KERNEL row without start,end,duration fields", path=path, line=line)
    k = i
    while k > 2 and _is_num(fields[k - 1]):
        k -= 1
    name = ",".join(fields[1:k]).strip()
    if not name:
        raise PagecastError("KERNEL row without a name", path=path, line=line)
    return {
        "name": name,
        "start_ns": int(fields[i]),
        "end_ns": int(fields[i + 1]),
        "pre": [f.strip() for f in fields[k:i]],
        "post": [f.strip() for f in fields[i + 3 :]],
        "line": line,
    }


def read_csv(
    path: str | Path, on_bytes: Callable[[int], None] | None = None
) -> tuple[dict[str, np.ndarray], list[dict[str, Any]], int]:
    """Parse the file: UVM columns, kernel rows, number of snapshots."""
    path = check_readable(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise from_os_error(e, "cannot read", path) from None
    parts: list[dict[str, np.ndarray]] = []
    kernels: list[dict[str, Any]] = []
    snapshots = 0
    snap_of_part: list[np.ndarray] = []
    saw_header = False
    with f:
        for lines in iter_lines(f, on_bytes=on_bytes):
            buf, s, e = lines.buf, lines.starts, lines.ends
            n = e - s
            first = np.where(n > 0, buf[np.minimum(s, len(buf) - 1)], 0)
            is_uvm = _field(buf, s, np.minimum(e, s + 4), 4) == b"UVM,"
            is_kernel = _field(buf, s, np.minimum(e, s + 7), 7) == b"KERNEL,"
            is_comment = first == ord("#")
            is_header = np.zeros(len(s), bool)
            cand = np.flatnonzero(first == ord("C"))
            for i in cand:
                if bytes(buf[s[i] : e[i]]).startswith(HEADER):
                    is_header[i] = True
            blank = n == 0
            bad = ~(is_uvm | is_kernel | is_comment | is_header | blank)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                text = bytes(buf[s[i] : e[i]][:80]).decode("utf-8", "replace")
                raise PagecastError(f"not an AI4Mem collector row: {text!r}", path=path, line=lines.first_line + i)
            saw_header |= bool(is_header.any())
            # snapshot index of each line: comments that are snapshot markers start a new one
            marks = is_comment.copy()
            for i in np.flatnonzero(is_comment):
                marks[i] = b"snapshot" in bytes(buf[s[i] : e[i]])
            snap = snapshots + np.cumsum(marks)
            snapshots += int(marks.sum())
            uidx = np.flatnonzero(is_uvm)
            if len(uidx):
                part = _uvm_rows(path, lines, uidx)
                parts.append(part)
                snap_of_part.append(snap[uidx])
            for i in np.flatnonzero(is_kernel):
                text = bytes(buf[s[i] : e[i]]).decode("utf-8", "replace")
                kr = parse_kernel_row(text, path, lines.first_line + int(i))
                kr["snapshot"] = int(snap[i])
                kernels.append(kr)
    if not saw_header and not parts and not kernels:
        raise PagecastError("empty or not an AI4Mem collector CSV (no header, no rows)", path=path)
    if parts:
        cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        cols["snapshot"] = np.concatenate(snap_of_part)
    else:
        cols = {
            "name": np.empty(0, f"S{_W}"),
            "addr": np.empty(0, np.uint64),
            "start": np.empty(0, np.int64),
            "phys": np.empty(0, f"S{_W}"),
            "line": np.empty(0, np.int64),
            "snapshot": np.empty(0, np.int64),
        }
    return cols, kernels, snapshots


def import_trace(
    src: str | Path,
    out: str | Path,
    *,
    dedupe: bool = True,
    page_size: int = PAGE_SIZE,
    on_bytes: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    src = Path(src)
    cols, kernels, snapshots = read_csv(src, on_bytes)
    kind = _event_kinds(cols, src)
    addr, start = cols["addr"], cols["start"]
    duplicates = 0
    phys = cols["phys"]
    if dedupe and snapshots > 1 and len(addr):
        # the same event seen in two snapshots: identical (event, address, start)
        keep = _first_of_each(np.stack([kind.astype(np.int64), addr.view(np.int64), start], axis=1))
        duplicates = int(len(addr) - keep.sum())
        kind, addr, start, phys = kind[keep], addr[keep], start[keep], phys[keep]
    if dedupe and snapshots > 1:
        uniq_k = _unique_kernels(kernels)
        duplicates += len(kernels) - len(uniq_k)
        kernels = uniq_k
    phys_names, phys_code = np.unique(phys, return_inverse=True)
    clusters = AddressClusters(page_size=page_size)
    clusters.add(addr)
    regions = clusters.build(kind="managed", name="alloc")
    for r in regions:
        r.device = 0
    region, page = clusters.translate(addr) if len(addr) else (np.empty(0, np.int32), np.empty(0, np.int64))
    kstart = np.array([k["start_ns"] for k in kernels], np.int64)
    t0 = _first_time(start, kstart)
    korder = np.argsort(kstart, kind="stable")
    kernels = [kernels[i] for i in korder]
    kstart = kstart[korder]
    t = np.concatenate([start - t0, kstart - t0])
    all_kind = np.concatenate([kind, np.full(len(kstart), Kind.KERNEL, np.uint8)])
    all_region = np.concatenate([region, np.full(len(kstart), -1, np.int32)])
    all_page = np.concatenate([page, np.zeros(len(kstart), np.int64)])
    is_migr = (kind == Kind.MIGRATE_HTOD) | (kind == Kind.MIGRATE_DTOH)
    all_bytes = np.concatenate([np.where(is_migr, page_size, 0), np.zeros(len(kstart))]).astype(np.uint32)
    codes = np.minimum(phys_code + 1, 15).astype(np.uint8) << FLAG_SUBKIND_SHIFT
    all_flags = np.concatenate([codes, np.zeros(len(kstart), np.uint8)])
    all_ip = np.concatenate([np.zeros(len(kind), np.uint64), np.arange(len(kstart), dtype=np.uint64)])
    order = np.argsort(t, kind="stable")
    meta = {
        "t0_ns": t0,
        "ai4mem_file": str(src),
        "snapshots": snapshots,
        "duplicates_dropped": duplicates,
        "host_phys_info": [p.decode(errors="replace") for p in phys_names],
        "flags_subkind": "1 + index into host_phys_info",
        "region_heuristic": "runs of touched 2 MiB granules",
    }
    with TraceWriter(out, regions=regions, source="import:ai4mem", page_size=page_size, meta=meta) as w:
        for k in kernels:
            w.add_kernel(
                k["name"], k["start_ns"] - t0, k["end_ns"] - t0, fields_before=k["pre"], fields_after=k["post"]
            )
        w.write(
            t_ns=t[order],
            region=all_region[order],
            page=all_page[order],
            kind=all_kind[order],
            flags=all_flags[order],
            ip=all_ip[order],
            bytes=all_bytes[order],
        )
    counts = {Kind(k).name: int(c) for k, c in zip(*np.unique(all_kind, return_counts=True))}
    return {
        "trace": str(out),
        "rows": int(len(t)),
        "kinds": counts,
        "regions": len(regions),
        "kernels": len(kernels),
        "snapshots": snapshots,
        "duplicates_dropped": duplicates,
    }


def _event_kinds(cols: dict[str, np.ndarray], src: Path) -> np.ndarray:
    """Each event's row kind, from its name; an unknown name is refused at its line."""
    names, name_inv = np.unique(cols["name"], return_inverse=True)
    kind_of_name = np.zeros(len(names), np.uint8)
    for j, nm in enumerate(names):
        if nm not in EVENT_KINDS:
            line = int(cols["line"][np.flatnonzero(name_inv == j)[0]])
            raise PagecastError(
                f"unknown UVM event {nm.decode(errors='replace')!r} "
                f"(known: {', '.join(k.decode() for k in EVENT_KINDS)})",
                path=src,
                line=line,
            )
        kind_of_name[j] = EVENT_KINDS[nm]
    return kind_of_name[name_inv]


def _first_of_each(key: np.ndarray) -> np.ndarray:
    """Rows whose key row (``key``: one row per event) is seen for the first time."""
    _, first = np.unique(key, axis=0, return_index=True)
    keep = np.zeros(len(key), bool)
    keep[first] = True
    return keep


def _unique_kernels(kernels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kernels in first-seen order, one per (name, start, end): snapshots repeat them."""
    seen, uniq_k = set(), []
    for k in kernels:
        sig = (k["name"], k["start_ns"], k["end_ns"])
        if sig not in seen:
            seen.add(sig)
            uniq_k.append(k)
    return uniq_k


def _first_time(start: np.ndarray, kstart: np.ndarray) -> int:
    """The earliest event or kernel start (0 when there is none)."""
    t0 = int(
        min(
            start.min() if len(start) else np.iinfo(np.int64).max,
            kstart.min() if len(kstart) else np.iinfo(np.int64).max,
        )
    )
    return 0 if t0 == np.iinfo(np.int64).max else t0
