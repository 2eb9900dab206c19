"""The prefetcher interface and the policy registry shared by every backend.

A policy module declares, once, what it provides (``register_prefetcher``):

* **python** — a ``Prefetcher`` whose per-event ``observe`` serves offline evaluation,
  the simulator's Python path and the live loop's predictor process;
* **sim** — a compiled kernel for the simulator: a ``NumbaPrefetcher`` subclass
  (``policies/_numba.py``) with ``nb_observe``, ``params`` and ``init_state``. The
  simulator's dispatch is generated from the registry (``sim/engine.py``), so such a
  policy runs compiled without any edit outside its own module;
* **live** / **pager** — where a C implementation exists, its id in
  ``native/policy/pc_policy_ids.h`` (``native_id``) and which native backends run it:
  the live loop's fast path (``native/live/fastpath.c``) and the userfaultfd pager
  (``native/pager/pager.c``). Both call the same C step functions
  (``native/policy/pc_policy.h``).

Policies that exist only in C (the pager's ``sparse`` and ``table``) are declared with
``register_native_policy`` so the vocabulary and the ids still have one source; their
``options`` function declares, by its signature, the options a spec may set and returns
the native settings.

How a spec names a policy is declared here too (``pagecast.policies.spec`` reads it): a
``Shorthand`` (``stride:8`` is ``stride:degree=8``), old names kept as deprecated aliases,
and per-backend defaults (the pager maps ``BATCH_PAGES`` pages per fault unless told).

Eviction policies register the same way (``register_eviction``), in a registry of their
own (an eviction and a prefetcher may share a name: ``min``, ``learned``): an
``Eviction`` declares the simulator structure it runs on (``sim/engine.py``: the
recency queue, the CLOCK ring, or the keyed heap, whose key a compiled ``nb_key`` gives
through the engine's eviction slots) and the native backends that implement it (the
pager's CLOCK, ``native/policy/pc_evict.h``).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

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


@dataclass(frozen=True)
class Shorthand:
    """``name:VALUE``: a bare value after the colon sets option ``key`` to VALUE + ``offset``.

    ``metavar`` names the value in syntax lines (``nextline[:N]``, ``table:FILE``); a
    shorthand that is ``required`` has no bare form (``table`` alone means nothing)."""

    key: str
    offset: int = 0
    metavar: str = "N"
    required: bool = False

    @property
    def syntax(self) -> str:
        return f":{self.metavar}" if self.required else f"[:{self.metavar}]"


@dataclass(frozen=True)
class Alias:
    """An old name kept working: the policy it now is and the options it implies
    (defaults the spec may still override). Using it prints ``warning``, one line."""

    name: str
    target: str
    implies: dict = field(default_factory=dict)
    warning: str = ""


# Pages the pager maps per fault unless a spec says otherwise (``PAGECAST_PAGER_DEPTH``'s default).
BATCH_PAGES = 16


def batch_depth(depth: int) -> int:
    """``depth``, a pager-only policy's pages per batch, checked (a one-line error if not >= 1)."""
    if depth < 1:
        raise ValueError("depth must be a positive integer (pages per batch)")
    return depth


# Backends a policy can claim, in the order messages list them.
BACKENDS = ("python", "sim", "live", "pager")
BACKEND_LABELS = {
    "python": "Python path",
    "sim": "simulator's compiled loop",
    "live": "live fast path",
    "pager": "pager",
}
NATIVE_BACKENDS = ("live", "pager")


