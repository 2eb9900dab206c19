"""A network trained on Belady's MIN decisions (``pagecast train --target eviction``).

Every access of the run is scored before the simulation (batched inference,
``learn/eviction.py``): P(MIN keeps the page until its next use), from the MIN table of
the training runs (which pages MIN kept, by their identity across runs) and the
access's recency features. The least confident page leaves first (logit P in ``levels``
steps, the model's 64 by default; ``levels=1``: Hawkeye's rule, pages with P below
``threshold`` before the rest), and among equals the least recently used.
``source=table`` uses the MIN table's share alone (the network left out: the baseline
the network is measured against).
``learned:model=ev.pt[,levels=N][,threshold=P][,source=net|table]``.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from pagecast.errors import PagecastError
from pagecast.policies._numba import _configure_jit_cache  # noqa: F401  (the jit cache first)
from pagecast.policies.base import Eviction, register_eviction


@njit(cache=True)
def nb_key(eparams, gi, given, prev, demand):
    # a prefetched page is expected now: kept until its first use scores it
    return given if demand else gi


@register_eviction("learned")
class LearnedEviction(Eviction):
    name = "learned"
    nb_key = nb_key

    def __init__(
        self, model: str | None = None, levels: int | None = None, threshold: float = 0.5, source: str = "net"
    ):
        if not model:
            raise PagecastError("the learned eviction needs a model file: learned:model=ev.pt")
        from pagecast.learn.eviction import EvictionModel

        self.model_path = model
        self.model = EvictionModel.load(model)
        self.levels = int(levels) if levels is not None else self.model.info.config.levels
        if self.levels < 1:
            raise PagecastError(f"learned eviction: levels must be at least 1, not {levels}")
        self.threshold = float(threshold)
        if not 0 < self.threshold < 1:
            raise PagecastError(f"learned eviction: threshold must be in (0, 1), not {threshold}")
        if source not in ("net", "table"):
            raise PagecastError(f"learned eviction: source must be net or table, not {source!r}")
        self.source = source
        self.inference_s = 0.0

    def ahead(self, demand: dict[str, np.ndarray], capacity_pages: int) -> np.ndarray:
        from pagecast.learn.eviction import keys_from_scores

        t0 = time.perf_counter()
        if self.source == "table":
            p = self.model.prior(demand, capacity_pages)
        else:
            p = self.model.scores(demand, capacity_pages)
        self.inference_s = time.perf_counter() - t0
        return keys_from_scores(p, self.threshold, self.levels)
