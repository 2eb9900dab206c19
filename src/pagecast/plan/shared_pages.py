"""The first planner: warm the file pages that most recorded runs used.

For every file the recordings name, a page counts for a run if any of the run's rows in a
file region touches it (faults today; the full page sets of newer recordings, whatever
their row kind, the same way: every kind but PREFETCH and EVICT, which say what pagecast
or a driver did, not what the program used). Pages used by at least ``min_runs`` runs
are planned as ``warm`` in merged ranges, in file order; a file with no such page gets
``nothing``.

``pagecast plan`` uses the page evidence here (``file_pages``, ``recorded_identity``,
``merge_ranges``) and chooses each file's strategy by predicted time
(``pagecast.plan.planner``); ``plan_from_recordings`` is the plain rule without that
choice (warm or nothing), kept for scripts that want exactly the shared pages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from pagecast.errors import PagecastError
from pagecast.plan.format import DEFAULT_CHUNK_KIB, DEFAULT_DEPTH, PAGE_SIZE, FileIdentity, FilePlan, PlanDoc
from pagecast.trace import open_trace
from pagecast.trace.schema import Kind

NOT_USES = (int(Kind.PREFETCH), int(Kind.EVICT))


@dataclass
class PlanConfig:
    min_runs: int | None = None  # None: all runs but one, at least 1
    depth: int = DEFAULT_DEPTH
    chunk_kib: int = DEFAULT_CHUNK_KIB


def file_pages(trace_path: str | Path, on_rows: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
    """File path → sorted unique file pages (offset // 4096) the run used; the files in the
    order the run first used them (the row of a file's first use).

    Every row kind counts here, page-set and fault rows alike, so these are never fewer
    pages than ``pagecast.trace.pageset.file_page_sets`` (page-set rows only, when the
    recording has them) and sometimes more (fault rows with no page-set row)."""
    t = open_trace(trace_path)
    if t.page_size != PAGE_SIZE:
        raise PagecastError(f"page size {t.page_size}: plans are in {PAGE_SIZE}-byte pages", path=trace_path)
    nreg = max((r.id for r in t.regions), default=-1) + 1
    is_file = np.zeros(nreg + 1, bool)  # last slot: rows with region -1
    base = np.zeros(nreg + 1, np.int64)
    for r in t.regions:
        if r.kind == "file" and r.path and not r.extra.get("recorder"):  # the recorder's shim: not the run's
            is_file[r.id] = True
            base[r.id] = r.file_offset // PAGE_SIZE
    parts: dict[int, list[np.ndarray]] = {}
    first: dict[int, int] = {}  # region -> row of its first use
    row0 = 0
    for b in t.iter_batches(["region", "page", "kind"]):
        reg = np.where((b["region"] >= 0) & (b["region"] < nreg), b["region"], nreg)
        keep = is_file[reg] & ~np.isin(b["kind"], NOT_USES)
        pos = np.flatnonzero(keep) + row0
        reg, page = reg[keep], b["page"][keep] + base[reg[keep]]
        order = np.argsort(reg, kind="stable")
        reg, page, pos = reg[order], page[order], pos[order]
        ids, starts = np.unique(reg, return_index=True)
        for rid, start, chunk in zip(ids, starts, np.split(page, starts[1:])):
            parts.setdefault(int(rid), []).append(np.unique(chunk))
            first.setdefault(int(rid), int(pos[start]))  # a stable sort keeps the earliest row first
        row0 += len(b["region"])
        if on_rows:
            on_rows(len(b["region"]))
    by_id = {r.id: r for r in t.regions}
    merged: dict[str, list[np.ndarray]] = {}
    first_row: dict[str, int] = {}
    for rid, ps in parts.items():
        path = by_id[rid].path
        merged.setdefault(path, []).extend(ps)
        first_row[path] = min(first_row.get(path, first[rid]), first[rid])
    return {p: np.unique(np.concatenate(merged[p])) for p in sorted(merged, key=lambda p: (first_row[p], p))}


def first_use_order(per_run: Sequence[dict[str, np.ndarray]]) -> list[str]:
    """Every file some run used, in the order the runs first used them: by the mean over the
    runs that used a file of its position in that run's order (``file_pages``), as a share of
    the run's files; ties by path. A plan's requests go out in its file order, so the files
    a program needs first are warmed first."""
    pos: dict[str, list[float]] = {}
    for run in per_run:
        for i, path in enumerate(run):
            pos.setdefault(path, []).append(i / len(run))
    return sorted(pos, key=lambda p: (sum(pos[p]) / len(pos[p]), p))


def recorded_identity(trace_path: str | Path) -> dict[str, FileIdentity]:
    """Identities the recorder stored with the file regions (``extra['identity']``), if any."""
    out = {}
    for r in open_trace(trace_path).regions:
        ident = r.extra.get("identity") if r.kind == "file" and r.path else None
        if isinstance(ident, dict):
            try:
                out[r.path] = FileIdentity(*(int(ident[k]) for k in ("size", "mtime_ns", "ctime_ns", "ino", "dev")))
            except (KeyError, TypeError, ValueError):
                pass
    return out


@dataclass(frozen=True)
class RecordedFile:
    """A file the recordings used that a plan can name: it exists now and is a regular file."""

    path: str
    identity: FileIdentity  # as recorded when the recorder stored it, else as the file is now
    size: int  # now
    dev: int  # now: the device whose read-ahead setting applies
    modified: bool  # changed after the recordings were written, and no identity was recorded

    @property
    def pages(self) -> int:
        return -(-self.size // PAGE_SIZE)


def recorded_files(traces: Sequence[str | Path], per_run: Sequence[dict[str, np.ndarray]]) -> list[RecordedFile]:
    """Every file some run used (``per_run``: ``file_pages`` of each trace), in the order the
    runs first used them (``first_use_order``), with the identity a plan stores for it. Files
    gone since, or no longer regular files, are left out: there is nothing to plan for them."""
    idents: dict[str, FileIdentity] = {}
    for t in traces:
        idents.update(recorded_identity(t))
    newest_trace_ns = max(os.stat(t).st_mtime_ns for t in traces)
    out = []
    for path in first_use_order(per_run):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not os.path.isfile(path):
            continue
        ident = idents.get(path) or FileIdentity(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
        modified = path not in idents and st.st_mtime_ns > newest_trace_ns
        out.append(RecordedFile(path, ident, st.st_size, st.st_dev, modified))
    return out


def recurrence(per_run: Sequence[dict[str, np.ndarray]]) -> tuple[float, float] | None:
    """How much of a run's file pages other runs used too, leave-one-run-out: the mean over
    the runs of the share of its (file, page) pairs that at least one other run used, and
    that every other run used. A plan learned from recordings can only warm pages that
    recur, so this bounds what it can do for a new input. None with fewer than 2 runs."""
    if len(per_run) < 2:
        return None
    paths = {p: i for i, p in enumerate(sorted({p for run in per_run for p in run}))}
    keys = [
        np.unique(
            np.concatenate(
                [(paths[p] << 40) | np.asarray(v, np.int64) for p, v in run.items()] or [np.empty(0, np.int64)]
            )
        )
        for run in per_run
    ]
    allk, counts = np.unique(np.concatenate(keys), return_counts=True)  # counts: runs using each pair
    anyo, allo = [], []
    for k in keys:
        if len(k) == 0:
            continue
        c = counts[np.searchsorted(allk, k)] - 1  # other runs using each of this run's pairs
        anyo.append(float(np.mean(c >= 1)))
        allo.append(float(np.mean(c >= len(per_run) - 1)))
    return (float(np.mean(anyo)), float(np.mean(allo))) if anyo else None


def recurrence_line(per_run: Sequence[dict[str, np.ndarray]]) -> str:
    """``recurrence`` in words (empty with fewer than 2 runs)."""
    r = recurrence(per_run)
    if r is None:
        return ""
    return (
        f"recurrence over {len(per_run)} recordings: {r[0]:.0%} of a recording's file pages were used by "
        f"another recording, {r[1]:.0%} by every other; a plan can only warm pages that recur "
        "(more recordings of varied inputs raise the first)"
    )


def merge_ranges(pages: np.ndarray) -> list[tuple[int, int]]:
    """Sorted unique pages → maximal runs of consecutive pages as (first, count)."""
    p = np.asarray(pages, np.int64)
    if len(p) == 0:
        return []
    breaks = np.nonzero(np.diff(p) != 1)[0] + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(p)]])
    return list(zip(p[starts].tolist(), (ends - starts).tolist()))


def plan_from_recordings(
    traces: Sequence[str | Path], cfg: PlanConfig = PlanConfig(), on_rows: Callable[[int], None] | None = None
) -> PlanDoc:
    if not traces:
        raise PagecastError("no recordings given")
    n = len(traces)
    k = cfg.min_runs if cfg.min_runs is not None else max(1, n - 1)
    if not 1 <= k <= n:
        raise PagecastError(f"--min-runs {k} is outside 1..{n} (the number of recordings)")
    per_run = [file_pages(t, on_rows) for t in traces]
    doc = PlanDoc()
    for rf in recorded_files(traces, per_run):
        path = rf.path
        used = [run[path] for run in per_run if path in run]
        fp = FilePlan(path, rf.identity, depth=cfg.depth, chunk_kib=cfg.chunk_kib)
        if rf.modified:
            fp.reason = "file modified after the recordings were written: its recorded pages may not apply"
            doc.files.append(fp)
            continue
        pages, counts = np.unique(np.concatenate(used), return_counts=True)
        shared = pages[(counts >= k) & (pages >= 0) & (pages * PAGE_SIZE < rf.size)]
        if len(shared) == 0:
            fp.reason = f"no page used by >= {k} of {n} runs ({len(used)} runs used the file)"
        else:
            fp.strategy = "warm"
            fp.ranges = merge_ranges(shared)
            fp.reason = (
                f"{len(shared)} pages used by >= {k} of {n} runs, {len(fp.ranges)} ranges; warm chosen "
                "without a predicted-time comparison (not built yet)"
            )
        doc.files.append(fp)
    return doc
