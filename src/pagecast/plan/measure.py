"""The measured stage of ``pagecast plan --measure``: run the recorded commands again, cold,
under each candidate plan, and keep the fastest only when it clearly is.

The planner chooses per file by *predicted* I/O time, and the model can be wrong for a
whole program (on real programs a plan predicted to gain measured 0.84-0.91x the kernel's
best strategy: BENCHMARKS.md). So the predicted plan is timed against plans that do
exactly what the kernel's strategies do (``pagecast.plan.kernel_plans``), on the
recordings' own commands:

- Each recording's command (its argv, run in its recorded working directory) is run
  through the native launcher with each candidate plan: ``LAUNCHER --restore-signals
  PLAN -- ARGV`` as ``pagecast run --plan`` does, stdin and stdout on /dev/null (stderr
  kept aside for an error message). Wall time from spawn to exit.
- Every run starts cold: ``posix_fadvise(DONTNEED)`` on every file the command may read
  (``pagecast.plan.cold_set``: the files the recordings used or opened, the program and its
  libraries, the files under the directories its arguments name), the plan files and any
  page pack, one file at a time (nothing global is touched).
- Interleaved: each round runs every (recording, candidate) pair, the candidates in a
  fresh seeded order per round and recording, so load that comes and goes falls on all of
  them and no candidate always follows the same one.
- A candidate's time is the sum over recordings of the median of its runs.
- Noise: for each (candidate, recording), half the spread of its runs (max - min) / 2
  relative to their median; the noise is the median of those, at least ``min_noise``
  (2 %). One round measures no spread: the floor applies.
- Choice: the candidates faster than ``default`` by more than the noise are eligible; of
  those within a standard error of the fastest (``tie_of``: 2 x noise / sqrt(rounds x
  recordings), at least 1 %), the simplest is chosen (``default``; then the advice-only
  ``random`` and ``sequential``; then ``willneed``; then ``willneed-beside``; then the
  predicted variants):
  what is not measured to be slower is not given up for what is harder to run. No eligible candidate: the fastest kernel candidate (``default`` on a tie), so
  a learned plan never stays that does not beat the kernel by more than was measured to be
  noise.

Identical candidate plans (the predicted plan is often ``nothing`` everywhere, which is
``default``) are run once and the times shared.

A candidate is one plan, or one plan per recording (``Candidate``): the caller times a
plan learned from the recordings on recording i as learned from the others
(leave-one-run-out), so it is not measured on the pages it was built from.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pagecast.errors import PagecastError, one_line
from pagecast.plan.format import PlanDoc, encode_plan, write_plan
from pagecast.trace import open_trace
from pagecast.util.pagecache import make_cold
from pagecast.util.process import children_read_bytes, run_blocking

PREDICTED = "predicted"
PREDICTED_BEFORE = "predicted-before"  # the same plan, its warm ranges issued before exec (as the oracle is)
PREDICTED_WILLNEED = "predicted+willneed"  # files the plan leaves alone get the kernel's WILLNEED, all before exec
PREDICTED_STREAM = "predicted+stream"  # files the plan does not pack read whole beside the program (with_stream)
PREDICTED_VARIANTS = (PREDICTED, PREDICTED_BEFORE, PREDICTED_WILLNEED, PREDICTED_STREAM)
# simplicity levels: of candidates measured within the noise of each other, the lowest level is kept.
# willneed-beside after willneed: the same requests, but raced against the program by a forked
# prefetcher instead of done before it, exactly as the kernel strategy does (on git, chosen on a
# 1 % lead in the measured stage, it was 2-3 % slower than that strategy on the held-out input)
_LEVEL = {"default": 0, "random": 1, "sequential": 1, "willneed": 2, "willneed-beside": 3}
KERNEL = tuple(_LEVEL)
# A candidate is one plan for every recording, or one plan per recording (by trace path):
# a plan learned from the recordings must be timed on a recording it did not learn from
# (leave-one-run-out), or it is measured on pages it was built from.
Candidate = PlanDoc | dict[str, PlanDoc]


def level(candidate: str) -> int:
    return _LEVEL.get(candidate, max(_LEVEL.values()) + 1)


@dataclass(frozen=True)
class Recording:
    """What runs a recording again: its trace, command and working directory."""

    trace: str
    argv: list[str]
    cwd: str
    cwd_recorded: bool  # False: an older recording without one, run in the current directory


def recordings_of(traces: Sequence[str | Path]) -> list[Recording]:
    """The command and working directory each recording stores; one-line errors otherwise."""
    out = []
    for t in traces:
        meta = open_trace(t).meta
        cmd = meta.get("command")
        if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd):
            raise PagecastError("the recording stores no command to run again (record it with pagecast record)", path=t)
        cwd = meta.get("cwd")
        if cwd is None:
            out.append(Recording(str(t), cmd, os.getcwd(), False))
            continue
        if not isinstance(cwd, str) or not os.path.isdir(cwd):
            raise PagecastError(
                f"the recorded working directory {cwd!r} does not exist: cannot run {cmd[0]} again", path=t
            )
        out.append(Recording(str(t), cmd, cwd, True))
    return out


@dataclass
class MeasureConfig:
    # (plan file, program argv) -> the command running the program under that plan
    launch_argv: Callable[[str, list[str]], list[str]]
    rounds: int = 3
    min_noise: float = 0.02
    timeout_s: float = 600.0
    on_run: Callable[[str], None] | None = None  # called after every run (progress)
    # rounds of the confirmation (None: as many as ``rounds``; 0: none)
    confirm_rounds: int | None = None
    on_extra: Callable[[int], None] | None = None  # told how many runs the confirmation adds
    # a candidate whose run takes this many times the baseline's (the first candidate's) slowest
    # run of that recording so far is stopped there and timed no more (0: every run goes to its
    # end or ``timeout_s``); the baseline itself is never stopped
    stop_slower: float = 0.0


@dataclass
class Confirmation:
    """Fresh rounds of the first stage's choice against the kernel plan it must beat."""

    chosen: str  # the first stage's choice (a learned plan)
    rival: str  # the fastest kernel plan of the first stage
    rounds: int
    runs: dict[str, dict[str, list[float]]]  # chosen / rival -> recording -> seconds
    tie: float = 0.0
    kept: bool = False

    def totals(self) -> dict[str, float]:
        return {c: sum(float(statistics.median(xs)) for xs in by.values()) for c, by in self.runs.items()}

    def to_dict(self) -> dict[str, Any]:
        tot = self.totals()
        return {
            "chosen": self.chosen,
            "rival": self.rival,
            "rounds": self.rounds,
            "tie": round(self.tie, 4),
            "kept": self.kept,
            "total_s": {c: round(t, 6) for c, t in tot.items()},
            "runs_s": {c: {r: [round(x, 6) for x in xs] for r, xs in by.items()} for c, by in self.runs.items()},
        }


