"""Stream the page faults of a running program (native/faultmon.c + perf_event_open).

``FaultMonitor`` starts the command under the native collector and yields
``FaultBatch``es — numpy arrays, time-ordered, already translated into region-relative
pages — while the program runs. The collector sends samples in bulk; they are decoded
with one ``np.frombuffer`` per frame, never a Python loop per fault.

Its parts, one concern each: ``collector`` (the collector process and its options),
``frames`` (the stream's frames and layouts), ``address_space`` (each process's maps,
rebuilt from mmap/fork/exec records: which region and page a fault address is),
``file_regions`` (file regions by path and by inode, and the file pages of page-set mode),
``filemap_tp`` (page-set mode's shim and tracepoints), ``fastpath_log`` (what the native
fast path reports). ``FaultMonitor`` reads the frames and releases them in time order.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from pagecast.collect.address_space import AddressSpaces
from pagecast.collect.batches import FaultBatch, FileUseBatch
from pagecast.collect.collector import CollectorOptions, CollectorProcess, faultmon_binary
from pagecast.collect.fastpath_log import FastPathLog
from pagecast.collect.file_regions import FileRegions
from pagecast.collect.filemap_tp import pageset_setup, pageset_shim
from pagecast.collect.frames import (
    EXEC_DTYPE,
    EXIT_DTYPE,
    FILE_USE_DTYPE,
    FORK_DTYPE,
    FR_ERROR,
    FR_EXEC,
    FR_EXIT,
    FR_FORK,
    FR_HELLO,
    FR_LOST,
    FR_MMAP,
    FR_NOTE,
    FR_READS,
    FR_SAMPLES,
    FR_WATERMARK,
    LOST_DTYPE,
    MMAP_DTYPE,
    SAMPLE_DTYPE,
    check_hello,
)
from pagecast.collect.region_table import RegionTable
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.trace.regions import Region
from pagecast.util.process import check_command
from pagecast.util.signals import current_state

__all__ = [
    "PAGE_SIZE",
    "FaultBatch",
    "FaultMonitor",
    "FileUseBatch",
    "faultmon_binary",
    "pageset_shim",
    "read_all",
]


@dataclass
class _Event:
    """A side-band record (mmap, fork, exec) applied in time order with the samples."""

    time: int
    what: str
    data: Any


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
        self.env, self.stdout, self.stderr = env, stdout, stderr
        self.options = CollectorOptions(
            ring_pages, poll_ms, fast, fast_poll_ms, fast_wake_minor, pageset=pageset, require_reads=require_reads
        )
        self.info: list[str] = []  # how page-set mode was made to work (e.g. tracefs mounted privately)
        self.notes: list[str] = []  # why a part of page-set mode is unavailable (warnings)
        self.reads_on = False  # filemap:mm_filemap_get_pages is sampled
        self.fault_tp_on = False  # filemap:mm_filemap_fault is sampled
        self.error: str | None = None  # the collector's own ERROR frame, if any
        self.returncode: int | None = None
        self.lost = 0
        self.samples = 0
        self.pid: int | None = None
        self.exclude_kernel = False
        self.t0_mono_ns = 0
        self.fast_log = FastPathLog()
        self._binary: str | None = None
        self._collector: CollectorProcess | None = None
        self._table = RegionTable()
        self._files = FileRegions(self._table)
        self._spaces = AddressSpaces(self._table, self._files)
        self._pending_samples: list[np.ndarray] = []
        self._pending_events: list[_Event] = []
        self._watermark: int | None = None

    @property
    def pageset(self) -> bool:
        return self.options.pageset

    @property
    def regions(self) -> list[Region]:
        return self._table.regions

    @property
    def fast_issued(self) -> list[np.ndarray]:
        return self.fast_log.issued

    @property
    def fast_files(self) -> dict[int, tuple[int, str]]:
        return self.fast_log.files

    @property
    def fast_stats(self) -> dict[str, int] | None:
        return self.fast_log.stats

    # -- process -------------------------------------------------------------------
    def start(self) -> "FaultMonitor":
        if self._collector is not None:
            return self
        check_command(self.cmd[0], self.env)
        binary = faultmon_binary()
        self._binary = str(binary)
        args = self.options.args()
        if self.options.pageset:
            args += self._pageset_args()
        self._collector = CollectorProcess(
            [str(binary), *args, *self.bare_signals.faultmon_args(), "--", *self.cmd],
            env=self.env,
            stdout=self.stdout,
            stderr=self.stderr,
        )
        # The first frame tells whether perf could be attached.
        while self.pid is None:
            frame = self._collector.reader.next()
            if frame is None:
                self._collector.wait()
                code = self._collector.proc.returncode
                raise PagecastError(f"fault collector exited without output (status {code})")
            self._dispatch(*frame)
        self.reads_on = self.reads_on and not any("mm_filemap_get_pages" in n for n in self.notes)
        self.fault_tp_on = self.fault_tp_on and not any("mm_filemap_fault" in n for n in self.notes)
        return self

    def _pageset_args(self) -> list[str]:
        self._files.shim_path = str(pageset_shim())
        setup = pageset_setup(self._files.shim_path, self.options.require_reads)
        self.reads_on, self.fault_tp_on = setup.reads_on, setup.fault_tp_on
        self.notes += setup.notes
        self.info += setup.info
        return setup.args

    def __enter__(self) -> "FaultMonitor":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def close(self) -> None:
        if self._collector is not None:
            self._collector.stop(self.pid, exited=self.returncode is not None)

    @property
    def collector_pid(self) -> int | None:
        return self._collector.proc.pid if self._collector is not None else None

    @property
    def collector_returncode(self) -> int | None:
        """The collector's own exit status once it ended (negative: killed by that signal)."""
        return self._collector.proc.poll() if self._collector is not None else None

    # -- frames --------------------------------------------------------------------
    def _dispatch(self, ftype: int, payload: bytes) -> bool:
        """Handle a frame; returns True when pending events may be released."""
        if ftype == FR_SAMPLES:
            self._pending_samples.append(np.frombuffer(payload, dtype=SAMPLE_DTYPE))
        elif ftype in (FR_MMAP, FR_FORK, FR_EXEC):
            self._queue_event(ftype, payload)
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
            self._spaces.new_process(self.pid)
        elif ftype == FR_EXIT:
            x = np.frombuffer(payload, dtype=EXIT_DTYPE)[0]
            self.returncode = os.waitstatus_to_exitcode(int(x["status"]))
            self._watermark = None  # release everything
            return True
        elif ftype == FR_READS:
            self._files.add_uses(np.frombuffer(payload, dtype=FILE_USE_DTYPE))
        elif ftype == FR_NOTE:
            self.notes.append(payload.decode("utf-8", "replace"))
        elif ftype == FR_ERROR:
            self.error = payload.decode("utf-8", "replace")
            self.close()
            raise PagecastError(self.error)
        else:
            self.fast_log.take(ftype, payload)
        return False

    def _queue_event(self, ftype: int, payload: bytes) -> None:
        """mmap, fork and exec records wait for the samples before them (``_release``)."""
        if ftype == FR_MMAP:
            m = np.frombuffer(payload[: MMAP_DTYPE.itemsize], dtype=MMAP_DTYPE)[0]
            name = payload[MMAP_DTYPE.itemsize :].decode("utf-8", "surrogateescape")
            self._pending_events.append(_Event(int(m["time"]), "mmap", (m, name)))
        elif ftype == FR_FORK:
            f = np.frombuffer(payload, dtype=FORK_DTYPE)[0]
            if f["pid"] != f["ppid"]:  # a new process, not a thread
                self._pending_events.append(_Event(int(f["time"]), "fork", (int(f["pid"]), int(f["ppid"]))))
        else:
            e = np.frombuffer(payload[: EXEC_DTYPE.itemsize], dtype=EXEC_DTYPE)[0]
            self._spaces.comm[int(e["pid"])] = payload[EXEC_DTYPE.itemsize :].decode("utf-8", "replace")
            self._pending_events.append(_Event(int(e["time"]), "exec", int(e["pid"])))

    def _check_hello(self, payload: bytes) -> np.void:
        try:
            return check_hello(payload, self._binary or "fault collector")
        except PagecastError:
            self.close()
            raise

    # -- public stream -------------------------------------------------------------
    def batches(self) -> Iterator[FaultBatch]:
        """Yield faults as they arrive (every few ms), until the command exits."""
        if self._collector is None:
            self.start()
        reader = self._collector.reader
        while True:
            frame = reader.next()
            if frame is None:
                break
            # a reader that fell behind has several drains buffered: release once, at the last
            if self._dispatch(*frame) and not reader.buffered():
                batch = self._release(self._watermark)
                if batch is not None and (len(batch) or (batch.uses is not None and len(batch.uses))):
                    yield batch
        batch = self._release(None)
        self._note_unshimmed()
        if batch is not None and (len(batch) or (batch.uses is not None and len(batch.uses))):
            yield batch
        self.close()
        if self.returncode is None:
            code = self._collector.proc.returncode if self._collector else None
            raise PagecastError(f"fault collector ended without reporting the command's exit (status {code})")

    def _note_unshimmed(self) -> None:
        no_shim = self._spaces.no_shim
        if no_shim:
            names = ", ".join(sorted(set(no_shim.values())))
            self.notes.append(
                f"{names}: ran without the page-set shim (static binary, or LD_PRELOAD removed): "
                "pages it mapped without a fault (fault-around, large folios) are missing"
            )
            no_shim.clear()

    def region_of_path(self, path: str) -> int:
        """Id of the file region mapped from ``path`` in this run, -1 if never mapped."""
        return self._files.by_path.get(path, -1)

    def take_changed_regions(self) -> list[int]:
        """Ids of regions whose length or end changed since the last call."""
        return self._table.take_changed()

    def page_set_fault_regions(self) -> np.ndarray:
        """Per region id: whether its fault samples give its mapped page set
        (``FileRegions.fault_regions``)."""
        return self._files.fault_regions(self.fault_tp_on)

    # -- translation ---------------------------------------------------------------
    def _release(self, watermark: int | None) -> FaultBatch | None:
        """The samples older than the watermark, translated through the maps as they were
        at each sample (side-band events applied in time order between them)."""
        ready = self._take_ready_samples(watermark)
        events = self._take_ready_events(watermark)
        region = np.full(len(ready), -1, np.int32)
        page = (ready["addr"] >> np.uint64(12)).astype(np.int64)
        times = ready["time"]
        # Between consecutive side-band events the maps are fixed: translate each span at once.
        start = 0
        for ev in events + [None]:
            stop = len(ready) if ev is None else int(np.searchsorted(times, np.uint64(ev.time), side="left"))
            if stop > start:
                self._spaces.translate(ready[start:stop], region[start:stop], page[start:stop])
            start = max(start, stop)
            if ev is not None:
                self._apply(ev)
        self.samples += len(ready)
        uses = self._files.release_uses(watermark, self.t0_mono_ns) if self.options.pageset else None
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

    def _take_ready_samples(self, watermark: int | None) -> np.ndarray:
        if self._pending_samples:
            s = np.concatenate(self._pending_samples) if len(self._pending_samples) > 1 else self._pending_samples[0]
        else:
            s = np.empty(0, SAMPLE_DTYPE)
        s = s[np.argsort(s["time"], kind="stable")]
        cut = len(s) if watermark is None else int(np.searchsorted(s["time"], np.uint64(watermark), side="left"))
        ready, rest = s[:cut], s[cut:]
        self._pending_samples = [rest] if len(rest) else []
        return ready

    def _take_ready_events(self, watermark: int | None) -> list[_Event]:
        self._pending_events.sort(key=lambda e: e.time)
        n_ev = len(self._pending_events)
        if watermark is not None:
            n_ev = sum(1 for e in self._pending_events if e.time < watermark)
        events, self._pending_events = self._pending_events[:n_ev], self._pending_events[n_ev:]
        return events

    def _apply(self, ev: _Event) -> None:
        if ev.what == "fork":
            self._spaces.fork(*ev.data)
        elif ev.what == "exec":
            self._spaces.exec(ev.data)
        elif ev.what == "mmap":
            m, name = ev.data
            self._spaces.mmap(m, name, max(ev.time - self.t0_mono_ns, 0))


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
