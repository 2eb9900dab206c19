"""One policy, every backend it claims: the same pages on fixed streams.

``check(name_or_class)`` is what a plug-in author runs on a policy: it verifies that the
backends the policy declares (``register_prefetcher``: ``python``, ``sim``, ``live``,
``pager``) are the ones it implements, runs it on fixed streams (runs, strides both ways,
region edges, two interleaved regions, noise) through the simulator's two paths (the
Python ``observe`` and the compiled ``nb_observe`` the simulator's loop calls), and
compares every other backend it claims with the simulator's Python path, event by
event: the compiled kernel, and the C step the live fast path and the pager run
(``native/policy/pc_policy.h``, fed through ``native/policy/parity_driver.c``).

``tests/test_policy_parity.py`` runs the same comparisons (and, above this layer, the
simulator's whole loop and the real pager). For an eviction policy ``check`` verifies the
declaration only (its simulator structure and key kernel, and that only a CLOCK claims
the pager, whose sweep is CLOCK): the victims come from the simulator's loop, which sits
above this package; the parity test compares them in every backend.
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.policies.base import (
    BACKEND_LABELS,
    BACKENDS,
    NATIVE_BACKENDS,
    Eviction,
    PolicyEntry,
    eviction_entries,
    policy_entries,
    policy_entry,
    supports,
)
from pagecast.policies.protocol import CompiledPrefetchPolicy, EvictionPolicy, NativePrefetchPolicy, PrefetchPolicy
from pagecast.trace.regions import Region

PS = PAGE_SIZE
# Two regions: one of known length (clipping), one of unknown length (region limit 0).
REGIONS = (Region(0, "f0", kind="file", length=300 * PS), Region(1, "f1", kind="file", length=0))
REFERENCE = "the simulator's Python path"

Event = tuple[int, int, bool]  # region, page, hit
Decisions = list[list[tuple[int, int]]]  # per event, the (region, page) pairs named


@functools.cache
def streams() -> dict[str, tuple[Event, ...]]:
    """(region, page, hit) events: runs, strides both ways, region edges, noise."""
    rng = np.random.default_rng(16)
    seq = [(0, p, p % 3 == 0) for p in range(0, 120)]
    strided = [(0, 5 + 3 * k, False) for k in range(40)] + [(1, 5000 - 7 * k, bool(k % 2)) for k in range(40)]
    edges = [(0, p, False) for p in (0, 1, 299, 298, 297, 150, 0, 299)] + [(1, p, False) for p in (0, 1, 2, 3, 1 << 30)]
    mixed: list[Event] = []
    for _ in range(400):
        r = int(rng.integers(2))
        if rng.random() < 0.5 and mixed:
            lr, lp, _ = mixed[-1]
            mixed.append((lr, max(0, lp + int(rng.choice([1, 2, 4, -3]))), bool(rng.random() < 0.3)))
        else:
            mixed.append((r, int(rng.integers(0, 300 if r == 0 else 100_000)), bool(rng.random() < 0.3)))
    interleaved = [ev for k in range(30) for ev in ((0, 10 + 2 * k, False), (1, 900 - 5 * k, False))]
    out = {"sequential": seq, "strided": strided, "edges": edges, "mixed": mixed, "interleaved": interleaved}
    return {k: tuple(v) for k, v in out.items()}


def option_sets(factory: Callable[..., Any]) -> list[dict]:
    """The defaults, then the option sets the policy lists in ``check_options``."""
    return [{}] + [dict(o) for o in getattr(factory, "check_options", ())]


def python_decisions(policy: PrefetchPolicy, stream: Sequence[Event]) -> Decisions:
    """What ``observe`` names per event (the simulator's Python path), from a reset. A
    policy that sees the future (the oracle) is given the stream, as the simulator does."""
    if hasattr(policy, "set_stream"):
        ev = np.array(stream, np.int64).reshape(-1, 3)
        policy.set_stream(ev[:, 0], ev[:, 1], np.arange(len(ev), dtype=np.int64))
    policy.reset(list(REGIONS))
    return [[(int(r), int(p)) for r, p in policy.observe(t, r, pg, hit)] for t, (r, pg, hit) in enumerate(stream)]


def kernel_decisions(policy: CompiledPrefetchPolicy, stream: Sequence[Event]) -> Decisions:
    """What the compiled ``nb_observe`` names per event, on state of its own (as the
    simulator's loop runs it)."""
    from pagecast.policies._numba import MAX_PREFETCH, region_pages

    state, params, rpages = policy.init_state(len(REGIONS)), policy.params(), region_pages(REGIONS)
    out_r, out_p = np.zeros(MAX_PREFETCH, np.int64), np.zeros(MAX_PREFETCH, np.int64)
    kernel = type(policy).nb_observe
    got = []
    for t, (r, pg, hit) in enumerate(stream):
        n = kernel(state, params, rpages, t, r, pg, hit, out_r, out_p)
        got.append([(int(out_r[j]), int(out_p[j])) for j in range(n)])
    return got


@functools.cache
def driver() -> Path:
    """The C step driver (built on first use)."""
    from pagecast.util.native import build

    return build("policy_parity_driver", ["policy/parity_driver.c"], shared=False)


def c_step_decisions(native_id: int, params: Sequence[int], stream: Sequence[Event]) -> Decisions:
    """What the C step of policy ``native_id`` (pc_policy.h) names per event, with the
    native parameters ``params`` (``native_params()``), one state per region."""
    limits = [str(r.pages) for r in REGIONS]
    text = "".join(f"{r} {pg} {int(hit)}\n" for r, pg, hit in stream)
    res = subprocess.run(
        [str(driver()), str(native_id), *map(str, params), *limits], input=text, capture_output=True, text=True
    )
    if res.returncode != 0:
        why = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[0]
        raise PagecastError(f"the C step driver failed: {why}")
    lines = res.stdout.split("\n")[: len(stream)]
    return [[(r, int(x)) for x in line.split()] for (r, _, _), line in zip(stream, lines)]


def first_difference(stream: Sequence[Event], got: Decisions, want: Decisions) -> str | None:
    """The first event where two backends name different pages, in words; None if none."""
    for i, (ev, g, w) in enumerate(zip(stream, got, want)):
        if g != w:
            r, pg, hit = ev
            return (
                f"event {i} (region {r}, page {pg}, {'hit' if hit else 'miss'}): "
                f"named {[p for _, p in g]}, {REFERENCE} {[p for _, p in w]}"
            )
    if len(got) != len(want):
        return f"{len(got)} events answered, {len(want)} expected"
    return None


# ---- the report ------------------------------------------------------------------------


@dataclass
class Finding:
    """One verdict on one backend: ``ok`` True (passed), False (failed), None (not run)."""

    backend: str
    ok: bool | None
    detail: str

    def __str__(self) -> str:
        mark = {True: "ok", False: "FAIL", None: "skip"}[self.ok]
        return f"  {mark:4} {BACKEND_LABELS.get(self.backend, self.backend)}: {self.detail}"


@dataclass
class CheckReport:
    """What ``check`` found for one policy."""

    name: str
    claims: tuple[str, ...]
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.ok is not False for f in self.findings)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.ok is False]

    def add(self, backend: str, ok: bool | None, detail: str) -> None:
        self.findings.append(Finding(backend, ok, detail))

    def __str__(self) -> str:
        head = f"policy {self.name!r} ({', '.join(self.claims) or 'no backend'}): {'ok' if self.ok else 'FAILED'}"
        return "\n".join([head, *map(str, self.findings)])


