"""``pagecast plan``'s choice: one strategy per file, by predicted time, checked on held-out runs.

For every file the recordings name, candidates are priced by the I/O cost model
(``pagecast.plan.cost_model``, driven by the device's calibration and read-ahead setting):

    nothing             the program alone, the kernel's default read-ahead
    nothing+random      the program alone, read-ahead off for this file (mapped files)
    warm+ADVICE[@k]     warm the pages at least k runs used (hot pages), then ADVICE
                        (default, or random for mapped files) for the program's misses
    whole               warm the whole file (one request for a small file)
    stream              read the whole file ahead (only when runs use most of it)

Every threshold k that gives a different warm set in the folds is its own candidate (k =
all runs: the pages every input used, such as B-tree interior pages and headers; k = 1:
every page any run used): how far down the frequency order warming still pays depends on
how skewed the program's accesses are, and leave-one-run-out decides. Each candidate is
validated leave-one-run-out: the warm set is computed from all runs but one (with the
same share of runs: 2 of 3 becomes 2 of the 2 left), the time of the one left out is
predicted, and the predictions are averaged over the runs (a single recording is priced
in-sample, and says so). The cheapest candidate is chosen only if it beats ``nothing`` by
``margin`` (10 %); otherwise the file gets ``nothing``: a plan must never cost more than
no plan, and the model is approximate.

Two run-wide steps follow, both priced on the same folds:

- CPU overlap (``overlap_upgrades``): the launcher prefetches while the program runs, so
  prefetching hidden behind the program's CPU time costs nothing. The CPU time is measured
  from the recordings (the span of their first touches less the modelled I/O, the least
  over the runs), times ``overlap`` (0.5); it is one budget for all files, spent on the upgrades that save the
  most I/O per second of prefetching.
- Small files (``small_files_group``): a file only one recording read gets ``nothing`` from
  its own folds, but a program that reads many small files (git's loose objects, modules)
  often reads again files another input read. The group of small files is priced as one
  candidate (warm whole every small file the training runs of a fold used) against the
  files' own choices, and wins or loses as a whole.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pagecast.errors import PagecastError
from pagecast.plan.cost_model import (
    CostParams,
    DeviceCosts,
    Prediction,
    device_costs_for,
    predict,
    predict_extent,
    predict_objects,
    predict_pack,
)
from pagecast.plan.format import (
    DEFAULT_CHUNK_KIB,
    DEFAULT_DEPTH,
    PAGE_SIZE,
    FilePlan,
    PlanDoc,
)
from pagecast.plan.objects import ObjectLayout, learn_layout, object_pages
from pagecast.plan.shared_pages import file_pages, merge_ranges, recorded_files, recurrence_line
from pagecast.trace.pageset import read_page_sets
from pagecast.util.elf import is_elf

CANDIDATES = ("nothing", "nothing+random", "warm+default", "warm+random", "whole", "stream")
# near-ties go to the simpler plan: no prefetch, then a whole-file read without ranges, then warm
PREFERENCE = (
    "nothing",
    "nothing+random",
    "stream",
    "whole",
    "warm+random",
    "warm+default",
    "objects+random",
    "objects+default",
)
TIE = 0.01
SMALL_FILES = "small files whole"
OBJECTS = "per-fault:objects"  # a mapped file's objects fetched whole on their first touch


@dataclass
class PlannerConfig:
    min_runs: int | None = None  # None: every threshold, chosen by leave-one-run-out (see hot_thresholds)
    depth: int = DEFAULT_DEPTH
    chunk_kib: int = DEFAULT_CHUNK_KIB
    margin: float = 0.10  # a candidate must predict this much less time than nothing
    stream_min_fraction: float = 0.5  # stream is a candidate when runs use at least this share of the file
    overlap: float = 0.5  # share of the program's CPU time the prefetcher's work may hide behind (run-wide)
    max_regret: float = 0.2  # an overlap upgrade priced with no credit may cost at most this much more
    small_kib: int = 1024  # files up to this size form the "small files whole" group
    live_startup_s: float = 0.5  # what starting the Python live machinery costs a run (pack, per-fault)
    pack_dir: Path | None = None  # where chosen page packs are written; None: pack is not a candidate
    # the chosen packs' names start with this (the plan's own file name: two plans written in
    # one directory, say one predicted and one measured, never share or remove each other's packs)
    pack_prefix: str = ""
    # writes a chosen pack (source file, pages, pack path): the pager's format, so the caller
    # (a layer above this one) passes it in; required with pack_dir
    pack_writer: Callable[[str, np.ndarray, Path], object] | None = None
    extent_pages: int = 512  # per-fault extent: files up to this many pages are one object (the policy's default)
    # what a planned run costs before the program starts (the native front and launcher: about
    # 1 ms measured, benchmarks/launch_overhead.py); a plan must gain more than this plus the
    # noise (``noise`` x the run's predicted I/O) or it is "nothing" for every file
    startup_s: float = 0.002
    objects: bool = True  # learn object layouts and price warming the recurring objects whole
    fit: bool = True  # scale the device model's times to the recordings' own timing (fit_scale)
    noise: float = 0.05  # run-to-run spread of a cold run's time (measured 2-16 % in the real-program benchmark)
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
    objects: str = ""  # the object layout the recordings show, described

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in vars(self).items()} | {
            "predicted_s": {k: round(v, 6) for k, v in self.predicted_s.items()}
        }


def shared_pages(runs: Sequence[np.ndarray], k: int, file_pages: int) -> np.ndarray:
    """Sorted pages used by at least ``k`` of ``runs``, inside the file."""
    if not runs:
        return np.empty(0, np.int64)
    pages, counts = np.unique(np.concatenate(runs), return_counts=True)
    return pages[(counts >= k) & (pages >= 0) & (pages < file_pages)]


def shared_objects(runs: Sequence[np.ndarray], k: int, layout: ObjectLayout, file_pages: int) -> np.ndarray:
    """Every page of the objects at least ``k`` of ``runs`` touched (any page of it)."""
    if not runs:
        return np.empty(0, np.int64)
    ids = [np.unique((r[(r >= 0) & (r < file_pages)] - layout.align) // layout.pages) for r in runs]
    objs, counts = np.unique(np.concatenate(ids), return_counts=True)
    hot = objs[counts >= k]
    return object_pages(layout.align + hot * layout.pages, layout, file_pages)


def _k(cfg: PlannerConfig, nruns: int) -> int:
    """The default threshold: --min-runs, else all runs but one (at least 1)."""
    return max(1, min(cfg.min_runs, nruns)) if cfg.min_runs is not None else max(1, nruns - 1)


def _k_fold(k: int, nruns: int) -> int:
    """The same share of runs when one run is held out (2 of 3 runs → 2 of the 2 left), so
    each fold prices the warm set the final plan's rule would pick, not a looser one."""
    return max(1, math.ceil(k * (nruns - 1) / nruns)) if nruns > 1 else 1


