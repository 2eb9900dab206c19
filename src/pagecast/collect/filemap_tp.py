"""Page-set mode's collector options: the page-set shim preloaded into the program, and the
two filemap tracepoints sampled beside its faults (the pages each read-family call asks of
the page cache; the file page each fault maps), each found in tracefs or left out with a
note saying why."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pagecast.collect import tracefs
from pagecast.errors import PagecastError
from pagecast.util.native import build

# (tracepoint, its last-page field); the first is read(), the second a fault's file page
_TRACEPOINTS = (("mm_filemap_get_pages", "last_index"), ("mm_filemap_fault", "index"))
_NEEDED_SIZES = {"i_ino": 8, "s_dev": 4, "index": 8}


def pageset_shim() -> Path:
    return build("pageset-shim", ["pageset/shim.c"], ldflags=("-ldl", "-lpthread"))


@dataclass
class PageSetSetup:
    args: list[str] = field(default_factory=list)  # the collector's options
    reads_on: bool = False  # filemap:mm_filemap_get_pages is sampled
    fault_tp_on: bool = False  # filemap:mm_filemap_fault is sampled
    notes: list[str] = field(default_factory=list)  # why a part is unavailable (warnings)
    info: list[str] = field(default_factory=list)  # how it was made to work (tracefs mounted privately)


def _tracepoints_refused() -> str:
    """Why the kernel would refuse this process tracepoint samples (their raw records need
    root, CAP_PERFMON or CAP_SYS_ADMIN, or kernel.perf_event_paranoid -1), or ""."""
    if os.geteuid() == 0:
        return ""
    try:
        paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
        status = Path("/proc/self/status").read_text().splitlines()
        cap_eff = next(int(line.split()[1], 16) for line in status if line.startswith("CapEff:"))
    except (OSError, ValueError, StopIteration):
        return ""  # unknown: let the kernel answer
    if paranoid <= -1 or cap_eff & ((1 << 38) | (1 << 21)):
        return ""
    return (
        f"kernel.perf_event_paranoid is {paranoid}: tracepoint samples need root, CAP_PERFMON or -1 "
        "(fix: sudo pagecast record ..., or sudo sysctl kernel.perf_event_paranoid=-1)"
    )


def pageset_setup(shim_path: str, require_reads: bool) -> PageSetSetup:
    """The collector's page-set options; ``require_reads`` refuses (one line naming the
    missing piece and its fix) when read-family calls cannot be sampled."""
    out = PageSetSetup(args=["--preload", shim_path])
    refused = _tracepoints_refused()
    for k, (name, last) in enumerate(_TRACEPOINTS):
        tp, why = (None, refused) if refused else tracefs.find_tracepoint("filemap", name)
        if tp is not None and any(tp.sizes.get(f) != n for f, n in _NEEDED_SIZES.items()):
            tp, why = None, f"filemap:{name} has an unexpected format"
        if tp is None:
            if k == 0 and require_reads:
                raise PagecastError(
                    f"cannot record the pages read with read()/pread(): {why}; "
                    "or record with --faults-only (the page faults alone, no file page sets)"
                )
            what = "read-family calls not recorded" if k == 0 else "file faults by inode not recorded"
            out.notes.append(f"{what}: {why}")
            continue
        offs = ":".join(str(tp.offsets[f]) for f in ("i_ino", "s_dev", "index", last))
        out.args += ["--file-tp", f"{k}:{tp.id}:{offs}"]
        if k == 0:
            out.reads_on = True
        else:
            out.fault_tp_on = True
    if out.reads_on or out.fault_tp_on:
        out.info += [n for n in [tracefs.private_mount_note("filemap")] if n]
    return out
