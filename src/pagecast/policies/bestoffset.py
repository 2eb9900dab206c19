"""Best-offset prefetching (Michaud, HPCA 2016), at page granularity.

The prefetcher learns one offset D and prefetches X + D on each observed page X (a miss
or the first use of a prefetched page). Learning runs in phases: each event tests the
next candidate offset d of a fixed list, scoring it if X − d is in the recent-requests
(RR) table, i.e. a prefetch with offset d would have been timely. A phase ends after
``round_max`` rounds over the list or when a score reaches ``score_max``; the best
offset becomes D, and prefetching is off if its score is ≤ ``bad_score``. The RR table
is direct-mapped (256 entries); BO inserts Y − D when a prefetched Y is filled, which is
the base X, so X is inserted when observed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.policies._numba import MAX_PREFETCH, NumbaPrefetcher, emit_run
from pagecast.policies.base import register_prefetcher
from pagecast.trace.keys import make_key

# Michaud's list: offsets up to 64 whose prime factors are 2, 3 and 5.
OFFSETS = np.array(
    [1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16, 18, 20, 24, 25, 27, 30, 32, 36, 40, 45, 48, 50, 54, 60, 64], np.int64
)
RR_SIZE = 256
# state: [test_idx, round, best, on, scores[len(OFFSETS)], rr[RR_SIZE]]
_HDR = 4
_RR = _HDR + len(OFFSETS)


@njit(cache=True)
def _rr_slot(key):
    return _RR + ((key ^ (key >> 8) ^ (key >> 16)) & (RR_SIZE - 1))


@njit(cache=True)
def nb_observe(state, params, rpages, t_ns, region, page, hit, out_r, out_p):
    degree, round_max, score_max, bad_score = params[0], params[1], params[2], params[3]
    n_off = len(OFFSETS)
    key = make_key(region, page)
    ti = state[0]
    d = OFFSETS[ti]
    if page - d >= 0 and state[_rr_slot(key - d)] == key - d:
        state[_HDR + ti] += 1
    end = state[_HDR + ti] >= score_max
    ti += 1
    if ti == n_off:
        ti = 0
        state[1] += 1
        if state[1] >= round_max:
            end = True
    state[0] = ti
    if end:
        best = 0
        for j in range(1, n_off):
            if state[_HDR + j] > state[_HDR + best]:
                best = j
        state[2] = OFFSETS[best]
        state[3] = 1 if state[_HDR + best] > bad_score else 0
        for j in range(n_off):
            state[_HDR + j] = 0
        state[0] = 0
        state[1] = 0
    state[_rr_slot(key)] = key
    n = 0
    if state[3]:
        n = emit_run(out_r, out_p, n, region, page, state[2], degree, rpages)
    return n


@register_prefetcher("bestoffset")
class BestOffset(NumbaPrefetcher):
    name = "bestoffset"
    nb_observe = nb_observe

    def __init__(self, degree: int = 1, round_max: int = 100, score_max: int = 31, bad_score: int = 1):
        if not 1 <= degree <= MAX_PREFETCH:
            raise ValueError(f"bestoffset degree must be 1..{MAX_PREFETCH}")
        self.degree, self.round_max, self.score_max, self.bad_score = (
            int(degree),
            int(round_max),
            int(score_max),
            int(bad_score),
        )
        super().__init__()

    def params(self) -> np.ndarray:
        return np.array([self.degree, self.round_max, self.score_max, self.bad_score], np.int64)

    def init_state(self, n_regions: int) -> np.ndarray:
        s = np.zeros(_RR + RR_SIZE, np.int64)
        s[_RR:] = -1
        return s
