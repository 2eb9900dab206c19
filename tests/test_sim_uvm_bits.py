"""The bit-map tree prefetcher used while servicing batches equals the page-array one."""

from __future__ import annotations

import numpy as np
import pytest

from pagecast.sim.uvm import P_FAULT, P_RES, WORDS, tree_prefetch, tree_prefetch_bits


def _bits(mask: np.ndarray) -> np.ndarray:
    return np.packbits(mask.astype(np.uint8), bitorder="little").view(np.uint64)


@pytest.mark.parametrize("seed", range(6))
def test_bits_match_page_array(seed):
    rng = np.random.default_rng(seed)
    out = np.zeros(512, np.int64)
    work = np.zeros((3, 529), np.int64)
    leaves = np.zeros(WORDS, np.uint64)
    sel = np.zeros(WORDS, np.uint64)
    cum = np.zeros(WORDS + 1, np.int64)
    for _ in range(300):
        lo = int(rng.integers(0, 512))
        hi = int(rng.integers(lo + 1, 513))
        state = np.zeros(512, np.uint8)
        p_res, p_fault = rng.random(2) * [0.9, 0.3]
        span = slice(lo, hi)
        state[span][rng.random(hi - lo) < p_res] |= P_RES
        faulted = (rng.random(hi - lo) < p_fault) & ~(state[span] & P_RES).astype(bool)
        state[span][faulted] |= P_FAULT
        thr = int(rng.choice([1, 25, 51, 75, 99]))
        n = tree_prefetch(lo, hi, state, thr, out, work)
        tree_prefetch_bits(lo, hi, _bits(state & P_RES), _bits(state & P_FAULT), thr, leaves, sel, cum)
        got = np.unpackbits(sel.view(np.uint8), bitorder="little").astype(bool)
        got &= (state & P_FAULT) == 0
        got[:lo] = False
        got[hi:] = False
        assert sorted(np.flatnonzero(got)) == sorted(out[:n].tolist())
