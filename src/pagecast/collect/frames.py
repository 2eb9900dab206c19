"""The fault collector's stream (native/faultmon.c → Python): frames {u32 type, u32 len,
payload}, read from a pipe and cut into whole frames, the first of which (HELLO) is checked.

The payload layouts mirror native/faultmon.h and native/live/fastpath.h
(tests/test_binary_layouts.py compares them).
"""

from __future__ import annotations

import os

import numpy as np

from pagecast.errors import PagecastError

STREAM_MAGIC = 0x4D544C46  # b"FLTM" as a little-endian u32: first field of the HELLO frame
STREAM_VERSION = 1
FR_HELLO, FR_SAMPLES, FR_MMAP, FR_FORK, FR_EXEC, FR_LOST, FR_WATERMARK, FR_EXIT, FR_ERROR = range(1, 10)
FR_ISSUED, FR_FILE, FR_FASTSTAT = range(10, 13)  # native fast path (native/live/fastpath.h)
FR_READS, FR_NOTE = 14, 15  # page-set mode: read-family tracepoint samples, a collector's note

SAMPLE_DTYPE = np.dtype(
    [("time", "<u8"), ("addr", "<u8"), ("ip", "<u8"), ("pid", "<u4"), ("tid", "<u4"), ("kind", "<u4"), ("pad", "<u4")]
)
MMAP_DTYPE = np.dtype(
    [
        ("time", "<u8"),
        ("addr", "<u8"),
        ("len", "<u8"),
        ("pgoff", "<u8"),
        ("ino", "<u8"),
        ("pid", "<u4"),
        ("tid", "<u4"),
        ("prot", "<u4"),
        ("flags", "<u4"),
        ("maj", "<u4"),
        ("min", "<u4"),
    ]
)
FILE_USE_DTYPE = np.dtype(
    [
        ("time", "<u8"),
        ("ino", "<u8"),
        ("first", "<u8"),
        ("last", "<u8"),
        ("pid", "<u4"),
        ("tid", "<u4"),
        ("dev", "<u4"),
        ("what", "<u4"),
    ]
)
HELLO_DTYPE = np.dtype(
    [
        ("magic", "<u4"),
        ("version", "<u4"),
        ("t0", "<u8"),
        ("pid", "<u4"),
        ("nrings", "<u4"),
        ("exclude_kernel", "<u4"),
        ("ring_pages", "<u4"),
    ]
)
FORK_DTYPE = np.dtype([("time", "<u8"), ("pid", "<u4"), ("ppid", "<u4"), ("tid", "<u4"), ("ptid", "<u4")])
EXEC_DTYPE = np.dtype([("time", "<u8"), ("pid", "<u4"), ("tid", "<u4")])
LOST_DTYPE = np.dtype([("time", "<u8"), ("lost", "<u8")])
EXIT_DTYPE = np.dtype([("status", "<i4"), ("code", "<i4"), ("time", "<u8"), ("lost", "<u8")])
# one page whose read the fast path issued; times are CLOCK_MONOTONIC ns (t_fault 0: at start)
ISSUED_DTYPE = np.dtype(
    [
        ("t_issue", "<u8"),
        ("t_fault", "<u8"),
        ("t_seen", "<u8"),
        ("t_submit", "<u8"),
        ("page", "<i8"),
        ("file", "<i4"),
        ("flags", "<u4"),
    ]
)
FILE_FRAME_DTYPE = np.dtype([("index", "<i4"), ("tag", "<i4")])  # then the path
FASTSTAT_FIELDS = (
    "faults",
    "unmapped_faults",
    "ranges",
    "range_pages",
    "fadvise_errors",
    "pages",
    "replay_cursor",
    "wakeups",
    "fadvise_ns",
    "handler_ns_p50",
    "handler_ns_p99",
    "handler_ns_max",
)


def check_hello(payload: bytes, where: str) -> np.void:
    """The HELLO frame opens the stream: a collector of another build is refused here."""
    if len(payload) < 8 or int(np.frombuffer(payload, "<u4", 1)[0]) != STREAM_MAGIC:
        raise PagecastError("not a pagecast fault collector stream (bad magic in its first frame)", path=where)
    version = int(np.frombuffer(payload, "<u4", 1, 4)[0])
    if version != STREAM_VERSION:
        raise PagecastError(
            f"fault collector stream version {version} not supported (this pagecast reads "
            f"{STREAM_VERSION}); rebuild the collector",
            path=where,
        )
    if len(payload) != HELLO_DTYPE.itemsize:
        raise PagecastError(
            f"malformed fault collector stream (first frame of {len(payload)} bytes, expected {HELLO_DTYPE.itemsize})",
            path=where,
        )
    return np.frombuffer(payload, dtype=HELLO_DTYPE)[0]


class FrameReader:
    """Whole frames from the read end of the collector's pipe (owned: ``close`` closes it)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.eof = False
        self._buf = bytearray()

    def _fill(self, need: int) -> bool:
        while len(self._buf) < need:
            if self.eof:
                return False
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                self.eof = True
                return False
            self._buf += chunk
        return True

    def next(self) -> tuple[int, bytes] | None:
        """The next frame as (type, payload), or None at the end of the stream."""
        if not self._fill(8):
            return None
        ftype, flen = np.frombuffer(self._buf, dtype="<u4", count=2)
        if not self._fill(8 + int(flen)):
            return None
        payload = bytes(self._buf[8 : 8 + flen])
        del self._buf[: 8 + flen]
        return int(ftype), payload

    def buffered(self) -> bool:
        """Whether a whole frame is already read and waiting (no system call)."""
        if len(self._buf) < 8:
            return False
        return len(self._buf) >= 8 + int(np.frombuffer(self._buf, dtype="<u4", count=2)[1])

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
