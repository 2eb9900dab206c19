import pytest

from pagecast.policies.nextline import NextLine
from pagecast.sim import SimConfig, simulate
from sim_helpers import mixed_pages, same_results_both_engines, write_trace


def test_read_around_window():
    p = NextLine()
    p.reset([])
    got = p.observe(0, 0, 100, False)
    pages = [pg for _, pg in got]
    # Linux read-around: 32 pages (128 KiB) from 16 before the fault, nearest first
    assert sorted(pages + [100]) == list(range(84, 116))
    assert pages[:4] == [101, 99, 102, 98]
    assert p.observe(1, 0, 101, True) == []  # hits do not trigger it


def test_clipped_to_region():
    from pagecast.trace.regions import Region

    p = NextLine(window=8, before=0)
    p.reset([Region(0, "r", length=10 * 4096)])
    assert [pg for _, pg in p.observe(0, 0, 6, False)] == [7, 8, 9]
    assert [pg for _, pg in p.observe(0, 0, 1, False)] == [2, 3, 4, 5, 6, 7, 8]
    with pytest.raises(ValueError):
        NextLine(window=200)


def test_sequential_scan_faults_once_per_window(tmp_path):
    path = write_trace(tmp_path / "s.parquet", list(range(3200)), t_step=100_000)
    r = simulate(path, SimConfig(capacity=4096), NextLine(window=32, before=0))
    assert r.faults == 100 and r.useful == 3100 and r.late == 0


def test_numba_and_python_agree(tmp_path):
    path = write_trace(tmp_path / "m.parquet", mixed_pages())
    same_results_both_engines(path, NextLine)
