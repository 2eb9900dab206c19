"""UVM mode: tree prefetcher growth, fault batching, 2 MiB root-chunk FIFO eviction.

No GPU here: these check the driver model against what uvm_perf_prefetch.c and the
PMM eviction order prescribe, on synthetic FAULT_GPU traces of managed allocations.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagecast.errors import PagecastError
from pagecast.sim import SimConfig, UvmParams, simulate
from pagecast.sim.uvm import P_FAULT, P_RES, tree_prefetch
from pagecast.trace.regions import Region
from pagecast.trace.schema import Kind
from pagecast.trace.writer import TraceWriter

MiB = 1 << 20


def _trace(path, pages, t_step=1_000_000, length=8 * MiB, base=1 << 30):
    with TraceWriter(path, regions=[Region(0, "m", kind="managed", base=base, length=length)], source="test") as w:
        w.write(
            t_ns=np.arange(len(pages), dtype=np.int64) * t_step,
            region=0,
            page=np.asarray(pages),
            kind=int(Kind.FAULT_GPU),
        )
    return path


def _uvm(path, capacity="64MiB", prefetcher="tree", **params):
    return simulate(path, SimConfig(capacity=capacity, uvm=True, uvm_params=UvmParams(**params)), prefetcher)


def test_sequential_sweep_grows_to_whole_block(tmp_path):
    # One fault per batch (1 ms apart). Fault at 0: its 64 KiB big page (16 pages); at 16:
    # the 32-page subtree is full → 32 resident; at 32: 48/64 > 51 % → 64; at 64: 80/128 →
    # 128; at 128: 144/256 → 256; at 256: 272/512 = 53 % > 51 % → the whole 2 MiB block.
    expected = {0: 16, 16: 32, 32: 64, 64: 128, 128: 256, 256: 512}
    for last, resident in expected.items():
        r = _uvm(_trace(tmp_path / f"s{last}.parquet", np.arange(last + 1)))
        assert r.bytes_in == resident * 4096, last
    r = _uvm(_trace(tmp_path / "s.parquet", np.arange(512)))
    assert r.faults == r.fault_batches == 6
    assert r.prefetches == 512 - 6 == r.useful
    assert r.bytes_in == 2 * MiB


def test_threshold_and_disable(tmp_path):
    path = _trace(tmp_path / "s.parquet", np.arange(512))
    assert _uvm(path, prefetcher="none").faults == 512
    # threshold 100: no subtree can exceed 100 %, so nothing beyond the faulted page
    assert _uvm(path, uvm_perf_prefetch_threshold=100).faults == 512
    # a lower threshold grows faster: 16 of 32 is 50 % > 49 %
    assert _uvm(path, uvm_perf_prefetch_threshold=49).faults < 6


def test_tree_prefetch_direct():
    state = np.zeros(512, np.uint8)
    state[0:32] = P_RES
    state[40] = P_FAULT
    out = np.zeros(512, np.int64)
    n = tree_prefetch(0, 512, state, 51, out, np.zeros((3, 529), np.int64))
    # leaves 0..47 set (32 resident + big page 32..47): 48/64 > 51 % → pages 32..63 minus 40
    # (the selection includes resident pages 0..31; the simulator skips those)
    assert sorted(p for p in out[:n].tolist() if p >= 32) == [p for p in range(32, 64) if p != 40]
    assert set(out[:n].tolist()) >= set(range(32))


def test_batching_coalesces_duplicates(tmp_path):
    # 300 faults on 100 distinct pages in other 2 MiB blocks, all within one window: the
    # batch takes 256 fault entries at most, duplicates coalesce and cost no entry.
    pages = np.tile(np.arange(0, 100 * 512, 512), 3)  # page 0 of 100 different blocks, 3 times
    path = _trace(tmp_path / "b.parquet", pages, t_step=10, length=100 * 2 * MiB)
    r = _uvm(path, capacity="1GiB")
    assert r.fault_batches == 1
    assert r.extra["faulted_pages"] == 100 and r.extra["duplicate_faults"] == 200
    r = _uvm(path, capacity="1GiB", uvm_perf_fault_batch_count=64)
    assert r.fault_batches == 2


def test_oversubscription_evicts_whole_chunks_in_residency_order(tmp_path):
    A, B, C = 0, 512, 1024  # first pages of three 2 MiB blocks
    seq = list(range(A, A + 512)) + list(range(B, B + 512)) + [A + 5] + [C] + [A + 300] + [B + 7]
    r = _uvm(_trace(tmp_path / "o.parquet", np.array(seq)), capacity="4MiB")
    # C needs a chunk: A became resident first, so A goes although it was just used (FIFO,
    # not LRU); then A+300 faults (its whole chunk went; LRU would have kept A) and evicts
    # B, the oldest resident chunk; B+7 faults and evicts C.
    assert r.evictions == 3
    assert r.bytes_out == (512 + 512 + 16) * 4096  # whole chunks: A and B full, C one big page
    assert r.faults == 6 + 6 + 1 + 1 + 1  # two sweeps, C, A+300, B+7
    assert r.hits == len(seq) - r.faults


def test_uvm_rejects_other_prefetchers(tmp_path):
    path = _trace(tmp_path / "s.parquet", np.arange(4))
    with pytest.raises(PagecastError, match="tree"):
        _uvm(path, prefetcher="stride")
    with pytest.raises(PagecastError, match="threshold"):
        _uvm(path, uvm_perf_prefetch_threshold=0)


def test_capacity_below_one_chunk_is_one_chunk(tmp_path):
    # GPU memory comes in whole 2 MiB root chunks: 10 pages of capacity behave as one chunk.
    A, B = 0, 512
    path = _trace(tmp_path / "c.parquet", np.array([A, B, A]))
    small, chunk = _uvm(path, capacity=10), _uvm(path, capacity="2MiB")
    assert small.capacity_pages == chunk.capacity_pages == 512
    assert (small.faults, small.evictions) == (chunk.faults, chunk.evictions) == (3, 2)


def test_uvm_chunk_lru_keeps_the_chunk_faulted_again(tmp_path):
    """Two chunks of GPU memory, three blocks: block 0 faults, block 1, block 0 again (a
    page not yet resident), then block 2. FIFO evicts block 0 (resident first); LRU
    evicts block 1 (block 0 was migrated into since)."""
    from pagecast.sim import SimConfig, simulate
    from pagecast.trace.regions import Region
    from pagecast.trace.schema import Kind
    from pagecast.trace.writer import TraceWriter

    blk = 512  # 4 KiB pages per 2 MiB block
    pages = np.array([0, blk, 300, 2 * blk, 301, blk + 1], np.int64)
    path = tmp_path / "g.parquet"
    region = Region(0, "m", kind="managed", base=1 << 32, length=3 * blk * 4096)
    with TraceWriter(path, regions=[region], source="test") as w:
        w.write(t_ns=np.arange(len(pages), dtype=np.int64) * 1_000_000, region=0, page=pages, kind=int(Kind.FAULT_GPU))
    cfg = dict(capacity="4MiB", uvm=True)
    fifo = simulate(path, SimConfig(**cfg), "none")
    lru = simulate(path, SimConfig(**cfg, eviction="uvm-lru"), "none")
    assert fifo.eviction == "uvm-fifo-2MiB" and lru.eviction == "uvm-lru-2MiB"
    # FIFO: block 2 evicts block 0, page 301 evicts block 1, page blk+1 evicts block 2: 3 evictions
    # LRU: block 2 evicts block 1, page 301 hits resident block 0, page blk+1 evicts block 2: 2
    assert (fifo.evictions, lru.evictions) == (3, 2)