@dataclass
class Measured:
    """Wall times per candidate and recording, and the choice made from them."""

    candidates: list[str]  # simplest first
    recordings: list[str]
    runs: dict[str, dict[str, list[float]]]  # candidate -> recording -> seconds, in run order
    same_as: dict[str, str] = field(default_factory=dict)  # candidate -> the identical candidate measured
    rounds: int = 0
    noise: float = 0.0
    chosen: str = "default"
    why: str = ""
    confirmation: Confirmation | None = None
    cold: dict[str, Any] | None = None  # what every run made cold first (``pagecast.plan.cold_set``)
    cold_note: str = ""

    def medians(self) -> dict[str, dict[str, float]]:
        return {c: {r: float(statistics.median(xs)) for r, xs in by.items()} for c, by in self.runs.items()}

    def totals(self) -> dict[str, float]:
        return {c: sum(m.values()) for c, m in self.medians().items()}

    def to_dict(self) -> dict[str, Any]:
        med, tot = self.medians(), self.totals()
        return {
            "rounds": self.rounds,
            "noise": round(self.noise, 4),
            "chosen": self.chosen,
            "why": self.why,
            "recordings": self.recordings,
            "candidates": [
                {
                    "name": c,
                    "same_as": self.same_as.get(c),
                    "median_s": {r: round(v, 6) for r, v in med[c].items()},
                    "runs_s": {r: [round(x, 6) for x in xs] for r, xs in self.runs[c].items()},
                    "total_s": round(tot[c], 6),
                    "vs_default": round(tot["default"] / tot[c], 4) if tot.get(c) else None,
                }
                for c in self.candidates
            ],
            "confirmation": self.confirmation.to_dict() if self.confirmation else None,
            "cold": self.cold,
        }

    def note(self) -> str:
        """What the plan file keeps of the measurement (its ``note``): the table and the choice."""
        return "\n".join(
            [*self.table(), *([self.cold_note] if self.cold_note else []), f"chosen: {self.chosen}: {self.why}"]
        )

    def table(self) -> list[str]:
        """One line per candidate: total, per-recording medians, ratio to default."""
        med, tot = self.medians(), self.totals()
        names = [Path(r).name for r in self.recordings]
        lines = [f"measured wall s (median of {self.rounds} cold runs each; noise {self.noise:.1%}):"]
        for c in sorted(self.candidates, key=lambda c: (tot[c], level(c))):
            per = ", ".join(f"{n} {med[c][r]:.3f}" for n, r in zip(names, self.recordings))
            same = f" (the same plan as {self.same_as[c]})" if c in self.same_as else ""
            mark = " <- chosen" if c == self.chosen else ""
            lines.append(f"  {c}: {tot[c]:.3f} s = {per}; {tot['default'] / tot[c]:.2f}x default{same}{mark}")
        if self.confirmation:
            conf, ctot = self.confirmation, self.confirmation.totals()
            lines.append(
                f"confirmation, {conf.rounds} more rounds of the two: "
                + ", ".join(f"{c} {ctot[c]:.3f} s" for c in (conf.chosen, conf.rival))
            )
        return lines


