"""Record a program's page faults and file page sets into a trace (the engine of ``pagecast record``).

By default (page-set mode) the program runs under the page-set shim and the read-family
tracepoint is sampled too, and besides the fault rows the trace holds one FILE_MAPPED or
FILE_READ row per file page at its first use (``pagecast.collect.pageset``).
``pageset=False`` (``pagecast record --faults-only``) records the page faults alone, as
the kernel takes them by default.

Rows stream from the collector into a journaled ``TraceWriter`` as they arrive, so memory
stays bounded however many faults the program takes, and a recorder killed midway leaves
a journal that ``pagecast recover`` turns into a trace.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pagecast.collect.batches import FaultBatch
from pagecast.collect.faultmon import FaultMonitor
from pagecast.collect.pageset import PageSetRows
from pagecast.errors import PagecastError
from pagecast.trace.schema import Kind
from pagecast.trace.sources import FAULTS, MAPPED_PAGES, READ_PAGES
from pagecast.trace.writer import TraceWriter
from pagecast.util.signals import SignalRelay


@dataclass
class RecordResult:
    trace: str
    command: list[str]
    exit_status: int
    faults: int
    major: int
    minor: int
    lost: int
    regions: int
    duration_s: float
    recorder_peak_rss_mib: float
    user_faults_only: bool
    pageset: bool = False
    file_pages_mapped: int = 0
    file_pages_read: int = 0
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def exit_status(returncode: int) -> int:
    """Shell convention: a program killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def record_faults(
    cmd: Sequence[str],
    out: str | Path,
    *,
    stdout: Any = None,
    stderr: Any = None,
    ring_pages: int = 4096,
    on_batch: Callable[[int], None] | None = None,
    pageset: bool = True,
    meta: dict[str, Any] | None = None,
    every_read: bool = False,
) -> RecordResult:
    """Run ``cmd`` under the fault collector and write its trace to ``out``.

    ``meta``: trace metadata that replaces the defaults (``command``: the program as the
    user gave it, when ``cmd`` wraps it, e.g. in a memory cgroup). ``every_read``: a
    ``FILE_REREAD`` row for every read of a file page after its first (under a limit)."""
    cmd = [str(c) for c in cmd]
    start = time.monotonic()
    major = minor = 0
    mon = FaultMonitor(cmd, stdout=stdout, stderr=stderr, ring_pages=ring_pages, pageset=pageset, require_reads=pageset)
    pages = PageSetRows(every_read) if pageset else None
    # Ctrl-C at the terminal reaches the program itself; a SIGTERM, SIGHUP or a SIGINT sent
    # to pagecast alone is passed on to it. Either way: record until it exits, write the trace.
    with SignalRelay() as relay:
        # The output must be writable before the program starts, not after it ran.
        # the working directory with the command: a relative path in it means nothing without
        # one, and `pagecast plan --measure` runs the command again exactly as it was recorded
        writer = TraceWriter(
            out, source="perf", journal=True, meta={"command": cmd, "cwd": os.getcwd(), **(meta or {})}
        )
        try:
            mon.start()
            relay.attach(mon.pid)
            for batch in mon.batches():
                _sync_regions(writer, mon)
                _write_batch(writer, batch, mon, pages)
                nmaj = int(np.count_nonzero(batch.kind == Kind.FAULT_MAJOR))
                major += nmaj
                minor += len(batch) - nmaj
                if on_batch:
                    on_batch(len(batch))
            relay.detach()
            _sync_regions(writer, mon)
            writer.meta.update(_recording_meta(mon, major + minor, pageset))
        except PagecastError:
            # The program never ran (or the collector failed): nothing worth recovering.
            writer.abort()
            for p in (Path(str(out) + ".partial"), Path(str(out) + ".partial.regions")):
                p.unlink(missing_ok=True)
            raise
        except BaseException:
            writer.abort()
            raise
        finally:
            mon.close()
        writer.close()
    return RecordResult(
        trace=str(out),
        command=cmd,
        exit_status=exit_status(mon.returncode or 0),
        faults=major + minor,
        major=major,
        minor=minor,
        lost=mon.lost,
        regions=len(mon.regions),
        duration_s=round(time.monotonic() - start, 3),
        recorder_peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        user_faults_only=mon.exclude_kernel,
        pageset=pageset,
        file_pages_mapped=pages.mapped.pages if pages else 0,
        file_pages_read=pages.read.pages if pages else 0,
        warnings=list(mon.notes),
        sources=trace_sources(mon),
        info=list(mon.info),
    )


def _sync_regions(writer: TraceWriter, mon: FaultMonitor) -> None:
    """The regions the monitor found since, and those that changed, into the trace."""
    while len(writer.regions) < len(mon.regions):
        writer.add_region(mon.regions[len(writer.regions)])
    for rid in mon.take_changed_regions():
        writer.update_region(rid)


def _write_batch(writer: TraceWriter, batch: FaultBatch, mon: FaultMonitor, pages: PageSetRows | None) -> None:
    if pages is not None:
        writer.write(**pages.rows(batch, mon.page_set_fault_regions()).columns())
    else:
        writer.write(
            t_ns=batch.t_ns,
            region=batch.region,
            page=batch.page,
            kind=batch.kind,
            tid=batch.tid,
            ip=batch.ip,
        )


def _recording_meta(mon: FaultMonitor, faults: int, pageset: bool) -> dict[str, Any]:
    return {
        "exit_status": exit_status(mon.returncode or 0),
        "lost": mon.lost,
        "faults": faults,
        "user_faults_only": mon.exclude_kernel,
        "collector": "perf_event_open page-faults (maj+min), sample_period=1",
        "sources": trace_sources(mon),
        "pageset": {
            "mapped": pageset,
            "reads": mon.reads_on,
            "fault_tracepoint": mon.fault_tp_on,
            "warnings": mon.notes,
        }
        if pageset
        else None,
    }


def trace_sources(mon: FaultMonitor) -> list[str]:
    """What the recording holds (``pagecast.trace.sources``): faults always; the page sets
    of mapped and of read files only when their collectors ran."""
    if not mon.pageset:
        return [FAULTS]
    return [FAULTS, MAPPED_PAGES] + ([READ_PAGES] if mon.reads_on else [])