def _entry_of(policy: str | type | PolicyEntry, role: str) -> PolicyEntry:
    if isinstance(policy, PolicyEntry):
        return policy
    entries = eviction_entries() if role == "eviction" else policy_entries()
    if isinstance(policy, str):
        for e in entries:
            if e.name == policy:
                return e
        names = ", ".join(x.name for x in entries)
        raise PagecastError(
            f"unknown {'eviction' if role == 'eviction' else 'policy'} {policy!r} (registered: {names})"
        )
    if isinstance(policy, type):
        for e in entries:
            if e.factory is policy:
                return e
        # not registered: it claims what it implements (register it to claim native backends)
        return PolicyEntry(getattr(policy, "name", policy.__name__), policy, module=policy.__module__, role=role)
    raise PagecastError(f"check() takes a policy name, class or PolicyEntry, not {type(policy).__name__}")


def check(
    policy: str | type | PolicyEntry, *, options: Sequence[dict] | None = None, role: str | None = None
) -> CheckReport:
    """Check one prefetch policy: its declared backends against what it implements, and
    its decisions in every claimed backend against the simulator's Python path.

    ``policy``: a registered name, a policy class (registered or not) or a ``PolicyEntry``
    (what ``register_prefetcher`` would record). ``options``: the option sets to run
    (default: the defaults plus the class's ``check_options``). ``role="eviction"`` (implied
    by an ``Eviction`` class or entry) checks an eviction policy's declaration. The
    report's ``ok`` is False when any claimed backend is missing or disagrees;
    ``str(report)`` says where.
    """
    if role is None:
        is_ev = (isinstance(policy, type) and issubclass(policy, Eviction)) or (
            isinstance(policy, PolicyEntry) and policy.role == "eviction"
        )
        role = "eviction" if is_ev else "prefetcher"
    entry = _entry_of(policy, role)
    report = CheckReport(entry.name, entry.backends)
    if role == "eviction":
        _check_eviction(entry, options, report)
        return report
    if entry.factory is None:
        _check_native_only(entry, report)
        return report
    _check_registry(entry, report)
    built = _build_all(entry, options, report)
    if built is None:
        return report
    try:
        reference = {(i, s): python_decisions(p, ev) for i, (_, p) in enumerate(built) for s, ev in streams().items()}
    except Exception as e:  # noqa: BLE001 (a plug-in's observe may raise anything)
        report.add("python", False, f"observe failed on the fixed streams: {type(e).__name__}: {e}")
        return report
    named = sum(len(d) for dec in reference.values() for d in dec)
    report.add("python", True, f"{len(built)} option set(s) x {len(streams())} streams, {named} pages named")
    if "sim" in entry.backends:
        _compare(report, ("sim",), built, reference, _kernel_runner)
    native = tuple(b for b in NATIVE_BACKENDS if b in entry.backends)
    if native:
        _compare(report, native, built, reference, _c_runner(entry))
    elif all(isinstance(p, NativePrefetchPolicy) for _, p in built):
        report.add("live", None, "implements native_params but claims no native backend (register native=...)")
    return report