def noise_of(runs: dict[str, dict[str, list[float]]], floor: float) -> float:
    """Median over (candidate, recording) of half the spread of its runs relative to their
    median, at least ``floor`` (one run each: no spread measured, the floor)."""
    spreads = [
        (max(xs) - min(xs)) / 2 / statistics.median(xs)
        for by in runs.values()
        for xs in by.values()
        if len(xs) > 1 and statistics.median(xs) > 0
    ]
    return max(floor, float(statistics.median(spreads)) if spreads else 0.0)


# measured totals this close to the fastest count as a tie, which goes to the simpler plan
TIE = 0.01


def tie_of(noise: float, rounds: int, recordings: int) -> float:
    """How close two candidates' totals must be to count as measured equal: about one standard
    error of their difference, from the per-run ``noise``, at least ``TIE``.

    ``noise`` is half the range of a candidate's runs relative to their median, about 0.85
    sigma for 3 runs. The median of ``rounds`` runs has a standard error of about
    1.25 sigma / sqrt(rounds); a total over ``recordings`` of similar length, relative to it,
    1.25 sigma / sqrt(rounds x recordings); the difference of two totals sqrt(2) times that:
    about 2 x noise / sqrt(rounds x recordings)."""
    return max(TIE, 2.0 * noise / math.sqrt(max(1, rounds) * max(1, recordings)))


