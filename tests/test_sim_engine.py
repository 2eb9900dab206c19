"""The simulator's eviction policies against obviously-correct references, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from pagecast.sim import SimConfig, simulate
from sim_helpers import ref_belady, ref_clock, ref_fifo, ref_lru, write_trace

REFS = {"lru": ref_lru, "fifo": ref_fifo, "clock": ref_clock, "min": ref_belady}


def _traces():
    rng = np.random.default_rng(7)
    yield "random", rng.integers(0, 60, 3000)
    yield "zipf", np.minimum(rng.zipf(1.3, 3000), 200)
    yield "cyclic", np.tile(np.arange(41), 40)  # one more than capacity: LRU/FIFO's worst case
    yield "sawtooth", np.concatenate([np.r_[np.arange(50), np.arange(48, 0, -1)]] * 15)
    yield "phases", np.concatenate([rng.integers(0, 30, 500), rng.integers(100, 180, 500), rng.integers(0, 30, 500)])


TRACES = list(_traces())


@pytest.mark.parametrize("eviction", sorted(REFS))
@pytest.mark.parametrize("name,pages", TRACES, ids=[t[0] for t in TRACES])
@pytest.mark.parametrize("cap", [1, 8, 40])
def test_faults_match_reference(tmp_path, eviction, name, pages, cap):
    path = write_trace(tmp_path / "t.parquet", pages, row_group_rows=700)  # several chunks
    r = simulate(path, SimConfig(capacity=cap, eviction=eviction, chunk_rows=500))
    assert r.faults == REFS[eviction](pages.tolist(), cap)
    assert r.hits + r.faults == len(pages)
    assert r.evictions == max(0, r.faults - cap) if r.faults > cap else r.evictions == 0


@pytest.mark.parametrize("name,pages", TRACES, ids=[t[0] for t in TRACES])
def test_belady_never_worse(tmp_path, name, pages):
    path = write_trace(tmp_path / "t.parquet", pages)
    for cap in (4, 16):
        best = simulate(path, SimConfig(capacity=cap, eviction="min")).faults
        for ev in ("lru", "fifo", "clock"):
            assert best <= simulate(path, SimConfig(capacity=cap, eviction=ev)).faults, ev


@pytest.mark.parametrize("eviction", sorted(REFS))
def test_all_in_capacity_faults_once_per_page(tmp_path, eviction):
    rng = np.random.default_rng(3)
    pages = rng.choice(np.arange(0, 10_000, 7), 5000)
    path = write_trace(tmp_path / "t.parquet", pages)
    r = simulate(path, SimConfig(capacity=2000, eviction=eviction))
    assert r.faults == len(np.unique(pages)) == r.distinct_pages
    assert r.evictions == 0


def test_timing_model(tmp_path):
    # 3 faults then 2 hits, gaps of 1 µs: time = compute + 3 × (fault + latency + transfer).
    path = write_trace(tmp_path / "t.parquet", [0, 1, 2, 0, 1], t_step=1000)
    cfg = SimConfig(capacity=8, fault_ns=10_000, link_latency_ns=2_000, link_bytes_per_s=4096e9 / 500)
    r = simulate(path, cfg)
    assert (r.faults, r.hits, r.compute_ns) == (3, 2, 4000)
    assert r.stall_ns == 3 * (10_000 + 2_000 + 500)
    assert r.est_time_ns == r.compute_ns + r.stall_ns
    assert r.bytes_in == 3 * 4096 and r.bytes_out == 0


def test_late_and_useless_prefetches(tmp_path):
    # nextline(before=0, window=3) on a fault at 0 prefetches 1 and 2; page 1 is demanded
    # 100 ns later, before its transfer (500 ns + 2 µs latency) ends: late. Page 2 is
    # never used and gets evicted by the later pages: useless.
    path = write_trace(tmp_path / "t.parquet", [0, 1, 10, 20, 30, 40], t_step=100)
    from pagecast.policies.nextline import NextLine

    cfg = SimConfig(capacity=3, fault_ns=0, link_latency_ns=2_000, link_bytes_per_s=4096e9 / 500)
    r = simulate(path, cfg, NextLine(window=3, before=0))
    assert r.late == 1 and r.useful == 1
    assert r.faults == 5
    assert r.useless + r.unused_at_end == r.prefetches - r.useful
    assert r.useless >= 1
    # the program waited for the rest of page 1's transfer, not a whole fault
    assert r.late_ns == (0 + 2_000 + 500) + 500 + 2_000 - 100 - (2_000 + 500)


def test_writes_cost_bytes_out(tmp_path):
    from pagecast.trace.regions import Region
    from pagecast.trace.writer import TraceWriter

    path = tmp_path / "w.parquet"
    with TraceWriter(path, regions=[Region(0, "r", length=1 << 20)]) as w:
        w.write(t_ns=np.arange(4), region=0, page=[0, 1, 2, 3], flags=[1, 0, 1, 0])
    r = simulate(path, SimConfig(capacity=1))
    assert r.bytes_out == 2 * 4096  # pages 0 and 2 were written, then evicted


def test_bad_eviction_is_one_line_error(tmp_path):
    from pagecast.errors import PagecastError

    path = write_trace(tmp_path / "t.parquet", [0, 1])
    with pytest.raises(PagecastError, match="unknown eviction"):
        simulate(path, SimConfig(eviction="random"))
