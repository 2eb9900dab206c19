"""Shared machinery for prefetchers whose logic is a numba function.

One implementation serves both paths: the simulator calls ``nb_observe`` inside its
compiled loop, and ``observe`` (the per-event Python API the live loop uses) calls the
very same compiled function on the object's own state, so the two can never drift.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from numba import njit

from pagecast.util.jitcache import configure as _configure_jit_cache

_configure_jit_cache()

from pagecast.constants import MAX_PREFETCH
from pagecast.policies.base import Prefetcher
from pagecast.trace.regions import Region


@njit(cache=True)
def region_index(region: int, n_regions: int) -> int:
    """Row of per-region state: regions 0..n-1, and n for unknown (-1 or out of range)."""
    if region < 0 or region >= n_regions:
        return n_regions
    return region


@njit(cache=True)
def emit(out_r: np.ndarray, out_p: np.ndarray, n: int, region: int, page: int, rpages: np.ndarray) -> int:
    """Append (region, page) if it lies inside the region; return the new count."""
    if n >= len(out_p) or page < 0:
        return n
    ri = region_index(region, len(rpages) - 1)
    limit = rpages[ri]
    if limit > 0 and page >= limit:
        return n
    out_r[n] = region
    out_p[n] = page
    return n + 1


@njit(cache=True)
def emit_run(
    out_r: np.ndarray, out_p: np.ndarray, n: int, region: int, page: int, step: int, count: int, rpages: np.ndarray
) -> int:
    """Append page + step, page + 2*step, ... (count pages, those inside the region)."""
    for k in range(1, count + 1):
        n = emit(out_r, out_p, n, region, page + k * step, rpages)
    return n


def region_pages(regions: Sequence[Region]) -> np.ndarray:
    """Pages per region (0 = unknown length), plus a trailing 0 for region -1."""
    return np.array([r.pages for r in regions] + [0], dtype=np.int64)


class NumbaPrefetcher(Prefetcher):
    """Base class: subclasses set ``nb_observe`` and implement ``params``/``init_state``.

    ``nb_observe(state, params, rpages, t_ns, region, page, hit, out_r, out_p) -> n``
    writes up to ``len(out_p)`` pages to prefetch, best first, and returns how many.
    """

    nb_observe = None  # a numba.njit function

    def params(self) -> np.ndarray:
        raise NotImplementedError

    def init_state(self, n_regions: int) -> np.ndarray:
        raise NotImplementedError

    def __init__(self) -> None:
        self._out_r = np.zeros(MAX_PREFETCH, np.int64)
        self._out_p = np.zeros(MAX_PREFETCH, np.int64)
        self.reset([])

    def reset(self, regions: Sequence[Region]) -> None:
        self._rpages = region_pages(regions)
        self._params = self.params()
        self._state = self.init_state(len(regions))

    def observe(self, t_ns: int, region: int, page: int, hit: bool) -> list[tuple[int, int]]:
        n = type(self).nb_observe(
            self._state,
            self._params,
            self._rpages,
            int(t_ns),
            int(region),
            int(page),
            bool(hit),
            self._out_r,
            self._out_p,
        )
        return [(int(self._out_r[j]), int(self._out_p[j])) for j in range(n)]