def choose_measured(totals: dict[str, float], noise: float, tie: float = TIE) -> tuple[str, str]:
    """Among the candidates faster than ``default`` by more than ``noise`` (a fraction), the
    simplest of those within ``tie`` (at least ``TIE``; ``tie_of``) of the fastest. When none
    is, the fastest kernel candidate (near-ties of ``TIE`` to the simpler, ``default`` first).
    Returns (candidate, why).

    Every candidate is judged against ``default`` alone, and by the per-run noise: a plan is
    kept only when it beats the kernel as it is by more than a single run varies. Among
    those, a gap to the fastest within a standard error of the difference of two totals
    (``tie_of``) is not a measured difference, and the simpler plan is the one with less that
    can go wrong on a new input. (A tie as wide as the per-run noise chose `random` on
    safetensors-zipf, 7 % slower than `predicted-before` with 8 % noise over 3 rounds of 3
    recordings, and it measured 0.95-1.00x on the held-out input; a tie of 1 % kept git's
    `predicted+willneed`, 3 % faster than `willneed` with 3.6 % noise: BENCHMARKS.md, "Figures
    cited by the code".) (Requiring a plan to beat every simpler candidate too threw
    away a plan 11 % faster than default because a kernel plan 4 % slower than it did not
    itself clear the noise over default.) Without such a plan, the kernel strategies are what
    is left, and what one of them costs beyond default is, as measured, within the noise: the
    fastest is the best estimate of the kernel's best strategy for this program."""
    base = totals["default"]
    eligible = {c: t for c, t in totals.items() if c != "default" and t < (1.0 - noise) * base}
    if not eligible:
        kernel = {c: t for c, t in totals.items() if c in KERNEL}
        best = fastest_kernel(totals)
        if best == "default":
            return (
                "default",
                f"default (the kernel's read-ahead, no plan) is measured fastest of the kernel plans ({base:.3f} s)",
            )
        return best, (
            f"no candidate is faster than default ({base:.3f} s) by more than the noise ({noise:.1%}); of the kernel "
            f"plans {best} measured fastest ({kernel[best]:.3f} s)"
        )
    fastest_name = min(eligible, key=lambda c: (eligible[c], level(c)))
    fastest = eligible[fastest_name]
    # what is within a standard error of the fastest is not measured to be slower: the simpler wins
    near = max(TIE, tie)
    chosen = min((c for c, t in eligible.items() if t <= fastest * (1.0 + near)), key=lambda c: (level(c), eligible[c]))
    others = sorted((c for c in eligible if c != chosen), key=lambda c: eligible[c])
    simpler = (
        f"; the fastest, {fastest_name} {fastest:.3f} s, is within {near:.1%} of it (measured equal) and it is "
        "the simpler"
        if level(chosen) < level(fastest_name)
        else ""
    )
    return chosen, (
        f"{chosen} measured {eligible[chosen]:.3f} s, {1 - eligible[chosen] / base:.1%} below default {base:.3f} s, "
        f"more than the noise ({noise:.1%})"
        + simpler
        + (f"; also beyond it: {', '.join(f'{c} {eligible[c]:.3f} s' for c in others)}" if others else "")
    )


def fastest_kernel(totals: dict[str, float]) -> str:
    """The fastest kernel plan (near-ties of ``TIE`` to the simpler, ``default`` first)."""
    kernel = {c: t for c, t in totals.items() if c in KERNEL}
    fastest = min(kernel.values())
    return min((c for c, t in kernel.items() if t <= fastest * (1.0 + TIE)), key=lambda c: (level(c), kernel[c]))


def confirm_choice(chosen: str, rival: str, totals: dict[str, float], tie: float) -> tuple[bool, str]:
    """Keep the first stage's ``chosen`` only if, in fresh rounds (``totals``), it is again
    faster than ``rival`` (the kernel plan it would replace) by more than ``tie`` (about one
    standard error of the difference: ``tie_of``). Returns (kept, why).

    The first stage picks the fastest of many noisy totals, and the minimum of noisy totals
    is biased low: a plan that is no faster than the kernel, measured once, can look faster
    by chance, the more so the more candidates there are. Fresh runs of the two alone are
    not selected, so they estimate the gain without that bias (on sqlite over mmap, where
    every strategy is bimodal, the first stage kept plans 18 % faster than default that
    measured 0.83-0.93x the kernel's best on a new input: BENCHMARKS.md, "Cold start of real
    programs"). It
    cannot catch a gain that holds on the recorded inputs and not on a new one: with 9
    recordings that same case's stream plan was confirmed 28 % faster than ``random`` and
    measured 0.82-0.99x on the held-out input (the same section, nine recordings)."""
    a, b = totals[chosen], totals[rival]
    gain = 1.0 - a / b if b > 0 else 0.0
    numbers = f"{chosen} {a:.3f} s against {rival} {b:.3f} s ({gain:.1%} faster; a standard error is {tie:.1%})"
    if gain > tie:
        return True, f"confirmed in fresh rounds: {numbers}"
    return False, f"not confirmed in fresh rounds: {numbers}; {rival} kept"


