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
