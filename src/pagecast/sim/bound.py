"""The reference row every fraction divides by: the fewest faults any oracle, or any row
compared, reaches.

The oracle prefetches the next k distinct pages the program will use. With a fast tier
smaller than a few k pages, those prefetches evict pages needed sooner than they are, so
a fixed k can make far more faults than no prefetching at all. ``oracle_bound`` runs the
oracle at k = 1, 2, 4, … up to ``k_max`` (at most the capacity) and keeps the run with the fewest faults. Under LRU,
k = 1 never makes more faults than no prefetching (the page it fetches is the next distinct
page used, and the page it evicts is the one that page's own fault would have evicted:
only the current page is used in between), so the bound holds against no prefetching.

It does not bound every prefetcher. On a full access trace the next k distinct pages are
mostly the hot pages already resident, so at a miss the oracle often names nothing that
will miss, while a next-line prefetcher fetches pages hundreds of distinct pages ahead
(a lackey trace of sort: nextline 132 faults, this oracle 238). Two more candidates
close that gap:

* the **miss oracle**: at each miss of an LRU tier of this capacity without
  prefetching, the pages of the next k such misses (a schedule, fired at those events);
* the **rows compared** (``candidates``: the classic prefetchers, schedules, models of the
  same evaluation), so the reference never has more faults than any row shown.

``result.extra["oracle_source"]`` names the run kept ("oracle k=4", "miss-oracle k=8",
or a row's prefetcher); its prefetch log, when logged, is the best oracle's, so the
row's ranking metrics are those of the next k distinct pages (the ideal ranking). It is an upper bound of what the rows shown reach, by
construction, and of the oracles; it is not a proof of the offline optimum (with
prefetch timing and a link of finite bandwidth, that is an open scheduling problem).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from pagecast.policies.oracle import Oracle
from pagecast.sim.config import SimConfig, SimResult
from pagecast.sim.misses import has_accesses, miss_events
from pagecast.sim.simulate import resolve_capacity, simulate
from pagecast.trace.demand import as_trace, demand_chunks
from pagecast.trace.followers import distinct_followers
from pagecast.trace.keys import page_keys, split_keys
from pagecast.trace.reader import Trace
from pagecast.trace.schedule import Schedule

MISS_LOOKAHEAD = 4096  # misses looked at for the next k distinct ones
MAX_MISS_ROWS = 1 << 23  # rows of one miss-oracle schedule (~0.4 GiB while it is built and replayed)


def oracle_ks(k_max: int) -> list[int]:
    ks, k = [], 1
    while k < k_max:
        ks.append(k)
        k *= 2
    return ks + [k_max]


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def _miss_rows(t: Trace, capacity_pages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(index, time, page key) of each demand event that misses in an LRU tier of
    ``capacity_pages`` without prefetching, the trace read chunk by chunk."""
    miss = miss_events(t, capacity_pages)
    ts, keys, base = [], [], 0
    for d in demand_chunks(t):
        n = len(d["t"])
        a, b = np.searchsorted(miss, [base, base + n])
        local = miss[a:b] - base
        ts.append(d["t"][local])
        keys.append(page_keys(d["region"][local], d["page"][local]))
        base += n
    cat = lambda x: np.concatenate(x) if x else np.empty(0, np.int64)  # noqa: E731
    return miss, cat(ts), cat(keys)


def miss_oracle_schedule(
    trace: Trace | str | Path, capacity_pages: int, k: int, misses: tuple[np.ndarray, ...] | None = None
) -> Schedule:
    """At each miss of an LRU tier of ``capacity_pages`` without prefetching, the pages of
    the next ``k`` distinct misses (it reads the future: a reference, not a predictor).
    ``misses``: ``_miss_rows`` of this trace and capacity, when already computed."""
    t = as_trace(trace)
    miss, times, keys = misses if misses is not None else _miss_rows(t, capacity_pages)
    src, dst, _ = distinct_followers(keys, MISS_LOOKAHEAD, int(k))
    rank = np.arange(len(src)) - np.searchsorted(src, src)  # the order of each among its miss's
    region, page = split_keys(dst)
    s = Schedule(miss[src], times[src], region, page, (k - rank).astype(np.float32))
    s.regions = list(t.regions)
    s.meta = {"name": f"miss-oracle k={k}", "source": "pagecast.sim.bound"}
    return s


def _keep(best: SimResult | None, r: SimResult, source: str) -> SimResult:
    if best is None or r.faults < best.faults:
        r.extra["oracle_source"] = source
        return r
    return best


def oracle_bound(
    trace: Trace | str | Path,
    config: SimConfig,
    k_max: int = 32,
    candidates: Sequence[SimResult] = (),
) -> SimResult:
    """The run with the fewest faults among the oracle at k = 1, 2, 4, …, ``k_max``, the
    miss oracle at the same k (traces with accesses) and the ``candidates`` given (ties: the
    oracle with the larger k, which is timelier, then the oracle before the others).

    ``result.extra["oracle_source"]`` says which; ``["oracle_k"]`` is the oracle's best k.
    """
    import dataclasses

    t = as_trace(trace)
    cap = resolve_capacity(config.capacity, t, config.page_size)
    ks = oracle_ks(max(1, int(min(k_max, cap))))  # more pages ahead than the tier holds only evicts them again
    best: SimResult | None = None
    best_k = 1
    for k in ks:
        r = simulate(t, config, Oracle(k=k))
        if best is None or r.faults <= best.faults:
            best, best_k = r, k
            best.extra["oracle_source"] = f"oracle k={k}"
    assert best is not None
    oracle_log = best.extra.get("prefetch_log")
    if has_accesses(t):
        mcfg = dataclasses.replace(config, capacity=cap, schedule_triggers="all")
        misses = _miss_rows(t, cap)
        # a schedule of misses × k rows: the k that would not fit in MAX_MISS_ROWS are skipped
        for k in (k for k in ks if len(misses[0]) * k <= MAX_MISS_ROWS):
            best = _keep(best, simulate(t, mcfg, miss_oracle_schedule(t, cap, k, misses)), f"miss-oracle k={k}")
    for c in candidates:
        if c.faults < best.faults:
            best = dataclasses.replace(c, extra={k: v for k, v in c.extra.items() if k != "prefetch_log"})
            best.extra["oracle_source"] = c.prefetcher
    best.extra["oracle_k"] = best_k
    if oracle_log is not None:
        # ranking metrics judge the pages named against the next pages used: the oracle's
        # (the next k distinct pages) are the ideal ranking, whichever run made fewest faults
        best.extra["prefetch_log"] = oracle_log
    best.prefetcher = "oracle"
    return best
