"""Memory plans from real recordings of a cyclic scan under a real memory limit: the keep
and evict-after-use decisions against MIN's steady state on the project's simulator."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cold_support import cold_file_maker
from conftest import record_under_limit, require_memcg
from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError
from pagecast.plan.memory import (
    MemoryPlanConfig,
    RunStream,
    build,
    chunk_keys,
    collapse,
    keep_set,
    plan_for_limit,
    price_run,
    read_run,
    room_bytes,
)
from pagecast.plan.memory_format import for_limit, read_memory_plan, write_memory_plan
from pagecast.sim import SimConfig, simulate
from pagecast.sim.misses import lru_misses, min_misses
from pagecast.trace.demand import read_demand
from pagecast.trace.keys import page_keys
from pagecast.trace.reader import open_trace

FILE_PAGES = 8192  # 32 MiB
LIMIT = "24M"
PASSES = 3
CHUNK = 1 << 20


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    require_memcg("memory cgroups and perf need root")
    from pagecast.bench.workloads import build_workload

    prog = build_workload("cyclic_scan")
    out = tmp_path_factory.mktemp("memplan")
    with cold_file_maker("memplan") as make:
        f = make(FILE_PAGES)
        traces = []
        for t, rep in record_under_limit(out, f, [str(prog), str(f), str(PASSES)], LIMIT):
            assert rep["memory"]["refaults"] > 0  # the limit made it read pages again
            assert rep["command"][0] == str(prog)  # the program as given, not the sh that entered the cgroup
            traces.append(t)
        yield f, traces


def _cfg() -> MemoryPlanConfig:
    # the room for read-around set small: on a device reading 8 MiB around a fault it would
    # take most of this small limit
    return MemoryPlanConfig(24 << 20, CHUNK, reserve_bytes=4 << 20, prefetch_chunks=2, stream_room_bytes=1 << 20)


def test_min_misses_equal_the_simulators_min(recordings):
    _, traces = recordings
    t = open_trace(traces[0])
    d = read_demand(t)
    u, ids = np.unique(page_keys(d["region"], d["page"]), return_inverse=True)
    for cap in (2000, 5000):
        sim_min = simulate(t, SimConfig(capacity=cap, eviction="min")).faults
        sim_lru = simulate(t, SimConfig(capacity=cap, eviction="lru")).faults
        assert int(min_misses(ids.astype(np.int64), len(u), cap).sum()) == sim_min
        assert int(lru_misses(ids.astype(np.int64), len(u), cap).sum()) == sim_lru


def test_keep_and_evict_are_mins_steady_state(recordings):
    f, traces = recordings
    cfg = _cfg()
    files: dict[str, int] = {}
    runs = [read_run(t, files) for t in traces]
    fi = files[str(f)]
    # the data file's accesses alone: the program's libraries, faulted at start-up in an order
    # that varies from run to run, would take a keep slot in one run and not in another
    runs = [RunStream(r.file[r.file == fi], r.page[r.file == fi], 0) for r in runs]
    keep, streamed, nxt, reserve, dist = build(runs, cfg)
    cap = (cfg.limit - reserve) // CHUNK - dist  # what MIN is played at: the prefetch window set aside
    streams = [collapse(chunk_keys(r, CHUNK // PAGE_SIZE)) for r in runs]
    ordered, min_streamed, _ = keep_set(streams, cap)
    # MIN's steady state, from the chunk stream: the chunks it holds through every pass after the
    # first, in every run (a pass's hits beyond them are the one streaming slot, whose content rotates)
    min_kept: set[int] | None = None
    for r in runs:
        keys = collapse(chunk_keys(r, CHUNK // PAGE_SIZE))
        u, ids = np.unique(keys, return_inverse=True)
        miss = min_misses(ids.astype(np.int64), len(u), cap)
        starts = [*np.flatnonzero(keys & ((1 << 40) - 1) == 0).tolist(), len(keys)]
        assert len(starts) == PASSES + 1
        for lo, hi in zip(starts[1:-1], starts[2:]):
            hit = {int(k & ((1 << 40) - 1)) for k in keys[lo:hi][~miss[lo:hi]]}
            min_kept = hit if min_kept is None else min_kept & hit
    min_keep = {c & ((1 << 40) - 1) for c in ordered if c >> 40 == fi}
    assert min_keep == min_kept
    assert len(min_keep) == cap - 1  # a cyclic scan: MIN holds all it can but one streaming slot
    assert set(range(len(min_keep) - 1)) <= min_keep  # the head of the file
    # the plan keeps MIN's most useful chunks less the room left unlocked for streaming
    # (read-around windows) and what the read-around model says locking costs
    plan_kept = {c & ((1 << 40) - 1) for c in keep if c >> 40 == fi}
    assert plan_kept <= min_keep
    assert 0 < len(plan_kept) <= cap - room_bytes(cfg) // CHUNK
    n_chunks = FILE_PAGES * PAGE_SIZE // CHUNK
    plan_streamed = {c & ((1 << 40) - 1) for c in streamed if c >> 40 == fi}
    assert plan_streamed == set(range(n_chunks)) - plan_kept
    # what to prefetch after each streamed chunk: the next streamed one in file order
    order = sorted(plan_streamed)
    assert all(nxt[(fi << 40) + a] == (fi << 40) + b for a, b in zip(order, order[1:]))
    # page level, on the simulator: the plan reads what MIN reads at its capacity, within a chunk a pass
    pr = price_run(runs[0], cfg, reserve, set(ordered))
    sim = simulate(traces[0], SimConfig(capacity=cap * CHUNK // PAGE_SIZE, eviction="min"))
    assert abs(int(pr.plan.sum()) - sim.faults) <= PASSES * CHUNK // PAGE_SIZE
    assert pr.plan.sum() < pr.lru.sum()


def test_a_plan_for_the_pager_keeps_min_s_set_less_only_its_streaming_room(recordings):
    """The pager reads no read-around window: its keep set is MIN's most useful chunks less
    the three chunks it streams through, more than the kernel backend's; the pager variants
    that ``plan --measure`` times are built from it."""
    from pagecast.plan.memory import PAGER_ROOM_CHUNKS, pager_plan
    from pagecast.plan.memory_measure import variants

    f, traces = recordings
    files: dict[str, int] = {}
    runs = [read_run(t, files) for t in traces]
    fi = files[str(f)]
    runs = [RunStream(r.file[r.file == fi], r.page[r.file == fi], 0) for r in runs]
    cfg = _cfg()
    keep, _, _, reserve, dist = build(runs, cfg)
    pkeep, pstreamed, _, _, _ = build(runs, dataclasses.replace(cfg, pager=True))
    cap = (cfg.limit - reserve) // CHUNK - dist
    ordered, _, _ = keep_set([collapse(chunk_keys(r, CHUNK // PAGE_SIZE)) for r in runs], cap)
    assert pkeep == set(ordered[: cap - PAGER_ROOM_CHUNKS]) and keep < pkeep
    assert not pkeep & pstreamed and set(ordered) <= pkeep | pstreamed  # MIN's rest streams

    plan = plan_for_limit(traces, cfg)
    pp = pager_plan(traces, cfg, plan)
    assert pp is not None and pp.backend == "pager" and pp.keep_bytes() > plan.keep_bytes()
    assert pp.room_bytes == PAGER_ROOM_CHUNKS * CHUNK and pp.chunk_bytes == plan.chunk_bytes
    v = variants(plan, for_pager=pp)
    assert v["plan+pager"].files == pp.files and v["keep+pager"].keep_bytes() == pp.keep_bytes()
    assert v["keep"].keep_bytes() == plan.keep_bytes() and v["keep"].backend == "kernel-advice"
    # nothing more to keep: no pager plan
    assert pager_plan(traces, cfg, pp) is None


def test_plan_cli_explain_and_other_limits(recordings, tmp_path):
    f, traces = recordings
    out = tmp_path / "p.plan"
    r = subprocess.run([sys.executable, "-m", "pagecast", "plan", "--memory", LIMIT, "--stream-room", "1M", "--chunk", "1M", "--reserve",
                        "4M", "--prefetch-chunks", "2", *map(str, traces), "-o", str(out), "--explain"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "lru_read_mib" in r.stderr and "leave-one-run-out" in r.stderr
    shown = subprocess.run([sys.executable, "-m", "pagecast", "plan", "--show", str(out)], capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert shown.returncode == 0 and "limit 24 MiB" in shown.stdout and str(f) in shown.stdout
    plan = read_memory_plan(out)
    row = next(p for p in plan.files if p.path == str(f))
    assert row.predicted["min"] <= row.predicted["plan"] < row.predicted["lru"]
    assert plan.validation["plan_bytes"] < plan.validation["lru_bytes"]
    # a larger limit: the same plan, one warning
    same, note = for_limit(plan, 48 << 20)
    assert same is plan and "24 MiB" in note
    # a smaller one: the keep set scaled to the room left, the chunks dropped streamed
    smaller, note = for_limit(plan, 16 << 20)
    assert "scaled" in note and smaller.keep_bytes() <= (16 << 20) - plan.reserve_bytes
    assert smaller.keep_bytes() < plan.keep_bytes()
    # too small for the prefetch window: the kernel alone
    tiny, note = for_limit(plan, 5 << 20)
    assert tiny.backend == "kernel" and "kernel alone" in note
    # limits a few KiB apart are named in bytes where in MiB they read alike, and a keep set
    # that still fits under a smaller one is not said to be scaled down
    _, note = for_limit(plan, plan.limit_bytes + 4096)
    assert f"{plan.limit_bytes:,}-byte" in note and f"{plan.limit_bytes + 4096:,} bytes" in note
    near, note = for_limit(plan, plan.limit_bytes - 4096)
    assert near.keep_bytes() == plan.keep_bytes() and "still fits" in note and "scaled" not in note
    # written and read back unchanged
    write_memory_plan(smaller, tmp_path / "s.plan")
    assert read_memory_plan(tmp_path / "s.plan").to_dict() == smaller.to_dict()


def test_corrupt_memory_plan_is_one_line(tmp_path):
    p = tmp_path / "bad.plan"
    p.write_text('{"format": "pagecast-memory-plan", "version": 1, "files": 3}')
    with pytest.raises(PagecastError) as e:
        read_memory_plan(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_plan_for_limit_needs_recordings():
    with pytest.raises(PagecastError):
        plan_for_limit([], _cfg())


def test_measure_times_the_variants_and_writes_the_choice(recordings, tmp_path):
    f, traces = recordings
    out = tmp_path / "m.plan"
    r = subprocess.run([sys.executable, "-m", "pagecast", "plan", "--memory", LIMIT, "--stream-room", "1M", "--chunk", "1M",
                        "--reserve", "4M", "--prefetch-chunks", "2", *map(str, traces), "-o", str(out), "--measure",
                        "--rounds", "1"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "measured wall s under the limit" in r.stderr and "chosen:" in r.stderr
    plan = read_memory_plan(out)
    m = plan.validation["measured"]
    kernel_side = {"kernel", "half", "keep", "plan"}
    timed = set(m["total_s"]) | set(m.get("stopped", {}))
    # files advised sequential are timed too, unasked (a variant far slower is stopped, and says so)
    assert timed == kernel_side | {"seq"} | {c + "+pager" for c in kernel_side - {"kernel"}}
    assert all(len(runs) == 1 for by in m["runs_s"].values() for runs in by.values())
    assert all(len(by) == len(traces) for by in m["runs_s"].values())
    conf = m.get("confirmation")  # a variant the first stage chose, timed again beside the kernel alone
    if conf is None:
        assert m["chosen"] == "kernel"
    else:
        assert set(conf["total_s"]) == {conf["chosen"], "kernel"} and conf["chosen"] != "kernel"
        assert m["chosen"] == (conf["chosen"] if conf["kept"] else "kernel")
    # the plan written is the variant chosen, with the backend that applied it
    row = next(p for p in plan.files if p.path == str(f))
    variant, _, by_pager = m["chosen"].partition("+")
    if variant == "kernel":
        assert plan.backend == "kernel" and "measured" in plan.note
    else:
        assert plan.backend == ("pager" if by_pager else "kernel-advice")
        if variant in ("keep", "half", "seq"):
            assert not row.stream and plan.prefetch_chunks == 0
            assert row.advice == ("sequential" if variant == "seq" else None)
        else:
            assert row.stream


def test_measured_choice_is_the_simplest_clear_winner():
    from pagecast.plan.memory_measure import choose

    # within the noise of the kernel: the kernel alone
    assert choose({"kernel": 1.0, "half": 0.99, "keep": 0.98, "plan": 0.97}, 0.05, 0.02)[0] == "kernel"
    # clearly faster, and the simpler within the tie of the fastest
    assert choose({"kernel": 1.0, "half": 0.61, "keep": 0.60, "plan": 0.59}, 0.05, 0.05)[0] == "half"
    assert choose({"kernel": 1.0, "half": 0.9, "keep": 0.5, "plan": 0.6}, 0.05, 0.02)[0] == "keep"
    # the pager only where it is clearly the faster: the kernel's page cache is the simpler
    pager = {"half+pager": 0.3, "keep+pager": 0.31, "plan+pager": 0.32}
    assert choose({"kernel": 1.0, "half": 0.8, "keep": 0.8, "plan": 0.8, **pager}, 0.05, 0.05)[0] == "half+pager"
    pager = {"half+pager": 0.59, "keep+pager": 0.9, "plan+pager": 0.9}
    assert choose({"kernel": 1.0, "half": 0.6, "keep": 0.8, "plan": 0.8, **pager}, 0.05, 0.05)[0] == "half"
    # as fast on the recorded runs: the one that read least (a longer run adds passes, not loads)
    fast = {"kernel": 1.0, "half": 0.80, "keep": 0.79, "seq": 0.80}
    assert choose(fast, 0.05, 0.05, {"kernel": 900, "half": 700, "keep": 500, "seq": 400})[0] == "seq"
    assert choose(fast, 0.05, 0.05, {"kernel": 900, "half": 402, "keep": 500, "seq": 400})[0] == "half"
    # reading less does not make a slower variant eligible, nor one slower than the tie
    assert choose(fast, 0.05, 0.05, {"kernel": 900, "half": 700, "keep": 500, "seq": 400, "plan": 10})[0] == "seq"
    assert choose({**fast, "plan": 0.9}, 0.05, 0.05, {"half": 700, "keep": 500, "seq": 400, "plan": 10})[0] == "seq"


def test_without_the_pager_only_the_kernel_variants_are_measured(tmp_path):
    from pagecast.plan.memory_measure import KERNEL_CANDIDATES, variants

    f = tmp_path / "f"
    f.write_bytes(b"\0" * (1 << 20))
    from pagecast.plan.format import FileIdentity
    from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan

    fp = FileMemoryPlan(str(f), FileIdentity.of(f), [(0, 2)], [(2, 2)], {2: 3})
    plan = MemoryPlan(64 << 20, 1 << 18, 8 << 20, 2, "pager", [fp])  # a plan already measured for the pager
    assert tuple(variants(plan, pager=False)) == KERNEL_CANDIDATES[:-3]  # no coarser nor sequential plan given
    coarse = dataclasses.replace(plan, chunk_bytes=1 << 20)
    assert tuple(variants(plan, pager=False, follow=coarse)) == KERNEL_CANDIDATES[:-2]
    both_seq = {"seq": plan, "seq1": plan}
    assert tuple(variants(plan, pager=False, follow=coarse, sequential=both_seq)) == KERNEL_CANDIDATES
    assert variants(plan, follow=coarse)["follow"].chunk_bytes == 1 << 20
    both = variants(plan)
    assert {k: v.backend for k, v in both.items() if v is not None} == {
        "half": "kernel-advice",
        "keep": "kernel-advice",
        "plan": "kernel-advice",
        "half+pager": "pager",
        "keep+pager": "pager",
        "plan+pager": "pager",
    }
    assert both["keep+pager"].files == both["keep"].files and both["plan"].files == plan.files


@pytest.mark.parametrize("holds", [False, True])
def test_a_lead_kept_only_if_fresh_rounds_confirm_it(tmp_path, holds):
    """The fastest of several noisy totals is biased low: the first stage's choice is timed
    again beside the kernel alone and kept only if it is faster again. Real processes whose
    wall time is set per candidate: ``half`` leads in the first stage, and in the fresh rounds
    either still leads or falls behind the kernel (a fifth slower: a tie of equal sleeps would
    be decided by process start-up jitter, a few per cent, against a 2 % standard error)."""
    from pathlib import Path

    from pagecast.plan.format import FileIdentity
    from pagecast.plan.measure import MeasureConfig, Recording
    from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan
    from pagecast.plan.memory_measure import measure_memory_plan

    f = tmp_path / "f"
    f.write_bytes(b"\0" * (1 << 20))
    fp = FileMemoryPlan(str(f), FileIdentity.of(f), [(0, 2)], [(2, 2)], {2: 3})
    plan = MemoryPlan(64 << 20, 1 << 18, 8 << 20, 2, "kernel-advice", [fp])
    recs = [Recording(str(tmp_path / n), ["true"], str(tmp_path), True) for n in ("a", "b")]
    rounds, seen = 2, {}
    first_stage = rounds * len(recs)

    def argv(path: str | None, _prog: list[str]) -> list[str]:
        name = Path(path).stem if path else "kernel"
        seen[name] = seen.get(name, 0) + 1
        wall = {"kernel": 0.10, "half": 0.04}.get(name, 0.14)
        if name == "half" and seen[name] > first_stage and not holds:
            wall = 0.12
        return ["sleep", str(wall)]

    # nothing stopped for slowness (the default): a loaded machine must not stop a 0.14 s run
    chosen, m = measure_memory_plan(plan, recs, MeasureConfig(argv, rounds), pager=False)
    assert m.confirmation is not None and m.confirmation.chosen == "half"
    assert seen["half"] == seen["kernel"] == 2 * first_stage and seen["keep"] == first_stage
    assert set(m.confirmation.runs) == {"half", "kernel"} and m.confirmation.kept is holds
    if holds:
        assert m.chosen == "half" and chosen.backend == "kernel-advice" and chosen.prefetch_chunks == 0
    else:
        assert m.chosen == "kernel" and chosen.backend == "kernel" and "not confirmed" in m.why
    assert m.to_dict()["confirmation"]["kept"] is holds


def test_a_program_whose_own_memory_fills_the_limit_is_told_so(recordings):
    _, traces = recordings
    files: dict[str, int] = {}
    runs = [read_run(t, files) for t in traces]
    cfg = _cfg()
    assert "own memory" not in plan_for_limit(traces, cfg, read=(runs, files)).note
    heavy = [dataclasses.replace(r, anon_pages=(16 << 20) // PAGE_SIZE) for r in runs]  # 16 of the 24 MiB
    note = plan_for_limit(traces, cfg, read=(heavy, files)).note
    assert "own memory (16 MiB of anonymous pages recorded) is more than half the 24 MiB limit" in note


def test_the_recorders_own_shim_is_not_a_file_of_the_plan(recordings):
    """The page-set shim the recorder preloads is mapped by the program like a library; it is
    the recorder's, not the program's: a plan naming it names a file of pagecast's build."""
    _, traces = recordings
    shims = [r.path for r in open_trace(traces[0]).regions if r.extra.get("recorder")]
    assert shims, "the recording has no region of the recorder's shim to leave out"
    files: dict[str, int] = {}
    run = read_run(traces[0], files)
    assert not set(shims) & set(files)
    plan = plan_for_limit(traces, _cfg())
    assert not set(shims) & {f.path for f in plan.files}
    assert len(run.file) and (run.file >= 0).all()  # its pages are nobody's accesses, not unknown files


