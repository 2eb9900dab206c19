"""Open-addressing hash table (int64 key → dense int32 id) for numba kernels.

The simulators name pages by dense ids so per-page state lives in flat arrays; this
table hands out those ids. Keys are never deleted (a page seen once keeps its id), so
memory grows with the number of distinct pages, never with trace length.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.trace.keys import make_key  # noqa: F401  (engine.py takes the key from here)
from pagecast.util.jitcache import configure as _configure_jit_cache

_configure_jit_cache()

EMPTY = np.int64(-1)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, inline="always")
def _slot_of(key: int, mask: int) -> int:
    h = np.uint64(key) * _GOLDEN
    return int(h >> np.uint64(20)) & mask


@njit(cache=True, inline="always")
def _probe(table: np.ndarray, key: int) -> int:
    """Slot holding ``key``, or the empty slot where it would go (linear probing)."""
    mask = table.shape[0] - 1
    j = _slot_of(key, mask)
    while True:
        k = table[j, 0]
        if k == key or k == EMPTY:
            return j
        j = (j + 1) & mask


@njit(cache=True)
def lookup(table: np.ndarray, key: int) -> int:
    """Id of ``key`` or -1. ``table[j] = (key, id)``: both in one cache line."""
    j = _probe(table, key)
    return table[j, 1] if table[j, 0] == key else -1


@njit(cache=True)
def intern(table: np.ndarray, key: int, next_id: int) -> int:
    """Id of ``key``; if absent it gets ``next_id`` (caller checks ``result == next_id``).

    The caller keeps the table at most half full, so the probe always ends.
    """
    j = _probe(table, key)
    if table[j, 0] == EMPTY:
        table[j, 0] = key
        table[j, 1] = next_id
    return table[j, 1]


@njit(cache=True)
def rehash(old: np.ndarray, new: np.ndarray) -> None:
    for j in range(old.shape[0]):
        k = old[j, 0]
        if k != EMPTY:
            intern(new, k, old[j, 1])


def new_table(min_entries: int) -> np.ndarray:
    size = 1 << max(10, int(2 * max(min_entries, 1) - 1).bit_length())
    t = np.zeros((size, 2), np.int64)
    t[:, 0] = EMPTY
    return t


def grown(table: np.ndarray, min_entries: int) -> np.ndarray:
    """A table holding the same keys with room for ``min_entries`` at <= 50 % load."""
    if 2 * min_entries <= table.shape[0]:
        return table
    nt = new_table(min_entries)
    rehash(table, nt)
    return nt