def _check_registry(entry: PolicyEntry, report: CheckReport) -> None:
    """The registry answers for a registered policy as its declaration says."""
    if policy_entry(entry.name) is not entry:
        return
    for b in BACKENDS:
        if supports(entry.name, b) != (b in entry.backends):
            report.add(b, False, f"the registry says supports={supports(entry.name, b)}, the declaration otherwise")


def _build_all(entry: PolicyEntry, options: Sequence[dict] | None, report: CheckReport) -> list[tuple] | None:
    """(options, policy) for every option set; None (and a finding) if one cannot be built."""
    sets = list(options) if options is not None else option_sets(entry.factory)
    built = []
    for opts in sets:
        try:
            p = entry.factory(**opts)
        except Exception as e:  # noqa: BLE001 (a plug-in's constructor may raise anything)
            if not opts and options is None and len(sets) == 1:
                report.add("python", None, f"not run: it needs options ({e}); pass check(..., options=[{{...}}])")
                return None
            report.add("python", False, f"cannot build with {opts or 'the defaults'}: {e}")
            return None
        if not isinstance(p, PrefetchPolicy):
            report.add("python", False, "the object built has no name/reset/observe (see PrefetchPolicy)")
            return None
        built.append((opts, p))
    return built


Runner = Callable[[Any, Sequence[Event]], Decisions]


