"""Per-region stride prefetcher (the classic reference-prediction-table idea, one
entry per region since pages carry no instruction pointer in every trace).

For each observed event (a miss, or the first use of a prefetched page) it compares the
delta from the region's previous event with the stored stride. A repeat raises the
confidence (saturating at 3), anything else replaces the stride and clears it. Once the
confidence reaches ``min_conf`` it prefetches ``degree`` pages along the stride.

Backends: Python ``observe``, the simulator's compiled loop, and in C
(``native/policy/pc_policy.h``) the live fast path (one entry per file) and the pager.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.policies._numba import MAX_PREFETCH, NumbaPrefetcher, emit_run, region_index
from pagecast.policies.base import BATCH_PAGES, Shorthand, register_prefetcher


@njit(cache=True)
def nb_observe(state, params, rpages, t_ns, region, page, hit, out_r, out_p):
    degree = params[0]
    min_conf = params[1]
    base = 3 * region_index(region, len(rpages) - 1)
    last, stride, conf = state[base], state[base + 1], state[base + 2]
    if last >= 0:
        d = page - last
        if d != 0 and d == stride:
            conf = min(conf + 1, 3)
        elif d != 0:
            stride = d
            conf = 0
    state[base] = page
    state[base + 1] = stride
    state[base + 2] = conf
    n = 0
    if stride != 0 and conf >= min_conf:
        n = emit_run(out_r, out_p, n, region, page, stride, degree, rpages)
    return n


@register_prefetcher(
    "stride",
    native_id=2,
    native=("live", "pager"),
    shorthand=Shorthand("degree"),
    backend_defaults={"pager": {"degree": BATCH_PAGES}},  # the pager maps a whole batch along the stride
)
class Stride(NumbaPrefetcher):
    name = "stride"
    nb_observe = nb_observe
    check_options = ({"degree": 8, "min_conf": 0}, {"degree": 64, "min_conf": 3})

    def __init__(self, degree: int = 4, min_conf: int = 1):
        if not 1 <= degree <= MAX_PREFETCH:
            raise ValueError(f"stride degree must be 1..{MAX_PREFETCH}")
        self.degree, self.min_conf = int(degree), int(min_conf)
        super().__init__()

    def params(self) -> np.ndarray:
        return np.array([self.degree, self.min_conf], np.int64)

    def native_params(self) -> tuple[int, int]:
        """(degree, min_conf): the parameters of the C step ``pc_stride_step``."""
        return self.degree, self.min_conf

    def native_config(self) -> dict[str, int]:
        """The pager's settings (``pgr_config``): pages per batch and the confidence to prefetch."""
        return {"depth": self.degree, "min_conf": self.min_conf}

    def init_state(self, n_regions: int) -> np.ndarray:
        s = np.zeros(3 * (n_regions + 1), np.int64)
        s[0::3] = -1  # no previous page yet
        return s
