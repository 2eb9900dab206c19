"""What the fault monitor yields: faults, and (page-set mode) file pages, as numpy columns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class FaultBatch:
    """Faults in time order. ``t_ns`` counts from the start of the command."""

    t_ns: np.ndarray  # int64
    tid: np.ndarray  # int32
    pid: np.ndarray  # int32
    addr: np.ndarray  # uint64
    ip: np.ndarray  # uint64
    kind: np.ndarray  # uint8, Kind.FAULT_MAJOR / Kind.FAULT_MINOR
    region: np.ndarray  # int32, -1 where no mapping is known
    page: np.ndarray  # int64, region-relative (raw addr // 4096 where region == -1)
    uses: "FileUseBatch | None" = None  # page-set mode: file tracepoint samples released with these faults

    def __len__(self) -> int:
        return len(self.t_ns)


@dataclass
class FileUseBatch:
    """File tracepoint samples in time order: pages [first, last] of file region ``region``,
    asked for by a read-family system call, or (``mapped``) mapped by a page fault."""

    t_ns: np.ndarray  # int64, from the start of the command
    tid: np.ndarray  # int32
    pid: np.ndarray  # int32
    region: np.ndarray  # int32, a file region
    first: np.ndarray  # int64
    last: np.ndarray  # int64, inclusive, already cut at the file's end
    mapped: np.ndarray  # bool: filemap:mm_filemap_fault (else filemap:mm_filemap_get_pages)

    def __len__(self) -> int:
        return len(self.t_ns)

    @classmethod
    def empty(cls) -> "FileUseBatch":
        return cls(*(np.empty(0, d) for d in (np.int64, np.int32, np.int32, np.int32, np.int64, np.int64, bool)))
