"""One policy, every backend: each registered policy runs through every backend it claims
on fixed streams, and the backends must name the same pages.

Backends (``pagecast.policies.base.BACKENDS``): the Python ``observe``; the simulator's
compiled kernel, looked up by the kind the registry gives it (``pagecast.sim.kernels``)
and run inside ``simulate``'s compiled loop; the C steps the live fast path and
the pager run (``native/policy/pc_policy.h``), fed through ``native/policy/parity_driver.c``;
and the real userfaultfd pager, whose fault log says what it mapped for each fault. The
streams and the comparisons are the library's (``pagecast.policies.parity``), which
``pagecast.policies.check`` runs for a policy's author.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from pagecast.policies import check
from pagecast.policies._numba import MAX_PREFETCH, emit, region_pages
from pagecast.policies.base import (
    BACKENDS,
    PolicyEntry,
    Prefetcher,
    get_prefetcher,
    native_ids,
    policy_entries,
    policy_entry,
    render_ids_header,
)
from pagecast.policies.nextline import NextLine
from pagecast.policies.parity import REGIONS, c_step_decisions, option_sets, python_decisions, streams
from pagecast.trace.regions import Region
from pagecast.util.native import build, native_dir

ROOT = Path(__file__).resolve().parents[1]
PS = 4096
STREAMS = streams()  # the fixed streams pagecast.policies.check runs
MULTI = [e.name for e in policy_entries() if len(e.backends) > 1]


def _params(name: str) -> list[dict]:
    return option_sets(policy_entry(name).factory)


def _python(name: str, opts: dict, stream) -> list[list[tuple[int, int]]]:
    return python_decisions(get_prefetcher(name, **opts), stream)


def _kernel(name: str, opts: dict, stream) -> list[list[tuple[int, int]]]:
    """The compiled kernel the simulator's loop calls for this policy's kind."""
    from pagecast.sim.kernels import FIRST_KIND, KINDS, slot

    p = get_prefetcher(name, **opts)
    p.reset(REGIONS)
    state, params, rpages = p.init_state(len(REGIONS)), p.params(), region_pages(REGIONS)
    out_r, out_p = np.zeros(MAX_PREFETCH, np.int64), np.zeros(MAX_PREFETCH, np.int64)
    got = []
    for t, (r, pg, hit) in enumerate(stream):
        n = slot(KINDS[name] - FIRST_KIND)(state, params, rpages, t, r, pg, hit, out_r, out_p)
        got.append([(int(out_r[j]), int(out_p[j])) for j in range(n)])
    return got


def _c_steps(name: str, opts: dict, stream) -> list[list[tuple[int, int]]]:
    """The C steps of the native backends, on the same stream (one state per region)."""
    return c_step_decisions(policy_entry(name).native_id, get_prefetcher(name, **opts).native_params(), stream)


def test_ids_header_is_generated_from_the_registry() -> None:
    header = native_dir() / "policy" / "pc_policy_ids.h"
    assert header.read_text() == render_ids_header(), "regenerate native/policy/pc_policy_ids.h (see its comment)"
    ids = native_ids()
    assert ids == {"none": 0, "nextline": 1, "stride": 2, "sparse": 3, "table": 4}  # the pager's ABI (log headers)


def test_every_claimed_backend_has_a_runner_here() -> None:
    runners = {"python", "sim", "live", "pager"}
    assert set(BACKENDS) == runners
    for e in policy_entries():
        if "live" in e.backends or "pager" in e.backends:
            assert e.native_id is not None
        if e.factory is not None and ({"live", "pager"} & set(e.backends)):
            assert len(_params(e.name)) > 1 or e.name == "none", f"{e.name}: list check_options in its class"
    # policies with one backend have nothing to agree with; the rest are all tested below
    assert {e.name for e in policy_entries() if len(e.backends) == 1} == {"learned", "oracle", "sparse", "table"}


@pytest.mark.parametrize("name", [n for n in MULTI if "sim" in policy_entry(n).backends])
@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_python_observe_equals_the_kernel_of_its_kind(name: str, stream: str) -> None:
    for opts in _params(name):
        assert _kernel(name, opts, STREAMS[stream]) == _python(name, opts, STREAMS[stream])


@pytest.mark.parametrize("name", [n for n in MULTI if "sim" in policy_entry(n).backends])
def test_simulator_runs_the_kernel_compiled_and_matches_observe(tmp_path: Path, name: str) -> None:
    from pagecast.sim import SimConfig, simulate
    from pagecast.sim.kernels import kind_of
    from pagecast.trace.writer import TraceWriter

    assert kind_of(get_prefetcher(name)) is not None, "a compiled policy fell back to the Python path"
    ev = [*STREAMS["mixed"], *STREAMS["strided"], *STREAMS["sequential"]] + [(1, 3 * k, False) for k in range(2000)]
    path = tmp_path / "s.parquet"
    with TraceWriter(path, regions=list(REGIONS), page_size=PS, source="test") as w:
        w.write(
            t_ns=np.arange(len(ev), dtype=np.int64) * 1000,
            region=np.array([e[0] for e in ev], np.int32),
            page=np.array([e[1] for e in ev], np.int64),
            kind=0,
        )
    runs = []
    for engine in ("auto", "python"):
        d = simulate(path, SimConfig(capacity=64, log_prefetches=True), get_prefetcher(name), engine=engine).to_dict()
        d.pop("wall_s")
        d = {k: None if isinstance(v, float) and v != v else v for k, v in d.items()}  # NaN != NaN
        d["log"] = [a.tolist() for a in d.pop("extra")["prefetch_log"]]
        runs.append(d)
    assert runs[0] == runs[1] and runs[0]["prefetches"] > 0


@pytest.mark.parametrize(
    "name", [n for n in MULTI if "live" in policy_entry(n).backends or "pager" in policy_entry(n).backends]
)
@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_native_c_steps_equal_python_observe(name: str, stream: str) -> None:
    for opts in _params(name):
        assert _c_steps(name, opts, STREAMS[stream]) == _python(name, opts, STREAMS[stream]), opts


@pytest.mark.parametrize("name", [e.name for e in policy_entries()])
def test_check_passes_for_every_registered_policy(name: str) -> None:
    report = check(name)
    assert report.ok, str(report)
    ran = {f.backend for f in report.findings if f.ok}
    if policy_entry(name).factory is not None and name != "learned":  # learned needs a model file
        assert ran == set(policy_entry(name).backends), str(report)


# ---- check() on deliberately broken policies ---------------------------------------------


@njit
def _skip_one(state, params, rpages, t_ns, region, page, hit, out_r, out_p):
    """nextline's window, forward only and one page late: p+2 .. p+window."""
    if hit:
        return 0
    n = 0
    for d in range(2, params[1] + 1):
        n = emit(out_r, out_p, n, region, page + d, rpages)
    return n