def hot_thresholds(cfg: PlannerConfig, nruns: int) -> list[int]:
    """Thresholds k (pages used by >= k of the runs) priced as separate warm candidates.

    A page's frequency across the training runs is the evidence that a new input uses it
    (hot keys, frequent tokens, shared headers): k = all runs warms only what every run
    used, k = 1 every page any run used. Which pays depends on how skewed the program's
    accesses are, so each threshold is its own candidate and leave-one-run-out chooses.
    Thresholds that fall on the same one in the folds are the same candidate (the default
    one, else the lowest). With --min-runs, only that threshold."""
    if cfg.min_runs is not None:
        return [_k(cfg, nruns)]
    default = _k(cfg, nruns)
    by_fold: dict[int, int] = {_k_fold(default, nruns): default}
    for k in range(1, nruns + 1):
        by_fold.setdefault(_k_fold(k, nruns), k)
    return sorted(by_fold.values(), reverse=True)


def _warm_name(advice: str, k: int, default_k: int) -> str:
    return f"warm+{advice}" if k == default_k else f"warm+{advice}@{k}"


def parse_candidate(name: str) -> tuple[str, str, int | None]:
    """'warm+random@1' → ('warm', 'random', 1); 'nothing' → ('nothing', 'default', None)."""
    base, _, k = name.partition("@")
    kind, _, advice = base.partition("+")
    return kind, advice or "default", int(k) if k else None


@dataclass
class FilePricing:
    """One file's candidates priced on every fold: ``folds[c][i]`` is fold i's prediction."""

    folds: dict[str, list[Prediction]]
    warm_sets: dict[str, np.ndarray]  # warm or pack candidate -> its pages on all runs (the plan's ranges)
    skipped: dict[str, str]
    validation: str
    live: dict[str, list[Prediction]] = field(default_factory=dict)  # pack / per-fault: need the live machinery
    layout: ObjectLayout | None = None  # the objects the recordings read whole, if they show any
    args: dict[str, str] = field(default_factory=dict)  # per-fault candidate -> the plan's policy spec

    def mean(self) -> dict[str, float]:
        return {c: float(np.mean([p.seconds for p in ps])) for c, ps in self.folds.items()}


def price_folds(
    runs: list[np.ndarray], file_pages: int, mapped: bool, dev: DeviceCosts, cfg: PlannerConfig, elf: bool = False
) -> FilePricing:
    params = CostParams(cfg.depth, cfg.chunk_kib, 0.0)
    n = len(runs)
    used = [np.unique(r[(r >= 0) & (r < file_pages)]) for r in runs]
    skipped: dict[str, str] = {}
    frac = float(np.mean([len(u) for u in used])) / max(1, file_pages)
    fixed = ["nothing", "nothing+random", "whole", "stream"]
    advices = ("random", "default")
    if not mapped:
        # read() files keep the kernel's read-ahead: it starts at a few pages and grows only
        # along sequential reads, and the recordings do not hold read sizes, so the model
        # cannot see what turning it off costs (SQLite over pread measured 0.72-0.73x the
        # default with it off: BENCHMARKS.md "Cold start of real programs")
        fixed.remove("nothing+random")
        advices = ("default",)
        skipped["nothing+random"] = skipped["warm+random"] = "read() file: read-ahead advice left to the kernel"
    if frac < cfg.stream_min_fraction:
        fixed.remove("stream")
        skipped["stream"] = f"runs use {frac:.0%} of the file (< {cfg.stream_min_fraction:.0%})"
    folds, validation = _folds(used)
    default_k = _k(cfg, n)
    out: dict[str, list[Prediction]] = {c: [] for c in fixed}
    warm_sets: dict[str, np.ndarray] = {}
    for k in hot_thresholds(cfg, n):
        kf = _k_fold(k, n)
        fold_sets = [shared_pages(train, kf, file_pages) for train, _ in folds]
        if not any(len(x) for x in fold_sets):
            for adv in advices:
                skipped[_warm_name(adv, k, default_k)] = f"no page used by >= {kf} runs in any fold"
            continue
        final = shared_pages(used, k, file_pages)
        for adv in advices:
            name = _warm_name(adv, k, default_k)
            warm_sets[name] = final
            out[name] = [
                predict(dev, held, s, file_pages, f"warm+{adv}", mapped, params)
                for (_, held), s in zip(folds, fold_sets)
            ]
    layout = learn_layout(used) if cfg.objects else None
    if layout is not None:
        # warm the objects that recur, whole: each fold learns which from its training runs
        for k in hot_thresholds(cfg, n):
            kf = _k_fold(k, n)
            fold_sets = [shared_objects(train, kf, layout, file_pages) for train, _ in folds]
            if not any(len(x) for x in fold_sets):
                continue
            final = shared_objects(used, k, layout, file_pages)
            for adv in advices:
                name = _warm_name(adv, k, default_k).replace("warm+", "objects+")
                warm_sets[name] = final
                out[name] = [
                    predict(dev, held, s, file_pages, f"warm+{adv}", mapped, params)
                    for (_, held), s in zip(folds, fold_sets)
                ]
    elif cfg.objects and file_pages * PAGE_SIZE > cfg.small_kib * 1024:
        skipped["objects"] = "no object structure in the recordings (runs of pages of one size and alignment)"
    none = np.empty(0, np.int64)
    for c in fixed:
        out[c] = [predict(dev, held, none, file_pages, c, mapped, params) for _, held in folds]
    # no pack for an ELF file: the dynamic loader maps it before the pager is in place
    live, args = _price_live(used, folds, file_pages, mapped, dev, cfg, layout, warm_sets, skipped, not elf)
    return FilePricing(out, warm_sets, skipped, validation, live, layout, args)


