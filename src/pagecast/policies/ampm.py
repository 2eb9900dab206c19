"""Access-map pattern matching (AMPM), at page granularity.

After Ishii, Inaba and Hiraki, "Access Map Pattern Matching for Data Cache Prefetch"
(ICS 2009; the DPC-1 winner, JILP 13, 2011). Memory is cut into zones (here 64 pages of a
region); each zone has an access map, one state per page: not accessed, accessed, or
prefetched. On each observed event at page p the maps are matched for every stride k =
1..``max_stride``: p + k is a candidate if p − k and p − 2k were accessed (a forward
stream with stride k through p), p − k if p + k and p + 2k were (a backward one). Nearer
candidates come first, forward before backward at the same k; pages already accessed or
prefetched are skipped, at most ``degree`` pages per event, all inside p's zone.
Matching the whole map finds strides that interleave or arrive out of order, which a
stride table learns only if the deltas repeat back to back.

Simplifications: the map table is direct-mapped (2**``table_bits`` zones, a zone that
maps onto a taken slot replaces it) instead of the paper's LRU table, and the degree is
fixed instead of adapted from the counts of useful and useless prefetches.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.policies._numba import MAX_PREFETCH, NumbaPrefetcher, emit
from pagecast.policies.base import register_prefetcher

ZONE_BITS = 6  # 64 pages per zone: one int64 bit map per state
_W = 4  # per slot: [tag (region + 2, 0 = empty), zone, accessed map, prefetched map]


@njit(cache=True, inline="always")
def _bit(m, i):
    return (m >> i) & 1


@njit(cache=True)
def nb_observe(state, params, rpages, t_ns, region, page, hit, out_r, out_p):
    degree, max_stride, mask = params[0], params[1], params[2]
    tag = region + 2
    zone = page >> ZONE_BITS
    off = page & ((1 << ZONE_BITS) - 1)
    h = ((zone * 0x9E3779B1) ^ (tag * 0x85EBCA77)) & 0x7FFFFFFFFFFF
    e = _W * ((h ^ (h >> 17)) & mask)
    if state[e] != tag or state[e + 1] != zone:
        state[e], state[e + 1], state[e + 2], state[e + 3] = tag, zone, 0, 0
    acc = state[e + 2]
    pf = state[e + 3]
    base = page - off
    n = 0
    for k in range(1, max_stride + 1):
        if n >= degree:
            break
        t = off + k  # forward stream through p: p - 2k, p - k accessed
        if t < 64 and off - 2 * k >= 0 and _bit(acc, off - k) and _bit(acc, off - 2 * k) and not _bit(acc | pf, t):
            m = emit(out_r, out_p, n, region, base + t, rpages)
            if m > n:
                pf |= 1 << t
                n = m
        if n >= degree:
            break
        t = off - k  # backward: p + k, p + 2k accessed
        if t >= 0 and off + 2 * k < 64 and _bit(acc, off + k) and _bit(acc, off + 2 * k) and not _bit(acc | pf, t):
            m = emit(out_r, out_p, n, region, base + t, rpages)
            if m > n:
                pf |= 1 << t
                n = m
    state[e + 2] = acc | (1 << off)
    state[e + 3] = pf & ~(1 << off)
    return n


@register_prefetcher("ampm")
class AccessMapPatternMatching(NumbaPrefetcher):
    name = "ampm"
    nb_observe = nb_observe

    def __init__(self, degree: int = 4, max_stride: int = 16, table_bits: int = 8):
        if not 1 <= degree <= MAX_PREFETCH:
            raise ValueError(f"ampm degree must be 1..{MAX_PREFETCH}")
        if not 1 <= max_stride <= 31:
            raise ValueError("ampm max_stride must be 1..31 (p - 2k and p + k inside a 64-page zone)")
        if not 1 <= table_bits <= 20:
            raise ValueError("ampm table_bits must be 1..20")
        self.degree, self.max_stride, self.table_bits = int(degree), int(max_stride), int(table_bits)
        super().__init__()

    def params(self) -> np.ndarray:
        return np.array([self.degree, self.max_stride, (1 << self.table_bits) - 1], np.int64)

    def init_state(self, n_regions: int) -> np.ndarray:
        return np.zeros(_W << self.table_bits, np.int64)
