"""Where a prefetch can matter: the demand events that miss in an LRU fast tier.

On a full access trace most events hit; a predictor deployed per fault is only asked at
misses. ``miss_events`` gives the indices (in the demand stream) of the events that miss
in an LRU tier of ``capacity`` pages with no prefetching, so a model can be trained on,
and schedules computed for, exactly the events a per-fault predictor sees.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np

from pagecast.trace.demand import as_trace, read_demand
from pagecast.trace.keys import page_keys
from pagecast.trace.reader import Trace
from pagecast.trace.schema import Kind


@numba.njit(cache=True)
def lru_misses(ids: np.ndarray, n_ids: int, capacity: int) -> np.ndarray:
    """Miss flag per access of dense page ids under LRU with ``capacity`` pages.

    A queue of (time, id) entries in use order; an entry is live while its page is resident
    and was last used at that time, so the oldest live entry is the LRU victim.
    """
    n = len(ids)
    miss = np.zeros(n, np.bool_)
    last = np.full(n_ids, -1, np.int64)
    res = np.zeros(n_ids, np.bool_)
    q_t = np.empty(n, np.int64)
    q_id = np.empty(n, np.int64)
    head = 0
    tail = 0
    nres = 0
    for i in range(n):
        s = ids[i]
        if not res[s]:
            miss[i] = True
            if nres >= capacity:
                while True:
                    v = q_id[head]
                    live = res[v] and last[v] == q_t[head]
                    head += 1
                    if live:
                        res[v] = False
                        break
            else:
                nres += 1
            res[s] = True
        last[s] = i
        q_t[tail] = i
        q_id[tail] = s
        tail += 1
    return miss


def miss_events(trace: Trace | str | Path, capacity_pages: int) -> np.ndarray:
    """Indices of the demand events that miss in an LRU tier of ``capacity_pages`` pages."""
    d = read_demand(as_trace(trace))
    keys = page_keys(d["region"], d["page"])
    uniq, ids = np.unique(keys, return_inverse=True)
    return np.flatnonzero(lru_misses(ids.astype(np.int64), len(uniq), max(1, int(capacity_pages))))


def has_accesses(trace: Trace | str | Path) -> bool:
    """Whether the trace records accesses (ACCESS rows: every load/store), not only faults."""
    t = as_trace(trace)
    for cols in t.iter_batches(["kind"], batch_rows=1 << 20):
        if np.any(cols["kind"] == int(Kind.ACCESS)):
            return True
    return False


@numba.njit(cache=True)
def next_uses(ids: np.ndarray, n_ids: int) -> np.ndarray:
    """For each access, the index of the next access to the same id (len(ids): none)."""
    n = len(ids)
    nxt = np.empty(n, np.int64)
    last = np.full(n_ids, n, np.int64)
    for i in range(n - 1, -1, -1):
        nxt[i] = last[ids[i]]
        last[ids[i]] = i
    return nxt


@numba.njit(cache=True)
def min_misses(ids: np.ndarray, n_ids: int, capacity: int) -> np.ndarray:
    """Miss flag per access of dense page ids under Belady's MIN with ``capacity`` pages.

    A page missing is brought in (demand paging), evicting the resident page whose next
    use is farthest; a max-heap of (next use, id) entries, an entry live while its page is
    resident with that next use.
    """
    n = len(ids)
    nxt = next_uses(ids, n_ids)
    miss = np.zeros(n, np.bool_)
    res = np.zeros(n_ids, np.bool_)
    cur = np.full(n_ids, -1, np.int64)
    hk = np.empty(n + 1, np.int64)
    hv = np.empty(n + 1, np.int64)
    size = 0
    nres = 0
    for i in range(n):
        s = ids[i]
        if not res[s]:
            miss[i] = True
            if nres >= capacity:
                while size > 0:
                    k, v = hk[0], hv[0]
                    size -= 1
                    hk[0], hv[0] = hk[size], hv[size]
                    j = 0
                    while True:  # sift down
                        a, b, m = 2 * j + 1, 2 * j + 2, j
                        if a < size and hk[a] > hk[m]:
                            m = a
                        if b < size and hk[b] > hk[m]:
                            m = b
                        if m == j:
                            break
                        hk[j], hk[m] = hk[m], hk[j]
                        hv[j], hv[m] = hv[m], hv[j]
                        j = m
                    if res[v] and cur[v] == k:
                        res[v] = False
                        break
            else:
                nres += 1
            res[s] = True
        cur[s] = nxt[i]
        j = size  # push (nxt[i], s), sift up
        hk[j], hv[j] = nxt[i], s
        size += 1
        while j > 0:
            p = (j - 1) // 2
            if hk[p] >= hk[j]:
                break
            hk[p], hk[j] = hk[j], hk[p]
            hv[p], hv[j] = hv[j], hv[p]
            j = p
    return miss