def _folds(used: list[np.ndarray]) -> tuple[list[tuple[list[np.ndarray], np.ndarray]], str]:
    """(training runs, held-out run) pairs: leave-one-run-out, or in-sample with one run."""
    n = len(used)
    if n == 1:
        return [(used, used[0])], "in-sample: one recording, nothing held out"
    return [(used[:i] + used[i + 1 :], used[i]) for i in range(n)], f"leave-one-run-out over {n} runs"


def _price_live(
    used: list[np.ndarray],
    folds: list[tuple[list[np.ndarray], np.ndarray]],
    file_pages: int,
    mapped: bool,
    dev: DeviceCosts,
    cfg: PlannerConfig,
    layout: ObjectLayout | None,
    warm_sets: dict[str, np.ndarray],
    skipped: dict[str, str],
    packable: bool = True,
) -> tuple[dict[str, list[Prediction]], dict[str, str]]:
    """The candidates only pagecast's live machinery runs (page packs, objects fetched on
    first touch, a per-fault policy) priced per fold, and the policy arguments they need."""
    n = len(used)
    default_k = _k(cfg, n)
    params = CostParams(cfg.depth, cfg.chunk_kib, 0.0)
    live: dict[str, list[Prediction]] = {}
    if mapped and not packable:
        skipped["pack"] = "an ELF file: the dynamic loader maps it, the pager never sees it"
    elif mapped and cfg.pack_dir is not None and cfg.pack_writer is not None:
        for k in hot_thresholds(cfg, n):
            fold_sets = [shared_pages(train, _k_fold(k, n), file_pages) for train, _ in folds]
            if any(len(x) for x in fold_sets):
                name = "pack" if k == default_k else f"pack@{k}"
                warm_sets[name] = shared_pages(used, k, file_pages)
                live[name] = [predict_pack(dev, held, s) for (_, held), s in zip(folds, fold_sets)]
    elif mapped:
        skipped["pack"] = "no directory to write page packs in"
    args: dict[str, str] = {}
    if layout is not None and mapped:
        # on the first touch of an object, fetch the object: the advice shim in the program
        live[OBJECTS] = [predict_objects(dev, held, layout.pages, layout.align, file_pages) for _, held in folds]
        args[OBJECTS] = f"objects:pages={layout.pages},align={layout.align}"
    if 0 < file_pages <= cfg.extent_pages:
        live["per-fault:extent"] = [predict_extent(dev, held, file_pages, params) for _, held in folds]
    else:
        skipped["per-fault:extent"] = f"file larger than one extent ({cfg.extent_pages} pages)"
    return live, args


def price_file(
    runs: list[np.ndarray], file_pages: int, mapped: bool, dev: DeviceCosts, cfg: PlannerConfig
) -> tuple[dict[str, float], dict[str, str], str]:
    """Mean predicted seconds per candidate over held-out runs; (predictions, skipped, validation)."""
    fp = price_folds(runs, file_pages, mapped, dev, cfg)
    return fp.mean(), fp.skipped, fp.validation


def _preference(name: str) -> tuple[int, int]:
    base, _, k = name.partition("@")
    return PREFERENCE.index(base), -int(k or 1 << 30)  # among warm thresholds, the highest (fewest pages) first


def _default_twin(name: str) -> str:
    return name.replace("+random", "+default") if name.startswith(("warm", "objects")) else "nothing"


def eligible(predicted: dict[str, float], margin: float) -> dict[str, float]:
    """The candidates that may be chosen: read-ahead off (``+random``) must pay by the margin
    on its own against the same plan with the kernel's read-ahead, because the two are
    often within the model's error of each other (measured: either can be 10-20 % ahead
    on the same sparse mapped file from one run to the next)."""
    return {
        c: v
        for c, v in predicted.items()
        if "+random" not in c or _default_twin(c) not in predicted or v <= (1.0 - margin) * predicted[_default_twin(c)]
    }