@dataclass(frozen=True)
class PolicyEntry:
    """What one policy provides, as its module declared it."""

    name: str
    factory: Callable[..., Prefetcher] | None = None  # None: the policy exists only in C
    native_id: int | None = None  # PC_POLICY_<NAME> in native/policy/pc_policy_ids.h
    native: tuple[str, ...] = ()  # native backends that implement it ("live", "pager")
    summary: str = ""
    module: str = field(default="", compare=False)
    role: str = "prefetcher"  # or "eviction"
    shorthand: Shorthand | None = field(default=None, compare=False)
    # per backend, option defaults that differ from the constructor's (the pager's batch)
    backend_defaults: dict = field(default_factory=dict, compare=False)
    # a native-only policy: its signature declares the options, it returns the native settings
    options: Callable[..., dict] | None = field(default=None, compare=False)

    def defaults_for(self, backend: str | None) -> dict:
        return dict(self.backend_defaults.get(backend, {})) if backend else {}

    @property
    def kernel(self) -> Callable | None:
        """The compiled simulator step (``nb_observe``; an eviction's ``nb_key``), or None."""
        attr = "nb_key" if self.role == "eviction" else "nb_observe"
        nb = getattr(self.factory, attr, None) if isinstance(self.factory, type) else None
        return nb if nb is not None and hasattr(nb, "py_func") else None

    @property
    def backends(self) -> tuple[str, ...]:
        have = set(self.native)
        if self.factory is not None:
            have.add("python")
        if self.kernel is not None or (self.role == "eviction" and self.factory is not None):
            have.add("sim")
        return tuple(b for b in BACKENDS if b in have)


class Eviction:
    """Chooses which resident page leaves the fast tier when a new one must come in.

    ``structure`` is the simulator's data structure for it: ``"lru"`` and ``"fifo"`` (the
    recency queue), ``"clock"`` (the ring of frames with reference bits) or ``"keyed"``:
    every access gives the page a key, ``nb_key(estate, eparams, gi, s, given, demand)``
    (a numba kernel run inside the compiled loop), and the victim is the resident page
    with the largest key. ``given`` is the row's value of ``ahead`` (computed before the
    simulation: MIN's next uses, a model's scores) on a demand access, and the page's
    previous key on a prefetch. Keys are int64.
    """

    name: str = "base"
    structure: str = "keyed"
    nb_key = None
    uses_next_use = False  # the engine fills ``given`` with each row's next use (MIN)
    guards_prefetch = False  # skip a prefetch whose key is no smaller than the victim's

    def params(self) -> np.ndarray:
        return np.zeros(1, np.int64)

    def init_state(self) -> np.ndarray:
        return np.zeros(1, np.int64)

    def ahead(self, demand: dict[str, np.ndarray], capacity_pages: int) -> np.ndarray | None:
        """Per-row values for ``given``, computed before the simulation from the demand
        columns (``t``, ``region``, ``page``, ``write``) and the capacity; None: not used."""
        return None


_REGISTRY: dict[str, Callable[..., Prefetcher]] = {}
_EV_REGISTRY: dict[str, Callable[..., Eviction]] = {}
_EV_ENTRIES: dict[str, "PolicyEntry"] = {}
_ENTRIES: dict[str, PolicyEntry] = {}
_ALIASES: dict[str, Alias] = {}
_LOADED = False
# Modules of this package that are not policies (``_load_all`` skips them).
_NOT_POLICIES = ("base", "spec", "parity", "protocol")


def _check_native(name: str, native_id: int | None, native: Sequence[str]) -> tuple[str, ...]:
    native = tuple(native)
    bad = [b for b in native if b not in NATIVE_BACKENDS]
    if bad or (native and native_id is None) or (native_id is not None and not 0 <= native_id < 64):
        raise ValueError(f"policy {name!r}: native backends {native} need a native_id in 0..63 (backends: live, pager)")
    for other in _ENTRIES.values():
        if native_id is not None and other.native_id == native_id and other.name != name:
            raise ValueError(f"policy {name!r}: native_id {native_id} is already {other.name!r}")
    return native


