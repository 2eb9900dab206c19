"""A network trained on Belady's MIN decisions (``pagecast train --target eviction``).

Every access of the run is scored before the simulation (batched inference,
``learn/eviction.py``): P(MIN keeps the page until its next use) and the predicted
distance to that use. Pages predicted averse (P below ``threshold``) leave before pages
predicted friendly, and among equals the least recently used (``rule=averse``, the
default: Hawkeye's rule) or the page whose predicted next use is farthest
(``rule=nextuse``: Belady's rule on predicted next uses, as LRB relaxes it; pages whose
predicted use passed stay, which thrashed on the programs measured).
``learned:model=ev.pt[,threshold=P][,rule=averse|nextuse]``.
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

    def __init__(self, model: str | None = None, threshold: float | None = None, rule: str = "averse"):
        if not model:
            raise PagecastError("the learned eviction needs a model file: learned:model=ev.pt")
        from pagecast.learn.eviction import EvictionModel

        self.model_path = model
        self.model = EvictionModel.load(model)
        self.threshold = float(threshold) if threshold is not None else self.model.info.config.threshold
        if not 0 < self.threshold < 1:
            raise PagecastError(f"learned eviction: threshold must be in (0, 1), not {threshold}")
        if rule not in ("averse", "nextuse"):
            raise PagecastError(f"learned eviction: rule must be averse or nextuse, not {rule!r}")
        self.rule = rule
        self.inference_s = 0.0

    def ahead(self, demand: dict[str, np.ndarray], capacity_pages: int) -> np.ndarray:
        from pagecast.learn.eviction import keys_from_scores

        t0 = time.perf_counter()
        p, gap = self.model.scores(demand, capacity_pages)
        self.inference_s = time.perf_counter() - t0
        return keys_from_scores(p, self.threshold, gap if self.rule == "nextuse" else None)
