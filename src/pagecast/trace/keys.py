"""One int64 key per (region, page): ``(region + 1) << PAGE_BITS | page``.

Region ids are >= -1 (-1: a page of no known region, e.g. a raw address), pages are
below 2**PAGE_BITS (4 PiB of 4 KiB pages). ``region + 1`` keeps every key of a valid
pair non-negative, so -1 is free to mean "no key", and keys sort by region, then page.
The mapping is a monotone shift of ``region << PAGE_BITS | page``, so sorting or
deduplicating by either gives the same order.

``page_keys``/``split_keys`` work on arrays; ``make_key``, ``key_region`` and ``key_page``
are numba functions for compiled loops (callable from plain Python too). They are
compiled when first imported from here, so modules that only need the array functions
(the live loop, page sets) do not import numba.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pagecast.constants import PAGE_BITS

PAGE_MASK = (1 << PAGE_BITS) - 1


def page_keys(region: np.ndarray | int, page: np.ndarray | int) -> np.ndarray:
    """Keys of (region, page) pairs (arrays or scalars, broadcast); pages must be below 2**PAGE_BITS."""
    return ((np.asarray(region, np.int64) + 1) << PAGE_BITS) | np.asarray(page, np.int64)


def split_keys(key: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """(region, page) arrays of keys from ``page_keys``."""
    key = np.asarray(key, np.int64)
    return (key >> PAGE_BITS) - 1, key & PAGE_MASK


def _make_key(region: int, page: int) -> int:
    """The key of (region, page) in a compiled loop; -1 if the page or region is out of range."""
    if page < 0 or page > PAGE_MASK or region < -1:
        return -1
    return ((region + 1) << PAGE_BITS) | page


def _key_region(key: int) -> int:
    return (key >> PAGE_BITS) - 1


def _key_page(key: int) -> int:
    return key & PAGE_MASK


_JITTED = {"make_key": (_make_key, True), "key_region": (_key_region, False), "key_page": (_key_page, False)}


def __getattr__(name: str) -> Callable[..., Any]:
    if name not in _JITTED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from numba import njit

    from pagecast.util.jitcache import configure

    configure()
    fn, inline = _JITTED[name]
    jitted = njit(cache=True, inline="always" if inline else "never")(fn)
    globals()[name] = jitted
    return jitted