class _LateNextLine(NextLine):
    """Claims nextline's C step (pager, live) while its own kernel names other pages."""

    name = "late_nextline"
    nb_observe = _skip_one
    check_options = ()


class _PythonDisagrees(NextLine):
    """A kernel (claims the simulator's compiled loop) and an observe that drifted apart."""

    name = "drifted"
    check_options = ()

    def observe(self, t_ns: int, region: int, page: int, hit: bool) -> list[tuple[int, int]]:
        return super().observe(t_ns, region, page, hit)[:-1]


def test_check_fails_a_policy_whose_c_step_differs_from_the_simulator() -> None:
    entry = PolicyEntry("late_nextline", _LateNextLine, native_id=1, native=("live", "pager"))
    report = check(entry)
    assert not report.ok
    assert {f.backend for f in report.failures} == {"live", "pager"}
    assert [f.ok for f in report.findings if f.backend in ("python", "sim")] == [True, True]
    text = str(report)
    assert text.splitlines()[0] == "policy 'late_nextline' (python, sim, live, pager): FAILED"
    # the first disagreement, named: stream, options, event, both answers. On the first miss
    # (page 1) the C step reads around (window 32, 16 below: 2, 0, 3 .. 16), the toy p+2 .. p+32.
    c_step, toy = [2, 0, *range(3, 17)], list(range(3, 34))
    want = (
        "C step differs from the simulator's Python path: stream 'sequential', options {}, event 1 "
        f"(region 0, page 1, miss): named {c_step}, the simulator's Python path {toy}"
    )
    assert want in text, text


def test_check_fails_a_kernel_and_observe_that_drifted_apart() -> None:
    report = check(_PythonDisagrees)  # not registered: it claims what it implements
    assert report.claims == ("python", "sim") and not report.ok
    (failure,) = report.failures
    assert failure.backend == "sim" and "compiled kernel differs from the simulator's Python path" in failure.detail


