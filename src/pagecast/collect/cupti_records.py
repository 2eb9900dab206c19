"""Read the CUPTI record stream of ``libpagecast_cupti.so`` and turn it into a trace.

Stream (``cupti.<pid>.bin``, see ``native/cuda/pc_cupti_format.h``): fixed 48-byte
little-endian records, the first a header carrying the CUPTI timestamp and
CLOCK_MONOTONIC taken together; kernel names in ``kernels.<pid>.tsv``.

Trace rows (one per CUPTI record, never expanded to pages, sorted by time):

==========================  ============  ============================================
CUPTI counter kind          trace kind    flags bits 4-7 / bytes
==========================  ============  ============================================
BYTES_TRANSFER_HTOD         MIGRATE_HTOD  migration cause / bytes moved
BYTES_TRANSFER_DTOH         MIGRATE_DTOH  migration cause / bytes moved
GPU_PAGE_FAULT              FAULT_GPU     access type (bit 0 set for write/atomic)
CPU_PAGE_FAULT_COUNT        CPU_FAULT     -
THRASHING / THROTTLING      THRASHING / THROTTLING
REMOTE_MAP                  REMOTE_MAP    remote-map cause
kernel                      KERNEL        ip = index into the trace's kernels list
==========================  ============  ============================================

Pages are relative to the allocation holding the address at that time (regions of kind
"managed" or "device", from MEMORY2 records, or from the interposer's allocation table
when CUPTI gave none). ``tid`` is the CUDA stream id.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.trace import Kind, Region, TraceWriter
from pagecast.trace.schema import FLAG_SUBKIND_SHIFT, FLAG_WRITE

REC_DTYPE = np.dtype(
    [
        ("type", "u1"),
        ("subkind", "u1"),
        ("flags", "<u2"),
        ("stream", "<u4"),
        ("start", "<u8"),
        ("end", "<u8"),
        ("address", "<u8"),
        ("value", "<u8"),
        ("src", "<u4"),
        ("dst", "<u4"),
    ]
)
# Mirrors struct pc_rec in native/cuda/pc_cupti_format.h (tests/test_binary_layouts.py).
FORMAT_VERSION = 2
READS_VERSIONS = (1, 2)  # version 1 streams have no magic
MAGIC = 0x50554350  # b"PCUP" as a little-endian u32, in the header record's dst (version >= 2)

REC_HEADER, REC_UM, REC_KERNEL, REC_MEMORY, REC_DROPPED = 0, 1, 2, 3, 4

# CUpti_ActivityUnifiedMemoryCounterKind
UM_HTOD, UM_DTOH, UM_CPU_FAULT, UM_GPU_FAULT, UM_THRASHING, UM_THROTTLING, UM_REMOTE_MAP, UM_DTOD = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
)
UM_TO_KIND = {
    UM_HTOD: Kind.MIGRATE_HTOD,
    UM_DTOH: Kind.MIGRATE_DTOH,
    UM_CPU_FAULT: Kind.CPU_FAULT,
    UM_GPU_FAULT: Kind.FAULT_GPU,
    UM_THRASHING: Kind.THRASHING,
    UM_THROTTLING: Kind.THROTTLING,
    UM_REMOTE_MAP: Kind.REMOTE_MAP,
}
# CUpti_ActivityUnifiedMemoryMigrationCause (flags of transfer records)
CAUSES = {0: "unknown", 1: "user", 2: "coherence", 3: "prefetch", 4: "eviction", 5: "access_counters"}
# CUpti_ActivityUnifiedMemoryAccessType (flags of fault records)
ACCESS_TYPES = {0: "unknown", 1: "read", 2: "write", 3: "atomic", 4: "prefetch"}
ACCESS_WRITE, ACCESS_ATOMIC = 2, 3
# CUpti_ActivityMemoryKind / CUpti_ActivityMemoryOperationType
MEMKIND_DEVICE, MEMKIND_MANAGED, MEMKIND_MANAGED_STATIC = 3, 5, 7
MEMOP_ALLOC, MEMOP_RELEASE = 1, 2


@dataclass
class CuptiStream:
    records: np.ndarray
    header: np.void
    kernel_names: dict[int, str] = field(default_factory=dict)
    truncated_bytes: int = 0
    dropped: int = 0


def check_header(first: np.ndarray, path: Path) -> None:
    """The header record: a known version, and from version 2 on the magic."""
    if len(first) == 0 or first[0]["type"] != REC_HEADER:
        raise PagecastError("not a pagecast CUPTI record stream (bad or missing header record)", path=path)
    version = int(first[0]["value"])
    if version not in READS_VERSIONS:
        raise PagecastError(
            f"CUPTI record stream version {version} not supported (this pagecast reads "
            f"{READS_VERSIONS[0]}..{FORMAT_VERSION})",
            path=path,
        )
    if version >= 2 and int(first[0]["dst"]) != MAGIC:
        raise PagecastError("not a pagecast CUPTI record stream (bad magic in the header record)", path=path)


def read_stream(path: str | Path, names_path: str | Path | None = None) -> CuptiStream:
    path = Path(path)
    if not path.exists():
        raise PagecastError("no such CUPTI record file", path=path)
    raw = np.fromfile(path, dtype=np.uint8)
    whole = len(raw) - len(raw) % REC_DTYPE.itemsize
    recs = raw[:whole].view(REC_DTYPE)
    check_header(recs[:1], path)
    bad = ~np.isin(recs["type"], (REC_HEADER, REC_UM, REC_KERNEL, REC_MEMORY, REC_DROPPED))
    if bad.any():
        i = int(np.argmax(bad))
        raise PagecastError(
            f"record {i} (byte {i * REC_DTYPE.itemsize}) has unknown type {int(recs['type'][i])}", path=path
        )
    names: dict[int, str] = {}
    if names_path is None:
        guess = path.with_name(path.name.replace("cupti.", "kernels.", 1).replace(".bin", ".tsv"))
        names_path = guess if guess.exists() else None
    if names_path is not None:
        for lineno, line in enumerate(Path(names_path).read_text(errors="replace").splitlines(), 1):
            if not line:
                continue
            key, sep, name = line.partition("\t")
            if not sep or not key.isdigit():
                raise PagecastError("expected '<id>\\t<kernel name>'", path=names_path, line=lineno)
            names[int(key)] = name
    dropped = int(recs["value"][recs["type"] == REC_DROPPED].sum())
    return CuptiStream(recs, recs[0], names, len(raw) - whole, dropped)


def _regions_from_memory(recs: np.ndarray) -> list[Region]:
    mem = recs[recs["type"] == REC_MEMORY]
    mem = mem[np.argsort(mem["start"], kind="stable")]
    regions: list[Region] = []
    live: dict[int, Region] = {}
    orders = {"managed": 0, "device": 0}
    for r in mem:
        addr, op, mk = int(r["address"]), int(r["subkind"]), int(r["flags"])
        if op == MEMOP_ALLOC:
            kind = (
                "managed"
                if mk in (MEMKIND_MANAGED, MEMKIND_MANAGED_STATIC)
                else "device"
                if mk == MEMKIND_DEVICE
                else None
            )
            if kind is None:
                continue
            reg = Region(
                len(regions),
                f"{kind}#{orders[kind]}",
                kind,
                base=addr,
                length=int(r["value"]),
                created_ns=int(r["start"]),
                device=int(r["src"]),
                order=orders[kind],
            )
            orders[kind] += 1
            regions.append(reg)
            live[addr] = reg
        elif op == MEMOP_RELEASE and addr in live:
            live.pop(addr).freed_ns = int(r["start"])
    return regions


def read_allocs_csv(path: str | Path) -> list[dict[str, Any]]:
    """The interposer's allocation table (``allocs.<pid>.csv``)."""
    path = Path(path)
    out = []
    with open(path, newline="") as f:
        rd = csv.DictReader(f)
        need = {"id", "kind", "order", "base", "size", "created_ns", "freed_ns"}
        if not rd.fieldnames or not need <= set(rd.fieldnames):
            raise PagecastError(f"not an allocation table (need columns {sorted(need)})", path=path, line=1)
        for lineno, row in enumerate(rd, 2):
            try:
                out.append(
                    {
                        "id": int(row["id"]),
                        "kind": row["kind"],
                        "order": int(row["order"]),
                        "base": int(row["base"], 0),
                        "size": int(row["size"]),
                        "created_ns": int(row["created_ns"]),
                        "freed_ns": int(row["freed_ns"]),
                    }
                )
            except (TypeError, ValueError):
                raise PagecastError("bad allocation row", path=path, line=lineno) from None
            if out[-1]["kind"] not in ("managed", "device"):
                raise PagecastError(f"unknown allocation kind {out[-1]['kind']!r}", path=path, line=lineno)
    return out


