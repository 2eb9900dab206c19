"""A trained model as a named prefetcher: ``get_prefetcher("learned", model="m.pt", top_k=10)``.

Lets the simulator's per-event engine and the live loop run a model from `pagecast train`
through the same interface as the classic prefetchers (the adapter: ``_learned_prefetcher``).
torch/onnxruntime load only when a learned prefetcher is built, so discovering the policies package stays cheap.
"""

from __future__ import annotations

from pathlib import Path

from pagecast.errors import PagecastError
from pagecast.policies.base import Prefetcher, register_prefetcher


@register_prefetcher("learned")
def learned(model: str | None = None, top_k: int = 10, backend: str = "auto") -> Prefetcher:
    if not model:
        raise PagecastError("the learned prefetcher needs a model file: learned:model=PATH.pt")
    return load_predictor(model, top_k=int(top_k), backend=backend)


def load_predictor(model_path: str | Path, *, top_k: int = 10, backend: str = "auto") -> Prefetcher:
    """A ``Prefetcher`` running the model per fault (call ``reset(regions)`` before use).

    ``auto``: the compiled numba kernel for one-layer LSTMs (fastest measured per fault),
    onnxruntime otherwise.
    """
    from pagecast.learn.predict import _loaded
    from pagecast.policies._learned_prefetcher import LearnedPrefetcher

    return LearnedPrefetcher(_loaded(model_path), top_k=top_k, backend=backend)
