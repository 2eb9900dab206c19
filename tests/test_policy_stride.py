from pagecast.policies.stride import Stride
from pagecast.sim import SimConfig, simulate
from sim_helpers import mixed_pages, same_results_both_engines, write_trace


def test_detects_stride_after_two_repeats():
    p = Stride(degree=3)
    p.reset([])
    assert p.observe(0, 0, 10, False) == []
    assert p.observe(1, 0, 13, False) == []  # stride 3 seen once
    assert [pg for _, pg in p.observe(2, 0, 16, False)] == [19, 22, 25]
    assert p.observe(3, 0, 17, False) == []  # broken: new stride 1, no confidence
    assert p.observe(4, 1, 500, False) == []  # other region has its own entry


def test_strided_scan(tmp_path):
    path = write_trace(tmp_path / "s.parquet", list(range(0, 4000, 4)), t_step=100_000)
    r = simulate(path, SimConfig(capacity=4096), Stride(degree=4))
    assert r.faults == 3 and r.useful == 997


def test_numba_and_python_agree(tmp_path):
    path = write_trace(tmp_path / "m.parquet", mixed_pages())
    same_results_both_engines(path, Stride)
