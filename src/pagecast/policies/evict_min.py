"""Belady's MIN: the resident page whose next use is farthest in the future leaves first.

The optimum for demand paging, and the floor every other eviction is measured against.
The engine computes each row's next use in a backward pass before the simulation and
gives it as ``given``; a prefetched page keeps the next use its last access recorded
(or its first use). MIN also refuses a prefetch that would evict a page needed sooner
than the prefetched one (``guards_prefetch``).
"""

from __future__ import annotations

from numba import njit

from pagecast.policies._numba import _configure_jit_cache  # noqa: F401  (the jit cache first)
from pagecast.policies.base import Eviction, register_eviction


@njit(cache=True)
def nb_key(eparams, gi, given, prev, demand):
    return given if demand else prev


@register_eviction("min")
class MIN(Eviction):
    name = "min"
    nb_key = nb_key
    uses_next_use = True
    guards_prefetch = True
