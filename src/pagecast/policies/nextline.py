"""Next-N-line prefetching, by default Linux's mmap read-around.

On a major fault Linux reads ``ra_pages`` (128 KiB = 32 pages of 4 KiB) centred on the
faulting page: from 16 pages before it to 15 after (mm/filemap.c, do_sync_mmap_readahead).
This prefetcher does the same on every miss: ``before`` pages before the fault and
``window - before - 1`` after, nearest first. ``before=0`` gives classic next-N-line.
It acts on misses only; hits (even on prefetched pages) do not trigger it.

Backends: Python ``observe``, the simulator's compiled loop, and in C
(``native/policy/pc_policy.h``) the live fast path and the pager, where ``nextline:N``
means N pages per batch (``window`` N + 1) and the old pager name ``next:N`` is
``before=0``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pagecast.policies._numba import MAX_PREFETCH, NumbaPrefetcher, emit
from pagecast.policies.base import BATCH_PAGES, Alias, Shorthand, register_prefetcher

# next:N, the pager's first name for this policy, looked forward only: pages p+1 .. p+N.
_NEXT = Alias(
    "next",
    "nextline",
    {"window": BATCH_PAGES + 1, "before": 0},
    "policy 'next' is deprecated: use nextline:N,before=0 (the same pages p+1..p+N)",
)


@njit(cache=True)
def nb_observe(state, params, rpages, t_ns, region, page, hit, out_r, out_p):
    if hit:
        return 0
    before = params[0]
    after = params[1] - before - 1
    n = 0
    for d in range(1, max(before, after) + 1):
        if d <= after:
            n = emit(out_r, out_p, n, region, page + d, rpages)
        if d <= before:
            n = emit(out_r, out_p, n, region, page - d, rpages)
    return n


@register_prefetcher(
    "nextline", native_id=1, native=("live", "pager"), shorthand=Shorthand("window", offset=1), aliases=[_NEXT]
)
class NextLine(NumbaPrefetcher):
    name = "nextline"
    nb_observe = nb_observe
    # option sets ``pagecast.policies.check`` compares across backends, besides the defaults
    check_options = ({"window": 9, "before": 0}, {"window": 65, "before": 3}, {"window": 1})

    def __init__(self, window: int = 32, before: int | None = None):
        if not 1 <= window <= MAX_PREFETCH + 1:
            raise ValueError(f"nextline window must be 1..{MAX_PREFETCH + 1} pages")
        self.window = int(window)
        self.before = self.window // 2 if before is None else int(before)
        if not 0 <= self.before < self.window:
            raise ValueError("nextline: before must be in [0, window)")
        super().__init__()

    def params(self) -> np.ndarray:
        return np.array([self.before, self.window], np.int64)

    def native_params(self) -> tuple[int, int]:
        """(before, window): the parameters of the C step ``pc_nextline_step``."""
        return self.before, self.window

    def native_config(self) -> dict[str, int]:
        """The pager's settings (``pgr_config``): pages per batch and pages below the fault."""
        return {"depth": self.window - 1, "before": self.before}

    def init_state(self, n_regions: int) -> np.ndarray:
        return np.zeros(1, np.int64)
