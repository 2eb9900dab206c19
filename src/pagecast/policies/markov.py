"""Markov prefetching over deltas (delta correlation).

A table maps a delta to the deltas that followed it last (two per entry, most recent
first), like the correlation tables of Joseph & Grunwald's Markov prefetcher and of
delta-correlating prediction tables, but over page deltas, so one pattern learned in one
part of a region applies everywhere. On each observed event (a miss, or the first use
of a prefetched page) the table learns "previous delta → this delta", then the
prefetcher follows the chain of most recent successors from the current delta,
``degree`` steps ahead.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.policies._numba import MAX_PREFETCH, NumbaPrefetcher, emit
from pagecast.policies.base import register_prefetcher

# state: [last_region, last_page, prev_delta, has_prev, table: (valid, tag, s0, s1) * 2**bits]
_HDR = 4


@njit(cache=True)
def _entry(state, delta, mask):
    return _HDR + 4 * ((delta ^ (delta >> 17)) & mask)


@njit(cache=True)
def nb_observe(state, params, rpages, t_ns, region, page, hit, out_r, out_p):
    mask, degree = params[0], params[1]
    if state[1] < 0 or state[0] != region:
        state[0], state[1], state[3] = region, page, 0
        return 0
    d = page - state[1]
    state[1] = page
    if d == 0:
        return 0
    if state[3]:
        e = _entry(state, state[2], mask)
        if state[e] == 0 or state[e + 1] != state[2]:
            state[e], state[e + 1], state[e + 2], state[e + 3] = 1, state[2], d, 0
        elif state[e + 2] != d:
            state[e + 3] = state[e + 2]
            state[e + 2] = d
    state[2], state[3] = d, 1
    n = 0
    cur = page
    delta = d
    for _ in range(degree):
        e = _entry(state, delta, mask)
        if state[e] == 0 or state[e + 1] != delta:
            break
        delta = state[e + 2]
        cur += delta
        n = emit(out_r, out_p, n, region, cur, rpages)
    return n


@register_prefetcher("markov")
class Markov(NumbaPrefetcher):
    name = "markov"
    nb_observe = nb_observe

    def __init__(self, degree: int = 4, table_bits: int = 12):
        if not 1 <= degree <= MAX_PREFETCH:
            raise ValueError(f"markov degree must be 1..{MAX_PREFETCH}")
        if not 1 <= table_bits <= 24:
            raise ValueError("markov table_bits must be 1..24")
        self.degree, self.table_bits = int(degree), int(table_bits)
        super().__init__()

    def params(self) -> np.ndarray:
        return np.array([(1 << self.table_bits) - 1, self.degree], np.int64)

    def init_state(self, n_regions: int) -> np.ndarray:
        s = np.zeros(_HDR + 4 * (1 << self.table_bits), np.int64)
        s[1] = -1
        return s
