"""Stream the page faults of a running program (native/faultmon.c + perf_event_open).

``FaultMonitor`` starts the command under the native collector and yields
``FaultBatch``es — numpy arrays, time-ordered, already translated into region-relative
pages — while the program runs. The collector sends samples in bulk; they are decoded
with one ``np.frombuffer`` per frame, never a Python loop per fault.

Regions (see ``pagecast.trace.regions``):
- a file mapping → one region per file path; page = file offset // 4096, wherever the
  file was mapped and however often;
- ``[heap]`` → one region per process image, page relative to the start of the heap;
- ``[stack]`` → one region, page relative to the mapping reported;
- any other mapping without a file (anonymous mmap, thread stacks, ...) → a new "anon"
  region per mmap record, numbered by creation order among anon regions (``order``),
  which with its length identifies it in the next run of a deterministic program.
The kernel reports mmap (and mprotect changes) but not munmap: a newer mapping replaces
any older one at the same addresses, which is exact for every fault that can happen
(a fault only hits mapped memory).

Each process of the traced tree has its own address space: a fork copies its parent's
map, an exec empties it.

With ``pageset=True`` (``pagecast record``'s default) the program also runs under the
page-set shim (native/pageset/shim.c: every first touch of a file-mapped page faults, and
every opened file is named by a PROT_NONE mapping), and the collector samples the
tracepoint ``filemap:mm_filemap_get_pages``: the pages each read-family system call asks
of the page cache, by (device, inode), and ``filemap:mm_filemap_fault``: the file page
each fault maps, by (device, inode), wherever the mapping was moved. Each batch then also
carries ``uses``: those pages, translated to file regions (one region per path, shared
with the mappings) and cut at the file's end. ``require_reads`` refuses to start (one
line naming the missing piece and its fix) when the read-family tracepoint cannot be
sampled, instead of recording page sets that silently lack every page read with read().
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from pagecast.collect.inode_path import path_of_inode
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.trace.regions import Region, RegionMap
from pagecast.util.native import build
from pagecast.util.signals import current_state

# The collector's stream: frames {u32 type, u32 len, payload}; the payload layouts mirror
# native/faultmon.h and native/live/fastpath.h (tests/test_binary_layouts.py compares them).
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


def pageset_shim() -> Path:
    return build("pageset-shim", ["pageset/shim.c"], ldflags=("-ldl", "-lpthread"))


def kernel_dev(major: int, minor: int) -> int:
    """The kernel's internal dev_t (tracepoints): major << 20 | minor."""
    return (major << 20) | minor


def faultmon_binary() -> Path:
    # one collector binary: the live loop's native fast path is linked in, off unless --fast
    return build("faultmon", ["faultmon.c", "live/fastpath.c"], shared=False, ldflags=("-lpthread",))


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


@dataclass
class _Event:
    """A side-band record (mmap, fork, exec) applied in time order with the samples."""

    time: int
    what: str
    data: Any


@dataclass
class _Proc:
    rmap: RegionMap = field(default_factory=lambda: RegionMap(PAGE_SIZE))
    heap: int = -1  # region id of this image's [heap]
    stack: int = -1


def _tracepoints_refused() -> str:
    """Why the kernel would refuse this process tracepoint samples (their raw records need
    root, CAP_PERFMON or CAP_SYS_ADMIN, or kernel.perf_event_paranoid -1), or ""."""
    if os.geteuid() == 0:
        return ""
    try:
        paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
        cap_eff = next(
            int(line.split()[1], 16) for line in Path("/proc/self/status").read_text().splitlines()
            if line.startswith("CapEff:")
        )  # fmt: skip
    except (OSError, ValueError, StopIteration):
        return ""  # unknown: let the kernel answer
    if paranoid <= -1 or cap_eff & ((1 << 38) | (1 << 21)):
        return ""
    return (
        f"kernel.perf_event_paranoid is {paranoid}: tracepoint samples need root, CAP_PERFMON or -1 "
        "(fix: sudo pagecast record ..., or sudo sysctl kernel.perf_event_paranoid=-1)"
    )


