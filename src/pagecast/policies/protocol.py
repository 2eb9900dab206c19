"""What a prefetch policy and an eviction policy must provide, as ``typing.Protocol``s.

The base classes in ``policies/base.py`` (``Prefetcher``, ``Eviction``) and
``policies/_numba.py`` (``NumbaPrefetcher``) define these by inheritance; the protocols
mirror them so a policy written outside pagecast can be checked statically (mypy,
pyright) without subclassing, and at run time with ``isinstance`` (``check()`` does).
Each protocol is one backend's contract (docs/simulator.md, "The policy registry").
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from pagecast.trace.regions import Region


@runtime_checkable
class PrefetchPolicy(Protocol):
    """The ``python`` backend: sees the demand stream one event at a time."""

    name: str

    def reset(self, regions: Sequence[Region]) -> None:
        """Forget all state; ``regions`` are those of the trace about to be played."""

    def observe(self, t_ns: int, region: int, page: int, hit: bool) -> list[tuple[int, int]]:
        """(region, page) pairs to prefetch after this access, best first."""
        ...


@runtime_checkable
class CompiledPrefetchPolicy(PrefetchPolicy, Protocol):
    """The ``sim`` backend: a numba kernel the simulator's compiled loop calls.

    ``nb_observe(state, params, rpages, t_ns, region, page, hit, out_r, out_p) -> n``
    writes up to ``len(out_p)`` pages, best first, and returns how many."""

    nb_observe: Any

    def params(self) -> np.ndarray:
        """The kernel's parameters (int64)."""
        ...

    def init_state(self, n_regions: int) -> np.ndarray:
        """Fresh kernel state for ``n_regions`` regions (int64)."""
        ...


@runtime_checkable
class NativePrefetchPolicy(PrefetchPolicy, Protocol):
    """The ``live`` and ``pager`` backends: a C step in ``native/policy/pc_policy.h``."""

    def native_params(self) -> tuple[int, int]:
        """The C step's two parameters (nextline: before, window)."""
        ...

    def native_config(self) -> dict[str, int]:
        """The pager's settings for this policy (``depth``, ``before``, ``min_conf``)."""
        ...


@runtime_checkable
class EvictionPolicy(Protocol):
    """An eviction: the simulator structure it runs on and, when keyed, its key kernel."""

    name: str
    structure: str  # "lru", "fifo", "clock" or "keyed"
    nb_key: Any  # keyed: nb_key(estate, eparams, gi, s, given, demand) -> int64 key
    uses_next_use: bool
    guards_prefetch: bool

    def params(self) -> np.ndarray: ...

    def init_state(self) -> np.ndarray: ...

    def ahead(self, demand: dict[str, np.ndarray], capacity_pages: int) -> np.ndarray | None:
        """Per-row values for ``nb_key``'s ``given``, computed before the simulation; None: unused."""
        ...
