"""The simulator's compiled policies, looked up in the policy registry.

Every policy that registers a ``NumbaPrefetcher`` with an ``nb_observe`` kernel gets a
kind id here: ``FIRST_KIND`` + its index in registry (name) order. The engine's loop
calls the kernel of a kind through a fixed table of ``SLOTS`` kernel slots that this
module fills from the registry (``slot``; unused slots hold a kernel that names nothing),
so a new policy module runs inside the compiled loop without any edit to the engine.

Why slots and not a generated dispatch function: a generated ``step(kind, ...)`` called
from the loop — even inlined at numba's IR level — ran the compiled policies measurably
slower than the hand-written chain of calls it replaced (BENCHMARKS.md, "Policy registry",
benchmarks/sim_policy_dispatch.py); the slot chain inside the loop is that same chain,
with the registry choosing what each slot calls. numba freezes the slots when the loop compiles; ``pagecast.util.jitcache``
keys its cache by the sources of every compiled module in ``policies/``, so adding or
editing a policy starts a fresh cache.
"""

from __future__ import annotations

from typing import Callable

from numba import njit

from pagecast.errors import PagecastError
from pagecast.policies.base import compiled_kernels, eviction_kernels

FIRST_KIND = 16  # the engine's own modes (none, oracle, schedule, python) lie below
SLOTS = 16  # kernel slots in the engine's loop (engine.run): raise both together


@njit(cache=True)
def no_kernel(pstate, pparams, rpages, t_ns, region, page, hit, out_r, out_p):
    """An empty slot: names nothing."""
    return 0


def _kinds(kernels: list[tuple[str, Callable]], first: int, slots: int, what: str) -> dict[str, int]:
    """Kind ``first + i`` for the i-th kernel; more kernels than slots is an error of the build."""
    if len(kernels) > slots:
        raise PagecastError(f"{len(kernels)} {what} but {slots} slots: add slots in sim/kernels.py and sim/engine.py")
    return {name: first + i for i, (name, _) in enumerate(kernels)}


KERNELS: list[tuple[str, Callable]] = compiled_kernels()
KINDS: dict[str, int] = _kinds(KERNELS, FIRST_KIND, SLOTS, "compiled policies")


def slot(i: int) -> Callable:
    """The kernel the engine's slot ``i`` calls (kind ``FIRST_KIND + i``)."""
    return KERNELS[i][1] if i < len(KERNELS) else no_kernel


# Evictions the same way: the engine's own structures (LRU, FIFO, CLOCK) lie below
# FIRST_EV_KIND; every keyed eviction (``nb_key``) gets kind FIRST_EV_KIND + its index.
FIRST_EV_KIND = 16
EV_SLOTS = 8


@njit(cache=True)
def no_key(eparams, gi, given, prev, demand):
    """An empty eviction slot: names nothing."""
    return given


EV_KERNELS: list[tuple[str, Callable]] = eviction_kernels()
EV_KINDS: dict[str, int] = _kinds(EV_KERNELS, FIRST_EV_KIND, EV_SLOTS, "keyed evictions")


def ev_slot(i: int) -> Callable:
    """The key kernel the engine's eviction slot ``i`` calls (kind ``FIRST_EV_KIND + i``)."""
    return EV_KERNELS[i][1] if i < len(EV_KERNELS) else no_key


def kind_of(prefetcher: object) -> int | None:
    """The kind that runs ``prefetcher`` compiled, or None (its class's kernel is not the
    registered one of its name: a subclass or a policy from outside the registry)."""
    name = getattr(prefetcher, "name", None)
    kind = KINDS.get(name) if isinstance(name, str) else None
    if kind is None or getattr(type(prefetcher), "nb_observe", None) is not KERNELS[kind - FIRST_KIND][1]:
        return None
    return kind