def choose(predicted: dict[str, float], margin: float) -> tuple[str, str]:
    """The candidate to plan and why: the cheapest, if it beats ``nothing`` by ``margin``."""
    base = predicted["nothing"]
    predicted = eligible(predicted, margin)
    cheapest = min(predicted.values())
    # near-ties go to the simpler plan (no prefetch, then a whole-file read without ranges,
    # then warm); between the warm ones to random advice, which bounds what a miss the
    # recordings did not foresee costs (one page, not a read-around window), then to the
    # threshold that warms the fewest pages
    best = min((c for c in predicted if predicted[c] <= cheapest * (1 + TIE)), key=_preference)
    if best == "nothing":
        return "nothing", f"nothing is predicted cheapest ({base * 1e3:.1f} ms)"
    if predicted[best] <= (1.0 - margin) * base:
        return best, (
            f"{best} predicted {predicted[best] * 1e3:.1f} ms vs nothing {base * 1e3:.1f} ms "
            f"({1 - predicted[best] / base:.0%} less)"
        )
    return "nothing", (
        f"best {best} predicted {predicted[best] * 1e3:.1f} ms, not {margin:.0%} below nothing "
        f"{base * 1e3:.1f} ms: not worth the risk"
    )


def pack_path(pack_dir: Path, path: str, prefix: str = "") -> Path:
    """Where the planner writes a file's page pack: named after the plan (``prefix``) and
    the file, unique per path."""
    return Path(pack_dir) / f"{prefix}{Path(path).name}.{zlib.crc32(path.encode()):08x}.pack"


def _file_plan(
    fp: FilePlan,
    chosen: str,
    warm_sets: dict[str, np.ndarray],
    npages: int,
    pack_dir: Path | None = None,
    pack_writer: Callable[[str, np.ndarray, Path], object] | None = None,
    args: dict[str, str] | None = None,
    pack_prefix: str = "",
) -> None:
    kind, advice, _ = parse_candidate(chosen)
    fp.strategy, fp.advice, fp.ranges, fp.arg = "nothing", "default", [], ""
    if kind == "pack":
        assert pack_dir is not None and pack_writer is not None  # pack is only priced with both
        out = pack_path(pack_dir, fp.path, pack_prefix)
        pack_writer(fp.path, warm_sets[chosen], out)
        fp.strategy, fp.arg = "pack", str(out)
    elif kind == "per-fault:extent":
        fp.strategy, fp.arg = "per-fault", "extent"
    elif kind == OBJECTS:
        fp.strategy, fp.arg = "per-fault", (args or {})[OBJECTS]
    elif kind == "nothing":
        fp.advice = advice
    elif kind in ("warm", "objects"):
        fp.strategy, fp.advice = "warm", advice
        fp.ranges = merge_ranges(warm_sets[chosen])
    elif kind == "whole":
        fp.strategy, fp.ranges = "warm", [(0, npages)] if npages else []
    elif kind == "stream":
        fp.strategy = "stream"


def cpu_seconds(trace: str | Path, io_s: float) -> float:
    """The run's CPU time: the span of its recorded first touches less its modelled I/O.

    The span runs from the first to the last page the run touched, so it misses the start
    and the end of the program (interpreter start-up, exit); but it is stretched by the
    recorder's work on every fault and by other load, and the modelled I/O can be short of
    the real one, so it can also overestimate (measured: 1-3x the warm-cache wall time of
    the same program). The planner takes the least over the runs, times ``overlap``."""
    return max(0.0, recorded_span(trace) - io_s)


@dataclass
class _Priced:
    path: str
    npages: int
    runs_used: list[bool]
    pricing: FilePricing
    chosen: str
    mapped: bool = False


def _mean_split(preds: list[Prediction]) -> tuple[float, float]:
    return float(np.mean([p.pre_s for p in preds])), float(np.mean([p.prog_s for p in preds]))


def overlap_upgrades(
    priced: list[_Priced], credit_s: float, margin: float, max_regret: float = 0.2
) -> tuple[dict[str, tuple[str, str]], float]:
    """Per-file choices revisited with the prefetcher's time hidden behind the program's CPU.

    Each file was first priced with its prefetch time added to the program's (no overlap).
    The run's CPU time (times ``overlap``) is one budget for all files: the prefetcher works
    through the plan while the program computes. Files are revisited in order of I/O saved
    per second of prefetching; a candidate that prefetches more than the file's current
    choice takes its extra prefetch time from the budget, and is chosen when, so credited,
    it beats both the current choice and ``nothing`` by ``margin``. The CPU estimate can be
    wrong (see ``cpu_seconds``), so an upgrade must also be safe without any credit: priced
    with no overlap at all, at most ``max_regret`` above the better of the current choice
    and ``nothing``. Returns {path: (candidate, why)} and the budget left."""
    left = credit_s - sum(_mean_split(p.pricing.folds[p.chosen])[0] for p in priced)
    offers = []
    for p in priced:
        cur_pre, cur_prog = _mean_split(p.pricing.folds[p.chosen])
        nothing = p.pricing.mean()["nothing"]
        allowed = eligible(p.pricing.mean(), margin)
        for c, preds in p.pricing.folds.items():
            if c not in allowed:
                continue
            pre, prog = _mean_split(preds)
            if (
                pre > cur_pre
                and prog < cur_prog
                and pre + prog <= (1.0 + max_regret) * min(cur_pre + cur_prog, nothing)
            ):
                offers.append(
                    ((cur_prog - prog) / (pre - cur_pre), p, c, pre - cur_pre, prog, cur_pre + cur_prog, nothing)
                )
    out: dict[str, tuple[str, str]] = {}
    for _, p, c, extra, prog, cur, nothing in sorted(offers, key=lambda o: -o[0]):
        if p.path in out or left <= 0:
            continue
        # the current choice's own prefetching stays charged; only the extra is hidden
        credited = prog + _mean_split(p.pricing.folds[p.chosen])[0] + max(0.0, extra - left)
        if credited <= (1.0 - margin) * min(cur, nothing):
            vs = f"nothing {nothing * 1e3:.1f} ms"
            if p.chosen != "nothing":
                vs = f"{p.chosen} {cur * 1e3:.1f} ms, {vs}"
            why = (
                f"{c} predicted {credited * 1e3:.1f} ms with {min(extra, left) * 1e3:.1f} ms of its prefetching "
                f"hidden behind the program's CPU time, vs {vs}"
            )
            out[p.path] = (c, why)
            left -= extra
    return out, max(0.0, left)


