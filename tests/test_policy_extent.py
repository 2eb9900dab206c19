import numpy as np

from pagecast.policies.extent import RegionExtent
from pagecast.sim import SimConfig, simulate
from pagecast.trace.regions import Region
from sim_helpers import mixed_pages, same_results_both_engines, write_trace


def _regions():
    return [Region(0, "small", kind="anon", length=40 * 4096), Region(1, "big", kind="anon", length=10_000 * 4096)]


def test_fetches_small_object_from_touched_page_wrapping():
    p = RegionExtent(degree=16, max_pages=512)
    p.reset(_regions())
    first = p.observe(0, 0, 30, False)
    assert [pg for _, pg in first] == [31, 32, 33, 34, 35, 36, 37, 38, 39, 0, 1, 2, 3, 4, 5, 6]
    second = p.observe(1, 0, 3, True)
    assert [pg for _, pg in second] == list(range(7, 23))
    third = p.observe(2, 0, 9, True)
    assert [pg for _, pg in third] == list(range(23, 30))  # 40 pages in all, each named once
    assert p.observe(3, 0, 10, False) == []


def test_large_and_unknown_regions_are_not_objects():
    p = RegionExtent(max_pages=512)
    p.reset(_regions())
    assert p.observe(0, 1, 5, False) == []
    assert p.observe(1, -1, 5, False) == []


def test_cuts_faults_on_object_walk(tmp_path):
    rng = np.random.default_rng(0)
    pages = np.concatenate([rng.permutation(40), rng.permutation(40)])
    path = write_trace(tmp_path / "o.parquet", pages, regions=_regions()[:1])
    none = simulate(path, SimConfig(capacity=64), None).faults
    whole = simulate(path, SimConfig(capacity=64), RegionExtent(degree=64))
    assert none == 40 and whole.faults == 1 and whole.prefetches == 39
    spread = simulate(path, SimConfig(capacity=64), RegionExtent(degree=16))  # 16 pages per observed event
    assert spread.faults < 5 and spread.prefetches + spread.redundant == 39


def test_numba_and_python_agree(tmp_path):
    path = write_trace(
        tmp_path / "m.parquet",
        mixed_pages(),
        regions=[Region(0, "r", kind="anon", length=300 * 4096), Region(1, "r1", kind="anon", length=3200 * 4096)],
        region=0,
    )
    same_results_both_engines(path, lambda: RegionExtent(max_pages=4000))
