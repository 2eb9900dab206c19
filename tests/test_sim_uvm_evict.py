"""UVM mode: registry evictions at 2 MiB chunk granularity, and pre-eviction.

No GPU here: the driver model is checked against brute-force references on chunk ids
(Belady's MIN, FIFO) on synthetic FAULT_GPU traces of one managed allocation.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagecast.errors import PagecastError
from pagecast.sim import SimConfig, UvmParams, simulate
from pagecast.trace.regions import Region
from pagecast.trace.schedule import Schedule
from pagecast.trace.schema import Kind
from pagecast.trace.writer import TraceWriter

MiB = 1 << 20
CHUNK_PAGES = 512


def _trace(path, pages, n_chunks=64, t_step=1_000_000):
    region = Region(0, "m", kind="managed", base=1 << 30, length=n_chunks * 2 * MiB)
    with TraceWriter(path, regions=[region], source="test") as w:
        w.write(
            t_ns=np.arange(len(pages), dtype=np.int64) * t_step,
            region=0,
            page=np.asarray(pages, np.int64),
            kind=int(Kind.FAULT_GPU),
        )
    return path


def _run(path, chunks, eviction="uvm-fifo", prefetcher="none", **params):
    # one fault per batch, serviced before the next row plays: the chunk decisions are
    # those of a cache of chunk ids
    p = dict(uvm_perf_fault_batch_count=1, batch_window_ns=0)
    p.update(params)
    cfg = SimConfig(capacity=f"{2 * chunks}MiB", eviction=eviction, uvm=True, uvm_params=UvmParams(**p))
    return simulate(path, cfg, prefetcher)


def _belady_evictions(ids, cap):
    """Brute force: at a miss with a full cache, evict the chunk used farthest ahead."""
    cache, evictions = set(), 0
    for i, c in enumerate(ids):
        if c in cache:
            continue
        if len(cache) == cap:
            rest = list(ids[i + 1 :])
            victim = max(cache, key=lambda x: rest.index(x) if x in rest else len(rest) + 1)
            cache.remove(victim)
            evictions += 1
        cache.add(c)
    return evictions


def _fifo_evictions(ids, cap):
    cache, evictions = [], 0
    for c in ids:
        if c in cache:
            continue
        if len(cache) == cap:
            cache.pop(0)
            evictions += 1
        cache.append(c)
    return evictions


def _chunk_stream(rng, n, n_chunks):
    ids = rng.integers(0, n_chunks, n)
    return ids, ids * CHUNK_PAGES + rng.integers(0, CHUNK_PAGES, n)


def test_chunk_min_equals_brute_force_belady(tmp_path):
    rng = np.random.default_rng(7)
    for k, (n_chunks, cap) in enumerate([(12, 4), (20, 6), (9, 2)]):
        ids, pages = _chunk_stream(rng, 400, n_chunks)
        path = _trace(tmp_path / f"r{k}.parquet", pages)
        r = _run(path, cap, "min")
        assert r.evictions == _belady_evictions(list(ids), cap) > 0
        assert r.eviction == "min-2MiB"
        assert r.extra["critical_path_evictions"] == r.evictions and r.extra["pre_evictions"] == 0
        fifo = _run(path, cap)
        assert fifo.evictions == _fifo_evictions(list(ids), cap) > r.evictions


def test_keyed_evictions_run_on_chunks(tmp_path):
    rng = np.random.default_rng(3)
    ids, pages = _chunk_stream(rng, 300, 10)
    path = _trace(tmp_path / "r.parquet", pages)
    # reuse from a training run of the same stream: a known chunk's pages carry keys
    r = _run(path, 3, f"reuse:trace={path}")
    lfu = _run(path, 3, "lfu")
    assert r.eviction == "reuse-2MiB" and lfu.eviction == "lfu-2MiB"
    assert _belady_evictions(list(ids), 3) <= min(r.evictions, lfu.evictions)
    assert r.accesses == lfu.accesses == 300


def test_page_frame_eviction_is_one_clear_error(tmp_path):
    path = _trace(tmp_path / "r.parquet", np.arange(8))
    with pytest.raises(PagecastError, match="'clock' works on page frames") as e:
        _run(path, 2, "clock")
    assert "\n" not in str(e.value)


def _cyclic(n_chunks, cycles, per_visit=8):
    """Chunks 0..n-1 in turn, ``per_visit`` pages of each visit; (pages, first row of each visit)."""
    visits = np.tile(np.arange(n_chunks), cycles)
    pages = (visits[:, None] * CHUNK_PAGES + np.arange(per_visit)[None, :]).ravel()
    return pages, visits, np.arange(len(visits)) * per_visit


@pytest.mark.parametrize("prefetcher", ["none", "tree"])
def test_pre_eviction_on_cyclic_stream_leaves_critical_path(tmp_path, prefetcher):
    pages, _, _ = _cyclic(10, 4)
    path = _trace(tmp_path / "c.parquet", pages)
    base = _run(path, 6, prefetcher=prefetcher, batch_window_ns=20_000, uvm_perf_fault_batch_count=256)
    pre = _run(path, 6, prefetcher=prefetcher, batch_window_ns=20_000, uvm_perf_fault_batch_count=256,
               pre_evict_chunks=1)  # fmt: skip
    assert base.evictions == 40 - 6 and base.extra["critical_path_evictions"] == base.evictions
    assert pre.faults <= base.faults and pre.bytes_in == base.bytes_in
    assert pre.extra["critical_path_evictions"] == 0
    # one more: the chunk freed after the last batch
    assert pre.extra["pre_evictions"] == pre.evictions == base.evictions + 1
    # 1 ms of compute between visits covers a 2 MiB copy: no batch waited for one
    assert pre.extra["pre_evictions_late"] == 0 and pre.extra["pre_eviction_wait_ns"] == 0
    assert pre.extra["evictions_off_critical_path"] == pre.evictions
    assert pre.stall_ns < base.stall_ns


def test_planned_pre_eviction_driver_fifo_order(tmp_path):
    # the plan names, one row after each visit starts, the chunk FIFO would evict at the
    # next visit's fault
    n_chunks, cap, per_visit = 10, 6, 8
    pages, visits, starts = _cyclic(n_chunks, 3, per_visit)
    path = _trace(tmp_path / "c.parquet", pages)
    k = np.arange(cap, len(visits))
    trig = starts[k - 1] + 1
    victim_pages = visits[k - cap] * CHUNK_PAGES
    z = np.zeros(len(k))
    plan = Schedule(trig, z, np.zeros(len(k), np.int32), victim_pages, z + 1)
    base = _run(path, cap)
    pre = _run(path, cap, pre_evict_plan=plan)
    assert pre.faults == base.faults and pre.evictions == base.evictions
    assert pre.extra["pre_evictions"] == len(k) and pre.extra["critical_path_evictions"] == 0
    assert pre.stall_ns < base.stall_ns
    # a plan naming chunks that are not resident changes nothing
    idle = Schedule(trig, z, np.zeros(len(k), np.int32), victim_pages + 40 * CHUNK_PAGES, z + 1)
    same = _run(path, cap, pre_evict_plan=idle)
    assert (same.faults, same.evictions, same.stall_ns) == (base.faults, base.evictions, base.stall_ns)
    assert same.extra["pre_evictions"] == 0


def test_learned_eviction_runs_on_chunks(tmp_path):
    from pagecast.learn.eviction import EvictionTrainConfig, train_eviction

    rng = np.random.default_rng(5)
    runs = []
    for k in range(2):
        ids, pages = _chunk_stream(rng, 600, 10)
        runs.append((ids, _trace(tmp_path / f"r{k}.parquet", pages)))
    model = tmp_path / "ev.pt"
    train_eviction([str(runs[0][1])], model, EvictionTrainConfig(capacities=(0.05, 0.1), rows_per_case=600, epochs=2))
    r = _run(runs[1][1], 3, f"learned:model={model}")
    assert r.eviction == "learned-2MiB" and r.accesses == 600
    assert r.evictions >= _belady_evictions(list(runs[1][0]), 3)


def test_planned_pre_evictions_past_the_ring_all_count(tmp_path):
    # each of 1100 chunks used once (8 rows 10 µs apart: a batch of 3 faults, then the tree
    # prefetcher's big page serves the rest) and sent home when the next one starts: more
    # pending copies than the model keeps end times for, and none is lost
    n, per_visit = 1100, 8
    pages, visits, starts = _cyclic(n, 1, per_visit)
    path = _trace(tmp_path / "once.parquet", pages, n_chunks=n, t_step=10_000)
    z = np.zeros(n)
    plan = Schedule(starts + per_visit, z, np.zeros(n, np.int32), visits * CHUNK_PAGES, z + 1)
    r = _run(path, 2048, prefetcher="tree", pre_evict_plan=plan, batch_window_ns=20_000, uvm_perf_fault_batch_count=256)
    assert r.faults == 3 * n and r.fault_batches == n
    # the last chunk's trigger lies past the trace's end
    assert r.extra["pre_evictions"] == r.evictions == n - 1
    assert r.extra["critical_path_evictions"] == 0


def test_simulate_command_uvm_eviction_and_pre_eviction(tmp_path, capsys):
    import json

    from pagecast.cli import main
    from pagecast.trace.schedule import write_schedule

    pages, visits, starts = _cyclic(10, 4)
    path = str(_trace(tmp_path / "c.parquet", pages))
    common = ["simulate", path, "--uvm", "--policy", "none", "--capacity", "12MiB", "--json"]
    assert main(common) == 0
    base = json.loads(capsys.readouterr().out)
    assert main([*common, "--eviction", "uvm-fifo", "--uvm-pre-evict-chunks", "1"]) == 0
    pre = json.loads(capsys.readouterr().out)
    assert pre["faults"] == base["faults"] and pre["extra"]["critical_path_evictions"] == 0
    assert main([*common, "--eviction", "min"]) == 0
    assert json.loads(capsys.readouterr().out)["evictions"] == _belady_evictions(list(visits), 6)
    z = np.zeros(3)
    write_schedule(tmp_path / "plan.parquet", Schedule(starts[5:8] + 1, z, np.zeros(3, np.int32), visits[:3] * 512, z))
    assert main([*common, "--uvm-pre-evict-plan", str(tmp_path / "plan.parquet")]) == 0
    assert json.loads(capsys.readouterr().out)["extra"]["pre_evictions"] == 3
    for bad, words in ((["--eviction", "clock"], "'clock' works on page frames"),
                       (["--uvm-pre-evict-chunks", "6"], "pre_evict_chunks must be 0..5"),
                       (["--uvm-pre-evict-plan", str(tmp_path / "none.parquet")], "none.parquet")):  # fmt: skip
        assert main([*common, *bad]) != 0
        err = capsys.readouterr().err.strip()
        assert words in err and len(err.splitlines()) == 1
