"""The keep set under a limit: far reuses decide it, read-around sizes it, the controller
lets go of it when the program's own memory grows."""

import os
import threading

import numpy as np

from pagecast.live.memctl import PIN_PIECE, Controller
from pagecast.plan.format import FileIdentity
from pagecast.plan.memory import MemoryPlanConfig, RunStream, keep_set, keep_size, stream_room
from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan
from pagecast.sim.misses import min_misses
from pagecast.util.device_model import read_ahead_bytes_of

MIB = 1 << 20


def test_neighbouring_chunks_used_in_turn_do_not_hide_the_far_reuses():
    # a cyclic scan whose passes use chunks in interleaved pairs (0 1 0 1 2 3 2 3 ...), as
    # threads working on neighbouring rows do: the near reuses are hits for any policy
    one = [c for a in range(0, 20, 2) for c in (a, a + 1, a, a + 1)]
    keys = np.array(one * 4, np.int64)
    keep, evict, left = keep_set([keys], 10)
    # MIN's steady state: the chunks it hits on their first use in the later passes
    u, ids = np.unique(keys, return_inverse=True)
    miss = min_misses(ids.astype(np.int64), len(u), 10)
    held = set(range(20))
    for p in range(1, 4):
        seg = slice(len(one) * p, len(one) * (p + 1))
        held &= {c for i, c in enumerate(keys[seg].tolist()) if one.index(c) == i and not miss[seg][i]}
    # what MIN holds through every later pass is kept, and as much as fits but one slot
    assert len(held) >= 6 and held <= set(keep) and len(keep) == 9
    assert evict == set(range(6, 16))  # the chunks MIN reads again every pass


def _run(pages: np.ndarray) -> RunStream:
    return RunStream(np.zeros(len(pages), np.int64), pages.astype(np.int64), 0)


def test_keep_size_follows_the_read_around_model():
    cfg = MemoryPlanConfig(64 * MIB, 1 * MIB, reserve_bytes=0, stream_room_bytes=16 * MIB)
    chunk = MIB // 4096
    # a cyclic scan of 96 MiB: locking what fits spares those pages every pass
    scan = _run(np.tile(np.arange(96 * chunk), 3))
    n, tried = keep_size([scan], cfg, 0, list(range(40)))
    assert n == 40 and tried["40"] < tried["0"]
    # 16 chunks read once, then a 48 MiB loop that fits in the limit: locking those chunks
    # (a poor keep list) past a third leaves the loop too little room, and LRU reads all of
    # it every pass
    once = 512 * chunk + np.arange(16) * chunk
    loop = _run(np.concatenate([once, np.tile(np.arange(48 * chunk), 5)]))
    n, tried = keep_size([loop], cfg, 0, [int(p) // chunk for p in once])
    assert n < 12 and tried["16"] > 3 * tried["0"]


def test_controller_lets_go_of_keep_pieces_when_the_room_shrinks(tmp_path):
    f = tmp_path / "data"
    f.write_bytes(os.urandom(4 * PIN_PIECE))
    ident = FileIdentity.of(f)
    chunks = 4 * PIN_PIECE // MIB
    plan = MemoryPlan(256 * MIB, MIB, 0, 0, "kernel-advice", [FileMemoryPlan(str(f), ident, [(0, chunks)], [], {})],
                      room_bytes=32 * MIB)  # fmt: skip
    used = [0]
    ctl = Controller(plan, os.getpid(), usage=lambda: 0, unreclaimable=lambda: used[0])
    while ctl.pin_some():
        pass
    assert ctl.stats.pinned_bytes == 4 * PIN_PIECE  # room to spare: every piece locked
    used[0] = 256 * MIB - 29 * MIB  # the program's own memory grew: 3 MiB short of the room
    ctl.unpin_to_room()  # the last piece goes (pieces of PIN_PIECE, at least 3 MiB)
    assert ctl.stats.pinned_bytes == 3 * PIN_PIECE and ctl.stats.unpinned_bytes == PIN_PIECE
    assert not ctl.pin_some()  # what was let go is not locked again
    used[0] = 256 * MIB - 100 * MIB
    ctl.unpin_to_room()
    assert ctl.stats.pinned_bytes == 3 * PIN_PIECE


def test_the_room_beside_the_keep_set_grows_with_the_program_s_threads(tmp_path):
    # each thread that misses has a read around the miss in flight, locked until the device
    # returns it: the room left beside the locked keep set is the plan's for each thread
    f = tmp_path / "data"
    f.write_bytes(os.urandom(4 * PIN_PIECE))
    plan = MemoryPlan(256 * MIB, MIB, 0, 0, "kernel-advice",
                      [FileMemoryPlan(str(f), FileIdentity.of(f), [(0, 4 * PIN_PIECE // MIB)], [], {})],
                      room_bytes=8 * MIB)  # fmt: skip
    base = 256 * MIB - 32 * MIB  # 32 MiB free before anything is locked
    ctl = Controller(plan, os.getpid(), usage=lambda: 0, unreclaimable=lambda: base + ctl.stats.pinned_bytes)
    assert ctl.read_around == read_ahead_bytes_of(f)  # the device's window, read at the start
    ctl.read_around = 4 * MIB  # a device reading 4 MiB around a miss
    ctl.threads = 1
    while ctl.pin_some():
        pass
    assert ctl.stats.pinned_bytes == 4 * PIN_PIECE  # 16 MiB locked, 16 left: twice one thread's room
    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait) for _ in range(5)]
    for w in workers:
        w.start()
    try:
        ctl.refresh_maps()
        threads = len(os.listdir("/proc/self/task"))
        assert ctl.threads == threads >= 6
        assert ctl.stream_room() == threads * 8 * MIB  # the plan's room for each thread
        ctl.plan.room_bytes = MIB  # a room below the device's window: a window each
        assert ctl.stream_room() == threads * 4 * MIB
        ctl.unpin_to_room()  # pieces go until the free room covers a window per thread
        fits = [k * PIN_PIECE for k in range(5) if 32 * MIB - k * PIN_PIECE >= threads * 4 * MIB]
        assert ctl.stats.pinned_bytes == max(fits, default=0)
    finally:
        stop.set()
        for w in workers:
            w.join()


def test_a_file_read_with_read_gets_room_for_windows_advised_sequential(tmp_path):
    # mapped, the room is two of the device's windows; read with read(), whose reader may
    # have advised it sequential (coreutils do: twice the window), two of those
    f = tmp_path / "data"
    f.write_bytes(bytes(4096))
    ra = read_ahead_bytes_of(f)
    pages = np.tile(np.arange(4096, dtype=np.int64), 3)
    uses = np.zeros(len(pages), np.int32)
    mapped = RunStream(uses, pages, 0, {0: (len(pages), 40)})  # every use a fault, too few majors to size from
    read = RunStream(uses, pages, 0, {0: (len(pages) // 10, 0)})  # most uses are read() calls
    assert stream_room([mapped], {0: str(f)}) == 2 * ra
    assert stream_room([read], {0: str(f)}) == 4 * ra