def test_check_fails_a_claimed_backend_that_is_not_implemented() -> None:
    from pagecast.policies.none import NoPrefetcher

    no_c_step = check(PolicyEntry("no_c_step", NoPrefetcher, native_id=60, native=("pager",)))
    assert not no_c_step.ok
    assert "policy id 60 has no shared C step in pc_policy.h" in no_c_step.failures[0].detail

    class Plain(Prefetcher):
        name = "plain"

        def observe(self, t_ns: int, region: int, page: int, hit: bool) -> list[tuple[int, int]]:
            return [(region, page + 1)]

    plain = check(PolicyEntry("plain", Plain, native_id=61, native=("live",)))
    assert [f.backend for f in plain.failures] == ["live"]
    assert "the C step is missing (NativePrefetchPolicy: native_params(), native_config())" in str(plain)
    assert check(Plain).ok  # claiming only the Python path, it passes


def test_registered_policies_satisfy_the_protocols() -> None:
    from pagecast.policies import EvictionPolicy, PrefetchPolicy
    from pagecast.policies.base import eviction_entries, get_eviction
    from pagecast.policies.protocol import CompiledPrefetchPolicy, NativePrefetchPolicy

    for e in policy_entries():
        if e.factory is None or e.name == "learned":
            continue
        p = e.factory()
        assert isinstance(p, PrefetchPolicy), e.name
        assert isinstance(p, CompiledPrefetchPolicy) == ("sim" in e.backends), e.name
        if e.native:
            assert isinstance(p, NativePrefetchPolicy), e.name
    for e in eviction_entries():
        if e.name not in ("learned", "reuse"):  # these need a model or a training trace
            assert isinstance(get_eviction(e.name), EvictionPolicy), e.name


@pytest.mark.parametrize("name", ["clock", "fifo", "lfu", "lru", "min", "learned", "reuse"])
def test_check_passes_every_registered_eviction(name: str) -> None:
    report = check(name, role="eviction")
    assert report.ok, str(report)
    if name not in ("learned", "reuse"):  # these need a model or a training trace
        assert [f.ok for f in report.findings] == [True] * len(report.findings)


def test_check_fails_an_eviction_that_does_not_implement_its_declaration() -> None:
    from pagecast.policies.base import Eviction
    from pagecast.policies.evict_lru import LRU

    class NoKey(Eviction):
        name = "nokey"

    report = check(NoKey)
    assert not report.ok and "a keyed eviction needs a compiled nb_key" in str(report)
    lru_on_pager = check(PolicyEntry("lru2", LRU, native=("pager",), role="eviction"))
    assert [f.backend for f in lru_on_pager.failures] == ["pager"]
    assert "whose only eviction is CLOCK, with structure 'lru'" in str(lru_on_pager)


# ---- the real pager ----------------------------------------------------------------------

PAGER_CASES = [  # (pager spec, the Python policy it must equal)
    ("none", "none", {}),
    ("nextline", "nextline", {}),
    ("nextline:window=9,before=4", "nextline", {"window": 9, "before": 4}),
    ("nextline:8", "nextline", {"window": 9}),
    ("next:5", "nextline", {"window": 6, "before": 0}),  # the deprecated alias
    ("stride:4", "stride", {"degree": 4}),
    ("stride:degree=3,min_conf=2", "stride", {"degree": 3, "min_conf": 2}),
]
NPAGES = 256
TOUCHES = {
    "sequential": list(range(NPAGES)),
    "backward": list(range(200, 40, -1)),
    "strided": list(range(0, NPAGES, 3)) + list(range(250, 0, -5)),
    "random": np.random.default_rng(5).integers(0, NPAGES, 150).tolist(),
    "runs": [p for s in (10, 100, 30, 180, 60) for p in range(s, s + 12)],
}


def _pager_reference(name: str, opts: dict, depth: int, touches: list[int]) -> list[tuple[int, list[int]]]:
    """(fault page, pages mapped with it) per fault, from the Python policy and the pager's
    rules: it sees misses only, shows the stride step the resident pages a miss skipped
    along the stride (pager.c, stride_pages), takes the first ``depth`` pages named and
    maps those not resident."""
    p = get_prefetcher(name, **opts)
    p.reset([Region(0, "f", kind="file", length=NPAGES * PS)])
    resident: set[int] = set()
    out = []
    for t, pg in enumerate(touches):
        if pg in resident:
            continue
        if name == "stride":
            last, stride, conf = (int(x) for x in p._state[:3])
            if last >= 0 and stride and conf >= p.min_conf and (pg - last) % stride == 0:
                k = (pg - last) // stride
                if 2 <= k <= p.degree + 1 and all(last + j * stride in resident for j in range(1, k)):
                    for j in range(1, k):
                        p.observe(t, 0, last + j * stride, True)
        named = [q for _, q in p.observe(t, 0, pg, False)][:depth]
        batch = sorted({q for q in named if 0 <= q < NPAGES and q not in resident and q != pg})
        resident.update(batch)
        resident.add(pg)
        out.append((pg, batch))
    return out


