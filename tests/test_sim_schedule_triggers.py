"""Where prefetches fire: schedules at misses of the simulated tier, the LRU miss stream,
the oracle as an upper bound at every capacity, percent capacities from Python."""

from __future__ import annotations

import numpy as np
import pytest

from pagecast.sim import SimConfig, simulate
from pagecast.sim.bound import oracle_bound
from pagecast.sim.misses import has_accesses, lru_misses, miss_events
from pagecast.sim.simulate import count_distinct
from pagecast.trace.schedule import Schedule
from sim_helpers import mixed_pages, ref_lru, write_trace


def _ref_miss_flags(pages, cap):
    from collections import OrderedDict

    cache: OrderedDict = OrderedDict()
    out = []
    for p in pages:
        if p in cache:
            cache.move_to_end(p)
            out.append(False)
            continue
        out.append(True)
        if len(cache) >= cap:
            cache.popitem(last=False)
        cache[p] = True
    return out


@pytest.mark.parametrize("cap", [1, 7, 64, 5000])
def test_lru_misses_match_reference(tmp_path, cap):
    pages = mixed_pages(3000, seed=cap)
    ids = np.unique(pages, return_inverse=True)[1]
    assert lru_misses(ids.astype(np.int64), int(ids.max()) + 1, cap).tolist() == _ref_miss_flags(pages.tolist(), cap)
    path = write_trace(tmp_path / "a.parquet", pages)
    ev = miss_events(path, cap)
    assert len(ev) == ref_lru(pages.tolist(), cap) == simulate(path, SimConfig(capacity=cap)).faults
    flags = np.array(_ref_miss_flags(pages.tolist(), cap))
    assert np.array_equal(ev, np.flatnonzero(flags))
    # streamed in small chunks (the tier's state carried across them): the same events
    assert np.array_equal(miss_events(path, cap, chunk_rows=257), ev)
    assert has_accesses(path)
    assert not has_accesses(write_trace(tmp_path / "f.parquet", pages, kind=1))


def test_schedule_fires_only_at_misses_on_access_trace(tmp_path):
    # a hot loop over 8 pages (hits after the first pass), with a new page every 50 accesses
    pages = []
    for j in range(40):
        pages += list(range(8)) * 6 + [100 + j, 100 + j]
    pages = np.array(pages)
    path = write_trace(tmp_path / "a.parquet", pages)
    n = len(pages)
    # a schedule that names the next cold page after every single access
    trig = np.arange(n)
    nxt = 100 + np.minimum(np.arange(n) // 50 + 1, 39)
    sched = Schedule(trig, trig * 1000, np.zeros(n, np.int32), nxt, np.ones(n, np.float32))
    cfg = SimConfig(capacity=16, log_prefetches=True)
    r = simulate(path, cfg, sched)
    fired = np.unique(r.extra["prefetch_log"][0])
    # it fired only where the tier missed or a prefetched page was first used
    hot = np.isin(pages, np.arange(8))
    assert len(fired) > 0 and not hot[fired[fired >= 8]].any()
    assert r.faults == 8 + 1  # the hot pages once, the first cold page; every later one was prefetched
    every = simulate(path, SimConfig(capacity=16, log_prefetches=True, schedule_triggers="all"), sched)
    assert len(np.unique(every.extra["prefetch_log"][0])) == n


def test_oracle_bound_never_worse_than_none(tmp_path):
    pages = np.tile(np.arange(20), 30)  # a loop one page larger than the tier
    path = write_trace(tmp_path / "loop.parquet", pages)
    for cap in (2, 5, 19, 20, 64):
        cfg = SimConfig(capacity=cap)
        none = simulate(path, cfg, None).faults
        best = oracle_bound(path, cfg)
        assert best.faults <= none and best.prefetcher == "oracle"
    # a hot loop of 15 pages and a new cold page now and then, in a 19-page tier: a fixed
    # 32-page lookahead fetches cold pages far ahead and evicts the hot ones
    hot = []
    for j in range(200):
        hot += list(range(15)) * 6 + [100 + j]
    path3 = write_trace(tmp_path / "hot.parquet", np.array(hot))
    cfg = SimConfig(capacity=19)
    none = simulate(path3, cfg, None).faults
    assert none == 215
    assert simulate(path3, cfg, "oracle").faults > 50 * none
    best = oracle_bound(path3, cfg)
    assert best.faults == 1 and best.extra["oracle_k"] == 16
    path2 = write_trace(tmp_path / "mixed.parquet", mixed_pages())
    for cap in (3, 30, 300):
        assert (
            oracle_bound(path2, SimConfig(capacity=cap)).faults <= simulate(path2, SimConfig(capacity=cap), None).faults
        )


def test_percent_capacity_from_python(tmp_path):
    pages = mixed_pages(2000)
    path = write_trace(tmp_path / "p.parquet", pages)
    distinct = count_distinct(path)
    r = simulate(path, SimConfig(capacity="50%"), "nextline")
    assert r.capacity_pages == round(distinct * 0.5)
    assert r.faults == simulate(path, SimConfig(capacity=round(distinct * 0.5)), "nextline").faults
