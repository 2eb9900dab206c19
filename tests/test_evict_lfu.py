"""LFU (policies/evict_lfu.py): an eviction that runs compiled in the simulator from one
file — its key kernel alone, no edit to the engine."""

from pagecast.sim import SimConfig, simulate
from pagecast.sim.kernels import EV_KINDS
from sim_helpers import mixed_pages, ref_victims, write_trace


def test_lfu_keeps_the_frequent_page_through_a_scan(tmp_path):
    assert "lfu" in EV_KINDS  # compiled: a kind of the engine's eviction slots
    pages = [0] * 5 + list(range(1, 20)) + [0]
    path = write_trace(tmp_path / "t.parquet", pages)
    r = simulate(path, SimConfig(capacity=3, eviction="lfu", log_victims=True))
    assert 0 not in r.extra["victims"][1].tolist()
    assert r.faults == 19 + 1  # the scan misses, page 0 only once
    pages = mixed_pages(2000)
    path = write_trace(tmp_path / "m.parquet", pages)
    r = simulate(path, SimConfig(capacity=50, eviction="lfu", log_victims=True))
    assert r.extra["victims"][1].tolist() == ref_victims("lfu", pages.tolist(), 50)
