"""Which streamed chunks a memory plan follows from outside: successors taken from the order
the program entered chunks (threads working side by side return to a chunk without leaving
the sweep), no successors for a file whose uses come back to chunks the controller would have
paged out, the plan rebuilt in coarser chunks where that happens at a fine grain, and the
controller streaming only the files whose chain the plan knows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cold_support import cold_file_maker
from conftest import record_under_limit, require_memcg
from pagecast.live.memctl import MIN_REGRETS, Controller
from pagecast.plan.format import FileIdentity
from pagecast.plan.memory import (
    LATE_RETURN_SHARE,
    MemoryPlanConfig,
    _streamed_bytes,
    follow_plan,
    late_returns,
    plan_for_limit,
    successors,
)
from pagecast.plan.memory_format import RECENT_CHUNKS, STREAM_CHAIN, FileMemoryPlan, MemoryPlan, write_memory_plan
from pagecast.util.pagecache import make_cold

F = 3 << 40  # file 3's chunk keys


def _keys(chunks: list[int], fi: int = F) -> np.ndarray:
    return np.array([fi + c for c in chunks], np.int64)


def test_a_return_to_the_last_chunks_is_not_an_entry():
    # one sweep 10..14 where a second thread is still in the previous chunk now and then,
    # played twice: changes of chunk would give 11 -> 10 and 12 -> 11 half the time
    sweep = [10, 11, 10, 11, 12, 11, 12, 13, 14]
    streamed = {F + c for c in range(10, 15)}
    nxt = successors([_keys(sweep), _keys(sweep)], streamed)
    assert nxt == {F + 10: F + 11, F + 11: F + 12, F + 12: F + 13, F + 13: F + 14}


def _side_by_side(threads: int, blocks: range, rounds: int = 6) -> list[int]:
    """Chunk uses of ``threads`` threads each in its own chunk of a block of ``threads``
    chunks, taking turns ``rounds`` times before the block is done."""
    return [b * threads + t for b in blocks for _ in range(rounds) for t in range(threads)]


def _late_reference(keys: list[int], window: int) -> int:
    """A plain reading of ``late_returns``: the distinct chunks in last-use order, a use of
    one found behind the ``RECENT_CHUNKS`` last but within ``window``."""
    stack: list[int] = []
    late = 0
    for k in keys:
        if stack and stack[0] == k:
            continue
        if k in stack[:window]:
            late += stack.index(k) >= RECENT_CHUNKS
            stack.remove(k)
        stack.insert(0, k)
    return late


def test_late_returns_match_a_plain_reading():
    rng = np.random.default_rng(7)
    for window in (3, 4, 9):
        keys = rng.integers(0, 12, 3000)
        assert late_returns(keys, window) == _late_reference(keys.tolist(), window)


def test_two_threads_side_by_side_are_followed_three_are_not():
    # two threads each in one of two neighbouring chunks (llama.cpp's matrix products): every
    # return is to the chunk before the current one, which the controller keeps
    two = _side_by_side(2, range(10, 20))
    streamed = {F + c for c in two}
    nxt = successors([_keys(two)] * 2, streamed)
    assert late_returns(_keys(two), 4) == 0
    assert nxt == {F + c: F + c + 1 for c in range(20, 39)}
    # three threads in three chunks: a return to the one two behind, already paged out
    three = _side_by_side(3, range(10, 20))
    plain = [40, 41, 42, 43, 44]  # another file read once through, in order
    streamed = {F + c for c in three} | {(4 << 40) + c for c in plain}
    runs = [np.concatenate([_keys(three), _keys(plain, 4 << 40)])] * 2
    assert late_returns(_keys(three), 4) > LATE_RETURN_SHARE * len(set(three))
    nxt = successors(runs, streamed)
    assert not any(k >> 40 == 3 for k in nxt)
    assert {k: v for k, v in nxt.items() if k >> 40 == 4} == {(4 << 40) + a: (4 << 40) + a + 1 for a in plain[:-1]}
    # the same three threads in chunks a block wide: a sweep in order
    block = [c // 3 for c in three]
    assert late_returns(_keys(block), 4) == 0
    assert len(successors([_keys(block)] * 2, {F + c for c in block})) == 9


LIMIT = 40 << 20


@pytest.fixture(scope="module")
def threads_scan(tmp_path_factory):
    """A real program whose three threads split every 1 MiB block of a 64 MiB file,
    recorded twice under a 40 MiB limit."""
    require_memcg("memory cgroups and perf need root")
    from pagecast.bench.workloads import build_workload

    prog = build_workload("threads_scan")
    out = tmp_path_factory.mktemp("follow")
    with cold_file_maker("follow") as make:
        f = make(64 << 8)
        argv = [str(prog), str(f), "3", "3", "1024"]
        traces = [t for t, _ in record_under_limit(out, f, argv, "40M")]
        yield f, argv, traces


def test_a_plan_in_fine_chunks_gets_a_coarser_one_that_is_followed(threads_scan, tmp_path):
    f, argv, traces = threads_scan
    cfg = MemoryPlanConfig(LIMIT, 256 << 10, reserve_bytes=4 << 20)
    fine = plan_for_limit(traces, cfg)
    assert fine.backend == "kernel-advice" and _streamed_bytes(fine, False) > 16 << 20
    assert _streamed_bytes(fine, True) == 0  # 256 KiB chunks: the threads come back to ones paged out
    coarse = follow_plan(traces, cfg, fine)
    assert coarse is not None and coarse.chunk_bytes == 2 << 20
    data = next(p for p in coarse.files if p.path == str(f))
    assert data.followed() and 2 * _streamed_bytes(coarse, True) >= _streamed_bytes(coarse, False)
    assert follow_plan(traces, cfg, coarse) is None  # already followed: nothing to rebuild
    # applied live: the program's output unchanged, the controller following it
    bare = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    make_cold([f])
    path = tmp_path / "coarse.plan"
    write_memory_plan(coarse, path)
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--json", "--memory", str(LIMIT), "--plan", str(path),
                        "--", *argv], capture_output=True, text=True, timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert bare.stdout.strip() in r.stderr.splitlines()  # with --json the program's stdout goes to stderr
    ctl = rep["controller"]
    assert ctl.get("entered", 0) > 0 and ctl["pageouts"] > 0, (ctl, r.stderr[-1500:])
    # a thread the scheduler left behind returns to chunks already paged out; streaming stops
    # only by the controller's rule for that
    assert not ctl["stream_off"] or ctl["regrets"] >= MIN_REGRETS, ctl
    assert rep["memory"]["oom_kills"] == 0


def _file(path: str, stream: list[tuple[int, int]], nxt: dict[int, int]) -> FileMemoryPlan:
    st = os.stat(path)
    ident = FileIdentity(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
    return FileMemoryPlan(path, ident, [], stream, nxt)


def test_followed_needs_the_chain_of_most_streamed_chunks(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"\0" * (1 << 20))
    ten = [(0, 10)]
    known = int(STREAM_CHAIN * 10)
    assert _file(str(p), ten, {c: c + 1 for c in range(known)}).followed()
    assert not _file(str(p), ten, {c: c + 1 for c in range(known - 1)}).followed()
    assert not _file(str(p), [], {}).followed()


def test_the_controller_streams_only_the_followed_files(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for p in (a, b):
        p.write_bytes(b"\0" * (1 << 20))
    chained = _file(str(a), [(0, 4)], {0: 1, 1: 2, 2: 3, 3: 0})
    scattered = _file(str(b), [(0, 4)], {0: 2})
    plan = MemoryPlan(64 << 20, 1 << 18, 8 << 20, 2, files=[chained, scattered])
    ctl = Controller(plan, os.getpid(), usage=lambda: 0)
    by_path = {f.path: f.stream for f in ctl.files}
    assert by_path == {str(a): {0, 1, 2, 3}, str(b): set()}
    assert not ctl.stats.stream_off
    ctl = Controller(MemoryPlan(64 << 20, 1 << 18, 8 << 20, 2, files=[scattered]), os.getpid(), usage=lambda: 0)
    assert ctl.stats.stream_off


def test_in_order_successors_are_left_to_the_kernels_read_ahead_unless_advised_random(tmp_path):
    """Of the chunks ahead along the chain, the controller fetches the jumps; a chunk that
    follows its predecessor in the file is read ahead by the kernel itself after a fault
    in a mapping with read-ahead, so it is left alone, unless the mapping is advised random."""
    import mmap

    from pagecast.util.device_model import read_ahead_bytes_of

    p = tmp_path / "f"
    p.write_bytes(b"\0" * (8 << 20))
    cb = 1 << 18
    if read_ahead_bytes_of(p) < cb:
        pytest.skip("the device's read-ahead window is smaller than a chunk")
    chain = {c: c + 1 for c in range(11)} | {2: 9, 11: 0}  # in file order but for one jump, 2 -> 9
    plan = MemoryPlan(64 << 20, cb, 8 << 20, 4, files=[_file(str(p), [(0, 12)], chain)])
    with open(p, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        try:
            ctl = Controller(plan, os.getpid(), usage=lambda: 0)
            ctl.refresh_maps()
            idx = ctl.files[0].idx
            ctl.prefetch_from((idx, 0))
            assert list(ctl.pending) == [(idx, 9)]  # 1, 2 and 10 follow their chunk in the file
            assert ctl.stats.left_to_read_ahead == 3
            m.madvise(mmap.MADV_RANDOM)
            ctl._smaps_at = 0.0  # the next look reads the advice again
            ctl.refresh_maps()
            ctl.pending.clear()
            ctl.prefetch_from((idx, 0))
            assert list(ctl.pending) == [(idx, 1), (idx, 2), (idx, 9), (idx, 10)]
        finally:
            m.close()