def _regions_from_allocs(allocs: Sequence[dict[str, Any]], mono_to_cupti: int) -> list[Region]:
    regions = []
    for a in sorted(allocs, key=lambda a: a["id"]):
        freed = a["freed_ns"] + mono_to_cupti if a["freed_ns"] >= 0 else -1
        regions.append(
            Region(
                len(regions),
                f"{a['kind']}#{a['order']}",
                a["kind"],
                base=a["base"],
                length=a["size"],
                created_ns=a["created_ns"] + mono_to_cupti,
                freed_ns=freed,
                order=a["order"],
                extra={"alloc_id": a["id"]},
            )
        )
    return regions


def translate(
    addr: np.ndarray, t: np.ndarray, regions: Sequence[Region], page_shift: int = 12
) -> tuple[np.ndarray, np.ndarray]:
    """(region, page) of each address at its time; region -1 and the raw page where none.

    A region covers [base, base+length) between created_ns and freed_ns. Addresses the
    driver reused after a free belong to whichever allocation was live at that time.
    """
    n = len(addr)
    region = np.full(n, -1, np.int32)
    if not regions or n == 0:
        return region, (addr >> np.uint64(page_shift)).astype(np.int64)
    base = np.array([r.base for r in regions], np.uint64)
    end = base + np.array([r.length for r in regions], np.uint64)
    born = np.array([r.created_ns for r in regions], np.int64)
    died = np.array([r.freed_ns if r.freed_ns >= 0 else np.iinfo(np.int64).max for r in regions], np.int64)
    order = np.argsort(base, kind="stable")
    idx = np.searchsorted(base[order], addr, side="right").astype(np.int64) - 1
    cand = order[np.clip(idx, 0, len(order) - 1)]
    ti = t.astype(np.int64)
    ok = (idx >= 0) & (addr < end[cand]) & (born[cand] <= ti) & (ti < died[cand])
    region[ok] = cand[ok]
    sb, se = base[order], end[order]
    if len(order) > 1 and np.any(sb[1:] < se[:-1]) and not ok.all():
        # Overlapping lifetimes of one address range (reuse): settle the rest per region.
        rest = np.flatnonzero(~ok)
        for r in range(len(regions)):
            m = (addr[rest] >= base[r]) & (addr[rest] < end[r]) & (born[r] <= ti[rest]) & (ti[rest] < died[r])
            region[rest[m]] = r
    hit = region >= 0
    page = (addr >> np.uint64(page_shift)).astype(np.int64)
    safe = np.where(hit, region, 0)
    page[hit] = ((addr[hit] - base[safe[hit]]) >> np.uint64(page_shift)).astype(np.int64)
    return region, page


