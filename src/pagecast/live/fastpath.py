"""The live loop's native fast path: which predictors it serves, its config file, its output.

For schedule replay and the policies the registry says the fast path runs (``live`` in
their backends: nextline and stride, whose C steps are ``native/policy/pc_policy.h``),
the whole fault → prefetch
path runs in C inside the collector (``native/live/fastpath.c``, linked into faultmon): it
wakes on every major-fault sample, maps the address to (file, page) with its own copy of
the mmap table, steps the predictor and calls posix_fadvise(WILLNEED) at once. No pipe
hop, no Python, no predictor process. The daemon still receives every fault (every poll
period) and writes the trace and summary as before; the collector reports each page it
issued with the causing fault's perf time, the time it read the sample and the issue time.

Only file-backed pages are handled there (another process can only prefetch those); the
other policies, learned models and the anonymous-memory shim stay on the Python path.
"""

from __future__ import annotations

import os
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pagecast.live.injector import Issued
from pagecast.live.worker import SourceSpec
from pagecast.policies.base import policies_for, policy_entry, supports

# The config file's header, mirrored from native/live/fastpath.h (struct fp_config_head;
# tests/test_binary_layouts.py compares the two): magic "PCFAST", the version as one ASCII
# digit, a NUL.
CONFIG_VERSION = 1
MAGIC = b"PCFAST%d\0" % CONFIG_VERSION
CONFIG_HEAD = struct.Struct("<8sII4qQ")
CONFIG_HEAD_FIELDS = ("magic", "mode", "nfiles", "lookahead", "gap", "p0", "p1", "nrows")
# A schedule with more of its rows in anonymous/heap memory than this stays on the Python
# path, where the LD_PRELOAD shim prefetches those pages (the fast path cannot).
MAX_ANON_SHARE = 0.01
# Schedule replay is not a registry policy: its mode lies above every policy id
# (native/policy/pc_policy_ids.h); a policy's mode is its registry ``native_id``.
REPLAY_MODE = 256
FLAG_AT_START = 1


def fast_mode(spec: SourceSpec) -> str | None:
    """The fast path's mode for this predictor, or None when it must run in Python."""
    if spec.kind == "schedule":
        return "replay"
    if spec.kind == "policy" and supports(spec.name, "live"):
        return spec.name
    return None


@dataclass
class FastPathState:
    """Stands in for the predictor process in the summary (same attributes)."""

    name: str
    alive: bool = True
    error: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    dropped_batches: int = 0


def write_config(spec: SourceSpec, gap: int, anon: bool = True, directory: str | None = None) -> tuple[Path, str] | str:
    """Write the fast path's config for ``spec`` to a temp file: (path, mode), or the
    reason why this predictor (or this schedule) stays on the Python path."""
    mode = fast_mode(spec)
    if mode is None:
        return f"not available for {spec.label()} (replay, {', '.join(policies_for('live'))} only)"
    files: list[tuple[int, str]] = []
    row_file = np.empty(0, np.int32)
    row_page = np.empty(0, np.int64)
    p0 = p1 = 0
    mode_id = REPLAY_MODE
    if mode == "replay":
        from pagecast.live.sources import load_replay

        sched = load_replay(spec.path)
        if not sched.regions:
            return "the schedule has no region table (only the Python source matches its ids)"
        s = sched.sorted()
        shim_kinds = {r.id for r in sched.regions if r.kind in ("anon", "heap")}
        share = float(np.isin(s.region, list(shim_kinds)).mean()) if shim_kinds and len(s) else 0.0
        if anon and share > MAX_ANON_SHARE:
            return f"{share:.0%} of the schedule is anonymous memory: the in-process shim runs on the Python path"
        file_regions = [r for r in sched.regions if r.kind == "file" and r.path]
        files = [(r.id, r.path) for r in file_regions]
        lut = np.full(max([r.id for r in sched.regions] + [0]) + 2, -1, np.int32)
        for i, r in enumerate(file_regions):
            lut[r.id] = i
        reg = s.region.astype(np.int64)
        row_file = np.where((reg >= 0) & (reg < len(lut) - 1), lut[np.clip(reg, 0, len(lut) - 1)], -1).astype(np.int32)
        row_page = s.page.astype(np.int64)
    else:
        from pagecast.policies.base import get_prefetcher

        pf = get_prefetcher(mode, **(spec.options or {}))
        p0, p1 = pf.native_params()
        mode_id = policy_entry(mode).native_id
    head = CONFIG_HEAD.pack(MAGIC, mode_id, len(files), int(spec.lookahead), int(gap), int(p0), int(p1), len(row_page))
    body = b"".join(struct.pack("<Ii", len(p.encode()), tag) + p.encode() for tag, p in files)
    fd, name = tempfile.mkstemp(prefix="pagecast-fast-", suffix=".cfg", dir=directory)
    with os.fdopen(fd, "wb") as f:
        f.write(head + body + row_file.astype("<i4").tobytes() + row_page.astype("<i8").tobytes())
    return Path(name), mode


def issued_from_monitor(mon: Any, t0: int) -> list[Issued]:
    """What the fast path issued, as the injector's records (times relative to ``t0``).

    Pages issued at start carry the schedule's encoded region id (``-2 - id``), as the
    Python replay's, so the summary maps and counts them the same way; the rest carry
    the live region of their file (by path).
    """
    if not mon.fast_issued:
        return []
    a = np.concatenate(mon.fast_issued)
    nfile = max(mon.fast_files, default=-1) + 1
    live = np.full(nfile + 1, -1, np.int32)
    tag = np.full(nfile + 1, -1, np.int32)
    for i, (t, path) in mon.fast_files.items():
        live[i] = mon.region_of_path(path)
        tag[i] = t
    f = np.where(a["file"] >= 0, a["file"], nfile)
    at_start = (a["flags"] & FLAG_AT_START) != 0
    region = np.where(at_start & (tag[f] >= 0), -2 - tag[f], live[f]).astype(np.int32)

    def rel(col: str) -> np.ndarray:
        return a[col].astype(np.int64) - np.int64(t0)

    t_fault = np.where(at_start, -1, rel("t_fault"))
    t_seen = np.where(at_start, -1, rel("t_seen"))
    return [Issued(rel("t_issue"), region, a["page"].astype(np.int64), t_fault, t_seen, rel("t_submit"))]
