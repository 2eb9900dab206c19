"""The oracle as an upper bound at every capacity.

The oracle prefetches the next k distinct pages the program will use. With a fast tier
smaller than a few k pages, those prefetches evict pages needed sooner than they are, so
a fixed k can make far more faults than no prefetching at all. ``oracle_bound`` runs the
oracle at k = 1, 2, 4, … up to ``k_max`` (at most the capacity) and keeps the run with the fewest faults. Under LRU,
k = 1 never makes more faults than no prefetching (the page it fetches is the next distinct
page used, and the page it evicts is the one that page's own fault would have evicted:
only the current page is used in between), so the bound holds at every capacity.
"""

from __future__ import annotations

from pathlib import Path

from pagecast.policies.oracle import Oracle
from pagecast.sim.config import SimConfig, SimResult
from pagecast.sim.simulate import resolve_capacity, simulate
from pagecast.trace.reader import Trace


def oracle_ks(k_max: int) -> list[int]:
    ks, k = [], 1
    while k < k_max:
        ks.append(k)
        k *= 2
    return ks + [k_max]


def oracle_bound(trace: Trace | str | Path, config: SimConfig, k_max: int = 32) -> SimResult:
    """The oracle run with the fewest faults over k = 1, 2, 4, …, ``k_max`` (ties: larger k, which is timelier).

    ``result.extra["oracle_k"]`` is the k chosen.
    """
    best: SimResult | None = None
    # more pages ahead than the tier holds only evicts them again
    k_max = min(k_max, resolve_capacity(config.capacity, trace, config.page_size))
    for k in oracle_ks(max(1, int(k_max))):
        r = simulate(trace, config, Oracle(k=k))
        if best is None or r.faults <= best.faults:
            best = r
            best.extra["oracle_k"] = k
    assert best is not None
    return best
