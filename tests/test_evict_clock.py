"""The CLOCK eviction (policies/evict_clock.py): a referenced page gets a second chance."""

from pagecast.policies.base import eviction_entries
from pagecast.sim import SimConfig, simulate
from sim_helpers import write_trace


def test_clock_gives_a_second_chance_and_is_the_pagers():
    assert "pager" in next(e for e in eviction_entries() if e.name == "clock").native


def test_clock_sweeps_reference_bits(tmp_path):
    # all three inserted with the bit set: the hand clears 0, 1, 2 and comes back to 0
    path = write_trace(tmp_path / "t.parquet", [0, 1, 2, 3, 1, 4])
    r = simulate(path, SimConfig(capacity=3, eviction="clock", log_victims=True))
    assert r.extra["victims"][1].tolist() == [0, 2]  # 4: 1 was referenced again after the sweep, 2 was not
