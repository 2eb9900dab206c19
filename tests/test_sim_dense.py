"""Page ids without hashing, and the lean no-prefetch loop, against the general paths.

Pages inside their region's declared length get dense ids (offset of the region +
page); pages past it, in regions of unknown length, or in region -1 are hashed. Both
kinds must give exactly the results of the reference caches and of each other; the
loop for no prefetch (``engine.run_plain``) must give exactly what the general loop
gives.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from pagecast.sim import SimConfig, simulate
from pagecast.trace.regions import Region
from pagecast.trace.writer import TraceWriter
from sim_helpers import ref_clock, ref_fifo, ref_lru

sim_mod = importlib.import_module("pagecast.sim.simulate")  # the module (the package exports the function)
REFS = {"lru": ref_lru, "fifo": ref_fifo, "clock": ref_clock}


def _mixed_trace(path, n=6000, seed=0):
    """Three regions: r0 declared 64 pages but touched up to page 95 (the last third
    hashed), r1 of unknown length (all hashed), r2 declared 200 pages; plus region -1
    rows; random writes. Returns the path and the (region, page) stream."""
    rng = np.random.default_rng(seed)
    regions = [Region(0, "a", length=64 * 4096), Region(1, "b", length=0), Region(2, "c", length=200 * 4096)]
    region = rng.choice([-1, 0, 1, 2], n, p=[0.1, 0.35, 0.2, 0.35])
    hi = np.select([region == 0, region == 1, region == 2], [96, 80, 200], 30)
    page = (rng.random(n) * hi).astype(np.int64)
    # runs of repeats and sequential stretches, so hits, re-references and faults all occur
    page[rng.random(n) < 0.2] = 5
    with TraceWriter(path, regions=regions, source="test", row_group_rows=1500) as w:
        w.write(
            t_ns=np.arange(n, dtype=np.int64) * 100,
            region=region,
            page=page,
            flags=(rng.random(n) < 0.3).astype(np.uint8),
        )
    return path, list(zip(region.tolist(), page.tolist()))


def _strip(r) -> dict:
    d = r.to_dict()
    d.pop("wall_s")
    extra = d.pop("extra")
    if "prefetch_log" in extra:
        d["log"] = [a.tolist() for a in extra["prefetch_log"]]
    return {k: None if isinstance(v, float) and v != v else v for k, v in d.items()}  # NaN != NaN


@pytest.mark.parametrize("eviction", sorted(REFS))
@pytest.mark.parametrize("cap", [1, 7, 50, 400])
def test_mixed_dense_and_hashed_pages_match_reference(tmp_path, eviction, cap):
    path, keys = _mixed_trace(tmp_path / "m.parquet")
    fast = simulate(path, SimConfig(capacity=cap, eviction=eviction, chunk_rows=1000))
    general = simulate(path, SimConfig(capacity=cap, eviction=eviction, chunk_rows=1000), engine="general")
    assert fast.faults == REFS[eviction](keys, cap)
    assert fast.distinct_pages == len(set(keys))
    assert _strip(fast) == _strip(general)


@pytest.mark.parametrize("eviction", ["lru", "fifo", "clock", "min"])
@pytest.mark.parametrize("prefetcher", ["none", "nextline", "stride", "markov", "oracle"])
def test_dense_and_hashed_ids_give_identical_results(tmp_path, monkeypatch, eviction, prefetcher):
    path, _ = _mixed_trace(tmp_path / "m.parquet", n=4000, seed=1)
    cfg = SimConfig(capacity=40, eviction=eviction, chunk_rows=700, log_prefetches=True)
    dense = _strip(simulate(path, cfg, prefetcher))
    monkeypatch.setattr(sim_mod, "DENSE_MAX_PAGES", 0)  # every page through the hash table
    hashed = _strip(simulate(path, cfg, prefetcher))
    assert dense == hashed
    if prefetcher != "none":
        assert dense["prefetches"] > 0 and len(dense["log"][0]) > 0


@pytest.mark.parametrize("eviction", sorted(REFS))
def test_plain_loop_equals_general_loop_on_random_traces(tmp_path, eviction):
    rng = np.random.default_rng(5)
    for trial in range(4):
        n = int(rng.integers(500, 5000))
        universe = int(rng.integers(20, 3000))
        pages = rng.integers(0, universe, n)
        pages[rng.random(n) < 0.3] = rng.integers(0, 10)  # a hot set
        t = np.cumsum(rng.integers(0, 500, n))  # uneven gaps, some zero
        path = tmp_path / f"r{trial}.parquet"
        with TraceWriter(
            path, regions=[Region(0, "r", length=universe * 4096)], source="test", row_group_rows=900
        ) as w:
            w.write(t_ns=t, region=0, page=pages, flags=rng.integers(0, 2, n).astype(np.uint8))
        for cap in (1, int(rng.integers(2, universe)), universe + 5):
            cfg = SimConfig(capacity=cap, eviction=eviction, chunk_rows=int(rng.integers(100, 2000)))
            fast, general = simulate(path, cfg), simulate(path, cfg, engine="general")
            assert _strip(fast) == _strip(general), (trial, cap)
            assert fast.faults == REFS[eviction](pages.tolist(), cap)


def test_count_distinct_with_hashed_pages(tmp_path):
    path, keys = _mixed_trace(tmp_path / "m.parquet")
    assert sim_mod.count_distinct(path, chunk_rows=1000) == len(set(keys))


def test_unknown_engine_is_one_line_error(tmp_path):
    from pagecast.errors import PagecastError

    path, _ = _mixed_trace(tmp_path / "m.parquet", n=100)
    with pytest.raises(PagecastError, match="unknown simulator engine"):
        simulate(path, SimConfig(), engine="fast")


@pytest.mark.parametrize("eviction", ["lru", "min"])
def test_queue_follows_resident_pages_not_capacity(tmp_path, monkeypatch, eviction):
    # A 64 GiB region (2^24 pages, all dense ids), a capacity larger than that, and
    # 3000 distinct pages: the recency queue / MIN heap must be sized by the pages made
    # resident, not by the capacity (its tail sweeps the whole array: that would be RSS).
    rng = np.random.default_rng(2)
    pages = rng.integers(0, 3000, 20_000) * 4001  # spread over the region
    path = tmp_path / "big.parquet"
    with TraceWriter(path, regions=[Region(0, "big", length=(1 << 24) * 4096)], source="test") as w:
        w.write(t_ns=np.arange(len(pages), dtype=np.int64), region=0, page=pages)
    states = []

    class Recording(sim_mod._State):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            states.append(self)

    monkeypatch.setattr(sim_mod, "_State", Recording)
    r = simulate(path, SimConfig(capacity=1 << 25, eviction=eviction, chunk_rows=4096), "nextline")
    assert r.evictions == 0 and r.faults + r.late + r.hits == len(pages)
    st = states[-1]
    assert st.ndense == 1 << 24
    resident = int(st.g[sim_mod.E.G_NRES])
    assert resident == r.faults + r.prefetches
    assert st.heap.shape[1] <= 4 * (resident + 4096 + 65) + 200
