"""``pagecast plan``'s choice: one strategy per file, by predicted time, checked on held-out runs.

For every file the recordings name, five candidates are priced by the I/O cost model
(``pagecast.plan.cost_model``, driven by the device's calibration and read-ahead setting):

    nothing         the program alone, the kernel's default read-ahead
    nothing+random  the program alone, read-ahead off for this file
    warm+default    warm the shared pages first, default read-ahead for the rest
    warm+random     warm the shared pages first, read-ahead off for the rest
    stream          read the whole file ahead (only when runs use most of it)

The shared pages are those used by at least ``min_runs`` runs (default: all but one).
Each candidate is validated leave-one-run-out: the shared pages are computed from all
runs but one (with the same share of runs: 2 of 3 becomes 2 of the 2 left), the time of the one left out is predicted, and the predictions are
averaged over the runs (a single recording is priced in-sample, and says so). The cheapest
candidate is chosen only if it beats ``nothing`` by ``margin`` (10 %); otherwise the file
gets ``nothing``: a plan must never cost more than no plan, and the model is approximate.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pagecast.errors import PagecastError
from pagecast.plan.cost_model import CostParams, DeviceCosts, device_costs_for, predict
from pagecast.plan.format import DEFAULT_CHUNK_KIB, DEFAULT_DEPTH, PAGE_SIZE, FileIdentity, FilePlan, PlanDoc
from pagecast.plan.shared_pages import file_pages, merge_ranges, recorded_identity
from pagecast.trace.pageset import read_page_sets

CANDIDATES = ("nothing", "nothing+random", "warm+default", "warm+random", "stream")
PREFERENCE = ("nothing", "nothing+random", "stream", "warm+random", "warm+default")
TIE = 0.01


@dataclass
class PlannerConfig:
    min_runs: int | None = None  # None: all runs but one, at least 1
    depth: int = DEFAULT_DEPTH
    chunk_kib: int = DEFAULT_CHUNK_KIB
    margin: float = 0.10  # a candidate must predict this much less time than nothing
    stream_min_fraction: float = 0.5  # stream is a candidate when runs use at least this share of the file
    overlap: float = 0.0  # see cost_model: prefetch time assumed hidden behind the program's CPU work
    device: DeviceCosts | None = None  # None: per file, the calibration of its device (else built-in)


@dataclass
class FileChoice:
    """Why a file got its strategy: the per-candidate predictions (mean seconds per held-out run)."""

    path: str
    chosen: str
    why: str
    predicted_s: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # candidate -> why it was not priced
    validation: str = ""
    device: str = ""
    read_ahead_kb: int = 0
    runs_using: int = 0
    mean_pages_used: float = 0.0
    file_pages: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in vars(self).items()} | {
            "predicted_s": {k: round(v, 6) for k, v in self.predicted_s.items()}}


def shared_pages(runs: Sequence[np.ndarray], k: int, file_pages: int) -> np.ndarray:
    """Sorted pages used by at least ``k`` of ``runs``, inside the file."""
    if not runs:
        return np.empty(0, np.int64)
    pages, counts = np.unique(np.concatenate(runs), return_counts=True)
    return pages[(counts >= k) & (pages >= 0) & (pages < file_pages)]


def _k(cfg: PlannerConfig, nruns: int) -> int:
    """Runs (of ``nruns``) a page must be used by to be warmed: --min-runs, else all but one."""
    return max(1, min(cfg.min_runs, nruns)) if cfg.min_runs is not None else max(1, nruns - 1)


def _k_fold(cfg: PlannerConfig, nruns: int) -> int:
    """The same share of runs when one run is held out (2 of 3 runs → 2 of the 2 left), so
    each fold prices the warm set the final plan's rule would pick, not a looser one."""
    return max(1, math.ceil(_k(cfg, nruns) * (nruns - 1) / nruns))


def price_file(runs: list[np.ndarray], file_pages: int, mapped: bool, dev: DeviceCosts,
               cfg: PlannerConfig) -> tuple[dict[str, float], dict[str, str], str]:  # fmt: skip
    """Mean predicted seconds per candidate over held-out runs; (predictions, skipped, validation)."""
    params = CostParams(cfg.depth, cfg.chunk_kib, cfg.overlap)
    n = len(runs)
    used = [np.unique(r[(r >= 0) & (r < file_pages)]) for r in runs]
    skipped: dict[str, str] = {}
    frac = float(np.mean([len(u) for u in used])) / max(1, file_pages)
    cands = list(CANDIDATES)
    if frac < cfg.stream_min_fraction:
        cands.remove("stream")
        skipped["stream"] = f"runs use {frac:.0%} of the file (< {cfg.stream_min_fraction:.0%})"
    if n == 1:
        folds = [(used, used[0])]
        validation = "in-sample: one recording, nothing held out"
    else:
        folds = [(used[:i] + used[i + 1 :], used[i]) for i in range(n)]
        validation = f"leave-one-run-out over {n} runs"
    totals = {c: 0.0 for c in cands}
    any_shared = False
    for train, held in folds:
        s = shared_pages(train, _k_fold(cfg, n) if n > 1 else 1, file_pages)
        any_shared |= len(s) > 0
        for c in cands:
            totals[c] += predict(dev, held, s, file_pages, c, mapped, params).seconds
    if not any_shared:
        for c in ("warm+default", "warm+random"):
            totals.pop(c)
            skipped[c] = "no page shared by enough runs in any fold"
    return {c: t / len(folds) for c, t in totals.items()}, skipped, validation


