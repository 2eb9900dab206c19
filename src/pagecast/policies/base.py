"""The prefetcher interface shared by the simulator, offline evaluation and the live loop."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Sequence

from pagecast.errors import PagecastError
from pagecast.trace.regions import Region


class Prefetcher:
    """Sees the demand stream one event at a time and names pages to bring in.

    ``observe`` is told each demand access (or fault) with whether it hit the fast tier,
    and returns (region, page) pairs to prefetch now, best first. A prefetcher never sees
    the future, except the oracle, which is given the trace explicitly.
    """

    name: str = "base"

    def reset(self, regions: Sequence[Region]) -> None:
        """Forget all state; ``regions`` are those of the trace about to be played."""

    def observe(self, t_ns: int, region: int, page: int, hit: bool) -> list[tuple[int, int]]:
        raise NotImplementedError


_REGISTRY: dict[str, Callable[..., Prefetcher]] = {}
_LOADED = False


def register_prefetcher(name: str) -> Callable[[Callable[..., Prefetcher]], Callable[..., Prefetcher]]:
    def deco(factory: Callable[..., Prefetcher]) -> Callable[..., Prefetcher]:
        _REGISTRY[name] = factory
        return factory

    return deco


def _load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    import pagecast.policies as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.startswith("_") and mod.name != "base":
            importlib.import_module(f"pagecast.policies.{mod.name}")
    _LOADED = True


def available_prefetchers() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def get_prefetcher(name: str, **options) -> Prefetcher:
    _load_all()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise PagecastError(f"unknown prefetcher {name!r} (available: {', '.join(available_prefetchers())})") from None
    return factory(**options)