def register_prefetcher(
    name: str,
    *,
    native_id: int | None = None,
    native: Sequence[str] = (),
    summary: str = "",
    shorthand: Shorthand | None = None,
    aliases: Sequence[Alias] = (),
    backend_defaults: dict[str, dict] | None = None,
) -> Callable[[Callable[..., Prefetcher]], Callable[..., Prefetcher]]:
    """Class or factory decorator: register ``name`` (and, optionally, its C implementations,
    its spec shorthand, old names and per-backend option defaults)."""
    nat = _check_native(name, native_id, native)

    def deco(factory: Callable[..., Prefetcher]) -> Callable[..., Prefetcher]:
        _REGISTRY[name] = factory
        module_doc = getattr(sys.modules.get(factory.__module__), "__doc__", None) or ""
        doc = summary or module_doc.strip().split("\n")[0]  # the module's first line says what it is
        _ENTRIES[name] = PolicyEntry(
            name,
            factory,
            native_id,
            nat,
            doc,
            factory.__module__,
            shorthand=shorthand,
            backend_defaults=dict(backend_defaults or {}),
        )
        _add_aliases(name, aliases)
        return factory

    return deco


def register_native_policy(
    name: str,
    *,
    native_id: int,
    native: Sequence[str],
    summary: str,
    module: str = "",
    options: Callable[..., dict] | None = None,
    shorthand: Shorthand | None = None,
) -> None:
    """Declare a policy that exists only in C (no Python ``observe``, no simulator kernel).

    ``options(**spec_options)`` returns the native settings (``depth``, ``table``...); its
    signature is what a spec may set, as a constructor's is for the other policies."""
    nat = _check_native(name, native_id, native)
    _ENTRIES[name] = PolicyEntry(name, None, native_id, nat, summary, module, shorthand=shorthand, options=options)


def _add_aliases(name: str, aliases: Sequence[Alias]) -> None:
    for a in aliases:
        if a.target != name or a.name in _REGISTRY or a.name in _ENTRIES:
            raise ValueError(f"alias {a.name!r} of {name!r}: must name this policy and no registered one")
        _ALIASES[a.name] = a


def alias(name: str) -> Alias | None:
    """The deprecated alias ``name``, or None."""
    _load_all()
    return _ALIASES.get(name)


def aliases() -> list[Alias]:
    _load_all()
    return [_ALIASES[k] for k in sorted(_ALIASES)]


def register_eviction(
    name: str, *, native: Sequence[str] = (), summary: str = ""
) -> Callable[[Callable[..., Eviction]], Callable[..., Eviction]]:
    """Class decorator: register the eviction policy ``name`` (and the native backends
    that implement it: the pager's built-in CLOCK)."""
    bad = [b for b in native if b not in NATIVE_BACKENDS]
    if bad:
        raise ValueError(f"eviction {name!r}: unknown native backends {bad} (live, pager)")

    def deco(factory: Callable[..., Eviction]) -> Callable[..., Eviction]:
        _EV_REGISTRY[name] = factory
        module_doc = getattr(sys.modules.get(factory.__module__), "__doc__", None) or ""
        doc = summary or module_doc.strip().split("\n")[0]
        _EV_ENTRIES[name] = PolicyEntry(name, factory, None, tuple(native), doc, factory.__module__, "eviction")
        return factory

    return deco


def available_evictions() -> list[str]:
    _load_all()
    return sorted(_EV_REGISTRY)


def _factory(registry: dict[str, Callable], name: str, what: str, available: Callable[[], list[str]]) -> Callable:
    """``registry[name]``, or the one-line error that lists what ``available`` names."""
    _load_all()
    try:
        return registry[name]
    except KeyError:
        raise PagecastError(f"unknown {what} {name!r} (available: {', '.join(available())})") from None


def get_eviction(name: str, **options) -> Eviction:
    return _factory(_EV_REGISTRY, name, "eviction policy", available_evictions)(**options)


def eviction_entries() -> list[PolicyEntry]:
    """Every registered eviction policy, by name."""
    _load_all()
    return [_EV_ENTRIES[k] for k in sorted(_EV_ENTRIES)]


def eviction_kernels() -> list[tuple[str, Callable]]:
    """(name, nb_key) of every keyed eviction, in a fixed order (the engine's eviction slots)."""
    return [(e.name, e.kernel) for e in eviction_entries() if e.kernel is not None]


