import numpy as np

from pagecast.policies.bestoffset import BestOffset
from pagecast.sim import SimConfig, simulate
from sim_helpers import mixed_pages, same_results_both_engines, write_trace


def test_learns_offset_of_a_strided_stream():
    p = BestOffset(round_max=4, score_max=8)
    p.reset([])
    out = []
    for t, pg in enumerate(range(0, 6 * 400, 6)):
        out = p.observe(t, 0, pg, False)
    # offsets that are multiples of 6 score; the best one is used
    assert len(out) == 1 and (out[0][1] - (6 * 399)) % 6 == 0


def test_random_stream_turns_prefetch_off():
    p = BestOffset(round_max=2)
    p.reset([])
    rng = np.random.default_rng(0)
    outs = [p.observe(t, 0, int(pg), False) for t, pg in enumerate(rng.integers(0, 1 << 30, 300))]
    assert outs[-1] == []


def test_numba_and_python_agree(tmp_path):
    path = write_trace(tmp_path / "m.parquet", mixed_pages())
    same_results_both_engines(path, BestOffset)


def test_helps_on_stride(tmp_path):
    path = write_trace(tmp_path / "s.parquet", list(range(0, 20000, 5)), t_step=1_000_000)
    assert simulate(path, SimConfig(capacity=8192), BestOffset()).faults < 4000 // 2
