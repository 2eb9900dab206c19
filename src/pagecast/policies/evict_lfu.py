"""Least frequently used: the page with the fewest uses so far leaves first; among
equals, the least recently used.

A keyed eviction entirely inside its kernel: the key packs the page's use count and its
last use (``prev`` is the page's previous key), so it needs no state of its own.
"""

from __future__ import annotations

from numba import njit

from pagecast.policies._numba import _configure_jit_cache  # noqa: F401  (the jit cache first)
from pagecast.policies.base import Eviction, register_eviction

COUNT_SHIFT = 36  # rows below 2**36; counts below 2**26


@njit(cache=True)
def nb_key(eparams, gi, given, prev, demand):
    count = (-prev) >> COUNT_SHIFT if prev < 0 else 0
    if demand:
        count = min(count + 1, (1 << 26) - 1)
    return -((count << COUNT_SHIFT) + gi)


@register_eviction("lfu")
class LFU(Eviction):
    name = "lfu"
    nb_key = nb_key
