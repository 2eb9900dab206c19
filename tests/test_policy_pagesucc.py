import numpy as np

from pagecast.policies.pagesucc import PageSuccessor
from pagecast.sim import SimConfig, simulate
from pagecast.trace.regions import Region
from sim_helpers import mixed_pages, same_results_both_engines, write_trace


def test_learns_page_chain():
    p = PageSuccessor(degree=3)
    p.reset([])
    seq = [7, 300, 12, 7]  # after one pass 7 → 300 → 12 → 7 is known
    for t, pg in enumerate(seq):
        out = p.observe(t, 0, pg, False)
    assert [pg for _, pg in out] == [300, 12, 7][:3]


def test_two_successors_most_recent_first():
    p = PageSuccessor(degree=2)
    p.reset([])
    for t, pg in enumerate([5, 9, 5, 40, 5]):
        out = p.observe(t, 0, pg, False)
    assert [pg for _, pg in out] == [40, 9]


def _irregular(n_rep: int) -> np.ndarray:
    rng = np.random.default_rng(3)
    walk = rng.choice(5000, 300, replace=False)  # irregular jumps, no usable delta
    return np.tile(walk, n_rep)


def test_trained_table_prefetches_next_run_with_shifted_region_ids(tmp_path):
    pages = _irregular(1)
    # training run: the file is region 1; next run: region 0 (ids differ, the key matches)
    reg_train = [
        Region(0, "anon0", kind="anon", length=4096),
        Region(1, "lib", kind="file", path="/lib/x.so", length=5000 * 4096),
    ]
    train = write_trace(tmp_path / "train.parquet", pages, regions=reg_train, region=1)
    reg_test = [Region(0, "lib", kind="file", path="/lib/x.so", length=5000 * 4096)]
    test = write_trace(tmp_path / "test.parquet", pages, regions=reg_test, region=0)
    cfg = SimConfig(capacity=1000)
    none = simulate(test, cfg, None).faults
    cold = simulate(test, cfg, PageSuccessor()).faults
    warm = simulate(test, cfg, PageSuccessor(train=str(train))).faults
    assert none == 300 and cold == 300  # one pass: nothing to learn from within the run
    assert warm <= 2  # every page but the first is the known successor of its predecessor


def test_repeating_walk_cuts_faults_online(tmp_path):
    path = write_trace(tmp_path / "w.parquet", _irregular(4), t_step=1_000_000)
    base = simulate(path, SimConfig(capacity=100)).faults
    r = simulate(path, SimConfig(capacity=100), PageSuccessor(degree=4))
    assert base == 1200 and r.faults < 400 and r.accuracy > 0.9


def test_numba_and_python_agree(tmp_path):
    path = write_trace(tmp_path / "m.parquet", mixed_pages())
    same_results_both_engines(path, PageSuccessor)


def test_missing_training_trace_is_one_line_error(tmp_path):
    from pagecast.errors import PagecastError

    p = PageSuccessor(train=str(tmp_path / "nope.parquet"))
    try:
        p.reset([Region(0, "r", kind="anon", length=4096)])
    except PagecastError as e:
        assert "nope.parquet" in str(e) and "\n" not in str(e)
    else:
        raise AssertionError("no error for a missing training trace")