def test_the_sequential_variant_keeps_more_and_advises_what_it_keeps(recordings, tmp_path):
    """``seq``: MIN's keep set cut only for what streams (no read-around window beside it),
    the program's own memory as the reserve, nothing followed from outside, and the files it
    keeps advised sequential; written and read back as such, and timed among the variants."""
    from pagecast.plan.memory import sequential_plan, sequential_variants
    from pagecast.plan.memory_measure import variants

    f, traces = recordings
    cfg = _cfg()
    plan = plan_for_limit(traces, cfg)
    seq = sequential_plan(traces, cfg, plan)
    assert seq is not None and seq.backend == "kernel-advice" and seq.prefetch_chunks == 0
    assert seq.keep_bytes() >= plan.keep_bytes() and seq.chunk_bytes == plan.chunk_bytes
    assert seq.reserve_bytes == plan.reserve_bytes  # the program's own pages keep their room
    data = next(x for x in seq.files if x.path == str(f))
    assert data.keep and data.advice == "sequential"
    assert all(not x.stream and not x.next for x in seq.files)
    assert all(x.advice is None for x in seq.files if not x.keep)
    write_memory_plan(seq, tmp_path / "seq.plan")
    assert read_memory_plan(tmp_path / "seq.plan").to_dict() == seq.to_dict()
    assert variants(plan, pager=False, sequential={"seq": seq})["seq"].files == seq.files
    assert "seq" not in variants(plan, pager=False)
    assert {"seq", "seq1"} <= set(variants(plan, pager=False, sequential={"seq": seq, "seq1": seq}))
    # the room set by the caller: one room, so one sequential variant
    assert list(sequential_variants(traces, cfg, plan)) == ["seq"]
    # a plan that found nothing to gain has no sequential variant either
    assert sequential_plan(traces, cfg, dataclasses.replace(plan, backend="kernel")) is None
    # asked for on the command line: written as the plan, the file advised sequential
    out = tmp_path / "cli.plan"
    r = subprocess.run([sys.executable, "-m", "pagecast", "plan", "--memory", LIMIT, "--stream-room", "1M", "--chunk",
                        "1M", "--reserve", "4M", "--prefetch-chunks", "2", "--sequential", *map(str, traces), "-o",
                        str(out)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "advised sequential" in r.stdout
    written = read_memory_plan(out)
    assert next(x for x in written.files if x.path == str(f)).advice == "sequential"
    assert written.keep_bytes() >= plan.keep_bytes() and written.followed_bytes() == 0
    shown = subprocess.run([sys.executable, "-m", "pagecast", "plan", "--show", str(out)], capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert f"{f}: advised sequential" in shown.stdout


def test_advised_sequential_what_lru_hit_in_the_recording_is_no_room_of_its_own():
    """A recording under a limit shows only what the kernel missed: a chunk of the weights it
    happened to hold between passes looks like one LRU always hits. Advised sequential the
    kernel holds none, so for the sequential variant such a chunk of a file MIN keeps from is
    a keep candidate (after MIN's) and gets no room of its own; another file's (a library's)
    still does. Hand-made streams: 20 chunks read cyclically, one more read twice in the
    first pass only, a library page used between every chunk."""
    chunk_pages = CHUNK // PAGE_SIZE
    whole = np.arange(chunk_pages)
    files: list[np.ndarray] = []
    pages: list[np.ndarray] = []

    def use(fi: int, pg: np.ndarray) -> None:
        files.append(np.full(len(pg), fi))
        pages.append(pg)

    for p in range(3):
        order = [20, 0, 20, *range(1, 20)] if p == 0 else list(range(20))
        for c in order:
            use(0, c * chunk_pages + whole)
            use(1, np.zeros(1, np.int64))
    run = RunStream(np.concatenate(files), np.concatenate(pages), 0)
    cfg = MemoryPlanConfig(14 << 20, CHUNK, reserve_bytes=1 << 20, prefetch_chunks=2, pager=True)
    keep, streamed, *_ = build([run], cfg)
    skeep, sstreamed, *_ = build([run], dataclasses.replace(cfg, sequential=True))
    once, lib = (0 << 40) | 20, (1 << 40) | 0
    assert once not in keep | streamed and lib not in keep | streamed  # left to the kernel: room kept for both
    assert once in sstreamed and lib not in skeep | sstreamed  # a candidate now (after MIN's); the library left
    assert keep < skeep and len(skeep) == len(keep) + 1  # its chunk of room went to the keep set


def test_the_sequential_variants_leave_read_ahead_windows_unlocked(tmp_path):
    """Advised sequential, the kernel reads ahead of a miss in windows of twice the device's
    read-ahead and asks for the next while the program reads the one before: the keep set of
    a cyclic scan leaves two such windows unlocked (``seq``) or one (``seq1``), or the room the
    caller set. The device's read-ahead read from sysfs here, beside the planner's own lookup."""
    import os

    from pagecast.plan.memory import sequential_room

    f = tmp_path / "weights"
    f.write_bytes(b"\0" * PAGE_SIZE)
    dev = os.stat(f).st_dev
    base = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    kb = next((int(q.read_text()) for q in (base / "queue/read_ahead_kb", base / "../queue/read_ahead_kb")
               if q.exists()), None)  # fmt: skip
    if kb is None:
        pytest.skip("the temporary directory is on no block device with a read-ahead setting")
    chunk_pages = CHUNK // PAGE_SIZE
    pages = np.concatenate([np.arange(100 * chunk_pages)] * 3)  # 100 MiB read in order, 3 passes
    run = RunStream(np.zeros(len(pages), np.int64), pages, 0)
    room = sequential_room([run], {0: str(f)})
    assert room == 2 * 2 * (kb << 10) and sequential_room([run], {0: str(f)}, windows=1) == room // 2
    for given, left in ((16 << 20, 16), (room, max(3, -(-room // CHUNK))), (None, 3)):  # None: the pager's 3
        cfg = MemoryPlanConfig(64 << 20, CHUNK, reserve_bytes=4 << 20, prefetch_chunks=0, pager=True,
                               sequential=True, stream_room_bytes=given)  # fmt: skip
        keep, streamed, *_ = build([run], cfg)
        assert len(keep) == max(0, 60 - left) and len(keep) + len(streamed) == 100


_VMFLAGS = r"""
import mmap, os, sys
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
base = int(open("/proc/self/maps").read().split(sys.argv[1])[0].splitlines()[-1].split("-")[0], 16)
lo = None
for line in open("/proc/self/smaps"):
    head = line.split()
    if "-" in head[0] and len(head) >= 5:
        lo, hi = (int(x, 16) for x in head[0].split("-"))
        name = head[-1]
    elif head[0] == "VmFlags:" and name == sys.argv[1]:
        flags = set(head[1:]) & {"sr", "rr", "hg"}
        print((lo - base) // 4096, (hi - base) // 4096, "".join(sorted(flags)))
"""


def test_a_file_read_in_order_beside_lookups_is_advised_by_span(tmp_path):
    """The sequential variant advises only the part of a file the recordings read in order
    (every page of its chunks), MADV_RANDOM on the rest (read by lookups, as token
    embeddings are): the plan finds the span, and the advice shim splits the program's real
    mapping so (its VmFlags: ``sr`` on the span, ``rr`` around it)."""
    from pagecast.launch.memlimit import shim_env
    from pagecast.plan.format import FileIdentity
    from pagecast.plan.memory import _read_in_order
    from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan

    cp = CHUNK // PAGE_SIZE
    # a lookup in chunk 0 and 5, chunks 1-3 read whole, chunk 6 at the end untouched
    pages = np.r_[3, np.arange(cp, 4 * cp), 5 * cp + 7, np.arange(cp, 4 * cp)]
    run = RunStream(np.zeros(len(pages), np.int64), pages, 0)
    assert _read_in_order([run], 0, CHUNK, 7 * CHUNK) == (1, 3)
    whole = RunStream(np.zeros(7 * cp, np.int64), np.arange(7 * cp), 0)
    assert _read_in_order([whole], 0, CHUNK, 7 * CHUNK) is None  # all of it in order: no span

    f = tmp_path / "weights.bin"
    f.write_bytes(b"\0" * (7 * CHUNK))
    fp = FileMemoryPlan(str(f), FileIdentity.of(f), keep=[(1, 1)], advice="sequential", advice_span=(1, 3))
    plan = MemoryPlan(16 << 20, CHUNK, 1 << 20, 0, files=[fp])
    write_memory_plan(plan, tmp_path / "p.plan")
    assert read_memory_plan(tmp_path / "p.plan").files[0].advice_span == (1, 3)
    env = shim_env(plan, [])
    assert env is not None
    r = subprocess.run([sys.executable, "-c", _VMFLAGS, str(f)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    vmas = [tuple(line.split()) for line in r.stdout.splitlines()]
    # the plan's sequential advice is read in large folios where the kernel has them (hg)
    seq = "hgsr" if Path("/sys/kernel/mm/transparent_hugepage").exists() else "sr"
    assert vmas == [("0", str(cp), "rr"), (str(cp), str(4 * cp), seq), (str(4 * cp), str(7 * cp), "rr")]


def test_a_sequential_variant_keeps_one_run_of_the_part_read_in_order():
    """A file read in order pass after pass is a cyclic scan: any chunks of the same number
    spare the same reads, so the keep set inside the part read in order becomes one run
    from its first kept chunk, as many chunks; what is kept outside that part stays."""
    from pagecast.plan.format import FileIdentity
    from pagecast.plan.memory import _contiguous_keep
    from pagecast.plan.memory_format import FileMemoryPlan

    ident = FileIdentity(40 * CHUNK, 1, 1, 1, 1)
    f = FileMemoryPlan("/w", ident, keep=[(1, 1), (5, 3), (10, 2), (20, 1)], stream=[(8, 2), (12, 8)])
    assert _contiguous_keep(f, (4, 30), 40) == [(1, 1), (5, 6)]  # chunk 1: outside the part, kept as it was
    assert _contiguous_keep(f, None, 40) == [(1, 7)]  # the whole file read in order
    late = FileMemoryPlan("/w", ident, keep=[(31, 1), (33, 2)])
    assert _contiguous_keep(late, (4, 30), 40) == [(31, 2), (34, 1)]  # chunk 34 is past the part
    assert _contiguous_keep(FileMemoryPlan("/w", ident, keep=[(1, 2)]), (4, 30), 40) == [(1, 2)]


def test_a_file_advice_of_a_memory_plan_is_checked(tmp_path):
    p = tmp_path / "advice.plan"
    doc = {"format": "pagecast-memory-plan", "version": 1, "limit_bytes": 1 << 24, "chunk_bytes": 1 << 20,
           "reserve_bytes": 0, "prefetch_chunks": 0, "backend": "kernel-advice",
           "files": [{"path": "/x", "identity": {"size": 1, "mtime_ns": 1, "ctime_ns": 1, "ino": 1, "dev": 1},
                      "keep": [], "stream": [], "advice": "backwards"}]}  # fmt: skip
    p.write_text(json.dumps(doc))
    with pytest.raises(PagecastError) as e:
        read_memory_plan(p)
    assert str(p) in str(e.value) and "backwards" in str(e.value) and "\n" not in str(e.value)
    for span, advice, why in (([3, 0], "sequential", "advice_span is not"), ([0, 2], None, "without an advice")):
        doc["files"][0].update(advice_span=span, advice=advice)
        p.write_text(json.dumps(doc))
        with pytest.raises(PagecastError) as e:
            read_memory_plan(p)
        assert str(p) in str(e.value) and why in str(e.value) and "\n" not in str(e.value)


def test_a_variant_far_slower_than_the_kernel_alone_is_stopped(tmp_path):
    """A variant that misreads the program (a run of minutes where the kernel alone takes
    seconds) is stopped at ``STOP_SLOWER`` times the kernel alone's slowest run and timed no
    more; the baseline is never stopped, even where a variant is many times faster. Real
    processes whose wall time is set per variant."""
    import re
    from pathlib import Path

    from pagecast.plan.format import FileIdentity
    from pagecast.plan.measure import MeasureConfig, Recording
    from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan
    from pagecast.plan.memory_measure import STOP_SLOWER, measure_memory_plan

    f = tmp_path / "f"
    f.write_bytes(b"\0" * (1 << 20))
    fp = FileMemoryPlan(str(f), FileIdentity.of(f), [(0, 2)], [(2, 2)], {2: 3})
    plan = MemoryPlan(64 << 20, 1 << 18, 8 << 20, 2, "kernel-advice", [fp])
    recs = [Recording(str(tmp_path / n), [n], str(tmp_path), True) for n in ("a", "b")]
    # the kernel alone's first run of each recording is its slowest: ``plan``, as slow as that
    # run and five times its later ones, is not stopped
    walls = {"kernel": 0.1, "half": 0.04, "keep": 30.0, "plan": 0.5}
    seen: dict[str, int] = {}

    def argv(path: str | None, prog: list[str]) -> list[str]:
        name = Path(path).stem if path else "kernel"
        seen[name] = seen.get(name, 0) + 1
        seen[name + prog[0]] = seen.get(name + prog[0], 0) + 1
        wall = 0.6 if name == "kernel" and seen[name + prog[0]] == 1 else walls[name]
        return ["sh", "-c", f"sleep {wall} && touch {tmp_path / name}.done"]

    cfg = MeasureConfig(argv, rounds=3, confirm_rounds=0, stop_slower=STOP_SLOWER)  # as plan --measure sets it
    chosen, m = measure_memory_plan(plan, recs, cfg, pager=False)
    assert seen["keep"] == 1 and "keep" not in m.runs and "keep" in m.stopped
    assert f"over {STOP_SLOWER:g}x the baseline's slowest run" in m.stopped["keep"]
    stopped_at = float(re.search(r"stopped after ([0-9.]+) s", m.stopped["keep"]).group(1))
    assert stopped_at < walls["keep"] / 2
    assert not (tmp_path / "keep.done").exists() and (tmp_path / "half.done").exists()  # killed, not waited for
    assert len(m.runs["kernel"][recs[0].trace]) == 3 and seen["kernel"] == 6  # never stopped
    assert "plan" not in m.stopped and seen["plan"] == 6
    assert m.chosen == "half" and chosen.backend == "kernel-advice"
    assert any("keep: stopped after" in line for line in m.table())
    assert m.to_dict()["stopped"] == m.stopped


def test_timed_rounds_count_what_each_run_read(tmp_path):
    """The bytes a measured run read are its process tree's block input: a cold file read by
    the program counts once, a warm one not at all, and nothing another process reads."""
    import os

    from pagecast.plan.measure import MeasureConfig, Recording, _tallied_rounds

    f = tmp_path / "data"
    f.write_bytes(os.urandom(8 << 20))
    os.sync()
    rec = Recording(str(tmp_path / "r"), ["true"], str(tmp_path), True)
    plans = {"cold": {rec.trace: tmp_path / "cold"}, "warm": {rec.trace: tmp_path / "warm"}}

    def argv(path: str, _prog: list[str]) -> list[str]:
        # "warm" reads the file twice in one process tree: the second read is from memory
        reads = 1 if path.endswith("cold") else 2
        return ["sh", "-c", " ; ".join(['cat "$0" > /dev/null'] * reads), str(f)]

    tally = _tallied_rounds(["cold", "warm"], [rec], plans, [str(f)], MeasureConfig(argv), 2, 0)
    for name in ("cold", "warm"):
        for got in tally.reads[name][rec.trace]:
            assert (8 << 20) <= got < (8 << 20) * 1.5, (name, got)


def test_the_pager_s_share_is_what_the_program_maps(recordings, tmp_path):
    # the cyclic scan maps its file: what a plan keeps is the pager's to serve
    from pagecast.plan.memory import mapped_share, plan_for_limit

    _, traces = recordings
    plan = plan_for_limit(traces, _cfg())
    assert plan.keep_bytes() > 0 and mapped_share(traces, plan) > 0.9