def choose(predicted: dict[str, float], margin: float) -> tuple[str, str]:
    """The candidate to plan and why: the cheapest, if it beats ``nothing`` by ``margin``."""
    base = predicted["nothing"]
    cheapest = min(predicted.values())
    # near-ties go to the simpler plan (no prefetch, then a whole-file stream without ranges,
    # then warm); between the warm ones to random advice, which bounds what a miss the
    # recordings did not foresee costs (one page, not a read-around window)
    best = next(c for c in PREFERENCE if c in predicted and predicted[c] <= cheapest * (1 + TIE))
    if best == "nothing":
        return "nothing", f"nothing is predicted cheapest ({base * 1e3:.1f} ms)"
    if predicted[best] <= (1.0 - margin) * base:
        return best, (f"{best} predicted {predicted[best] * 1e3:.1f} ms vs nothing {base * 1e3:.1f} ms "
                      f"({1 - predicted[best] / base:.0%} less)")  # fmt: skip
    return "nothing", (f"best {best} predicted {predicted[best] * 1e3:.1f} ms, not {margin:.0%} below nothing "
                       f"{base * 1e3:.1f} ms: not worth the risk")  # fmt: skip


def _file_plan(fp: FilePlan, chosen: str, shared: np.ndarray) -> None:
    if chosen == "nothing+random":
        fp.advice = "random"
    elif chosen.startswith("warm+"):
        fp.strategy, fp.advice = "warm", chosen.split("+")[1]
        fp.ranges = merge_ranges(shared)
    elif chosen == "stream":
        fp.strategy = "stream"


def plan_by_predicted_time(traces: Sequence[str | Path], cfg: PlannerConfig = PlannerConfig(),
                           on_rows: Callable[[int], None] | None = None) -> tuple[PlanDoc, list[FileChoice]]:  # fmt: skip
    if not traces:
        raise PagecastError("no recordings given")
    n = len(traces)
    if cfg.min_runs is not None and not 1 <= cfg.min_runs <= n:
        raise PagecastError(f"--min-runs {cfg.min_runs} is outside 1..{n} (the number of recordings)")
    if not 0.0 <= cfg.margin < 1.0 or not 0.0 <= cfg.overlap <= 1.0:
        raise PagecastError("--margin must be in [0, 1) and --overlap in [0, 1]")
    per_run = [file_pages(t, on_rows) for t in traces]
    mapped_pages: dict[str, int] = {}
    read_pages: dict[str, int] = {}
    idents: dict[str, FileIdentity] = {}
    for t in traces:
        ps = read_page_sets(t)
        for key, m in ps.mapped.items():
            mapped_pages[key] = mapped_pages.get(key, 0) + m
            read_pages[key] = read_pages.get(key, 0) + ps.read[key]
        idents.update(recorded_identity(t))
    newest_trace_ns = max(os.stat(t).st_mtime_ns for t in traces)
    doc, choices = PlanDoc(), []
    for path in sorted({p for run in per_run for p in run}):
        try:
            st = os.stat(path)
        except OSError:
            continue  # gone: nothing to plan
        if not os.path.isfile(path):
            continue
        ident = idents.get(path) or FileIdentity(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
        fp = FilePlan(path, ident, depth=cfg.depth, chunk_kib=cfg.chunk_kib)
        doc.files.append(fp)
        if path not in idents and st.st_mtime_ns > newest_trace_ns:
            fp.reason = "file modified after the recordings were written: its recorded pages may not apply"
            choices.append(FileChoice(path, "nothing", fp.reason))
            continue
        npages = -(-st.st_size // PAGE_SIZE)
        runs = [run.get(path, np.empty(0, np.int64)) for run in per_run]
        mapped = mapped_pages.get(path, 0) >= read_pages.get(path, 0)
        dev = cfg.device or device_costs_for(path, st.st_dev)
        predicted, skipped, validation = price_file(runs, npages, mapped, dev, cfg)
        chosen, why = choose(predicted, cfg.margin)
        shared = shared_pages(runs, _k(cfg, n), npages)
        if chosen.startswith("warm+") and len(shared) == 0:
            chosen, why = "nothing", f"{chosen} was cheapest in the folds, but no page is shared by enough of all runs"
        _file_plan(fp, chosen, shared)
        fp.gain_ms = (predicted["nothing"] - predicted[chosen]) * 1e3
        fp.reason = f"{chosen}: {why}"
        used = [len(r) for r in runs if len(r)]
        choices.append(FileChoice(path, chosen, why, predicted, skipped, validation, dev.source, dev.read_ahead_kb,
                                  len(used), float(np.mean(used)) if used else 0.0, npages))  # fmt: skip
    return doc, choices
