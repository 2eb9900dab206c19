"""The distinct keys that follow each position of a key stream (a compiled loop).

A page table of successors (``learn.pagetable``: the pages within the next events of a
page) and the miss oracle (``sim.bound``: the pages of the next k distinct misses) both
read this of a stream of keys (``trace.keys``; -1: no key).
"""

from __future__ import annotations

import numba
import numpy as np

from pagecast.util.jitcache import configure

configure()  # the cache directory before the first compiled function


@numba.njit(cache=True)
def distinct_followers(keys: np.ndarray, look: int, most: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(position, key, distance): for each position i holding a key, the first ``most``
    distinct keys among the next ``look`` positions, other than its own, each at the
    distance j - i where it first appears; grouped by position, in increasing order."""
    n = len(keys)
    cap = n * min(look, most) if look > 0 and most > 0 else 0
    pos = np.empty(cap, np.int64)
    dst = np.empty(cap, np.int64)
    dist = np.empty(cap, np.int64)
    if cap == 0:
        return pos, dst, dist
    m = 0
    for i in range(n):
        k = keys[i]
        if k < 0:
            continue
        start = m
        for j in range(i + 1, min(n, i + 1 + look)):
            q = keys[j]
            if q < 0 or q == k:
                continue
            dup = False
            for r in range(start, m):
                if dst[r] == q:
                    dup = True
                    break
            if dup:
                continue
            pos[m] = i
            dst[m] = q
            dist[m] = j - i
            m += 1
            if m - start == most:
                break
    return pos[:m], dst[:m], dist[:m]
