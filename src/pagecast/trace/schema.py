"""Columns, event kinds and flag bits of the accesses table.

Format version history:
  1 — first release: columns t_ns, region, page, kind, flags, tid, ip, bytes; regions and
      metadata as JSON in the Parquet key-value metadata under ``pagecast.*`` keys.
"""

from __future__ import annotations

import enum
import zlib
from typing import Mapping

import numpy as np
import pyarrow as pa

FORMAT_VERSION = 1

# Keys of the Parquet key-value metadata.
META_VERSION = b"pagecast.format_version"
META_INFO = b"pagecast.meta"  # JSON object: page_size, source, command, host, recorder, ...
META_REGIONS = b"pagecast.regions"  # JSON list of Region dicts, index == region id
META_KERNELS = b"pagecast.kernels"  # JSON list of {name, start_ns, end_ns, ...} (GPU sources)
# CRC-32 (decimal) of the other pagecast.* values, in key order: Parquet page checksums
# cover the rows but not the footer, where the regions and metadata live.
META_CHECKSUM = b"pagecast.crc32"


def metadata_checksum(kv: Mapping[bytes, bytes]) -> bytes:
    crc = 0
    for k in sorted(k for k in kv if k.startswith(b"pagecast.") and k != META_CHECKSUM):
        crc = zlib.crc32(kv[k], zlib.crc32(k + b"\0", crc))
    return str(crc).encode()


def metadata_checksum_ok(kv: Mapping[bytes, bytes]) -> bool:
    """True when the metadata matches its checksum (files written before checksums have none)."""
    return META_CHECKSUM not in kv or kv[META_CHECKSUM] == metadata_checksum(kv)


class Kind(enum.IntEnum):
    """What a row records. Values are stored as uint8 and never renumbered."""

    ACCESS = 0  # a memory access (lackey, PEBS, ChampSim loads, simulated demand)
    FAULT_MINOR = 1  # Linux minor page fault
    FAULT_MAJOR = 2  # Linux major page fault (I/O)
    FAULT_GPU = 3  # GPU page fault on managed memory (flags bits 4-7: CUPTI access type)
    MIGRATE_HTOD = 4  # host-to-device migration (bytes; flags bits 4-7: CUPTI cause)
    MIGRATE_DTOH = 5  # device-to-host migration (bytes; flags bits 4-7: CUPTI cause)
    PREFETCH = 6  # a prefetch issued (by pagecast or a driver)
    EVICT = 7  # a page dropped from the fast tier
    FAULT = 8  # a fault of unknown severity (userfaultfd: every fault is "missing")
    KERNEL = 9  # a GPU kernel launch; ip = index into the kernels list
    THRASHING = 10  # CUPTI thrashing notification
    THROTTLING = 11  # CUPTI throttling notification
    CPU_FAULT = 12  # CPU page fault on managed memory reported by CUPTI
    REMOTE_MAP = 13  # CUPTI remote map
    # 14-15: page sets (pagecast record): one row per file page per run, at its first use
    FILE_MAPPED = 14  # first touch of a file page through a mapping (the fault that showed it)
    FILE_READ = 15  # first time a read-family system call asked the page cache for a file page
    # A range of pages sampled over an interval (DAMON region in one aggregation
    # interval): page = first page, ip = pages in the range, tid = samples that found it
    # accessed (DAMON nr_accesses). ACCESSED when tid > 0 (a demand kind), IDLE when 0.
    RANGE_ACCESSED = 16
    RANGE_IDLE = 17
    # a read-family system call asked for a file page already read in this run (recorded
    # under --memory, where what a program reads again is what the limit costs it)
    FILE_REREAD = 18

    @classmethod
    def parse(cls, name: str) -> "Kind":
        try:
            return cls[name.upper()]
        except KeyError:
            valid = ", ".join(k.name.lower() for k in cls)
            raise ValueError(f"unknown event kind {name!r} (valid: {valid})") from None


FAULT_KINDS = (Kind.FAULT_MINOR, Kind.FAULT_MAJOR, Kind.FAULT_GPU, Kind.FAULT)
DEMAND_KINDS = (Kind.ACCESS,) + FAULT_KINDS + (Kind.RANGE_ACCESSED,)
RANGE_KINDS = (Kind.RANGE_ACCESSED, Kind.RANGE_IDLE)  # rows that cover ip pages from page on
PAGESET_KINDS = (Kind.FILE_MAPPED, Kind.FILE_READ)

# flags bits
FLAG_WRITE = 1 << 0  # the access or fault was a write
FLAG_EXEC = 1 << 1  # instruction fetch
FLAG_LATE = 1 << 2  # live loop: the page was prefetched but arrived after the demand
FLAG_USELESS = 1 << 3  # live loop / simulator: prefetched page evicted or never used
FLAG_SUBKIND_SHIFT = 4  # bits 4-7: a source-specific small enum (CUPTI cause or access type)


def subkind(flags: np.ndarray | int) -> np.ndarray | int:
    return (flags >> FLAG_SUBKIND_SHIFT) & 0xF


COLUMNS: dict[str, np.dtype] = {
    "t_ns": np.dtype(np.int64),
    "region": np.dtype(np.int32),
    "page": np.dtype(np.int64),
    "kind": np.dtype(np.uint8),
    "flags": np.dtype(np.uint8),
    "tid": np.dtype(np.int32),
    "ip": np.dtype(np.uint64),
    "bytes": np.dtype(np.uint32),
}

ACCESS_SCHEMA = pa.schema([pa.field(name, pa.from_numpy_dtype(dt), nullable=False) for name, dt in COLUMNS.items()])

DEFAULTS = {"t_ns": 0, "region": -1, "page": 0, "kind": int(Kind.ACCESS), "flags": 0, "tid": -1, "ip": 0, "bytes": 0}
