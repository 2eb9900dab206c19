"""Leap's majority-trend prefetcher (Al Maruf & Chowdhury, USENIX ATC'20).

Leap keeps the deltas between successive faulting pages in a history of 32 entries and
looks for a *majority* delta with the Boyer–Moore vote: first over the newest
``history / 8`` deltas, then over a window doubled each time until the whole history,
so a fresh trend is found fast and an old one still counts. The prefetch window adapts
to how useful the last prefetches were: no prefetch hit since the previous miss halves
it, hits grow it to the next power of two above their number (capped at ``max_window``).

Every observed event (a miss, or the first use of a prefetched page) enters the history;
prefetches are issued on misses, along the trend. Deltas across regions are recorded
as 0, which breaks a trend instead of inventing one.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.policies._numba import MAX_PREFETCH, NumbaPrefetcher, emit_run
from pagecast.policies.base import register_prefetcher

# state layout: [last_region, last_page, count, head, window, hits, deltas...]
_S_REGION, _S_PAGE, _S_COUNT, _S_HEAD, _S_WINDOW, _S_HITS, _S_HIST = range(7)


@njit(cache=True)
def majority_trend(state, history, min_window):
    """Majority delta of the newest w deltas for w = min_window, 2·min_window, …; 0 if none."""
    count = state[_S_COUNT]
    head = state[_S_HEAD]
    w = min_window
    while True:
        w_eff = min(w, count)
        if w_eff == 0:
            return 0
        cand = 0
        votes = 0
        for j in range(w_eff):
            d = state[_S_HIST + (head - 1 - j) % history]
            if votes == 0:
                cand = d
                votes = 1
            elif d == cand:
                votes += 1
            else:
                votes -= 1
        support = 0
        for j in range(w_eff):
            if state[_S_HIST + (head - 1 - j) % history] == cand:
                support += 1
        if 2 * support > w_eff and cand != 0:
            return cand
        if w_eff >= count or w >= history:
            return 0
        w *= 2


@njit(cache=True)
def nb_observe(state, params, rpages, t_ns, region, page, hit, out_r, out_p):
    history, max_window, min_window = params[0], params[1], params[2]
    if state[_S_PAGE] >= 0:
        d = page - state[_S_PAGE] if region == state[_S_REGION] else 0
        state[_S_HIST + state[_S_HEAD]] = d
        state[_S_HEAD] = (state[_S_HEAD] + 1) % history
        state[_S_COUNT] = min(state[_S_COUNT] + 1, history)
    state[_S_REGION] = region
    state[_S_PAGE] = page
    if hit:
        state[_S_HITS] += 1
        return 0
    hits = state[_S_HITS]
    state[_S_HITS] = 0
    if hits == 0:
        state[_S_WINDOW] = max(1, state[_S_WINDOW] // 2)
    else:
        w = 1
        while w <= hits:
            w *= 2
        state[_S_WINDOW] = min(max_window, w)
    trend = majority_trend(state, history, min_window)
    n = 0
    if trend != 0:
        n = emit_run(out_r, out_p, n, region, page, trend, state[_S_WINDOW], rpages)
    return n


@register_prefetcher("leap")
class Leap(NumbaPrefetcher):
    name = "leap"
    nb_observe = nb_observe

    def __init__(self, history: int = 32, max_window: int = 32, split: int = 8):
        if not 1 <= max_window <= MAX_PREFETCH:
            raise ValueError(f"leap max_window must be 1..{MAX_PREFETCH}")
        if history < 1 or split < 1:
            raise ValueError("leap history and split must be positive")
        self.history, self.max_window = int(history), int(max_window)
        self.min_window = max(1, self.history // int(split))
        super().__init__()

    def params(self) -> np.ndarray:
        return np.array([self.history, self.max_window, self.min_window], np.int64)

    def init_state(self, n_regions: int) -> np.ndarray:
        s = np.zeros(_S_HIST + self.history, np.int64)
        s[_S_PAGE] = -1
        s[_S_WINDOW] = max(1, self.max_window // 4)
        return s