def _argv_tail(argv: list[str]) -> str:
    return one_line(" ".join(argv))[:200]


def _program_tail(stderr: str) -> str:
    """The last line of a failed run's stderr that the program wrote: ``pagecast run`` ends
    with its own report (wall time, bytes read), which says nothing of why the program
    failed (a traceback's last line does)."""
    lines = [x for x in stderr.strip().splitlines() if x.strip()]
    own = [x for x in lines if not x.startswith("pagecast")]
    return (own or lines or [""])[-1]


class TooSlow(Exception):
    """A run stopped at the time a candidate is given up at (``MeasureConfig.stop_slower``)."""


def _run_once(
    rec: Recording, cand: str, plan: Path, cold: list[str], cfg: MeasureConfig, give_up_s: float | None = None
) -> tuple[float, int]:
    """One cold run of ``rec``'s command under ``plan``: wall seconds from spawn to exit, and
    the bytes its process tree read from devices (``children_read_bytes``: the program, its
    threads and pagecast's own helpers, and no other process). Its stderr goes to a temporary file, so a failure can be reported with its
    last line. A run past ``give_up_s`` (if sooner than ``cfg.timeout_s``) is killed and
    raises ``TooSlow``."""
    make_cold(cold)
    argv = cfg.launch_argv(str(plan), rec.argv)
    stop_at = cfg.timeout_s if give_up_s is None else min(give_up_s, cfg.timeout_s)
    with tempfile.TemporaryFile() as err:
        read0 = children_read_bytes()
        t0 = time.perf_counter()
        try:
            proc = run_blocking(argv, dict(os.environ), rec.cwd, err, stop_at)
        except subprocess.TimeoutExpired:
            if stop_at < cfg.timeout_s:
                raise TooSlow(stop_at) from None
            raise PagecastError(
                f"`{_argv_tail(rec.argv)}` (in {rec.cwd}) did not finish within {cfg.timeout_s:.0f} s "
                f"under the {cand} plan",
                path=rec.trace,
            ) from None
        except OSError as e:
            raise PagecastError(f"cannot run `{_argv_tail(rec.argv)}` ({e.strerror})", path=rec.trace) from None
        wall = time.perf_counter() - t0
        read = children_read_bytes() - read0
        if proc.returncode != 0:
            err.seek(0)
            tail = _program_tail(err.read().decode(errors="replace"))
            status = f"signal {-proc.returncode}" if proc.returncode < 0 else f"status {proc.returncode}"
            raise PagecastError(
                f"`{_argv_tail(rec.argv)}` (in {rec.cwd}) exited with {status} under the {cand} plan"
                + (f": {one_line(tail)[:200]}" if tail else "")
                + "; --measure needs commands that succeed when run again",
                path=rec.trace,
            )
    return wall, read


def per_recording(cand: Candidate, recordings: Sequence[Recording]) -> dict[str, PlanDoc]:
    """The plan each recording runs under (one plan for all, or one each)."""
    if isinstance(cand, PlanDoc):
        return {r.trace: cand for r in recordings}
    missing = [r.trace for r in recordings if r.trace not in cand]
    if missing:
        raise PagecastError("a per-recording candidate has no plan for this recording", path=missing[0])
    return {r.trace: cand[r.trace] for r in recordings}


def _signature(cand: Candidate, recordings: Sequence[Recording]) -> tuple[bytes, ...]:
    per = per_recording(cand, recordings)
    return tuple(encode_plan(per[r.trace]) for r in recordings)