@pytest.mark.parametrize("spec,name,opts", PAGER_CASES, ids=[c[0] for c in PAGER_CASES])
def test_real_pager_maps_what_the_python_policy_names(tmp_path: Path, spec: str, name: str, opts: dict) -> None:
    from pagecast.pager import runtime as pg
    from pagecast.trace.schema import Kind

    try:
        pg.probe()
    except Exception as e:  # no userfaultfd here
        pytest.skip(str(e))
    f = tmp_path / "data.bin"
    np.arange(NPAGES * PS // 8, dtype=np.uint64).tofile(f)
    pol = pg.PolicySpec.parse(spec)
    assert pol.policy_id == policy_entry(name).native_id
    mapped = 0
    for label, touches in TOUCHES.items():
        log = tmp_path / f"{label}.pglog"
        with pg.open_paged(f, (NPAGES + 8) * PS, pol, log=log) as r:
            a = r.array(np.uint64)
            for p in touches:
                assert a[p * PS // 8] == p * PS // 8
        rec = pg.read_fault_log(log).records
        got: list[tuple[int, list[int]]] = []
        for kind, page in zip(rec["kind"].tolist(), rec["page"].tolist()):
            if kind == int(Kind.FAULT):
                got.append((page, []))
            elif kind == int(Kind.PREFETCH):
                got[-1][1].append(page)
        got = [(p, sorted(b)) for p, b in got]
        assert got == _pager_reference(name, opts, pol.depth, touches), label
        mapped += sum(len(b) for _, b in got)
    assert (mapped > 0) == (name != "none")


# ---- one vocabulary: unsupported names and the deprecated pager alias ------------------------


def test_a_backend_refuses_a_policy_it_does_not_run_in_one_line(tmp_path: Path) -> None:
    from pagecast.cli import main as cli_main
    from pagecast.errors import PagecastError
    from pagecast.pager.runtime import PolicySpec

    with pytest.raises(PagecastError) as e:
        PolicySpec.parse("leap:4")
    assert str(e.value) == "policy 'leap' does not run in the pager; it runs in: Python path, simulator's compiled loop"
    with pytest.raises(PagecastError) as e:
        get_prefetcher("sparse")
    assert str(e.value) == "policy 'sparse' does not run in the Python path; it runs in: pager"
    with pytest.raises(PagecastError) as e:
        PolicySpec.parse("nosuch")
    assert "unknown pager policy 'nosuch'" in str(e.value) and "nextline" in str(e.value)
    f = tmp_path / "f.bin"
    f.write_bytes(b"\0" * PS)
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = cli_main(["pager", "run", f"{f}:16K", "--policy", "markov", "--", "true"])
    assert rc == 2 and err.getvalue().count("\n") == 1 and "policy 'markov' does not run in the pager" in err.getvalue()


def test_shim_still_takes_the_old_name_next(tmp_path: Path) -> None:
    """PAGECAST_PAGER_POLICY=next set by hand (not through pager_env) is nextline with before 0:
    a forward scan of 64 pages with depth 7 faults once per 8 pages, as it always did."""
    import json
    import os
    import sys

    from pagecast.pager import runtime as pg

    try:
        pg.probe()
    except Exception as e:
        pytest.skip(str(e))
    f = tmp_path / "n.bin"
    f.write_bytes(bytes(64 * PS))
    stats = tmp_path / "stats"
    stats.mkdir()
    e = pg.pager_env([(str(f), 64 * PS)], "none", stats_dir=stats)
    e.update(PAGECAST_PAGER_POLICY="next", PAGECAST_PAGER_DEPTH="7")
    e.pop("PAGECAST_PAGER_BEFORE")
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    script = (
        f"import mmap,os\nfd=os.open({str(f)!r},os.O_RDONLY)\nm=mmap.mmap(fd,0,prot=mmap.PROT_READ)\n"
        f"s=sum(m[p*{PS}] for p in range(64))\n"
    )
    res = subprocess.run([sys.executable, "-c", script], env=e, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    st = [json.loads(p.read_text()) for p in stats.glob("*.json")]
    assert len(st) == 1 and st[0]["faults"] == 8 and st[0]["prefetched"] == 56


# --- evictions: the same victims in every backend ---------------------------------------
def _eviction_stream(seed: int = 3, n: int = 3000) -> list[int]:
    """Loops larger than the capacity, a hot set, scans and noise: every policy evicts often."""
    rng = np.random.default_rng(seed)
    parts = []
    while sum(map(len, parts)) < n:
        k = int(rng.integers(4))
        if k == 0:
            parts.append(np.tile(np.arange(40), 3))
        elif k == 1:
            parts.append(rng.integers(0, 8, 30))
        elif k == 2:
            start = int(rng.integers(0, 500))
            parts.append(np.arange(start, start + 50))
        else:
            parts.append(rng.integers(0, 600, 30))
    return np.concatenate(parts)[:n].tolist()


def _sim_victims(tmp_path: Path, pages: list[int], cap: int, eviction, engine: str = "auto") -> list[int]:
    from pagecast.sim import SimConfig, simulate
    from sim_helpers import write_trace

    path = write_trace(tmp_path / "ev.parquet", pages)
    r = simulate(path, SimConfig(capacity=cap, eviction=eviction, log_victims=True), "none", engine=engine)
    return r.extra["victims"][1].tolist()


def _c_clock_victims(pages: list[int], cap: int) -> list[int]:
    """The pager's CLOCK sweep (native/policy/pc_evict.h) on the same stream."""
    drv = build("evict_parity_driver", [ROOT / "tests/evict_parity_driver.c"], shared=False)
    text = "".join(f"{p}\n" for p in pages)
    res = subprocess.run([str(drv), str(cap)], input=text, capture_output=True, text=True, check=True)
    return [int(x) for x in res.stdout.split()]


def test_every_eviction_declares_a_backend_tested_here() -> None:
    from pagecast.policies.base import eviction_entries

    names = {e.name for e in eviction_entries()}
    assert {"lru", "fifo", "clock", "min", "reuse", "learned"} <= names
    for e in eviction_entries():
        assert "sim" in e.backends, e.name
        assert set(e.native) <= {"pager"}, f"{e.name}: a native backend without a runner in this test"


@pytest.mark.parametrize("name", ["lru", "fifo", "clock", "lfu"])
@pytest.mark.parametrize("cap", [1, 7, 64])
def test_eviction_victims_equal_the_reference_in_every_backend(tmp_path: Path, name: str, cap: int) -> None:
    from pagecast.policies.base import (
        eviction_entries,
        policy_entry,  # noqa: F401  (the registry loads every policy)
    )
    from sim_helpers import ref_victims

    pages = _eviction_stream()
    want = ref_victims(name, pages, cap)
    assert len(want) > 100
    assert _sim_victims(tmp_path, pages, cap, name) == want
    assert _sim_victims(tmp_path, pages, cap, name, engine="general") == want
    entry = next(e for e in eviction_entries() if e.name == name)
    if "pager" in entry.native:
        assert _c_clock_victims(pages, cap) == want


@pytest.mark.parametrize("cap", [1, 7, 64])
def test_keyed_evictions_evict_a_page_of_largest_key(tmp_path: Path, cap: int) -> None:
    """MIN (keys = next uses) and reuse (keys from a training run's reuse distances) in
    the compiled loop; the learned eviction's keys go through the same kernel form."""
    from pagecast.learn.eviction import reuse_keys, reuse_table
    from pagecast.trace.demand import as_trace, read_demand
    from sim_helpers import check_keyed_victims, write_trace

    pages = _eviction_stream()
    nxt: dict = {}
    nextuse = [0] * len(pages)
    for i in range(len(pages) - 1, -1, -1):
        nextuse[i] = nxt.get(pages[i], 1 << 62)
        nxt[pages[i]] = i
    check_keyed_victims(pages, cap, nextuse, _sim_victims(tmp_path, pages, cap, "min"))
    train = write_trace(tmp_path / "train.parquet", _eviction_stream(seed=4))
    test = write_trace(tmp_path / "test.parquet", pages)
    keys = reuse_keys(read_demand(as_trace(test)), reuse_table(train), cap).tolist()
    victims = _sim_victims(tmp_path, pages, cap, f"reuse:trace={train}")
    check_keyed_victims(pages, cap, keys, victims)
