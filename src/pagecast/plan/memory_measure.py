"""``pagecast plan --memory --measure``: time the memory plan against the kernel alone under
the limit, on the recordings' own commands, and keep it only where it is faster.

The planner prices keep sets with a model of the kernel's page cache (``sim.readaround``)
on the recordings' demand streams. Those see faults only: a page the program used while it
stayed mapped is not in them, so a plan that leaves the kernel less room than the recording
had can be priced too well (a database's point queries, each reading a read-ahead window,
measured slower with a keep set the model said would read less). So, as for cold-start plans
(``pagecast.plan.measure``, whose timed rounds this reuses), the candidates are run:

- ``kernel``: ``pagecast run --memory LIMIT`` (the program alone under the limit);
- ``half``: the keep set halved (the less useful half streamed), locked only;
- ``keep``: the keep set locked, nothing evicted or prefetched from outside;
- ``plan``: the plan as built (keep, evict after use, prefetch);
- ``follow``: where the plan cannot follow what it streams, the plan rebuilt in coarser
  chunks that the controller can follow (``pagecast.plan.memory.follow_plan``): threads
  side by side come back to a chunk a few behind at a fine grain (llama.cpp at 512 KiB),
  to none at a coarse one;
- ``seq`` (``plan --memory --sequential``): the keep set rebuilt for files read in order,
  locked, the files advised sequential (``pagecast.plan.memory.sequential_plan``): the kernel
  reads ahead of a miss only and reclaims first what the program used through such a
  mapping, so the rest streams through less room and more of MIN's keep set fits. On
  programs that do not read in order it can be far slower: on SQLite (point queries among
  its scans, 85 MiB) one timed run of it went on for minutes where the others took seconds;
- ``seq1``: the same, the keep set leaving one read-ahead window of room where ``seq`` leaves
  two (``memory.sequential_room``): which one a program needs depends on its threads and
  streams (the power iteration ran faster with one, llama.cpp far slower);
- ``half+pager``, ``keep+pager``, ``plan+pager``: the same three applied by the userfaultfd
  pager instead (page-sized faults into a budget: where the kernel reads a read-around
  window for every scattered miss, the pager reads what is asked and what the plan names),
  unless ``backends`` leaves it out (no userfaultfd on the machine).

Every run starts cold (the plan's files), candidates interleaved in a seeded order per round
(the first round starts with the kernel alone), a candidate's time the sum over recordings of
its median wall time. A run that takes ``STOP_SLOWER`` times the kernel alone's slowest run so far of
its recording is stopped there, and its candidate is not timed again (``stopped``): it cannot
win, and a variant that misreads a program's order (``seq`` on a database) would otherwise
spend minutes a run. Each run's bytes read from devices are counted too (its process tree's
block input). Eligible: faster than ``kernel`` by more than the measured noise; of those
within a standard error of the fastest, the ones reading within ``READ_TIE`` of the least of
them, and of these the simplest (the order above). Reads break the tie because recorded runs
are short: llama.cpp's six tokens weigh less than loading the model, which every variant reads
once, so ``half``, ``keep`` and ``seq`` tied on whole runs while per token after the first
they ran 1.46x, 1.96x and 2.01x the kernel alone, reading 2,538, 1,878 and 1,678 MiB a run
(BENCHMARKS.md, "Programs under a memory limit").
None eligible: the kernel alone (``backend kernel``).

A variant chosen is then timed again beside the kernel alone, in fresh rounds, and kept only
if it is faster again by more than a standard error (``pagecast.plan.measure.confirm_choice``):
the fastest of seven noisy totals is biased low. On the power iteration at 50 % of its data,
``half`` measured 6 % ahead of the kernel alone in the first stage (noise 3.7 %) and ran at
0.88x it on the held-out input (BENCHMARKS.md, "Programs under a memory limit").
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from pagecast.plan.measure import (
    Confirmation,
    MeasureConfig,
    Recording,
    Rounds,
    _tallied_rounds,
    confirm_or_fall_back,
    noise_of,
    tie_of,
)
from pagecast.plan.memory_format import MemoryPlan, write_memory_plan

KERNEL_CANDIDATES = ("kernel", "half", "keep", "plan", "follow", "seq", "seq1")  # simplest first
PAGER = "+pager"
PAGER_SIDE = ("half", "keep", "plan")  # also applied by the pager
PAGER_CANDIDATES = tuple(c + PAGER for c in PAGER_SIDE)
CANDIDATES = (*KERNEL_CANDIDATES, *PAGER_CANDIDATES)
STOP_SLOWER = 3.0  # plan --memory --measure's MeasureConfig.stop_slower: a variant that slow is stopped
READ_TIE = 0.05  # variants as fast, reading within this share of the least, count as reading least


def _keep_only(plan: MemoryPlan, share: float = 1.0) -> MemoryPlan:
    """``plan`` with nothing streamed from outside and ``share`` of its keep chunks (in file
    order, the rest left to the kernel)."""
    budget = round(sum(f.keep_chunks() for f in plan.files) * share)
    files = []
    for f in plan.files:
        keep = []
        for a, n in f.keep:
            take = min(n, budget)
            if take > 0:
                keep.append((a, take))
                budget -= take
        files.append(dataclasses.replace(f, keep=keep, stream=[], next={}))
    return dataclasses.replace(plan, files=files, prefetch_chunks=0)


def _sides(plan: MemoryPlan) -> dict[str, MemoryPlan]:
    return {"half": _keep_only(plan, 0.5), "keep": _keep_only(plan), "plan": plan}


def variants(
    plan: MemoryPlan,
    pager: bool = True,
    follow: MemoryPlan | None = None,
    for_pager: MemoryPlan | None = None,
    sequential: Mapping[str, MemoryPlan] | None = None,
) -> dict[str, MemoryPlan | None]:
    """The candidates, each naming the backend that applies it (whatever ``plan`` names);
    ``follow``: the plan rebuilt in chunks the controller can follow, if one was;
    ``for_pager``: the plan rebuilt for the pager (``memory.pager_plan``), whose variants
    the pager's are, if one was; ``sequential``: the keep sets rebuilt for files advised
    sequential, by variant name (``memory.sequential_variants``), if any were."""
    kernel_side = _sides(plan)
    if follow is not None:
        kernel_side["follow"] = follow
    kernel_side.update(sequential or {})
    out: dict[str, MemoryPlan | None] = {"kernel": None}
    out.update({k: dataclasses.replace(v, backend="kernel-advice") for k, v in kernel_side.items()})
    if pager:
        pager_side = _sides(for_pager) if for_pager is not None else kernel_side
        for name in PAGER_SIDE:
            out[name + PAGER] = dataclasses.replace(pager_side[name], backend="pager")
    return out


@dataclass
class MemoryMeasured:
    recordings: list[str]
    runs: dict[str, dict[str, list[float]]]  # candidate -> recording -> wall seconds
    rounds: int
    noise: float = 0.0
    chosen: str = "kernel"
    why: str = ""
    confirmation: Confirmation | None = None
    stopped: dict[str, str] = dataclasses.field(default_factory=dict)  # variant -> why it was stopped
    # candidate -> recording -> bytes the run's process tree read from devices
    reads: dict[str, dict[str, list[int]]] = dataclasses.field(default_factory=dict)

    def totals(self) -> dict[str, float]:
        return {c: sum(statistics.median(xs) for xs in by.values()) for c, by in self.runs.items()}

    def read_totals(self) -> dict[str, float]:
        return {c: sum(statistics.median(xs) for xs in by.values()) for c, by in self.reads.items()}

    def to_dict(self) -> dict[str, Any]:
        tot = self.totals()
        return {
            "rounds": self.rounds,
            "noise": round(self.noise, 4),
            "chosen": self.chosen,
            "why": self.why,
            "total_s": {c: round(t, 6) for c, t in tot.items()},
            "read_mib": {c: round(b / 2**20, 1) for c, b in self.read_totals().items()},
            "runs_s": {
                c: {Path(r).name: [round(x, 4) for x in xs] for r, xs in by.items()} for c, by in self.runs.items()
            },
            **({"confirmation": self.confirmation.to_dict()} if self.confirmation else {}),
            **({"stopped": dict(self.stopped)} if self.stopped else {}),
        }

    def table(self) -> list[str]:
        tot = self.totals()
        lines = [f"measured wall s under the limit (median of {self.rounds} cold runs each; noise {self.noise:.1%}):"]
        read = self.read_totals()
        for c in sorted(tot, key=tot.__getitem__):
            mark = " <- chosen" if c == self.chosen else ""
            mib = f", {read[c] / 2**20:.0f} MiB read" if c in read else ""
            lines.append(f"  {c}: {tot[c]:.3f} s{mib}, {tot['kernel'] / tot[c]:.2f}x the kernel alone{mark}")
        lines += [f"  {c}: {why}" for c, why in self.stopped.items()]
        if self.confirmation is not None:
            conf = self.confirmation.totals()
            lines.append(
                f"  fresh rounds ({self.confirmation.rounds}): "
                + ", ".join(f"{c} {t:.3f} s" for c, t in conf.items())
                + (" (kept)" if self.confirmation.kept else " (not kept)")
            )
        return lines


def choose(
    totals: dict[str, float], noise: float, tie: float, reads: dict[str, float] | None = None
) -> tuple[str, str]:
    """The variant to keep: of those faster than the kernel alone by more than ``noise``, the
    ones within ``tie`` of the fastest; of these, the ones that read within ``READ_TIE`` of the
    least (``reads``: bytes per variant, if measured); of these, the simplest."""
    kernel = totals["kernel"]
    eligible = [c for c in CANDIDATES if c != "kernel" and c in totals and totals[c] < kernel * (1 - noise)]
    if not eligible:
        return "kernel", f"no variant of the plan beat the kernel alone by more than the noise ({noise:.1%})"
    fastest = min(totals[c] for c in eligible)
    tied = [c for c in eligible if totals[c] <= fastest * (1 + tie)]
    why = f"the simplest within {tie:.1%} of the fastest"
    if reads and all(c in reads for c in tied) and len(tied) > 1:
        # as fast on the recorded runs, the one reading less is ahead on every pass a longer
        # run adds: the recorded runs weigh loading (read once by all) against passes
        least = min(reads[c] for c in tied)
        tied = [c for c in tied if reads[c] <= least * (1 + READ_TIE)]
        why = f"of those within {tie:.1%} of the fastest, the simplest of those reading least"
    pick = tied[0]
    return pick, f"{kernel / totals[pick]:.2f}x the kernel alone, {why}"


def measure_memory_plan(
    plan: MemoryPlan,
    recordings: Sequence[Recording],
    cfg: MeasureConfig,
    pager: bool = True,
    follow: MemoryPlan | None = None,
    for_pager: MemoryPlan | None = None,
    sequential: Mapping[str, MemoryPlan] | None = None,
) -> tuple[MemoryPlan, MemoryMeasured]:
    """The variant of ``plan`` that measured fastest (the kernel alone: ``backend kernel``);
    ``pager``: whether the pager variants are timed too; ``follow``, ``for_pager``: see
    ``variants``."""
    cands = variants(plan, pager, follow, for_pager, sequential)
    work = Path(tempfile.mkdtemp(prefix="pagecast-memmeasure-"))
    try:
        no_plan = work / "kernel.plan"  # never written: ``launch_argv`` is given None for it
        plan_of: dict[str, dict[str, Path]] = {}
        for name, p in cands.items():
            path = no_plan
            if p is not None:
                path = work / f"{name}.plan"
                write_memory_plan(p, path)
            plan_of[name] = {r.trace: path for r in recordings}
        base = cfg.launch_argv
        run_cfg = dataclasses.replace(
            cfg,
            launch_argv=lambda path, argv: base(None if path == str(no_plan) else path, argv),
        )
        cold = [f.path for f in plan.files]
        names = ["kernel", *(c for c in cands if c != "kernel")]  # the baseline first
        tally = _tallied_rounds(names, recordings, plan_of, cold, run_cfg, cfg.rounds, 0)
        out = MemoryMeasured(
            [r.trace for r in recordings], tally.runs, cfg.rounds, stopped=tally.stopped, reads=tally.reads
        )
        out.noise = noise_of(tally.runs, cfg.min_noise)
        tie = tie_of(out.noise, cfg.rounds, len(recordings))
        out.chosen, out.why = choose(out.totals(), out.noise, tie, out.read_totals())
        extra = cfg.rounds if cfg.confirm_rounds is None else cfg.confirm_rounds
        if out.chosen != "kernel" and extra > 0:
            # the fastest of seven noisy totals is biased low: timed again beside the kernel alone
            run_as = {out.chosen: out.chosen, "kernel": "kernel"}
            confirm_or_fall_back(out, "kernel", run_as, Rounds(recordings, plan_of, cold, run_cfg), extra)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    chosen = cands[out.chosen]
    if chosen is None:
        chosen = dataclasses.replace(plan, backend="kernel", note=f"measured: {out.why}")
    return chosen, out
