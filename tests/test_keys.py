"""The one (region, page) key: array and compiled forms agree, round trip, order."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from numba import njit

from pagecast.trace.keys import PAGE_BITS, PAGE_MASK, key_page, key_region, make_key, page_keys, split_keys


def _pairs(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    region = rng.integers(-1, 50, n).astype(np.int32)
    page = rng.integers(0, 1 << PAGE_BITS, n).astype(np.int64)
    page[:4] = [0, 1, PAGE_MASK, PAGE_MASK - 1]
    return region, page


def test_round_trip_arrays():
    region, page = _pairs()
    r, p = split_keys(page_keys(region, page))
    assert np.array_equal(r, region) and np.array_equal(p, page)
    assert (page_keys(region, page) >= 0).all()


def test_against_an_independent_formula():
    region, page = _pairs(300, 1)
    expect = [(int(r) + 1) * 2**40 + int(p) for r, p in zip(region, page)]
    assert page_keys(region, page).tolist() == expect
    assert int(page_keys(2, 7)) == 3 * 2**40 + 7


def test_order_and_uniqueness_match_the_region_shift_convention():
    # the older convention region << 40 | page sorts and deduplicates the same way
    region, page = _pairs(5000, 2)
    region, page = np.concatenate([region, region[:100]]), np.concatenate([page, page[:100]])
    old = (region.astype(np.int64) << 40) | page
    new = page_keys(region, page)
    assert np.array_equal(np.argsort(old, kind="stable"), np.argsort(new, kind="stable"))
    assert np.array_equal(np.unique(old, return_index=True)[1], np.unique(new, return_index=True)[1])


@njit(cache=False)
def _keys_compiled(region, page):
    out = np.empty(len(page), np.int64)
    for i in range(len(page)):
        out[i] = make_key(region[i], page[i])
    return out


@njit(cache=False)
def _split_compiled(keys):
    r = np.empty(len(keys), np.int64)
    p = np.empty(len(keys), np.int64)
    for i in range(len(keys)):
        r[i], p[i] = key_region(keys[i]), key_page(keys[i])
    return r, p


def test_compiled_form_agrees_inside_a_numba_loop():
    region, page = _pairs(1000, 3)
    keys = _keys_compiled(region.astype(np.int64), page)
    assert np.array_equal(keys, page_keys(region, page))
    r, p = _split_compiled(keys)
    assert np.array_equal(r, region) and np.array_equal(p, page)


def test_compiled_form_refuses_out_of_range():
    assert make_key(0, -1) == -1
    assert make_key(0, PAGE_MASK + 1) == -1
    assert make_key(-2, 0) == -1
    assert make_key(-1, 0) == 0
    assert make_key(0, 0) == 1 << PAGE_BITS


def test_array_form_does_not_import_numba():
    code = "import sys; from pagecast.trace.keys import page_keys; page_keys(1, 2); print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_simulator_kernels_use_the_same_key():
    from pagecast.sim import hashtab

    assert hashtab.make_key is make_key