def measure(
    candidates: dict[str, Candidate],
    recordings: Sequence[Recording],
    cold_files: Sequence[str | Path],
    cfg: MeasureConfig,
) -> Measured:
    """Time every candidate plan on every recording's command, cold, interleaved; choose."""
    if "default" not in candidates:
        raise PagecastError("the measured candidates must include 'default' (the kernel's own behaviour)")
    if cfg.rounds < 1:
        raise PagecastError("--rounds must be at least 1")
    names = sorted(candidates, key=lambda c: (level(c), list(candidates).index(c)))
    work = Path(tempfile.mkdtemp(prefix="pagecast-measure-"))
    try:
        plan_of: dict[str, dict[str, Path]] = {}  # candidate -> recording -> plan file
        same_as: dict[str, str] = {}
        by_sig: dict[tuple[bytes, ...], str] = {}
        files: dict[bytes, Path] = {}  # one file per distinct plan
        for c in names:
            sig = _signature(candidates[c], recordings)
            if sig in by_sig:
                same_as[c] = by_sig[sig]
                continue
            by_sig[sig] = c
            per = per_recording(candidates[c], recordings)
            plan_of[c] = {}
            for rec, data in zip(recordings, sig):
                if data not in files:
                    files[data] = work / f"plan{len(files)}.plan"
                    write_plan(files[data], per[rec.trace])
                plan_of[c][rec.trace] = files[data]
        packs = [
            f.arg
            for cand in candidates.values()
            for d in per_recording(cand, recordings).values()
            for f in d.files
            if f.strategy == "pack" and f.arg
        ]
        cold = [str(p) for p in [*cold_files, *files.values(), *dict.fromkeys(packs)]]
        make_cold(cold, sync=True)  # once with write-back: plans and packs were just written
        measured = list(plan_of)
        runs = _tallied_rounds(measured, recordings, plan_of, cold, cfg, cfg.rounds, 0).runs
        for c, s in same_as.items():
            runs[c] = runs[s]
        out = Measured(names, [r.trace for r in recordings], runs, same_as, cfg.rounds)
        out.noise = noise_of({c: runs[c] for c in measured}, cfg.min_noise)
        out.chosen, out.why = choose_measured(out.totals(), out.noise, tie_of(out.noise, cfg.rounds, len(recordings)))
        extra = cfg.rounds if cfg.confirm_rounds is None else cfg.confirm_rounds
        if out.chosen not in KERNEL and extra > 0:
            _confirm(out, same_as, Rounds(recordings, plan_of, cold, cfg), extra)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


@dataclass
class Tally:
    """What timed rounds measured: candidate -> recording -> wall seconds (``runs``) and bytes
    its process tree read from devices (``reads``), and the candidates stopped for slowness
    (``stopped``: why), left out of both."""

    runs: dict[str, dict[str, list[float]]]
    reads: dict[str, dict[str, list[int]]]
    stopped: dict[str, str] = field(default_factory=dict)
    # recording -> the baseline's slowest run so far (a program whose own runs spread 5x, as
    # SQLite's under a tight limit, must not have a variant stopped for being as slow as it)
    slowest: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, names: Sequence[str], recordings: Sequence[Recording]) -> "Tally":
        return cls(
            {c: {r.trace: [] for r in recordings} for c in names}, {c: {r.trace: [] for r in recordings} for c in names}
        )

    def kept(self) -> "Tally":
        keep = lambda by: {c: v for c, v in by.items() if c not in self.stopped}  # noqa: E731
        return Tally(keep(self.runs), keep(self.reads), self.stopped, self.slowest)


def _tallied_rounds(
    names: list[str],
    recordings: Sequence[Recording],
    plan_of: dict[str, dict[str, Path]],
    cold: list[str],
    cfg: MeasureConfig,
    rounds: int,
    first_round: int,
) -> Tally:
    """Cold runs of every candidate on every recording, ``rounds`` rounds: candidate ->
    recording -> wall seconds and bytes the run read. With ``cfg.stop_slower``, the first
    round starts each recording with ``names[0]`` (the baseline), and a candidate stopped for
    slowness against it is left out and named in ``stopped`` with why."""
    tally = Tally.of(names, recordings)
    for rnd in range(first_round, first_round + rounds):
        for i, rec in enumerate(recordings):
            # a fresh order per (round, recording), seeded: a rotation of one order keeps each
            # candidate right after the same one, which then inherits what that one leaves
            order = random.Random(rnd * len(recordings) + i).sample(names, len(names))
            if cfg.stop_slower and rnd == first_round:
                # the baseline first: every later run then has a time to be stopped at
                order = [names[0], *(c for c in order if c != names[0])]
            for c in order:
                if c not in tally.stopped:
                    _time_one(tally, rec, c, plan_of[c][rec.trace], cold, cfg, c == names[0])
                if cfg.on_run:
                    cfg.on_run(c)
    return tally.kept()


