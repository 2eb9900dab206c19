"""sim.readaround: LRU with mmap read-around, against a plain OrderedDict model."""

from collections import OrderedDict

import numpy as np
import pytest

from pagecast.sim.readaround import readaround_reads


def reference(idx, lo, hi, before, window, capacity, pinned):
    cache: OrderedDict[int, None] = OrderedDict()
    reads = 0
    for p, a, b in zip(idx, lo, hi):
        if pinned[p]:
            continue
        if p in cache:
            cache.move_to_end(p)
            continue
        s = max(a, p - before)
        for q in range(s, min(b, s + window)):
            if q != p and not pinned[q] and q not in cache:
                cache[q] = None
                reads += 1
        cache[p] = None
        reads += 1
        while len(cache) > max(1, capacity):
            cache.popitem(last=False)
    return reads


@pytest.mark.parametrize("seed", range(6))
def test_matches_reference_on_random_streams(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(20, 200, 3)
    base = np.concatenate([[0], np.cumsum(sizes)])
    f = rng.integers(0, 3, 3000)
    page = rng.integers(0, sizes[f])
    if seed % 2:  # runs of sequential pages, as a scan
        page = (np.arange(3000) % sizes[f]).astype(np.int64)
    idx = base[f] + page
    lo, hi = base[f], base[f + 1]
    pinned = rng.random(base[-1]) < 0.2 * (seed % 3)
    for before, window, cap in ((0, 1, 30), (4, 8, 30), (16, 32, 50), (8, 32, 5)):
        got = readaround_reads(idx, lo, hi, before, window, cap, pinned)
        assert got == reference(idx.tolist(), lo.tolist(), hi.tolist(), before, window, cap, pinned)


def test_cyclic_scan_rereads_everything_unless_pinned():
    n = 1000
    idx = np.tile(np.arange(n), 4)
    lo, hi = np.zeros_like(idx), np.full_like(idx, n)
    none = np.zeros(n, bool)
    # 600 pages of cache, 32-page windows: LRU reads the whole file every pass
    assert readaround_reads(idx, lo, hi, 0, 32, 600, none) == 4 * n
    keep = none.copy()
    keep[:500] = True  # 500 locked, 100 left: only the unlocked half is read again
    assert readaround_reads(idx, lo, hi, 0, 32, 100, keep) == 4 * 500
    # scattered single pages with a large window: each miss reads its window
    idx = np.array([0, 500, 0, 500])
    assert readaround_reads(idx, lo[:4], hi[:4], 16, 32, 20, none) == 4 * 32  # each window evicts the other
    assert readaround_reads(idx, lo[:4], hi[:4], 16, 32, 64, none) == 2 * 32  # both fit