class FaultMonitor:
    """Run ``cmd`` and stream its page faults.

    >>> with FaultMonitor(["ls"]) as mon:
    ...     for batch in mon.batches():
    ...         ...
    >>> mon.returncode, mon.lost, mon.regions
    """

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        stdout: Any = None,
        stderr: Any = None,
        ring_pages: int = 4096,
        poll_ms: int = 20,
        fast: str | Path | None = None,
        fast_poll_ms: int = 1,
        fast_wake_minor: int = 0,
        pageset: bool = False,
        require_reads: bool = False,
    ):
        if not cmd:
            raise PagecastError("no command given")
        self.cmd = [str(c) for c in cmd]
        # now, before the caller ignores SIGINT for itself: the program gets what it would bare
        self.bare_signals = current_state()
        self.env = env
        self.stdout = stdout
        self.stderr = stderr
        self.ring_pages = ring_pages
        self.poll_ms = poll_ms
        # native fast path: its config file (pagecast.live.fastpath), what it issued, its files
        self.fast = fast
        self.fast_poll_ms = fast_poll_ms
        self.fast_wake_minor = fast_wake_minor
        self.fast_issued: list[np.ndarray] = []
        self.fast_files: dict[int, tuple[int, str]] = {}  # index -> (schedule region id or -1, path)
        self.fast_stats: dict[str, int] | None = None
        self.pageset = pageset
        self.require_reads = require_reads
        self.info: list[str] = []  # how page-set mode was made to work (e.g. tracefs mounted privately)
        self.notes: list[str] = []  # why a part of page-set mode is unavailable (warnings)
        self.reads_on = False  # filemap:mm_filemap_get_pages is sampled
        self.fault_tp_on = False  # filemap:mm_filemap_fault is sampled
        self.error: str | None = None  # the collector's own ERROR frame, if any
        self._binary: str | None = None
        self.regions: list[Region] = []
        self.returncode: int | None = None
        self.lost = 0
        self.samples = 0
        self.pid: int | None = None
        self.exclude_kernel = False
        self.t0_mono_ns = 0
        self._proc: subprocess.Popen | None = None
        self._fd = -1
        self._buf = bytearray()
        self._eof = False
        self._procs: dict[int, _Proc] = {}
        self._file_regions: dict[str, int] = {}
        self._inode_regions: dict[tuple[int, int], int] = {}  # (kernel dev, ino) -> file region
        self._file_size: dict[int, int] = {}  # file region -> size in bytes last seen
        self._file_extent: dict[int, int] = {}  # file region -> bytes it had before the program shortened it
        self._pending_uses: list[np.ndarray] = []
        self._shim_path: str | None = None
        self._region_dev: dict[int, int] = {}  # file region -> kernel dev
        self._mapped_regions: set[int] = set()  # file regions with a real mapping (their base is known)
        self._ps_cache: np.ndarray | None = None
        self._comm: dict[int, str] = {}  # pid -> name at its last exec
        self._no_shim: dict[int, str] = {}  # exec'd processes that have not mapped the shim (yet)
        self._anon_order = 0
        self._pending_samples: list[np.ndarray] = []
        self._pending_events: list[_Event] = []
        self._changed_regions: set[int] = set()

    # -- process -------------------------------------------------------------------
    def start(self) -> "FaultMonitor":
        if self._proc is not None:
            return self
        exe = self.cmd[0]
        if os.sep not in exe and shutil.which(exe, path=(self.env or os.environ).get("PATH")) is None:
            raise PagecastError(f"command not found: {exe}")
        if os.sep in exe and not os.access(exe, os.X_OK):
            raise PagecastError(f"command not found or not executable: {exe}")
        binary = faultmon_binary()
        self._binary = str(binary)
        r, w = os.pipe()
        fast = ["--fast", str(self.fast), "--fast-poll-ms", str(self.fast_poll_ms)] if self.fast else []
        if self.fast and self.fast_wake_minor:
            fast += ["--fast-wake-minor", str(int(self.fast_wake_minor))]
        if self.pageset:
            fast += self._pageset_args()
        try:
            self._proc = subprocess.Popen(
                [
                    str(binary),
                    "--fd",
                    str(w),
                    "--ring-pages",
                    str(self.ring_pages),
                    "--poll-ms",
                    str(self.poll_ms),
                    *fast,
                    *self.bare_signals.faultmon_args(),
                    "--",
                    *self.cmd,
                ],
                pass_fds=(w,),
                env=self.env,
                stdout=self.stdout,
                stderr=self.stderr,
            )
        except OSError as e:
            os.close(r)
            raise PagecastError(f"cannot start the fault collector: {e}") from None
        finally:
            os.close(w)
        self._fd = r
        # The first frame tells whether perf could be attached.
        while self.pid is None:
            frame = self._next_frame()
            if frame is None:
                self._finish_process()
                raise PagecastError(f"fault collector exited without output (status {self._proc.returncode})")
            self._dispatch(*frame)
        self.reads_on = self.reads_on and not any("mm_filemap_get_pages" in n for n in self.notes)
        self.fault_tp_on = self.fault_tp_on and not any("mm_filemap_fault" in n for n in self.notes)
        return self

    def _pageset_args(self) -> list[str]:
        from pagecast.collect import tracefs

        self._shim_path = str(pageset_shim())
        args = ["--preload", self._shim_path]
        refused = _tracepoints_refused()
        for k, (name, last) in enumerate((("mm_filemap_get_pages", "last_index"), ("mm_filemap_fault", "index"))):
            tp, why = (None, refused) if refused else tracefs.find_tracepoint("filemap", name)
            need = {"i_ino": 8, "s_dev": 4, "index": 8}
            if tp is not None and any(tp.sizes.get(f) != n for f, n in need.items()):
                tp, why = None, f"filemap:{name} has an unexpected format"
            if tp is None:
                if k == 0 and self.require_reads:
                    raise PagecastError(
                        f"cannot record the pages read with read()/pread(): {why}; "
                        "or record with --faults-only (the page faults alone, no file page sets)"
                    )
                what = "read-family calls not recorded" if k == 0 else "file faults by inode not recorded"
                self.notes.append(f"{what}: {why}")
                continue
            offs = ":".join(str(tp.offsets[f]) for f in ("i_ino", "s_dev", "index", last))
            args += ["--file-tp", f"{k}:{tp.id}:{offs}"]
            if k == 0:
                self.reads_on = True
            else:
                self.fault_tp_on = True
        if self.reads_on or self.fault_tp_on:
            self.info += [n for n in [tracefs.private_mount_note("filemap")] if n]
        return args

    def __enter__(self) -> "FaultMonitor":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None and self.returncode is None and not self._eof:
            # Stopping early: end the traced program, then the collector. Not after the
            # collector closed its end (it died): the program is not ours to end then, and
            # a collector that is exiting but not yet reaped still looks alive to poll().
            if self.pid:
                try:
                    os.kill(self.pid, 15)
                except ProcessLookupError:
                    pass
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._finish_process()

    def _finish_process(self) -> None:
        if self._proc is not None:
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    # -- frames --------------------------------------------------------------------
    def _fill(self, need: int) -> bool:
        while len(self._buf) < need:
            if self._eof:
                return False
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                self._eof = True
                return False
            self._buf += chunk
        return True

    def _next_frame(self) -> tuple[int, bytes] | None:
        if not self._fill(8):
            return None
        ftype, flen = np.frombuffer(self._buf, dtype="<u4", count=2)
        if not self._fill(8 + int(flen)):
            return None
        payload = bytes(self._buf[8 : 8 + flen])
        del self._buf[: 8 + flen]
        return int(ftype), payload

    def _frame_buffered(self) -> bool:
        """Whether a whole frame is already read and waiting (no system call)."""
        if len(self._buf) < 8:
            return False
        return len(self._buf) >= 8 + int(np.frombuffer(self._buf, dtype="<u4", count=2)[1])

    def _dispatch(self, ftype: int, payload: bytes) -> bool:
        """Handle a frame; returns True when pending events may be released."""
        if ftype == FR_SAMPLES:
            self._pending_samples.append(np.frombuffer(payload, dtype=SAMPLE_DTYPE))
        elif ftype == FR_MMAP:
            m = np.frombuffer(payload[: MMAP_DTYPE.itemsize], dtype=MMAP_DTYPE)[0]
            name = payload[MMAP_DTYPE.itemsize :].decode("utf-8", "surrogateescape")
            self._pending_events.append(_Event(int(m["time"]), "mmap", (m, name)))
        elif ftype == FR_FORK:
            f = np.frombuffer(payload, dtype=FORK_DTYPE)[0]
            if f["pid"] != f["ppid"]:  # a new process, not a thread
                self._pending_events.append(_Event(int(f["time"]), "fork", (int(f["pid"]), int(f["ppid"]))))
        elif ftype == FR_EXEC:
            e = np.frombuffer(payload[: EXEC_DTYPE.itemsize], dtype=EXEC_DTYPE)[0]
            self._comm[int(e["pid"])] = payload[EXEC_DTYPE.itemsize :].decode("utf-8", "replace")
            self._pending_events.append(_Event(int(e["time"]), "exec", int(e["pid"])))
        elif ftype == FR_LOST:
            self.lost += int(np.frombuffer(payload, dtype=LOST_DTYPE)[0]["lost"])
        elif ftype == FR_WATERMARK:
            self._watermark = int(np.frombuffer(payload, dtype="<u8")[0])
            return True
        elif ftype == FR_HELLO:
            h = self._check_hello(payload)
            self.t0_mono_ns = int(h["t0"])
            self.pid = int(h["pid"])
            self.exclude_kernel = bool(h["exclude_kernel"])
            self._procs[self.pid] = _Proc()
        elif ftype == FR_EXIT:
            x = np.frombuffer(payload, dtype=EXIT_DTYPE)[0]
            status = int(x["status"])
            self.returncode = os.waitstatus_to_exitcode(status)
            self._watermark = None  # release everything
            return True
        elif ftype == FR_ISSUED:
            self.fast_issued.append(np.frombuffer(payload, dtype=ISSUED_DTYPE))
        elif ftype == FR_FILE:
            ff = np.frombuffer(payload[: FILE_FRAME_DTYPE.itemsize], dtype=FILE_FRAME_DTYPE)[0]
            path = payload[FILE_FRAME_DTYPE.itemsize :].decode("utf-8", "surrogateescape")
            self.fast_files[int(ff["index"])] = (int(ff["tag"]), path)
        elif ftype == FR_READS:
            self._pending_uses.append(np.frombuffer(payload, dtype=FILE_USE_DTYPE))
        elif ftype == FR_NOTE:
            self.notes.append(payload.decode("utf-8", "replace"))
        elif ftype == FR_FASTSTAT:
            self.fast_stats = dict(
                zip(FASTSTAT_FIELDS, np.frombuffer(payload, dtype="<i8").tolist())
            )  # cursor -1: none
        elif ftype == FR_ERROR:
            msg = payload.decode("utf-8", "replace")
            self.error = msg
            self.close()
            raise PagecastError(msg)
        return False

    def _check_hello(self, payload: bytes) -> np.void:
        """The HELLO frame opens the stream: a collector of another build is refused here."""
        where = self._binary or "fault collector"
        if len(payload) < 8 or int(np.frombuffer(payload, "<u4", 1)[0]) != STREAM_MAGIC:
            self.close()
            raise PagecastError("not a pagecast fault collector stream (bad magic in its first frame)", path=where)
        version = int(np.frombuffer(payload, "<u4", 1, 4)[0])
        if version != STREAM_VERSION:
            self.close()
            raise PagecastError(
                f"fault collector stream version {version} not supported (this pagecast reads "
                f"{STREAM_VERSION}); rebuild the collector",
                path=where,
            )
        if len(payload) != HELLO_DTYPE.itemsize:
            self.close()
            raise PagecastError(
                f"malformed fault collector stream (first frame of {len(payload)} bytes, expected "
                f"{HELLO_DTYPE.itemsize})",
                path=where,
            )
        return np.frombuffer(payload, dtype=HELLO_DTYPE)[0]

    # -- public stream -------------------------------------------------------------
    def batches(self) -> Iterator[FaultBatch]:
        """Yield faults as they arrive (every few ms), until the command exits."""
        if self._proc is None:
            self.start()
        while True:
            frame = self._next_frame()
            if frame is None:
                break
            # a reader that fell behind has several drains buffered: release once, at the last
            if self._dispatch(*frame) and not self._frame_buffered():
                batch = self._release(self._watermark)
                if batch is not None and (len(batch) or (batch.uses is not None and len(batch.uses))):
                    yield batch
        batch = self._release(None)
        if self._no_shim:
            names = ", ".join(sorted(set(self._no_shim.values())))
            self.notes.append(
                f"{names}: ran without the page-set shim (static binary, or LD_PRELOAD removed): "
                "pages it mapped without a fault (fault-around, large folios) are missing"
            )
            self._no_shim.clear()
        if batch is not None and (len(batch) or (batch.uses is not None and len(batch.uses))):
            yield batch
        self.close()
        if self.returncode is None:
            code = self._proc.returncode if self._proc else None
            raise PagecastError(f"fault collector ended without reporting the command's exit (status {code})")

    @property
    def collector_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def collector_returncode(self) -> int | None:
        """The collector's own exit status once it ended (negative: killed by that signal)."""
        return self._proc.poll() if self._proc is not None else None

    def region_of_path(self, path: str) -> int:
        """Id of the file region mapped from ``path`` in this run, -1 if never mapped."""
        return self._file_regions.get(path, -1)

    def take_changed_regions(self) -> list[int]:
        """Ids of regions whose length or end changed since the last call."""
        out = sorted(self._changed_regions)
        self._changed_regions.clear()
        return out

    # -- translation ---------------------------------------------------------------
    def _release(self, watermark: int | None) -> FaultBatch | None:
        if self._pending_samples:
            s = np.concatenate(self._pending_samples) if len(self._pending_samples) > 1 else self._pending_samples[0]
        else:
            s = np.empty(0, SAMPLE_DTYPE)
        s = s[np.argsort(s["time"], kind="stable")]
        cut = len(s) if watermark is None else int(np.searchsorted(s["time"], np.uint64(watermark), side="left"))
        ready, rest = s[:cut], s[cut:]
        self._pending_samples = [rest] if len(rest) else []
        self._pending_events.sort(key=lambda e: e.time)
        n_ev = len(self._pending_events)
        if watermark is not None:
            n_ev = sum(1 for e in self._pending_events if e.time < watermark)
        events, self._pending_events = self._pending_events[:n_ev], self._pending_events[n_ev:]
        region = np.full(len(ready), -1, np.int32)
        page = (ready["addr"] >> np.uint64(12)).astype(np.int64)
        times = ready["time"]
        # Between consecutive side-band events the maps are fixed: translate each span at once.
        start = 0
        for ev in events + [None]:
            stop = len(ready) if ev is None else int(np.searchsorted(times, np.uint64(ev.time), side="left"))
            if stop > start:
                self._translate(ready[start:stop], region[start:stop], page[start:stop])
            start = max(start, stop)
            if ev is not None:
                self._apply(ev)
        self.samples += len(ready)
        uses = self._release_uses(watermark) if self.pageset else None
        if not len(ready) and uses is None:
            return None
        t = ready["time"].astype(np.int64) - np.int64(self.t0_mono_ns)
        return FaultBatch(
            uses=uses,
            t_ns=np.maximum(t, 0),
            tid=ready["tid"].astype(np.int32),
            pid=ready["pid"].astype(np.int32),
            addr=ready["addr"].copy(),
            ip=ready["ip"].copy(),
            kind=ready["kind"].astype(np.uint8),
            region=region,
            page=page,
        )

    def _release_uses(self, watermark: int | None) -> FileUseBatch | None:
        """File tracepoint samples older than the watermark, as file-region page ranges
        (after this release's mmap records were applied: they may name the inodes)."""
        if not self._pending_uses:
            return None
        s = np.concatenate(self._pending_uses) if len(self._pending_uses) > 1 else self._pending_uses[0]
        s = s[np.argsort(s["time"], kind="stable")]
        cut = len(s) if watermark is None else int(np.searchsorted(s["time"], np.uint64(watermark), side="left"))
        ready, rest = s[:cut], s[cut:]
        self._pending_uses = [rest] if len(rest) else []
        if not len(ready):
            return None
        keys = (ready["dev"].astype(np.uint64) << np.uint64(32)) ^ ready["ino"]
        _, first_at, inv = np.unique(keys, return_index=True, return_inverse=True)
        rids = np.array(
            [self._inode_region(int(ready["dev"][i]), int(ready["ino"][i]), int(ready["pid"][i])) for i in first_at],
            np.int32,
        )
        region = rids[inv]
        first = ready["first"].astype(np.int64)
        last = ready["last"].astype(np.int64)
        # the call asked for its whole length; pages past the end of the file were not read
        limit = np.array([self._last_page(int(r), int(last[inv == k].max())) for k, r in enumerate(rids)], np.int64)
        last = np.minimum(last, limit[inv])
        keep = last >= first
        t = ready["time"].astype(np.int64) - np.int64(self.t0_mono_ns)
        return FileUseBatch(
            t_ns=np.maximum(t, 0)[keep],
            tid=ready["tid"].astype(np.int32)[keep],
            pid=ready["pid"].astype(np.int32)[keep],
            region=region[keep],
            first=first[keep],
            last=last[keep],
            mapped=(ready["what"] == 1)[keep],
        )

    def _last_page(self, rid: int, wanted: int) -> int:
        """Last page the file had: the largest size seen (re-read when a call reaches past
        it) or announced by the shim before the program truncated it. A file that only
        shrinks later keeps the pages read while they existed."""
        size = self._file_size.get(rid)
        if size is None or wanted * PAGE_SIZE >= size:
            path = self.regions[rid].path
            now = None
            try:
                now = os.stat(path).st_size if path else None
            except OSError:
                pass
            if now is None and size is None:  # no name (yet) or gone: the call's range is all there is to go by
                return wanted
            size = max(size or 0, now or 0, self._file_extent.get(rid, 0))
            self._file_size[rid] = size
            if size > self.regions[rid].length:
                self.regions[rid].length = size
                self._changed_regions.add(rid)
        return -(-size // PAGE_SIZE) - 1

    def _inode_region(self, dev: int, ino: int, pid: int) -> int:
        """The file region of (kernel dev, inode): known from a mapping or an announced open,
        else found among the process's open files, else opened by its inode number
        (``inode_path``), else a region named by the inode that a later mapping of the
        file will name."""
        rid = self._inode_regions.get((dev, ino))
        if rid is not None:
            return rid
        path = _open_file_path(pid, dev, ino) or path_of_inode(dev, ino)
        if path is not None:
            return self._file_region(path, dev, ino, 0, 0)
        name = f"inode {dev >> 20}:{dev & 0xFFFFF}:{ino}"
        r = self._new_region(
            name=name,
            kind="file",
            path=None,
            file_offset=0,
            base=0,
            length=0,
            created_ns=0,
            order=len(self._file_regions) + len(self._inode_regions),
        )
        self._inode_regions[(dev, ino)] = r.id
        self._region_dev[r.id] = dev
        return r.id

    def _file_region(
        self, path: str, dev: int, ino: int, start: int, length: int, pgoff: int = 0, t_rel: int = 0
    ) -> int:
        """The region of file ``path`` (one per path; an inode seen before its name joins it)."""
        rid = self._file_regions.get(path)
        by_inode = self._inode_regions.get((dev, ino)) if ino else None
        if rid is None and by_inode is not None and self.regions[by_inode].path is None:
            r = self.regions[by_inode]  # read before it was named: name it now
            r.path, r.name = path, os.path.basename(path)
            self._changed_regions.add(r.id)
            rid = r.id
            self._file_regions[path] = rid
        if rid is None:
            try:
                size = os.stat(path).st_size
            except OSError:
                size = 0
            r = self._new_region(
                name=os.path.basename(path),
                kind="file",
                path=path,
                file_offset=0,
                base=start - pgoff,
                length=max(size, pgoff + length),
                created_ns=t_rel,
                order=len(self._file_regions),
            )
            rid = r.id
            if path == self._shim_path:
                r.extra["recorder"] = True  # the shim itself: part of the recorder, not of the run
            self._file_regions[path] = rid
        else:
            r = self.regions[rid]
            if pgoff + length > r.length:
                r.length = pgoff + length
                self._changed_regions.add(rid)
            if length and rid not in self._mapped_regions:
                r.base = start - pgoff  # first mapping of a file that was opened or read before
                self._changed_regions.add(rid)
        if length:
            self._mapped_regions.add(rid)
        if ino and (dev, ino) not in self._inode_regions:
            self._inode_regions[(dev, ino)] = rid
        if rid not in self._region_dev:
            self._region_dev[rid] = dev
            self._ps_cache = None
        return rid

    def page_set_fault_regions(self) -> np.ndarray:
        """Per region id: whether its fault samples give its mapped page set. With
        filemap:mm_filemap_fault on, only files whose faults it does not see (tmpfs and
        shared memory: device major 0, no filemap_fault) need the address-translated
        samples, which a mapping moved by mremap (perf reports no record of it) misplaces."""
        if self._ps_cache is not None and len(self._ps_cache) == len(self.regions):
            return self._ps_cache
        out = np.zeros(len(self.regions), bool)
        for r in self.regions:
            if r.kind == "file" and not r.extra.get("recorder"):
                out[r.id] = not self.fault_tp_on or (self._region_dev.get(r.id, 0) >> 20) == 0
        self._ps_cache = out
        return out

    def _translate(self, s: np.ndarray, region_out: np.ndarray, page_out: np.ndarray) -> None:
        pids = s["pid"]
        for pid in np.unique(pids):
            proc = self._procs.get(int(pid))
            if proc is None or not len(proc.rmap):
                continue
            sel = pids == pid
            r, p = proc.rmap.translate(s["addr"][sel])
            region_out[sel] = r
            page_out[sel] = np.where(r >= 0, p, page_out[sel])

    def _proc_of(self, pid: int) -> _Proc:
        if pid not in self._procs:
            self._procs[pid] = _Proc()
        return self._procs[pid]

    def _new_region(self, **kw: Any) -> Region:
        r = Region(id=len(self.regions), **kw)
        self.regions.append(r)
        self._changed_regions.add(r.id)
        return r

    def _apply(self, ev: _Event) -> None:
        if ev.what == "fork":
            pid, ppid = ev.data
            parent = self._procs.get(ppid)
            child = _Proc()
            if parent is not None:
                child = _Proc(rmap=parent.rmap.copy(), heap=parent.heap, stack=parent.stack)
            self._procs[pid] = child
        elif ev.what == "exec":
            self._procs[ev.data] = _Proc()
            if self._shim_path:
                self._no_shim[ev.data] = self._comm.get(ev.data, "?")
        elif ev.what == "mmap":
            m, name = ev.data
            self._apply_mmap(m, name, ev.time)

    def _apply_mmap(self, m: np.void, name: str, time: int) -> None:
        proc = self._proc_of(int(m["pid"]))
        start, length, pgoff = int(m["addr"]), int(m["len"]), int(m["pgoff"])
        end = start + length
        t_rel = max(time - self.t0_mono_ns, 0)
        is_file = name.startswith("/") and int(m["ino"]) != 0 and not name.startswith("/dev/zero")
        if name.startswith("/SYSV") or name.startswith("/memfd:") or name.startswith("/dev/shm/"):
            is_file = name.startswith("/dev/shm/")
        if is_file:
            if name == self._shim_path:
                self._no_shim.pop(int(m["pid"]), None)
            dev = kernel_dev(int(m["maj"]), int(m["min"]))
            if int(m["prot"]) == 0:
                # PROT_NONE: the page-set shim naming an opened file or saying how far it
                # reached before it was cut short (one page at its last page), or the
                # loader's guard gap in a library; either way nothing there can be touched
                rid = self._file_region(name, dev, int(m["ino"]), 0, 0, 0, t_rel)
                if length == PAGE_SIZE:
                    self._file_extent[rid] = max(self._file_extent.get(rid, 0), pgoff + length)
                return
            rid = self._file_region(name, dev, int(m["ino"]), start, length, pgoff, t_rel)
            proc.rmap.add(start, end, rid, pgoff // PAGE_SIZE)
            return
        if name == "[heap]":
            if proc.heap < 0:
                r = self._new_region(
                    name="[heap]",
                    kind="heap",
                    base=start,
                    length=length,
                    created_ns=t_rel,
                    order=sum(1 for x in self.regions if x.kind == "heap"),
                )
                proc.heap = r.id
            r = self.regions[proc.heap]
            if end - r.base > r.length:
                r.length = end - r.base
                self._changed_regions.add(r.id)
            proc.rmap.add(start, end, r.id, (start - r.base) // PAGE_SIZE)
            return
        if name == "[stack]":
            if proc.stack < 0:
                r = self._new_region(
                    name="[stack]",
                    kind="stack",
                    base=start,
                    length=length,
                    created_ns=t_rel,
                    order=sum(1 for x in self.regions if x.kind == "stack"),
                )
                proc.stack = r.id
            r = self.regions[proc.stack]
            proc.rmap.add(start, end, r.id, max(start - r.base, 0) // PAGE_SIZE)
            return
        kind = "anon" if name in ("", "//anon") or name.startswith("[anon") or name.startswith("/dev/zero") else "other"
        r = self._new_region(
            name=name or "//anon",
            kind=kind,
            base=start,
            length=length,
            created_ns=t_rel,
            order=self._anon_order if kind == "anon" else -1,
            extra={"prot": int(m["prot"]), "flags": int(m["flags"])},
        )
        if kind == "anon":
            self._anon_order += 1
        proc.rmap.add(start, end, r.id, 0)


def _open_file_path(pid: int, dev: int, ino: int) -> str | None:
    """Path of the file (kernel dev, ino) among the open files of ``pid``, if it is still open."""
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return None
    for fd in fds:
        try:
            st = os.stat(fd)
            if st.st_ino == ino and kernel_dev(os.major(st.st_dev), os.minor(st.st_dev)) == dev:
                return os.readlink(fd)
        except OSError:
            continue
    return None


def read_all(cmd: Sequence[str], **kw: Any) -> tuple[FaultBatch, FaultMonitor]:
    """Run ``cmd`` to completion and return all its faults (and file uses) as one batch (small programs, tests)."""
    parts: list[FaultBatch] = []
    with FaultMonitor(cmd, **kw) as mon:
        parts.extend(mon.batches())
    fields = [f for f in FaultBatch.__dataclass_fields__ if f != "uses"]
    if parts:
        cols = {f: np.concatenate([getattr(b, f) for b in parts]) for f in fields}
    else:
        cols = {
            f: np.empty(0, d)
            for f, d in zip(fields, (np.int64, np.int32, np.int32, np.uint64, np.uint64, np.uint8, np.int32, np.int64))
        }
    uses = [b.uses for b in parts if b.uses is not None]
    if uses:
        cols["uses"] = FileUseBatch(
            **{f: np.concatenate([getattr(r, f) for r in uses]) for f in FileUseBatch.__dataclass_fields__}
        )
    elif mon.pageset:
        cols["uses"] = FileUseBatch.empty()
    return FaultBatch(**cols), mon