def _time_one(
    tally: Tally, rec: Recording, cand: str, plan: Path, cold: list[str], cfg: MeasureConfig, baseline: bool
) -> None:
    """One timed run into ``tally``; a candidate's run past ``cfg.stop_slower`` times the
    baseline's slowest run of the recording so far stops the candidate (with why)."""
    worst = tally.slowest.get(rec.trace)
    give_up = cfg.stop_slower * worst if cfg.stop_slower and worst is not None and not baseline else None
    try:
        wall, read = _run_once(rec, cand, plan, cold, cfg, give_up)
    except TooSlow as e:
        tally.stopped[cand] = (
            f"stopped after {e.args[0]:.1f} s on {Path(rec.trace).name}: over {cfg.stop_slower:g}x the "
            f"baseline's slowest run of it so far ({worst:.2f} s)"
        )
        return
    tally.runs[cand][rec.trace].append(wall)
    tally.reads[cand][rec.trace].append(read)
    if baseline:
        tally.slowest[rec.trace] = max(wall, worst if worst is not None else wall)


@dataclass
class Rounds:
    """What timing a candidate again needs: the recorded commands, each candidate's plan file
    per recording, the files made cold before every run, and the configuration."""

    recordings: Sequence[Recording]
    plan_of: dict[str, dict[str, Path]]
    cold: list[str]
    cfg: MeasureConfig


def confirm_or_fall_back(out: Any, rival: str, run_as: dict[str, str], at: Rounds, rounds: int) -> None:
    """Time ``out.chosen`` and ``rival`` again, alone, interleaved in ``rounds`` fresh rounds
    (``run_as``: the candidate whose plan files each one runs); keep the choice only if
    ``confirm_choice`` does, else fall back to ``rival``. ``out`` is a measured stage's
    result (cold-start or memory-limit): its ``confirmation``, ``why`` and ``chosen`` are set."""
    chosen, n = out.chosen, len(at.recordings)
    if at.cfg.on_extra:
        at.cfg.on_extra(2 * n * rounds)
    # rounds numbered on from the first stage's: their seeded orders are not reused
    names = list(dict.fromkeys(run_as.values()))
    # nothing stopped here: the choice and its rival both ran to the end in the first stage
    cfg = dataclasses.replace(at.cfg, stop_slower=0.0)
    got = _tallied_rounds(names, at.recordings, at.plan_of, at.cold, cfg, rounds, at.cfg.rounds).runs
    conf = Confirmation(
        chosen, rival, rounds, {c: got[run_as[c]] for c in (chosen, rival)}, tie_of(out.noise, rounds, n)
    )
    conf.kept, why = confirm_choice(chosen, rival, conf.totals(), conf.tie)
    out.confirmation = conf
    out.why = f"{out.why}; {why}"
    if not conf.kept:
        out.chosen = rival


def _confirm(out: Measured, same_as: dict[str, str], at: Rounds, rounds: int) -> None:
    """Time the learned plan the first stage chose and the fastest kernel plan again, alone,
    interleaved, and keep the learned one only if it is faster again (``confirm_choice``)."""
    chosen, rival = out.chosen, fastest_kernel(out.totals())
    run_as = {chosen: same_as.get(chosen, chosen), rival: same_as.get(rival, rival)}
    confirm_or_fall_back(out, rival, run_as, at, rounds)


def runs_needed(candidates: dict[str, Candidate], recordings: Sequence[Recording], rounds: int) -> int:
    """How many runs ``measure`` makes (identical candidates are run once)."""
    return len({_signature(c, recordings) for c in candidates.values()}) * len(recordings) * rounds
