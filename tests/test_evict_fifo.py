"""The FIFO eviction (policies/evict_fifo.py): the page resident longest leaves, whatever its uses."""

from pagecast.sim import SimConfig, simulate
from sim_helpers import write_trace


def test_fifo_evicts_the_oldest_arrival_even_if_used(tmp_path):
    path = write_trace(tmp_path / "t.parquet", [0, 1, 2, 0, 3, 0])
    r = simulate(path, SimConfig(capacity=3, eviction="fifo", log_victims=True))
    assert r.extra["victims"][1].tolist() == [0, 1]  # 3 evicts 0 despite its use, 0 comes back and evicts 1
    assert r.faults == 5
