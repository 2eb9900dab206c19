"""What a benchmark harness measures: one row per timed run, and the table of medians.

``pagecast bench`` (the sparse-weights workload) and the cold-start harness of real
programs (``pagecast.bench.coldstart``) both time strategies round by round and report
each strategy's medians with its ratio to the best kernel strategy. The strategies are of
a few kinds, and the table lists them in this order whatever order they ran in:

- ``kernel``: the kernel alone, with or without advice (the baselines);
- ``pagecast``: pagecast's strategies;
- ``bound``: the most a plan built from the recordings could do;
- ``oracle``: this run's own pages, known in advance;
- ``warm``: a warm page cache, the roof no cold start passes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

KINDS = ("kernel", "pagecast", "bound", "oracle", "warm")

# below this share of the best kernel strategy's time, the oracle's lead is within run-to-run
# noise, and a share of it (a ratio of two small differences) means nothing
MIN_HEADROOM = 0.03


@dataclass
class RunRow:
    """One timed run. The optional measures are None where a harness does not take them."""

    strategy: str
    kind: str  # one of KINDS
    round: int
    wall_s: float
    bytes_read: int  # read from the device during the run, or the harness's nearest measure of it
    case: str = ""
    cached_bytes: int | None = None  # the run's files in the page cache afterwards
    major_faults: int | None = None
    prefetched: int | None = None  # pages the strategy brought in ahead of the program
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    checksum: float | None = None  # the program's own result, to check every run computed the same

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"strategy kind {self.kind!r} is not one of {', '.join(KINDS)}")


# summary column -> (row field, divisor, integer): medians of the measures every run of the strategy has
_OPTIONAL = {
    "ttft_s": ("ttft_s", 1, False),
    "tokens_per_s": ("tokens_per_s", 1, False),
    "major_faults": ("major_faults", 1, True),
    "prefetched": ("prefetched", 1, True),
    "mib_cached": ("cached_bytes", 2**20, False),
}


def summarise(rows: Sequence[RunRow], order: Sequence[str]) -> list[dict[str, Any]]:
    """A row per strategy named in ``order`` that has runs: medians, the spread of the wall
    time, and ratios to the baselines of its case (``RunRow.case``). Listed by kind
    (``KINDS``), in ``order`` within a kind."""
    med = lambda xs: float(statistics.median(xs))  # noqa: E731
    out = []
    for name in dict.fromkeys(order):
        rs = [r for r in rows if r.strategy == name]
        if not rs:
            continue
        x: dict[str, Any] = {
            "strategy": name,
            "kind": rs[0].kind,
            "case": rs[0].case,
            "runs": len(rs),
            "wall_s": med([r.wall_s for r in rs]),
            "wall_min_s": min(r.wall_s for r in rs),
            "wall_max_s": max(r.wall_s for r in rs),
            "mib_read": med([r.bytes_read for r in rs]) / 2**20,
        }
        for col, (field, div, whole) in _OPTIONAL.items():
            vals = [getattr(r, field) for r in rs]
            if all(v is not None for v in vals):
                m = med(vals)
                x[col] = int(m) if whole else m / div
        out.append(x)
    out.sort(key=lambda x: KINDS.index(x["kind"]))  # stable: ``order`` within a kind
    for case in dict.fromkeys(x["case"] for x in out):
        # each case against its own baselines: rows under a memory limit against the kernel
        # alone under that limit, not against strategies with all the memory they want
        _ratios([x for x in out if x["case"] == case])
    return out


def _ratios(out: list[dict[str, Any]]) -> None:
    kern = [x for x in out if x["kind"] == "kernel"]
    best = min(kern, key=lambda x: x["wall_s"]) if kern else None
    oracle = next((x for x in out if x["kind"] == "oracle"), None)
    warm = next((x for x in out if x["kind"] == "warm"), None)
    for x in out:
        w = x["wall_s"]
        x["best_kernel"] = x is best
        x["vs_best_kernel"] = best["wall_s"] / w if best and w else None
        x["vs_warm"] = w / warm["wall_s"] if warm and warm["wall_s"] else None
        x["headroom_captured"] = headroom(best["wall_s"], w, oracle["wall_s"]) if best and oracle else None


def headroom(best_kernel: float, strategy: float, oracle: float) -> float | None:
    """(best kernel - strategy) / (best kernel - oracle); None when the oracle is not
    ``MIN_HEADROOM`` faster than the best kernel strategy (no headroom worth sharing)."""
    gap = best_kernel - oracle
    return (best_kernel - strategy) / gap if gap > MIN_HEADROOM * best_kernel else None