def runs_natively(candidate: str, mapped: bool) -> bool:
    """Whether the native launcher runs a live candidate itself: ``extent`` on a file the
    program read()s (the advice shim sees its reads), ``objects`` on a mapped file (the
    shim sees the first touch of each object), a pack of a mapped file (the pager's shim,
    preloaded by the launcher); extent on a mapped file (no read() to see) needs the Python
    live machinery."""
    if candidate == "pack" or candidate.startswith("pack@"):
        return mapped
    return (candidate == "per-fault:extent" and not mapped) or (candidate == OBJECTS and mapped)


def live_choices(priced: list[_Priced], cfg: PlannerConfig) -> tuple[dict[str, str], str] | None:
    """Page packs and per-fault extent, priced run-wide against the files' current choices.

    Both need the Python live machinery (the userfaultfd pager, the per-fault loop) unless
    the native launcher runs the strategy itself (``runs_natively``), and that start-up
    (``live_startup_s``) is paid once by the whole run, before the program starts. So the
    files' savings (mean over the folds, each file's best live candidate against its
    current choice) are summed and the live candidates are taken only when the sum beats
    the start-up and the run's I/O under the current choices by ``margin``. One per-fault
    policy per run: every per-fault file gets the same ``extent`` spec.
    Returns ({path: candidate}, why) or None."""
    mapped = {p.path: p.mapped for p in priced}
    base = sum(float(np.mean([x.seconds for x in p.pricing.folds[p.chosen]])) for p in priced)
    best: tuple[float, dict[str, tuple[str, float]], float] | None = None
    # every live candidate (the Python start-up paid once if any needs it), or only those the
    # launcher runs natively (no start-up): whichever leaves the run cheaper
    for native_only in (False, True):
        offers: dict[str, tuple[str, float]] = {}
        for p in priced:
            cur = float(np.mean([x.seconds for x in p.pricing.folds[p.chosen]]))
            live = [
                (float(np.mean([x.seconds for x in ps])), c)
                for c, ps in p.pricing.live.items()
                if not native_only or runs_natively(c, p.mapped)
            ]
            top = min(live, default=None)
            if top and top[0] < cur:
                offers[p.path] = (top[1], cur - top[0])
        if not offers:
            continue
        startup = 0.0 if all(runs_natively(c, mapped[path]) for path, (c, _) in offers.items()) else cfg.live_startup_s
        cost = base - sum(g for _, g in offers.values()) + startup
        if best is None or cost < best[0]:
            best = (cost, offers, startup)
    if best is None or base <= 0 or best[0] > (1.0 - cfg.margin) * base:
        return None
    _, offers, startup = best
    saving = sum(g for _, g in offers.values())
    why = (
        f"live candidates save {saving * 1e3:.1f} ms of the run's predicted {base * 1e3:.1f} ms over "
        f"{len(offers)} files, {startup * 1e3:.0f} ms of live start-up included"
    )
    return {path: c for path, (c, _) in offers.items()}, why


def small_files_group(
    priced: list[_Priced], credit_s: float, cfg: PlannerConfig, nruns: int
) -> tuple[list[str], str] | None:
    """Whole-file warming of every small file any run used, priced as one candidate.

    A file only one recording used gets ``nothing`` from its own leave-one-run-out (held
    out, nothing warms it; kept, the other runs did not use it), yet a program that reads
    many small files (git's loose objects, a package's modules) often reads again files
    that another input read. The evidence for that is the group's, not the file's: in each
    fold, warm whole every small file the training runs used and price the held-out run's
    misses on all of them, against the per-file choices of the same files in the same
    fold. The prefetcher's extra time is hidden up to ``credit_s`` (the program's CPU time
    times ``overlap``): the group warms in the background while the program computes.
    Returns (paths to warm whole, why) when the group beats the per-file choices by the
    margin, else None."""
    small = [p for p in priced if 0 < p.npages * PAGE_SIZE <= cfg.small_kib * 1024 and "whole" in p.pricing.folds]
    if nruns < 2 or len(small) < 2:
        return None
    group, base = 0.0, 0.0
    for i in range(nruns):
        g_pre = g_prog = b_pre = b_prog = 0.0
        for p in small:
            cur = p.pricing.folds[p.chosen][i]
            b_pre, b_prog = b_pre + cur.pre_s, b_prog + cur.prog_s
            if any(u for j, u in enumerate(p.runs_used) if j != i):
                w = p.pricing.folds["whole"][i]
                g_pre, g_prog = g_pre + w.pre_s, g_prog + w.prog_s
            else:
                g_pre, g_prog = g_pre + cur.pre_s, g_prog + cur.prog_s
        group += g_prog + max(0.0, g_pre - credit_s)
        base += b_prog + max(0.0, b_pre - credit_s)
    group, base = group / nruns, base / nruns
    if base <= 0 or group > (1.0 - cfg.margin) * base:
        return None
    paths = [p.path for p in small if any(p.runs_used)]
    return paths, (
        f"{SMALL_FILES}: the {len(paths)} files up to {cfg.small_kib} KiB the runs used, warmed whole, "
        f"predicted {group * 1e3:.1f} ms vs {base * 1e3:.1f} ms for their per-file choices "
        f"(leave-one-run-out over the group, {credit_s * 1e3:.0f} ms of CPU time to hide behind)"
    )


