"""Belady's MIN (policies/evict_min.py) as a keyed eviction: the optimum of demand paging."""

import pytest

from pagecast.sim import SimConfig, simulate
from sim_helpers import mixed_pages, ref_belady, write_trace


@pytest.mark.parametrize("cap", [5, 60, 300])
def test_min_equals_belady_and_no_eviction_does_better(tmp_path, cap):
    pages = mixed_pages(2500)
    path = write_trace(tmp_path / "m.parquet", pages)
    best = simulate(path, SimConfig(capacity=cap, eviction="min")).faults
    assert best == ref_belady(pages.tolist(), cap)
    for ev in ("lru", "fifo", "clock", "lfu", "belady"):
        assert simulate(path, SimConfig(capacity=cap, eviction=ev)).faults >= best
