"""numba kernels for the gym's hot loops: per-window counts and one environment step.

An env step over a few dozen chunks is a dozen tiny numpy calls whose fixed overhead
dominates; one compiled call does the whole step instead.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def window_counts(bounds: np.ndarray, unit: np.ndarray, n_units: int):
    """Sparse (window, unit, count) entries, windows in order (units in first-touch order).

    One pass per window with a scratch array of size n_units: O(accesses + entries).
    """
    W = len(bounds) - 1
    scratch = np.zeros(n_units, np.int64)
    touched = np.empty(len(unit), np.int64)
    out_w = np.empty(len(unit), np.int64)
    out_u = np.empty(len(unit), np.int64)
    out_c = np.empty(len(unit), np.int64)
    k = 0
    for w in range(W):
        m = 0
        for i in range(bounds[w], bounds[w + 1]):
            u = unit[i]
            if scratch[u] == 0:
                touched[m] = u
                m += 1
            scratch[u] += 1
        for j in range(m):
            u = touched[j]
            out_w[k] = w
            out_u[k] = u
            out_c[k] = scratch[u]
            scratch[u] = 0
            k += 1
    return out_w[:k].copy(), out_u[:k].copy(), out_c[:k].copy()


@njit(cache=True, nogil=True)
def place_and_score(
    target: np.ndarray,
    resident: np.ndarray,
    chunk_pages: np.ndarray,
    capacity: int,
    num_row: np.ndarray,
    den: float,
    t_slow: float,
    t_fast: float,
):
    """Apply a wanted placement under the capacity rule (resident chunks first, then chunk
    order) in place on ``resident``; return (window time, pages moved, rejected, fast pages)."""
    C = len(target)
    new = np.zeros(C, np.bool_)
    used = 0
    rejected = 0
    for c in range(C):
        if target[c] and resident[c]:
            if used + chunk_pages[c] <= capacity:
                new[c] = True
                used += chunk_pages[c]
            else:
                rejected += 1
    for c in range(C):
        if target[c] and not resident[c]:
            if used + chunk_pages[c] <= capacity:
                new[c] = True
                used += chunk_pages[c]
            else:
                rejected += 1
    moved = 0
    nh = 0.0
    for c in range(C):
        if new[c] != resident[c]:
            moved += chunk_pages[c]
        if new[c]:
            nh += num_row[c]
        resident[c] = new[c]
    f = nh / den
    return t_slow * (1.0 - f) + t_fast * f, moved, rejected, used


@njit(cache=True, nogil=True)
def fill_obs(
    out: np.ndarray,
    hist: np.ndarray,
    t: int,
    history: int,
    resident: np.ndarray,
    chunk_pages: np.ndarray,
    capacity: int,
    n_windows: int,
) -> None:
    C = len(resident)
    k = 0
    for h in range(history):  # most recent window first: hist row t+H-1 holds window t-1
        row = t + history - 1 - h
        for c in range(C):
            out[k] = hist[row, c]
            k += 1
    used = 0
    placed = 0
    for c in range(C):
        out[k] = 1.0 if resident[c] else 0.0
        k += 1
        if resident[c]:
            used += chunk_pages[c]
            placed += 1
    cap = max(capacity, 1)
    out[k] = max(cap - used, 0) / cap
    out[k + 1] = placed / C
    out[k + 2] = t / n_windows


@njit(cache=True, nogil=True)
def region_page_bounds(region: np.ndarray, page: np.ndarray, n_slots: int):
    """Min and max page seen per region slot (slot = region + 1; slot 0 is 'no region')."""
    lo = np.full(n_slots, np.iinfo(np.int64).max, np.int64)
    hi = np.full(n_slots, -1, np.int64)
    for i in range(len(region)):
        s = region[i] + 1
        p = page[i]
        if p < lo[s]:
            lo[s] = p
        if p > hi[s]:
            hi[s] = p
    return lo, hi


@njit(cache=True, nogil=True)
def dense_units(region: np.ndarray, page: np.ndarray, offset: np.ndarray, lo: np.ndarray, span: int):
    """Unit id of every access, ids numbered in (region, page) order, without sorting:
    mark touched cells of a dense (region, page) grid, number them, look them up.
    Returns (inverse, unit region, unit page)."""
    slot_of = np.zeros(span, np.int64)
    for i in range(len(region)):
        s = region[i] + 1
        slot_of[offset[s] + page[i] - lo[s]] = 1
    n = 0
    for j in range(span):
        if slot_of[j]:
            n += 1
            slot_of[j] = n
    u_region = np.empty(n, np.int64)
    u_page = np.empty(n, np.int64)
    for s in range(len(offset)):
        end = offset[s + 1] if s + 1 < len(offset) else span
        for j in range(offset[s], end):
            if slot_of[j]:
                u_region[slot_of[j] - 1] = s - 1
                u_page[slot_of[j] - 1] = lo[s] + j - offset[s]
    inv = np.empty(len(region), np.int64)
    for i in range(len(region)):
        s = region[i] + 1
        inv[i] = slot_of[offset[s] + page[i] - lo[s]] - 1
    return inv, u_region, u_page


@njit(cache=True, nogil=True)
def first_fit(order: np.ndarray, chunk_pages: np.ndarray, capacity: int) -> np.ndarray:
    """Take chunks in the given order, skipping any that no longer fit, until none does."""
    out = np.zeros(len(chunk_pages), np.bool_)
    used = 0
    for c in order:
        if used + chunk_pages[c] <= capacity:
            out[c] = True
            used += chunk_pages[c]
    return out
