"""Which streamed chunks a memory plan follows from outside: successors taken from the order
the program entered chunks (threads working side by side return to a chunk without leaving
the sweep), no successors for a file whose streamed uses are mostly returns, and the
controller streaming only the files whose chain the plan knows."""

from __future__ import annotations

import os

import numpy as np

from pagecast.live.memctl import Controller
from pagecast.plan.format import FileIdentity
from pagecast.plan.memory import RETURN_SHARE, successors
from pagecast.plan.memory_format import STREAM_CHAIN, FileMemoryPlan, MemoryPlan

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


def test_a_file_used_mostly_by_returns_gets_no_successors():
    # two threads alternating between neighbouring chunks many times before moving on
    # (llama.cpp's matrix products: 94 % of its streamed uses were returns)
    sweep = [c for a in range(20, 30, 2) for c in [a, a + 1] * 6]
    plain = [40, 41, 42, 43, 44]  # another file read once through, in order
    streamed = {F + c for c in range(20, 30)} | {(4 << 40) + c for c in plain}
    runs = [np.concatenate([_keys(sweep), _keys(plain, 4 << 40)])] * 2
    returns = sum(1 for i, c in enumerate(sweep) if c in sweep[max(0, i - 4) : i])
    assert returns > RETURN_SHARE * len(sweep)
    nxt = successors(runs, streamed)
    assert not any(k >> 40 == 3 for k in nxt)
    assert {k: v for k, v in nxt.items() if k >> 40 == 4} == {(4 << 40) + a: (4 << 40) + a + 1 for a in plain[:-1]}


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
