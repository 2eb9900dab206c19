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

from pagecast.trace.demand import as_trace, demand_chunks
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
    state = np.zeros(2, np.int64)
    last = np.full(n_ids, -1, np.int64)
    res = np.zeros(n_ids, np.bool_)
    return _lru_chunk(ids, capacity, last, res, np.empty(n, np.int64), np.empty(n, np.int64), state, 0)


@numba.njit(cache=True)
def _lru_chunk(ids, capacity, last, res, q_t, q_id, state, base):
    """``lru_misses`` over one chunk, its state carried in arrays: ``last``/``res`` per id,
    the queue ``q_t``/``q_id`` (live entries first, ``state`` = [queue length, resident])
    with room for the chunk; times are global indices (``base`` + position)."""
    n = len(ids)
    miss = np.zeros(n, np.bool_)
    head = 0
    tail = state[0]
    nres = state[1]
    for i in range(n):
        s = ids[i]
        t = base + i
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
        last[s] = t
        q_t[tail] = t
        q_id[tail] = s
        tail += 1
    # keep the live entries only (at most the capacity), oldest first
    m = 0
    for j in range(head, tail):
        v = q_id[j]
        if res[v] and last[v] == q_t[j]:
            q_t[m] = q_t[j]
            q_id[m] = v
            m += 1
    state[0] = m
    state[1] = nres
    return miss


def miss_events(trace: Trace | str | Path, capacity_pages: int, chunk_rows: int = 1 << 20) -> np.ndarray:
    """Indices of the demand events that miss in an LRU tier of ``capacity_pages`` pages.

    Streams the trace chunk by chunk: memory holds the distinct pages, the tier's queue
    and the result, not the stream."""
    cap = max(1, int(capacity_pages))
    known = np.empty(0, np.int64)  # sorted page keys seen so far; a key's id is its insertion order
    known_id = np.empty(0, np.int64)
    last = np.zeros(0, np.int64)
    res = np.zeros(0, np.bool_)
    q_t = np.zeros(0, np.int64)
    q_id = np.zeros(0, np.int64)
    state = np.zeros(2, np.int64)
    out, base = [], 0
    for d in demand_chunks(as_trace(trace), chunk_rows):
        keys = page_keys(d["region"], d["page"])
        uk = np.unique(keys)
        if len(known):
            pos = np.searchsorted(known, uk)
            new = uk[(pos >= len(known)) | (known[np.minimum(pos, len(known) - 1)] != uk)]
        else:
            new = uk
        if len(new):
            n_ids = len(known) + len(new)
            known = np.concatenate([known, new])
            known_id = np.concatenate([known_id, np.arange(n_ids - len(new), n_ids)])
            order = np.argsort(known, kind="stable")
            known, known_id = known[order], known_id[order]
            last = np.concatenate([last, np.zeros(len(new), np.int64)])
            res = np.concatenate([res, np.zeros(len(new), np.bool_)])
        ids = known_id[np.searchsorted(known, keys)]
        room = int(state[0]) + len(ids)
        if len(q_t) < room:
            q_t = np.concatenate([q_t, np.zeros(room - len(q_t), np.int64)])
            q_id = np.concatenate([q_id, np.zeros(room - len(q_id), np.int64)])
        out.append(np.flatnonzero(_lru_chunk(ids, cap, last, res, q_t, q_id, state, base)) + base)
        base += len(ids)
    return np.concatenate(out) if out else np.empty(0, np.int64)


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


@numba.njit(cache=True)
def returns_at_depth(keys: np.ndarray, lo: int, hi: int) -> int:
    """Uses of a key found at depth ``lo`` to ``hi`` - 1 of the stack of distinct keys in
    last-use order (depth 0: the key used last; ``keys`` with no two equal neighbours)."""
    stack = np.empty(max(hi, 1), np.int64)
    n = 0
    count = 0
    for i in range(len(keys)):
        k = keys[i]
        d = 0
        while d < n and stack[d] != k:
            d += 1
        if d < n:
            count += lo <= d
            top = d
        else:
            top = min(n, hi - 1)
            n = min(n + 1, hi)
        for j in range(top, 0, -1):
            stack[j] = stack[j - 1]
        stack[0] = k
    return count
