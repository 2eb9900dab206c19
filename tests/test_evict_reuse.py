"""The reuse eviction (policies/evict_reuse.py): a training run's reuse distances decide
which pages are expected back within the capacity."""

import pytest

from pagecast.errors import PagecastError
from pagecast.sim import SimConfig, simulate
from sim_helpers import write_trace


def test_reuse_evicts_pages_the_training_run_did_not_reuse(tmp_path):
    # a hot set of 4 pages reused every few accesses, and a stream of pages used once
    hot = [0, 1, 2, 3]
    pages = []
    for k in range(200):
        pages += hot + [100 + k, 400 + k]
    train = write_trace(tmp_path / "train.parquet", pages)
    test = write_trace(tmp_path / "test.parquet", pages[::-1])  # another run: other order
    reuse = simulate(test, SimConfig(capacity=6, eviction=f"reuse:trace={train}"))
    lru = simulate(test, SimConfig(capacity=6, eviction="lru"))
    assert reuse.faults == 4 + 400  # the hot set stays: only the once-used pages miss
    assert lru.faults >= reuse.faults
    with pytest.raises(PagecastError, match="needs a training run"):
        simulate(test, SimConfig(capacity=6, eviction="reuse"))
