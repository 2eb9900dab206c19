from pagecast.policies.markov import Markov
from pagecast.sim import SimConfig, simulate
from sim_helpers import mixed_pages, same_results_both_engines, write_trace


def test_learns_delta_chain():
    p = Markov(degree=3)
    p.reset([])
    # deltas 1,5,2 repeating: after one period the chain 1→5→2→1 is known
    pages = [0, 1, 6, 8, 9, 14]
    for t, pg in enumerate(pages):
        out = p.observe(t, 0, pg, False)
    # last delta 5 → next 2 → then 1 → then 5
    assert [pg for _, pg in out] == [16, 17, 22]


def test_repeating_pattern_cuts_faults(tmp_path):
    import numpy as np

    pages = np.cumsum(np.tile([1, 5, 2], 400))
    path = write_trace(tmp_path / "p.parquet", pages, t_step=1_000_000)
    base = simulate(path, SimConfig(capacity=8192)).faults
    r = simulate(path, SimConfig(capacity=8192), Markov(degree=4))
    assert r.faults < base / 3 and r.accuracy > 0.9


def test_numba_and_python_agree(tmp_path):
    path = write_trace(tmp_path / "m.parquet", mixed_pages())
    same_results_both_engines(path, Markov)
