"""The LRU eviction (policies/evict_lru.py): the page unused longest leaves."""

from pagecast.sim import SimConfig, simulate
from sim_helpers import mixed_pages, ref_lru, write_trace


def test_lru_evicts_the_page_unused_longest(tmp_path):
    path = write_trace(tmp_path / "t.parquet", [0, 1, 2, 0, 3, 0, 1])
    r = simulate(path, SimConfig(capacity=3, eviction="lru", log_victims=True))
    assert r.extra["victims"][1].tolist() == [1, 2]  # 3 evicts 1 (0 was used again), then 1 evicts 2
    pages = mixed_pages(3000)
    path = write_trace(tmp_path / "m.parquet", pages)
    assert simulate(path, SimConfig(capacity=100, eviction="lru")).faults == ref_lru(pages.tolist(), 100)
