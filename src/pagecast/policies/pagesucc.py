"""Page-successor (correlation) table: which page came after this page last time.

The Markov prefetcher of Joseph & Grunwald over absolute region-relative pages instead of
deltas: a table maps (region, page) to the two pages most recently observed right after
it (most recent first). On each observed event (a miss, or the first use of a prefetched
page) it learns "previous page → this page", then prefetches this page's successors and
follows the chain of most recent successors until ``degree`` pages are named.

Deltas cannot name the irregular jumps of code and data pages of shared libraries and
compilers; absolute pages can, because region-relative pages recur from run to run.
``train=TRACE.parquet`` fills the table from another run's demand stream first (its
regions matched to this run's by ``region_key``), which is what a learned model trained
on that run has to beat.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from numba import njit

from pagecast.errors import PagecastError
from pagecast.policies._numba import MAX_PREFETCH, NumbaPrefetcher, emit
from pagecast.policies.base import register_prefetcher
from pagecast.trace.regions import Region, match_regions, region_key

# state: [prev_region, prev_page, has_prev, pad, table: (valid, region, page, r0, p0, r1, p1, pad) * 2**bits]
_HDR = 4
_W = 8


@njit(cache=True, inline="always")
def _slot(region, page, mask):
    h = (page * 0x9E3779B1 + region * 0x85EBCA77) & 0x7FFFFFFFFFFF
    return _HDR + _W * ((h ^ (h >> 15)) & mask)


@njit(cache=True)
def _find(state, region, page, mask):
    """Entry index of (region, page), or -1."""
    e = _slot(region, page, mask)
    if state[e] != 0 and state[e + 1] == region and state[e + 2] == page:
        return e
    return -1


@njit(cache=True)
def learn(state, mask, region, page):
    """Record "previous page → (region, page)" and make (region, page) the previous page."""
    if state[2] != 0 and not (state[0] == region and state[1] == page):
        pr, pp = state[0], state[1]
        e = _slot(pr, pp, mask)
        if state[e] == 0 or state[e + 1] != pr or state[e + 2] != pp:
            state[e], state[e + 1], state[e + 2] = 1, pr, pp
            state[e + 3], state[e + 4], state[e + 5], state[e + 6] = region, page, -1, -1
        elif not (state[e + 3] == region and state[e + 4] == page):
            state[e + 5], state[e + 6] = state[e + 3], state[e + 4]
            state[e + 3], state[e + 4] = region, page
    state[0], state[1], state[2] = region, page, 1


@njit(cache=True)
def learn_stream(state, mask, regions, pages):
    """``learn`` over a whole demand stream; region −1 (unmatched) breaks the chain."""
    for i in range(len(pages)):
        if regions[i] < 0:
            state[2] = 0
            continue
        learn(state, mask, regions[i], pages[i])
    state[2] = 0


@njit(cache=True)
def nb_observe(state, params, rpages, t_ns, region, page, hit, out_r, out_p):
    mask, degree = params[0], params[1]
    learn(state, mask, region, page)
    n = 0
    cr, cp = region, page
    for _ in range(degree):
        e = _find(state, cr, cp, mask)
        if e < 0:
            break
        n = emit(out_r, out_p, n, state[e + 3], state[e + 4], rpages)
        if n < degree and state[e + 5] >= 0 and not (state[e + 5] == region and state[e + 6] == page):
            n = emit(out_r, out_p, n, state[e + 5], state[e + 6], rpages)
        if n >= degree:
            break
        cr, cp = state[e + 3], state[e + 4]
        if cr == region and cp == page:
            break
    return n


def _training_stream(path: str, regions: Sequence[Region]) -> tuple[np.ndarray, np.ndarray]:
    """The demand stream of ``path`` with its region ids mapped to ``regions`` (−1: no match)."""
    from pagecast.trace.demand import as_trace, read_demand

    try:
        tr = as_trace(path)
    except PagecastError:
        raise  # already one line naming the file
    except Exception as e:  # any other reader failure: one line naming it too
        raise PagecastError(f"cannot read the page-successor training trace ({type(e).__name__})", path=path) from None
    d = read_demand(tr)
    lut = np.full(len(tr.regions) + 1, -1, np.int64)
    for old, new in match_regions(tr.regions, regions).items():
        if 0 <= old < len(tr.regions):
            lut[old] = new
    reg = np.asarray(d["region"], np.int64)
    ok = (reg >= 0) & (reg < len(tr.regions))
    return np.where(ok, lut[np.clip(reg, 0, len(lut) - 1)], -1), np.asarray(d["page"], np.int64)


@register_prefetcher("pagesucc")
class PageSuccessor(NumbaPrefetcher):
    name = "pagesucc"
    nb_observe = nb_observe

    def __init__(self, degree: int = 8, table_bits: int = 16, train: str | None = None):
        if not 1 <= degree <= MAX_PREFETCH:
            raise ValueError(f"pagesucc degree must be 1..{MAX_PREFETCH}")
        if not 4 <= table_bits <= 24:
            raise ValueError("pagesucc table_bits must be 4..24")
        self.degree, self.table_bits = int(degree), int(table_bits)
        self.train = str(train) if train else None
        self._regions: list[Region] = []
        self._train_stream: tuple | None = None
        super().__init__()

    def reset(self, regions: Sequence[Region]) -> None:
        self._regions = list(regions)
        super().reset(regions)

    def params(self) -> np.ndarray:
        return np.array([(1 << self.table_bits) - 1, self.degree], np.int64)

    def init_state(self, n_regions: int) -> np.ndarray:
        s = np.zeros(_HDR + _W * (1 << self.table_bits), np.int64)
        if self.train and self._regions:
            # reset() and the simulator both build a state: read the training run once per region set
            key = tuple(region_key(r) for r in self._regions)
            if self._train_stream is None or self._train_stream[0] != key:
                self._train_stream = (key, *_training_stream(self.train, self._regions))
            _, reg, pg = self._train_stream
            learn_stream(s, (1 << self.table_bits) - 1, reg, pg)
        return s
