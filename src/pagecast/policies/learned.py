"""A trained model as a named prefetcher: ``get_prefetcher("learned", model="m.pt", top_k=10)``.

Lets the simulator's per-event engine and the live loop run a model from `pagecast train`
through the same interface as the classic prefetchers. torch/onnxruntime load only when a
learned prefetcher is built, so discovering the policies package stays cheap.
"""

from __future__ import annotations

from pagecast.errors import PagecastError
from pagecast.policies.base import Prefetcher, register_prefetcher


@register_prefetcher("learned")
def learned(model: str | None = None, top_k: int = 10, backend: str = "auto") -> Prefetcher:
    if not model:
        raise PagecastError("the learned prefetcher needs a model file: learned:model=PATH.pt")
    from pagecast.learn.predict import load_predictor

    return load_predictor(model, top_k=int(top_k), backend=backend)
