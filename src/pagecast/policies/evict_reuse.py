"""Reuse distances of a training run: pages that did not come back within the capacity leave first.

A page is predicted *averse* when its median reuse distance (distinct other pages
between two uses) in a training run of the same program is at least the capacity, or
the run never reused it; averse pages leave first, and among equals the least recently
used: the learned eviction's rule (``learned``) with a table of the past run in place
of the network. ``reuse:trace=T.parquet``; the baseline the learned
eviction must beat.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.errors import PagecastError
from pagecast.policies._numba import _configure_jit_cache  # noqa: F401  (the jit cache first)
from pagecast.policies.base import Eviction, register_eviction


@njit(cache=True)
def nb_key(eparams, gi, given, prev, demand):
    # a prefetched page counts as just used and friendly until its first use
    return given if demand else -gi


@register_eviction("reuse")
class Reuse(Eviction):
    name = "reuse"
    nb_key = nb_key

    def __init__(self, trace: str | None = None):
        if not trace:
            raise PagecastError("the reuse eviction needs a training run: reuse:trace=T.parquet")
        from pagecast.learn.eviction import reuse_table

        self.trace = trace
        self.table = reuse_table(trace)

    def ahead(self, demand: dict[str, np.ndarray], capacity_pages: int) -> np.ndarray:
        from pagecast.learn.eviction import reuse_keys

        return reuse_keys(demand, self.table, capacity_pages)