def _run_seconds(priced: list[_Priced], choice: Callable[[_Priced], str], credit_s: float) -> float:
    """Predicted I/O seconds of a whole run (mean over the folds) when each file takes
    ``choice(file)``: the programs' reads plus the prefetching not hidden behind ``credit_s``."""
    pre = prog = 0.0
    for p in priced:
        c = choice(p)
        preds = p.pricing.folds.get(c) or p.pricing.live[c]
        a, b = _mean_split(preds)
        pre, prog = pre + a, prog + b
    return prog + max(0.0, pre - credit_s)


def recorded_span(trace: str | Path) -> float:
    """Seconds from the first to the last row of a recording: when its first page was needed
    to when its last was (the program's start-up before it and exit after it are not in it)."""
    from pagecast.trace import open_trace

    lo, hi = None, None
    for b in open_trace(trace).iter_batches(["t_ns"]):
        ts = b["t_ns"]
        if len(ts):
            lo = int(ts.min()) if lo is None else min(lo, int(ts.min()))
            hi = int(ts.max()) if hi is None else max(hi, int(ts.max()))
    return (hi - lo) / 1e9 if lo is not None else 0.0


def nothing_io(dev: DeviceCosts, runs: list[np.ndarray], npages: int, mapped: bool, cfg: PlannerConfig) -> np.ndarray:
    """Modelled I/O seconds of each run on one file under no plan (in-sample)."""
    params = CostParams(cfg.depth, cfg.chunk_kib, 0.0)
    out = np.zeros(len(runs))
    for i, r in enumerate(runs):
        u = np.unique(r[(r >= 0) & (r < npages)])
        if len(u):
            out[i] = predict(dev, u, np.empty(0, np.int64), npages, "nothing", mapped, params).seconds
    return out


def fit_scale(spans: np.ndarray, io: np.ndarray) -> float:
    """The factor that makes the device model's I/O fit the recordings' own timing.

    A run's I/O under no plan cannot take longer than the run itself: the recording saw its
    first page needed at the start of its span and its last at the end, the I/O inside. So
    where the model prices a run's reads above its recorded span, its device is slower than
    the one the run met (a built-in model, or a calibration of another state of the device:
    its read-ahead, its cache) and every I/O time is scaled down by the median over the runs
    of span / modelled I/O. Never up: a span also holds the program's CPU time and the
    recorder's work, which are not I/O. A recording made on a warm cache fits a small
    factor: the model then sees little to gain, and a plan that gains little is nothing."""
    ok = (io > 0) & (spans > 0)
    if not ok.any():
        return 1.0
    return float(min(1.0, np.median(spans[ok] / io[ok])))


def scaled(dev: DeviceCosts, f: float) -> DeviceCosts:
    """``dev`` with every time multiplied by ``f``."""
    if f >= 1.0:
        return dev
    return dataclasses.replace(
        dev,
        seq_bytes_per_s=dev.seq_bytes_per_s / f,
        iops_by_depth=tuple((q, x / f) for q, x in dev.iops_by_depth),
        readaround_s_per_page=dev.readaround_s_per_page * f if dev.readaround_s_per_page else None,
        pager_fill_s=dev.pager_fill_s * f if dev.pager_fill_s else None,
        source=f"{dev.source}, times x {f:.2f} (fitted to the recordings)",
    )


@dataclass
class RunModel:
    """The run-level model: the fitted scale, each recording's span, modelled I/O (under no
    plan, fitted) and CPU time (span less I/O), and per measured-plan kind the predicted wall
    time of each recording held out (CPU + the files' predicted I/O)."""

    scale: float
    spans_s: list[float]
    io_s: list[float]
    cpu_s: list[float]
    per_run: dict[str, list[float]] = field(default_factory=dict)  # "default" | "random" | "predicted" -> s

    def line(self) -> str:
        return (
            f"cost model fitted to the recordings: I/O times x {self.scale:.2f} (recorded spans "
            f"{min(self.spans_s):.3f}-{max(self.spans_s):.3f} s; modelled I/O under no plan, fitted, "
            f"{min(self.io_s):.3f}-{max(self.io_s):.3f} s)"
        )

    def wall(self, kind: str) -> list[float]:
        """Predicted wall seconds of each recording held out, under ``kind``: the run's I/O plus
        the least CPU time of the recordings (a recording's span is stretched by the recorder
        and the machine's load, the least stretched is the best evidence of the program's own)."""
        cpu = min(self.cpu_s, default=0.0)
        return [cpu + x for x in self.per_run.get(kind, [])]


