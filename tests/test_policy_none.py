from pagecast.policies import get_prefetcher
from pagecast.sim import SimConfig, simulate
from sim_helpers import mixed_pages, ref_lru, write_trace


def test_none_prefetches_nothing(tmp_path):
    p = get_prefetcher("none")
    assert p.observe(0, 0, 5, False) == [] and p.observe(1, 0, 6, True) == []
    pages = mixed_pages(2000)
    r = simulate(write_trace(tmp_path / "t.parquet", pages), SimConfig(capacity=100), "none")
    assert r.prefetches == 0 and r.faults == ref_lru(pages.tolist(), 100)