def convert_stream(
    stream: CuptiStream,
    out: str | Path,
    *,
    allocs: Sequence[dict[str, Any]] | None = None,
    command: Sequence[str] | None = None,
    page_size: int = PAGE_SIZE,
) -> dict[str, Any]:
    """Write the trace; returns a summary (rows per kind, regions, kernels, dropped)."""
    recs = stream.records
    hdr = stream.header
    cupti0, mono0 = int(hdr["start"]), int(hdr["end"])
    regions = _regions_from_memory(recs)
    alloc_source = "cupti_memory2"
    if not regions and allocs:
        regions = _regions_from_allocs(allocs, cupti0 - mono0)
        alloc_source = "interposer"
    um = recs[recs["type"] == REC_UM]
    kern = recs[recs["type"] == REC_KERNEL]
    known = np.isin(um["subkind"], list(UM_TO_KIND))
    skipped_dtod = int(np.count_nonzero(um["subkind"] == UM_DTOD))
    um = um[known]
    mem_t = recs["start"][recs["type"] == REC_MEMORY]
    starts = [int(x.min()) for x in (um["start"], kern["start"], mem_t) if len(x)]
    t0 = min([cupti0, *starts])
    shift = page_size.bit_length() - 1
    region, page = translate(um["address"], um["start"].astype(np.int64), regions, shift)
    um_kind, flags, nbytes = _um_columns(um)
    korder = np.argsort(kern["start"], kind="stable")
    kern = kern[korder]
    t = np.concatenate([um["start"].astype(np.int64), kern["start"].astype(np.int64)]) - t0
    cols = {
        "t_ns": t,
        "region": np.concatenate([region, np.full(len(kern), -1, np.int32)]),
        "page": np.concatenate([page, np.zeros(len(kern), np.int64)]),
        "kind": np.concatenate([um_kind, np.full(len(kern), int(Kind.KERNEL), np.uint8)]),
        "flags": np.concatenate([flags, np.zeros(len(kern), np.uint8)]),
        "tid": np.concatenate([um["stream"].astype(np.int32), kern["stream"].astype(np.int32)]),
        "ip": np.concatenate([np.zeros(len(um), np.uint64), np.arange(len(kern), dtype=np.uint64)]),
        "bytes": np.concatenate([nbytes, np.zeros(len(kern), np.uint32)]),
    }
    order = np.argsort(cols["t_ns"], kind="stable")
    for r in regions:
        r.created_ns -= t0
        if r.freed_ns >= 0:
            r.freed_ns -= t0
    meta = {
        "cupti_format": FORMAT_VERSION,
        "cupti_t0": t0,
        "allocations_from": alloc_source,
        "dropped_records": stream.dropped,
        "skipped_dtod_records": skipped_dtod,
        "truncated_bytes": stream.truncated_bytes,
        "causes": CAUSES,
        "access_types": ACCESS_TYPES,
    }
    if command is not None:
        meta["command"] = list(command)
        meta["cwd"] = os.getcwd()  # the command ran here (cuda record, the injector): as pagecast record stores it
    with TraceWriter(out, regions=regions, source="cuda", page_size=page_size, meta=meta) as w:
        _add_kernels(w, kern, stream.kernel_names, t0)
        w.write(**{c: v[order] for c, v in cols.items()})
    kinds, counts = np.unique(cols["kind"], return_counts=True)
    return {
        "trace": str(out),
        "rows": int(len(order)),
        "rows_by_kind": {Kind(int(k)).name.lower(): int(c) for k, c in zip(kinds, counts)},
        "regions": len(regions),
        "allocations_from": alloc_source,
        "kernels": int(len(kern)),
        "unmatched_addresses": int(np.count_nonzero(region < 0)),
        "dropped_records": stream.dropped,
    }


