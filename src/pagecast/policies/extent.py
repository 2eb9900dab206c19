"""Region extent: on the first touch of an object, fetch the whole object.

An object is a region (a mapped file, an allocation) of known length of at most
``max_pages`` pages; larger regions are address space, not objects, and are left alone.
The first observed event in such a region starts fetching it from the touched page
onwards (wrapping to the start), ``degree`` pages per observed event in that region,
until every page of it has been named once. A cursor per region remembers how far it got,
so the object is fetched exactly once whatever the capacity.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.policies._numba import MAX_PREFETCH, NumbaPrefetcher, emit, region_index
from pagecast.policies.base import register_prefetcher

# state per region (and one row for unknown regions): [start page, pages named so far]; start −1 = untouched


@njit(cache=True)
def nb_observe(state, params, rpages, t_ns, region, page, hit, out_r, out_p):
    degree, max_pages = params[0], params[1]
    ri = region_index(region, len(rpages) - 1)
    size = rpages[ri]
    if ri == len(rpages) - 1 or size <= 0 or size > max_pages:
        return 0
    b = 2 * ri
    if state[b] < 0:
        state[b] = page
        state[b + 1] = 1  # the touched page itself
    n = 0
    done = state[b + 1]
    while done < size and n < degree:
        n = emit(out_r, out_p, n, region, (state[b] + done) % size, rpages)
        done += 1
    state[b + 1] = done
    return n


@register_prefetcher("extent")
class RegionExtent(NumbaPrefetcher):
    name = "extent"
    nb_observe = nb_observe

    def __init__(self, degree: int = 16, max_pages: int = 512):
        if not 1 <= degree <= MAX_PREFETCH:
            raise ValueError(f"extent degree must be 1..{MAX_PREFETCH}")
        if max_pages < 1:
            raise ValueError("extent max_pages must be at least 1")
        self.degree, self.max_pages = int(degree), int(max_pages)
        super().__init__()

    def params(self) -> np.ndarray:
        return np.array([self.degree, self.max_pages], np.int64)

    def init_state(self, n_regions: int) -> np.ndarray:
        s = np.zeros(2 * (n_regions + 1), np.int64)
        s[0::2] = -1
        return s
