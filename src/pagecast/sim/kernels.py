"""The simulator's dispatch over compiled policies, generated from the policy registry.

Every policy that registers a ``NumbaPrefetcher`` with an ``nb_observe`` kernel gets a
kind id here (``FIRST_KIND`` + its index in registry order), and ``step`` is one compiled
function that calls the kernel of a kind. ``step``'s source is generated — an if-chain
over the kinds, the same code a hand-written chain would be — so a new policy module
runs inside the compiled loop without any edit here or in ``engine``.

``step`` is built with ``exec`` and cannot be cached on disk itself; the engine's loop
that calls it is, and ``pagecast.util.jitcache`` keys that cache by the sources of every
module with compiled code in ``policies/``, so adding or editing a policy starts a fresh
cache.
"""

from __future__ import annotations

from typing import Callable

from numba import njit

from pagecast.policies.base import compiled_kernels

FIRST_KIND = 16  # the engine's own modes (none, oracle, schedule, python) lie below


def _generate(kernels: list[tuple[str, Callable]]) -> Callable:
    args = "pstate, pparams, rpages, t_ns, region, page, hit, out_r, out_p"
    lines = [f"def step(kind, {args}):"]
    for i, (name, _) in enumerate(kernels):
        lines.append(f"    {'if' if i == 0 else 'elif'} kind == {FIRST_KIND + i}:  # {name}")
        lines.append(f"        return _k{i}({args})")
    lines.append("    return 0")
    namespace: dict = {f"_k{i}": k for i, (_, k) in enumerate(kernels)}
    exec(compile("\n".join(lines) + "\n", "<pagecast.sim.kernels.step>", "exec"), namespace)
    return njit(namespace["step"])


KERNELS = compiled_kernels()
KINDS: dict[str, int] = {name: FIRST_KIND + i for i, (name, _) in enumerate(KERNELS)}
step = _generate(KERNELS)


def kind_of(prefetcher: object) -> int | None:
    """The kind that runs ``prefetcher`` compiled, or None (its class's kernel is not the
    registered one of its name: a subclass or a policy from outside the registry)."""
    name = getattr(prefetcher, "name", None)
    kind = KINDS.get(name) if isinstance(name, str) else None
    if kind is None or getattr(type(prefetcher), "nb_observe", None) is not KERNELS[kind - FIRST_KIND][1]:
        return None
    return kind