def run_predictions(priced: list[_Priced], nruns: int) -> dict[str, list[float]]:
    """Per fold (the recording held out), the predicted I/O of the whole run under no plan
    (``default``), read-ahead off where priced (``random``) and the plan's choices (``predicted``)."""
    out = {k: [0.0] * nruns for k in ("default", "random", "predicted")}
    for p in priced:
        by = {
            "default": "nothing",
            "random": "nothing+random" if "nothing+random" in p.pricing.folds else "nothing",
            "predicted": p.chosen,
        }
        for k, c in by.items():
            preds = p.pricing.folds.get(c) or p.pricing.live.get(c) or []
            for i, x in enumerate(preds[:nruns]):
                out[k][i] += x.seconds
    return out


def never_slower(priced: list[_Priced], credit_s: float, cfg: PlannerConfig, live: bool) -> str | None:
    """Why the whole plan should be ``nothing``, or None: its predicted gain over no plan
    must exceed what starting a planned run costs (``startup_s``, plus the live machinery's
    start-up when a pack or a per-fault file needs it) and the noise (``noise`` times the run's
    predicted I/O under no plan). Below that a plan can only lose, so it costs nothing."""
    chosen = [p for p in priced if p.chosen != "nothing"]
    if not chosen:
        return None
    base = _run_seconds(priced, lambda p: "nothing", 0.0)
    planned = _run_seconds(priced, lambda p: p.chosen, credit_s)
    startup = cfg.startup_s + (cfg.live_startup_s if live else 0.0)
    gain, floor = base - planned, startup + cfg.noise * base
    if gain > floor:
        return None
    return (
        f"the plan's predicted gain, {gain * 1e3:.1f} ms of {base * 1e3:.1f} ms, is not above the start-up "
        f"({startup * 1e3:.1f} ms) and the noise ({cfg.noise:.0%} of the run's I/O): every file gets nothing"
    )


def plan_by_predicted_time(
    traces: Sequence[str | Path], cfg: PlannerConfig = PlannerConfig(), on_rows: Callable[[int], None] | None = None
) -> tuple[PlanDoc, list[FileChoice]]:
    """The plan and, per file, why (``plan_with_model`` without the run-level model)."""
    doc, choices, _ = plan_with_model(traces, cfg, on_rows)
    return doc, choices


def plan_with_model(
    traces: Sequence[str | Path], cfg: PlannerConfig = PlannerConfig(), on_rows: Callable[[int], None] | None = None
) -> tuple[PlanDoc, list[FileChoice], RunModel]:
    if not traces:
        raise PagecastError("no recordings given")
    n = len(traces)
    _check_config(cfg, n)
    per_run = [file_pages(t, on_rows) for t in traces]
    mapped_pages, read_pages = _page_counts(traces)
    doc, choices = PlanDoc(note=recurrence_line(per_run)), []
    priced: list[_Priced] = []
    plans: dict[str, tuple[FilePlan, FileChoice]] = {}
    files = []
    for rf in recorded_files(traces, per_run):
        fp = FilePlan(rf.path, rf.identity, depth=cfg.depth, chunk_kib=cfg.chunk_kib)
        doc.files.append(fp)
        if rf.modified:
            fp.reason = "file modified after the recordings were written: its recorded pages may not apply"
            choices.append(FileChoice(rf.path, "nothing", fp.reason))
            continue
        runs = [run.get(rf.path, np.empty(0, np.int64)) for run in per_run]
        mapped = mapped_pages.get(rf.path, 0) >= read_pages.get(rf.path, 0)
        files.append((rf, fp, runs, mapped, cfg.device or device_costs_for(rf.path, rf.dev)))
    # in-sample I/O of each run under no plan, on the device model as calibrated
    io_per_run = np.zeros(n)
    for rf, _, runs, mapped, dev in files:
        io_per_run += nothing_io(dev, runs, rf.pages, mapped, cfg)
    spans = np.array([recorded_span(t) for t in traces])
    scale = fit_scale(spans, io_per_run) if cfg.fit else 1.0
    io_per_run *= scale
    for rf, fp, runs, mapped, dev in files:
        fc, p = _choose_file(rf.path, rf.pages, fp, runs, mapped, scaled(dev, scale), cfg)
        choices.append(fc)
        plans[rf.path] = (fp, fc)
        priced.append(p)
    cpu = np.maximum(0.0, spans - io_per_run)
    model = RunModel(scale, spans.tolist(), io_per_run.tolist(), cpu.tolist())
    if cfg.fit and scale < 1.0:
        doc.note = "\n".join(x for x in (doc.note, model.line()) if x)
    # the least of the runs: a recording's span is stretched by the recorder's own work per
    # fault and by other load on the machine, both of which this estimate would count as CPU
    credit = cfg.overlap * float(np.min(cpu))
    upgrades, left = overlap_upgrades(priced, credit, cfg.margin, cfg.max_regret)
    for p in priced:
        if p.path in upgrades:
            c, why = upgrades[p.path]
            _rechoose(plans[p.path], p, c, why, p.pricing.warm_sets)
    everything = list(priced)
    priced, live_needs_python = _apply_live_choices(priced, plans, cfg)
    group = small_files_group(priced, left, cfg, n)
    if group:
        paths, why = group
        # the group's reason once, in the plan's note: the launcher reads the plan (cold) before
        # the program starts, and a sentence repeated for each of git's 470 small files was 117 KB
        doc.note = "\n".join(x for x in (doc.note, why) if x)
        for path in paths:
            p = next(p for p in priced if p.path == path)
            _rechoose(plans[path], p, "whole", why, {}, reason=f"whole: {SMALL_FILES} (the plan's note)")
    why_nothing = never_slower(everything, credit, cfg, live_needs_python)
    if why_nothing:
        _all_nothing(doc, choices, plans, why_nothing)
        for p in everything:
            p.chosen = "nothing"
    model.per_run = run_predictions(everything, n)
    return doc, choices, model


