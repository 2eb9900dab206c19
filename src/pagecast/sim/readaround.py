"""Pages a kernel page cache reads for a stream of file pages: LRU with mmap read-around.

On a miss in a mapping Linux reads the device's read-ahead window around the faulting page
(``before`` pages before it, the rest after; mm/filemap.c, do_sync_mmap_readahead), and
every page of that window occupies the cache until the LRU evicts it. Under a memory limit
this, more than the page-level stream, decides how much is read: a window evicted before
its pages are used is read again, and on scattered accesses each miss reads a whole window.
``readaround_reads`` plays a stream so, with some pages locked (never evicted, never read
again: a keep set), and counts the pages read; the memory planner compares keep sets by it.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _unlink(i, prev, nxt, st):
    p, n = prev[i], nxt[i]
    if p >= 0:
        nxt[p] = n
    else:
        st[0] = n
    if n >= 0:
        prev[n] = p
    else:
        st[1] = p
    prev[i] = -1
    nxt[i] = -1


@numba.njit(cache=True)
def _push(i, prev, nxt, st):
    """Make ``i`` the most recently used (``st`` = [head (MRU), tail (LRU), resident])."""
    prev[i] = -1
    nxt[i] = st[0]
    if st[0] >= 0:
        prev[st[0]] = i
    st[0] = i
    if st[1] < 0:
        st[1] = i


@numba.njit(cache=True)
def readaround_reads(
    idx: np.ndarray, lo: np.ndarray, hi: np.ndarray, before: int, window: int, capacity: int, pinned: np.ndarray
) -> int:
    """Pages read for the accesses ``idx`` (indices into one page space of every file;
    ``lo``/``hi`` per access: its file's first and past-last index) by an LRU cache of
    ``capacity`` unlocked pages reading ``window`` pages from ``before`` before a miss;
    ``pinned`` pages always hit (their one read is not counted here)."""
    n_pages = len(pinned)
    prev = np.full(n_pages, -1, np.int64)
    nxt = np.full(n_pages, -1, np.int64)
    res = np.zeros(n_pages, np.bool_)
    st = np.array([-1, -1, 0], np.int64)
    cap = max(1, capacity)
    reads = 0
    for k in range(len(idx)):
        p = idx[k]
        if pinned[p]:
            continue
        if res[p]:
            _unlink(p, prev, nxt, st)
            _push(p, prev, nxt, st)
            continue
        s = max(lo[k], p - before)
        e = min(hi[k], s + window)
        for q in range(s, e):
            if q == p or pinned[q] or res[q]:
                continue
            res[q] = True
            _push(q, prev, nxt, st)
            st[2] += 1
            reads += 1
        res[p] = True
        _push(p, prev, nxt, st)  # the faulting page last: the most recently used
        st[2] += 1
        reads += 1
        while st[2] > cap:
            v = st[1]
            _unlink(v, prev, nxt, st)
            res[v] = False
            st[2] -= 1
    return reads
