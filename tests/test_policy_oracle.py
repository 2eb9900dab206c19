import numpy as np
import pytest

from pagecast.policies.oracle import Oracle
from pagecast.sim import SimConfig, simulate
from sim_helpers import mixed_pages, same_results_both_engines, write_trace


def test_names_next_distinct_pages():
    reg = np.zeros(8, np.int64)
    pg = np.array([5, 6, 6, 7, 5, 8, 9, 10])
    o = Oracle(k=3, stream=(reg, pg, np.arange(8)))
    assert o.observe(0, 0, 5, False) == [(0, 6), (0, 7), (0, 8)]
    assert o.observe(3, 0, 7, False) == [(0, 5), (0, 8), (0, 9)]
    with pytest.raises(ValueError):
        o.observe(0, 0, 99, False)


@pytest.mark.parametrize("seed", range(4))
def test_oracle_never_worse_than_none(tmp_path, seed):
    pages = mixed_pages(3000, seed)
    path = write_trace(tmp_path / "m.parquet", pages)
    for cap in (32, 256):
        none = simulate(path, SimConfig(capacity=cap, eviction="min")).faults
        assert simulate(path, SimConfig(capacity=cap, eviction="min"), "oracle").faults <= none
    # with LRU too, when capacity leaves room for the lookahead
    none = simulate(path, SimConfig(capacity=512)).faults
    assert simulate(path, SimConfig(capacity=512), Oracle(k=16)).faults <= none


def test_numba_and_python_agree(tmp_path):
    path = write_trace(tmp_path / "m.parquet", mixed_pages())
    same_results_both_engines(path, lambda: Oracle(k=8, lookahead=1000))