def _load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    import pagecast.policies as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.startswith("_") and mod.name not in _NOT_POLICIES:
            importlib.import_module(f"pagecast.policies.{mod.name}")
    _LOADED = True


def available_prefetchers() -> list[str]:
    """Names with a Python ``observe`` (what ``get_prefetcher`` builds)."""
    _load_all()
    return sorted(_REGISTRY)


def get_prefetcher(name: str, **options) -> Prefetcher:
    _load_all()
    if name not in _REGISTRY and name in _ENTRIES:
        raise PagecastError(unsupported(name, "python"))
    return _factory(_REGISTRY, name, "prefetcher", available_prefetchers)(**options)


def policy_entries() -> list[PolicyEntry]:
    """Every registered policy, by name."""
    _load_all()
    return [_ENTRIES[k] for k in sorted(_ENTRIES)]


def policy_entry(name: str) -> PolicyEntry | None:
    _load_all()
    return _ENTRIES.get(name)


def policies_for(backend: str) -> list[str]:
    """Names of the policies ``backend`` runs (one of ``BACKENDS``)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r} ({', '.join(BACKENDS)})")
    return [e.name for e in policy_entries() if backend in e.backends]


def supports(name: str, backend: str) -> bool:
    e = policy_entry(name)
    return e is not None and backend in e.backends


def unsupported(name: str, backend: str) -> str:
    """The one-line error for ``name`` on a backend that does not run it."""
    e = policy_entry(name)
    label = BACKEND_LABELS.get(backend, backend)
    if e is None:
        return f"unknown policy {name!r} for the {label} (it runs: {', '.join(policies_for(backend))})"
    where = ", ".join(BACKEND_LABELS[b] for b in e.backends) or "nowhere"
    return f"policy {name!r} does not run in the {label}; it runs in: {where}"


def require(name: str, backend: str) -> PolicyEntry:
    """The entry of ``name`` if ``backend`` runs it, else a one-line PagecastError."""
    if not supports(name, backend):
        raise PagecastError(unsupported(name, backend))
    return policy_entry(name)  # type: ignore[return-value]


def compiled_kernels() -> list[tuple[str, Callable]]:
    """(name, nb_observe) of every policy with a simulator kernel, in a fixed order."""
    return [(e.name, e.kernel) for e in policy_entries() if e.kernel is not None]


def native_ids() -> dict[str, int]:
    """Name → id of every policy with a C implementation (the shared header's values)."""
    return {e.name: e.native_id for e in policy_entries() if e.native_id is not None}


def render_ids_header() -> str:
    """``native/policy/pc_policy_ids.h`` as the registry defines it (a test checks the file)."""
    lines = [
        "/* Generated from the policy registry (pagecast.policies.base.render_ids_header);",
        " * tests/test_policy_parity.py checks that this file matches it. Do not edit by hand:",
        " * declare native_id=... in the policy's module and regenerate with",
        " *   python -c 'from pagecast.policies.base import render_ids_header as r; print(r(), end=\"\")' \\",
        " *     > native/policy/pc_policy_ids.h */",
        "#ifndef PAGECAST_PC_POLICY_IDS_H",
        "#define PAGECAST_PC_POLICY_IDS_H",
        "",
        "#include <stddef.h>",
        "",
        "/* clang-format off */",
        "enum pc_policy_id {",
    ]
    for name, nid in sorted(native_ids().items(), key=lambda kv: kv[1]):
        lines.append(f"    PC_POLICY_{name.upper()} = {nid},")
    lines += [
        "};",
        "",
        "/* Canonical names, indexed by id (NULL: no policy has that id). */",
        "static const char *const pc_policy_names[] = {",
    ]
    ids = native_ids()
    top = max(ids.values(), default=-1)
    by_id = {v: k for k, v in ids.items()}
    for i in range(top + 1):
        lines.append("    " + (f'"{by_id[i]}"' if i in by_id else "NULL") + ",")
    lines += ["};", f"#define PC_POLICY_COUNT {top + 1}", "/* clang-format on */", "", "#endif", ""]
    return "\n".join(lines)
