from pagecast.policies.leap import Leap
from pagecast.sim import SimConfig, simulate
from sim_helpers import mixed_pages, same_results_both_engines, write_trace


def test_majority_trend_survives_noise():
    p = Leap(history=32, max_window=4)
    p.reset([])
    # deltas +2 +2 +7 +2: majority +2 in the newest 4 despite the outlier
    for t, pg in enumerate([0, 2, 4, 11]):
        p.observe(t, 0, pg, False)
    got = [pg for _, pg in p.observe(9, 0, 13, False)]
    assert got and got[0] == 15 and all(b - a == 2 for a, b in zip(got, got[1:]))


def test_no_trend_no_prefetch():
    p = Leap()
    p.reset([])
    out = [p.observe(t, 0, pg, False) for t, pg in enumerate([0, 9, 3, 40, 7, 100])]
    assert out[-1] == []


def test_window_grows_with_prefetch_hits(tmp_path):
    path = write_trace(tmp_path / "s.parquet", list(range(2000)), t_step=1_000_000)
    r = simulate(path, SimConfig(capacity=4096), Leap(max_window=32))
    assert r.faults < 2000 // 16  # windows ramp up to 32 pages per miss
    assert r.useless == 0


def test_numba_and_python_agree(tmp_path):
    path = write_trace(tmp_path / "m.parquet", mixed_pages())
    same_results_both_engines(path, Leap)
