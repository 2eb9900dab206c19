"""Open-addressing hash table (int64 key → dense int32 id) for numba kernels.

The simulators name pages by dense ids so per-page state lives in flat arrays; this
table hands out those ids. Keys are never deleted (a page seen once keeps its id), so
memory grows with the number of distinct pages, never with trace length.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.util.jitcache import configure as _configure_jit_cache

_configure_jit_cache()

EMPTY = np.int64(-1)
PAGE_BITS = 40  # pages per region < 2**40 (4 PiB of 4 KiB pages)
PAGE_MASK = (1 << PAGE_BITS) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, inline="always")
def make_key(region: int, page: int) -> int:
    """(region, page) → one int64; region -1 (unknown) is allowed. -1 if page is out of range."""
    if page < 0 or page > PAGE_MASK or region < -1:
        return -1
    return ((region + 1) << PAGE_BITS) | page


@njit(cache=True, inline="always")
def key_region(key: int) -> int:
    return (key >> PAGE_BITS) - 1


@njit(cache=True, inline="always")
def key_page(key: int) -> int:
    return key & PAGE_MASK


@njit(cache=True, inline="always")
def _slot_of(key: int, mask: int) -> int:
    h = np.uint64(key) * _GOLDEN
    return int(h >> np.uint64(20)) & mask


@njit(cache=True)
def lookup(hkeys: np.ndarray, hvals: np.ndarray, key: int) -> int:
    """Id of ``key`` or -1."""
    mask = len(hkeys) - 1
    j = _slot_of(key, mask)
    while True:
        k = hkeys[j]
        if k == key:
            return hvals[j]
        if k == EMPTY:
            return -1
        j = (j + 1) & mask


@njit(cache=True)
def intern(hkeys: np.ndarray, hvals: np.ndarray, key: int, next_id: int) -> int:
    """Id of ``key``; if absent it gets ``next_id`` (caller checks ``result == next_id``).

    The caller keeps the table at most half full, so the probe always ends.
    """
    mask = len(hkeys) - 1
    j = _slot_of(key, mask)
    while True:
        k = hkeys[j]
        if k == key:
            return hvals[j]
        if k == EMPTY:
            hkeys[j] = key
            hvals[j] = next_id
            return next_id
        j = (j + 1) & mask


@njit(cache=True)
def rehash(old_keys: np.ndarray, old_vals: np.ndarray, new_keys: np.ndarray, new_vals: np.ndarray) -> None:
    for j in range(len(old_keys)):
        k = old_keys[j]
        if k != EMPTY:
            intern(new_keys, new_vals, k, old_vals[j])


def new_table(min_entries: int) -> tuple[np.ndarray, np.ndarray]:
    size = 1 << max(10, int(2 * max(min_entries, 1) - 1).bit_length())
    return np.full(size, EMPTY, np.int64), np.zeros(size, np.int32)


def grown(hkeys: np.ndarray, hvals: np.ndarray, min_entries: int) -> tuple[np.ndarray, np.ndarray]:
    """A table holding the same keys with room for ``min_entries`` at ≤ 50 % load."""
    if 2 * min_entries <= len(hkeys):
        return hkeys, hvals
    nk, nv = new_table(min_entries)
    rehash(hkeys, hvals, nk, nv)
    return nk, nv