def _um_columns(um: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unified-memory records' row kind, flags (access subkind, write) and bytes moved."""
    lut = np.zeros(256, np.uint8)
    for k, v in UM_TO_KIND.items():
        lut[k] = int(v)
    um_kind = lut[um["subkind"]]
    sub = (um["flags"] & 0xF).astype(np.uint8)
    flags = (sub << FLAG_SUBKIND_SHIFT).astype(np.uint8)
    write = (um["subkind"] == UM_GPU_FAULT) & ((sub == ACCESS_WRITE) | (sub == ACCESS_ATOMIC))
    flags[write] |= FLAG_WRITE
    moved = np.isin(um["subkind"], (UM_HTOD, UM_DTOH))
    nbytes = np.where(moved, np.minimum(um["value"], np.uint64(0xFFFFFFFF)), 0).astype(np.uint32)
    return um_kind, flags, nbytes


def _add_kernels(w: TraceWriter, kern: np.ndarray, names: dict[int, str], t0: int) -> None:
    for k in kern:
        w.add_kernel(
            names.get(int(k["value"]), f"kernel#{int(k['value'])}"),
            int(k["start"]) - t0,
            int(k["end"]) - t0,
            stream=int(k["stream"]),
            device=int(k["src"]),
            correlation=int(k["address"]),
            grid_x=int(k["dst"]),
        )


def convert_dir(raw_dir: str | Path, out: str | Path, *, command: Sequence[str] | None = None) -> dict[str, Any]:
    """Convert the files a CUDA recording left in ``raw_dir`` (the largest process's stream)."""
    raw_dir = Path(raw_dir)
    streams = sorted(raw_dir.glob("cupti.*.bin"), key=lambda p: p.stat().st_size, reverse=True)
    if not streams:
        raise PagecastError(
            "no CUPTI record stream (cupti.<pid>.bin): the program created no CUDA context, or no GPU/driver "
            "was available, or it did not exit normally",
            path=raw_dir,
        )
    bin_path = streams[0]
    pid = bin_path.name.split(".")[1]
    stream = read_stream(bin_path)
    allocs_path = raw_dir / f"allocs.{pid}.csv"
    allocs = read_allocs_csv(allocs_path) if allocs_path.exists() else None
    summary = convert_stream(stream, out, allocs=allocs, command=command)
    summary["pid"] = int(pid)
    summary["other_processes"] = [int(p.name.split(".")[1]) for p in streams[1:]]
    return summary