def _kernel_runner(p: Any, stream: Sequence[Event]) -> Decisions:
    return kernel_decisions(p, stream)


def _c_runner(entry: PolicyEntry) -> Runner:
    def run(p: Any, stream: Sequence[Event]) -> Decisions:
        return c_step_decisions(entry.native_id, p.native_params(), stream)  # type: ignore[arg-type]

    return run


def _compare(report: CheckReport, backends: tuple[str, ...], built: list, reference: dict, run: Runner) -> None:
    """``run`` (the kernel, the C step) against the reference, for ``backends``: the first
    disagreement, or that there is none."""
    sim = backends == ("sim",)
    what = "the compiled kernel" if sim else "the C step"
    need = CompiledPrefetchPolicy if sim else NativePrefetchPolicy
    if not all(isinstance(p, need) for _, p in built):
        members = "nb_observe, params(), init_state()" if sim else "native_params(), native_config()"
        for b in backends:
            report.add(b, False, f"claimed, but {what} is missing ({need.__name__}: {members})")
        return
    for i, (opts, p) in enumerate(built):
        for s, ev in streams().items():
            try:
                got = run(p, ev)
            except PagecastError as e:
                for b in backends:
                    report.add(b, False, f"claimed, but {what} cannot run: {e}")
                return
            diff = first_difference(ev, got, reference[(i, s)])
            if diff:
                for b in backends:
                    report.add(b, False, f"{what} differs from {REFERENCE}: stream {s!r}, options {opts}, {diff}")
                return
    for b in backends:
        shared = " (the same C step the live fast path and the pager run)" if len(backends) > 1 else ""
        report.add(b, True, f"{what} names the same pages as {REFERENCE} on every stream{shared}")


def _check_native_only(entry: PolicyEntry, report: CheckReport) -> None:
    """A policy that exists only in C: nothing to compare with; its declaration must still
    name an id and give specs a way to configure it."""
    for b in entry.backends:
        if entry.native_id is None:
            report.add(b, False, "claimed, but no native_id")
        elif entry.options is None:
            report.add(b, False, "claimed, but no options function (register_native_policy(options=...))")
        else:
            report.add(b, None, "exists only in C: no Python reference to compare with")


STRUCTURES = ("lru", "fifo", "clock", "keyed")


def _check_eviction(entry: PolicyEntry, options: Sequence[dict] | None, report: CheckReport) -> None:
    """An eviction's declaration against what it implements (no victims: see the module doc)."""
    sets = list(options) if options is not None else [{}]
    for opts in sets:
        try:
            ev = entry.factory(**opts)  # type: ignore[misc]
        except Exception as e:  # noqa: BLE001 (a plug-in's constructor may raise anything)
            ok = False if opts or options is not None else None
            report.add("sim", ok, f"not built with {opts or 'the defaults'}: {e}")
            return
        if not isinstance(ev, EvictionPolicy):
            report.add("sim", False, "the object built lacks EvictionPolicy's members (structure, params()...)")
            return
        if ev.structure not in STRUCTURES:
            report.add("sim", False, f"structure {ev.structure!r} is none of the simulator's ({', '.join(STRUCTURES)})")
            return
        if ev.structure == "keyed" and not hasattr(getattr(type(ev), "nb_key", None), "py_func"):
            report.add("sim", False, "a keyed eviction needs a compiled nb_key (numba.njit)")
            return
        for what in ("params", "init_state"):
            arr = getattr(ev, what)()
            if not (isinstance(arr, np.ndarray) and arr.dtype == np.int64 and arr.ndim == 1 and len(arr)):
                report.add("sim", False, f"{what}() must return a non-empty 1-d int64 array")
                return
        if "pager" in entry.native and ev.structure != "clock":
            report.add(
                "pager", False, f"claims the pager, whose only eviction is CLOCK, with structure {ev.structure!r}"
            )
            return
    report.add("sim", True, f"runs on the simulator's {ev.structure} structure")
    if "pager" in entry.native:
        report.add("pager", True, "the pager's CLOCK sweep, the simulator's clock (victims: see the module doc)")