def _check_config(cfg: PlannerConfig, n: int) -> None:
    if cfg.min_runs is not None and not 1 <= cfg.min_runs <= n:
        raise PagecastError(f"--min-runs {cfg.min_runs} is outside 1..{n} (the number of recordings)")
    if not 0.0 <= cfg.margin < 1.0 or not 0.0 <= cfg.overlap <= 1.0:
        raise PagecastError("--margin must be in [0, 1) and --overlap in [0, 1]")
    if cfg.small_kib < 0 or cfg.live_startup_s < 0 or cfg.max_regret < 0 or cfg.startup_s < 0 or cfg.noise < 0:
        raise PagecastError("--small-kib, --live-startup-ms, --startup-ms, --noise and --max-regret must be >= 0")


def _page_counts(traces: Sequence[str | Path]) -> tuple[dict[str, int], dict[str, int]]:
    """Per file, over all recordings: the pages mapped and the pages read with read()."""
    mapped_pages: dict[str, int] = {}
    read_pages: dict[str, int] = {}
    for t in traces:
        ps = read_page_sets(t)
        for key, m in ps.mapped.items():
            mapped_pages[key] = mapped_pages.get(key, 0) + m
            read_pages[key] = read_pages.get(key, 0) + ps.read[key]
    return mapped_pages, read_pages


def _choose_file(
    path: str, npages: int, fp: FilePlan, runs: list[np.ndarray], mapped: bool, dev: DeviceCosts, cfg: PlannerConfig
) -> tuple[FileChoice, _Priced]:
    """One file's candidates priced leave-one-run-out on its (scaled) device, and the one
    chosen written into ``fp``."""
    pricing = price_folds(runs, npages, mapped, dev, cfg, elf=is_elf(path))
    predicted = pricing.mean()
    chosen, why = choose(predicted, cfg.margin)
    _file_plan(fp, chosen, pricing.warm_sets, npages)
    fp.gain_ms = (predicted["nothing"] - predicted[chosen]) * 1e3
    fp.reason = f"{chosen}: {why}"
    used = [len(r) for r in runs if len(r)]
    live_means = {c: float(np.mean([x.seconds for x in ps])) for c, ps in pricing.live.items()}
    fc = FileChoice(
        path,
        chosen,
        why,
        predicted_s=predicted | live_means,
        skipped=pricing.skipped,
        validation=pricing.validation,
        device=dev.source,
        read_ahead_kb=dev.read_ahead_kb,
        runs_using=len(used),
        mean_pages_used=float(np.mean(used)) if used else 0.0,
        file_pages=npages,
        objects=pricing.layout.describe() if pricing.layout else "",
    )
    return fc, _Priced(path, npages, [len(r) > 0 for r in runs], pricing, chosen, mapped)


def _apply_live_choices(
    priced: list[_Priced], plans: dict[str, tuple[FilePlan, FileChoice]], cfg: PlannerConfig
) -> tuple[list[_Priced], bool]:
    """Files given a page pack or a per-fault policy (``live_choices``): the files left for
    the other run-wide choices, and whether the plan then needs pagecast's Python machinery."""
    live = live_choices(priced, cfg)
    live_needs_python = False
    if live:
        chosen_live, why = live
        for p in priced:
            if p.path in chosen_live:
                c = chosen_live[p.path]
                _rechoose(
                    plans[p.path],
                    p,
                    c,
                    why,
                    p.pricing.warm_sets,
                    (cfg.pack_dir, cfg.pack_writer, p.pricing.args, cfg.pack_prefix),
                )
                live_needs_python |= not runs_natively(c, p.mapped)
        priced = [p for p in priced if p.path not in chosen_live]
    return priced, live_needs_python


def _rechoose(
    planned: tuple[FilePlan, FileChoice],
    p: _Priced,
    chosen: str,
    why: str,
    warm_sets: dict,
    pack: tuple | None = None,
    reason: str | None = None,
) -> None:
    """A later stage's choice for one file: its plan entry, its explanation and its pricing
    record all say ``chosen``. ``pack``: (directory, writer, arguments) where it writes one."""
    fp, fc = planned
    _file_plan(fp, chosen, warm_sets, fc.file_pages, *(pack or ()))
    p.chosen, fc.chosen, fc.why = chosen, chosen, why
    fp.gain_ms = (fc.predicted_s["nothing"] - fc.predicted_s[chosen]) * 1e3
    fp.reason = reason or f"{chosen}: {why}"


def _all_nothing(
    doc: PlanDoc, choices: list[FileChoice], plans: dict[str, tuple[FilePlan, FileChoice]], why: str
) -> None:
    """Turn every file of the plan to ``nothing`` (a page pack already written is removed)."""
    for fp, fc in plans.values():
        if fp.strategy == "pack" and fp.arg:
            Path(fp.arg).unlink(missing_ok=True)
        _file_plan(fp, "nothing", {}, fc.file_pages)
        fp.gain_ms = 0.0
        fp.reason = "nothing: the plan as a whole is not worth its start-up (the plan's note)"
        fc.chosen, fc.why = "nothing", why
    doc.note = "\n".join(x for x in (doc.note, why) if x)
