import pytest

from pagecast.policies.ampm import AccessMapPatternMatching
from pagecast.policies.base import policy_entry
from pagecast.sim import SimConfig, simulate
from pagecast.sim.kernels import kind_of
from sim_helpers import mixed_pages, same_results_both_engines, write_trace


def pages(p, t, page, hit=False):
    return [pg for _, pg in p.observe(t, 0, page, hit)]


def test_matches_strides_in_the_access_map():
    p = AccessMapPatternMatching(degree=4)
    p.reset([])
    assert pages(p, 0, 0) == [] and pages(p, 1, 2) == []
    assert pages(p, 2, 4) == [6]  # 0, 2 accessed: stride 2 through 4
    assert pages(p, 3, 10) == [] and pages(p, 4, 7) == []
    assert pages(p, 5, 8) == [12]  # stride 1 needs 7 and 6 accessed (6 is only prefetched); stride 4: 4, 0
    assert pages(p, 6, 63) == [] and pages(p, 7, 61) == []
    assert pages(p, 8, 59) == [57]  # backward stream 63, 61, 59 at the zone's end
    assert pages(p, 9, 12) == [14, 16, 17]  # strides 2 (10, 8), 4 (8, 4), 5 (7, 2), nearest first


def test_interleaved_streams_and_zone_limits():
    p = AccessMapPatternMatching(degree=2, max_stride=8)
    p.reset([])
    for t, pg in enumerate([100, 130, 101, 131, 102]):  # two streams interleaved: no delta repeats
        got = pages(p, t, pg)
    assert got == [103]  # stride 1 through 102 (101, 100 accessed) despite the other stream
    assert pages(p, 9, 132) == [133]  # its own zone (128..191): stride 1; stride 2 would need 128
    p.reset([])
    for t, pg in enumerate([60, 61, 62, 63]):
        got = pages(p, t, pg)
    assert got == []  # 64 is the next zone: never named from this one


def test_registered_with_a_compiled_kernel_and_run_compiled(tmp_path):
    e = policy_entry("ampm")
    assert e is not None and e.backends == ("python", "sim")
    assert kind_of(AccessMapPatternMatching()) is not None  # the simulator's loop runs it, not the Python path
    path = write_trace(
        tmp_path / "s.parquet", [q for base in range(0, 4096, 64) for q in range(base, base + 64, 2)], t_step=100_000
    )
    r = simulate(path, SimConfig(capacity=4096), AccessMapPatternMatching(degree=4))
    # per 64-page zone of 32 touches: 0, 2, 4 fault, then the map stays ahead of the scan
    assert r.faults == 3 * 64 and r.useful == 29 * 64


def test_numba_and_python_agree(tmp_path):
    path = write_trace(tmp_path / "m.parquet", mixed_pages())
    same_results_both_engines(path, AccessMapPatternMatching)


@pytest.mark.parametrize("opts", [{"degree": 0}, {"max_stride": 32}, {"table_bits": 0}])
def test_bad_options(opts):
    with pytest.raises(ValueError):
        AccessMapPatternMatching(**opts)
