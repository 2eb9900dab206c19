"""``pagecast run --memory --plan --backend pager`` on a real program, real userfaultfd
faults and a real memory cgroup: the program's output and status unchanged, the keep set
read once, the streamed part read once a pass (the simulator's MIN at the pager's budget
plus the room the plan leaves for streaming), no OOM kill, the cgroup gone afterwards; a
plan whose file the program reads with read() is one warning and the kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cold_support import cold_file_maker
from conftest import require_memcg
from pagecast.errors import PagecastError
from pagecast.plan.format import FileIdentity
from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan, write_memory_plan
from pagecast.util.memcg import find_hierarchy
from pagecast.util.pagecache import make_cold

MIB = 1 << 20
PAGE = 4096
FILE_MIB = 64
LIMIT = 40 * MIB
RESERVE = 4 * MIB
PREFETCH = 2
CHUNK = MIB
KEEP = 12  # chunks
PASSES = 4
FAULT, PREFETCHED, EVICT = 8, 6, 7  # fault log record kinds (pager.h)


@pytest.fixture(scope="module")
def setup():
    require_memcg("memory cgroups need root")
    from pagecast.bench.workloads import build_workload
    from pagecast.pager.runtime import probe

    try:
        probe()
    except PagecastError as e:
        pytest.skip(str(e))
    prog = build_workload("cyclic_scan")
    with cold_file_maker("mempager") as make:
        yield prog, make(FILE_MIB * MIB // PAGE)


def _plan(path: Path, f: Path, keep: int = KEEP, backend: str = "kernel-advice") -> Path:
    n = FILE_MIB * MIB // CHUNK
    nxt = {c: c + 1 for c in range(keep, n - 1)}
    fp = FileMemoryPlan(str(f), FileIdentity.of(f), [(0, keep)], [(keep, n - keep)], nxt)
    write_memory_plan(MemoryPlan(LIMIT, CHUNK, RESERVE, PREFETCH, backend, [fp]), path)
    return path


def _pagecast_run(args: list[str], env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict, int]:
    p = subprocess.Popen([sys.executable, "-m", "pagecast", "run", "--json", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    out, err = p.communicate(timeout=180)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), json.loads(out), p.pid


def _installs_per_pass(log_dir: Path) -> list[np.ndarray]:
    """Pages brought into the region (faults and prefetches), split into passes: the scan
    goes up the file, so a pass ends where the page installed goes down."""
    from pagecast.pager.runtime import read_fault_log

    logs = list(log_dir.glob("*.pglog"))
    assert len(logs) == 1, logs
    rec = read_fault_log(logs[0]).records
    pages = rec["page"][np.isin(rec["kind"], [FAULT, PREFETCHED])]
    cuts = np.flatnonzero(np.diff(pages) < 0) + 1
    return np.split(pages, cuts), rec


def _min_misses_per_pass(npages: int, capacity: int) -> int:
    from pagecast.sim.misses import min_misses

    ids = np.tile(np.arange(npages, dtype=np.int64), PASSES)
    miss = min_misses(ids, npages, capacity)
    return int(miss[npages : 2 * npages].sum())  # the second pass: MIN's steady state


def test_pager_backend_applies_the_plan(setup, tmp_path):
    prog, f = setup
    plan = _plan(tmp_path / "p.plan", f)
    make_cold([f])
    bare = subprocess.run([str(prog), str(f), str(PASSES)], capture_output=True, text=True, timeout=60)
    logs = tmp_path / "logs"
    logs.mkdir()
    make_cold([f])
    env = dict(os.environ, PAGECAST_PAGER_LOG=str(logs))
    r, rep, pid = _pagecast_run(["--memory", str(LIMIT), "--plan", str(plan), "--backend", "pager", "--",
                                 str(prog), str(f), str(PASSES)], env)  # fmt: skip
    assert r.returncode == bare.returncode == 0 == rep["exit_status"], r.stderr
    assert bare.stdout.strip() in r.stderr.splitlines()  # --json: the program's stdout is on stderr
    assert "warning" not in r.stderr
    mem, pager = rep["memory"], rep["pager"]
    assert mem["oom_kills"] == 0 and mem["peak_bytes"] <= LIMIT
    # the budget is what the limit leaves after the reserve, the prefetch window and the margin
    budget = pager["files"][0]["budget_bytes"]
    assert budget == LIMIT - RESERVE - PREFETCH * CHUNK - pager["margin_bytes"]
    (st,) = pager["regions"]
    assert st["errors"] == 0 and st["max_resident"] <= budget // PAGE
    keep_pages = KEEP * CHUNK // PAGE
    assert st["plan_keep_resident"] == keep_pages and st["plan_keep_demoted"] == 0
    assert st["plan_after_use"] > 0 and st["plan_regrets"] == 0 and st["plan_stream_off"] == 0
    passes, rec = _installs_per_pass(logs)
    assert len(passes) == PASSES
    # kept pages: brought in once, in the first pass, never evicted
    installed = np.concatenate(passes)
    assert np.array_equal(np.sort(installed[installed < keep_pages]), np.arange(keep_pages))
    evicted = rec["page"][rec["kind"] == EVICT]
    assert not np.any(evicted < keep_pages)
    # later passes read the streamed part once: MIN at the budget reads a little less (it
    # keeps all but one page of the budget), by at most the room left beside the keep set
    npages = FILE_MIB * MIB // PAGE
    want = _min_misses_per_pass(npages, budget // PAGE)
    room = budget // PAGE - keep_pages
    for p in passes[1:]:
        assert len(np.unique(p)) == len(p) == npages - keep_pages
        assert want <= len(p) <= want + room
    # the cgroup is gone
    parent = find_hierarchy().parent
    assert not [d for d in parent.iterdir() if d.name.startswith(f"pagecast-{pid}-")]


def test_keep_set_larger_than_the_budget_is_pinned_in_part(setup, tmp_path):
    prog, f = setup
    plan = _plan(tmp_path / "greedy.plan", f, keep=40)  # 40 MiB kept: all of the limit
    make_cold([f])
    r, rep, _ = _pagecast_run(["--memory", str(LIMIT), "--plan", str(plan), "--backend", "pager", "--",
                               str(prog), str(f), "2"])  # fmt: skip
    assert r.returncode == 0 == rep["exit_status"], r.stderr
    assert rep["memory"]["oom_kills"] == 0
    (st,) = rep["pager"]["regions"]
    pf = rep["pager"]["files"][0]
    assert pf["keep_bytes"] < pf["budget_bytes"]  # room left to stream through
    assert st["plan_keep_resident"] * PAGE == pf["keep_bytes"] and st["errors"] == 0


def test_a_file_read_with_read_is_one_warning_and_the_kernel(setup, tmp_path):
    _, f = setup
    plan = _plan(tmp_path / "p.plan", f)
    bare = subprocess.run(["sha256sum", str(f)], capture_output=True, text=True, timeout=60)
    make_cold([f])
    r, rep, _ = _pagecast_run(["--memory", str(LIMIT), "--plan", str(plan), "--backend", "pager", "--",
                               "sha256sum", str(f)])  # fmt: skip
    assert r.returncode == 0 == rep["exit_status"]
    assert bare.stdout.strip() in r.stderr.splitlines()
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "never mapped" in warnings[0] and str(f) in warnings[0], r.stderr
    assert "the kernel served it under the limit" in warnings[0]
    assert rep["pager"]["regions"] == [] and rep["memory"]["oom_kills"] == 0


def test_a_malformed_plan_map_is_one_line_and_clock(setup, tmp_path):
    """The map reaches the shim through its environment: the C core checks every field."""
    from pagecast.launch.memlimit_pager import write_plan_map
    from pagecast.pager.runtime import encode_list, pager_env
    from pagecast.plan.memory_format import read_memory_plan

    prog, f = setup
    plan = read_memory_plan(_plan(tmp_path / "p.plan", f))
    good = write_plan_map(tmp_path / "good.map", plan.files[0], plan, KEEP * CHUNK)
    bad = tmp_path / "bad.map"
    bad.write_bytes(good.read_bytes()[:-200])  # truncated: the path and part of the chains gone
    bare = subprocess.run([str(prog), str(f), "2"], capture_output=True, text=True, timeout=60)
    env = pager_env([(str(f), 16 * MIB)], "none", strict=False)
    env["PAGECAST_PAGER_PLAN"] = encode_list([bad])
    r = subprocess.run([str(prog), str(f), "2"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and r.stdout == bare.stdout
    lines = [line for line in r.stderr.splitlines() if line.startswith("pagecast pager:")]
    assert len(lines) == 1 and str(bad) in lines[0] and "without its plan" in lines[0], r.stderr


def test_a_changed_file_is_one_warning_and_the_kernel(setup, tmp_path):
    prog, f = setup
    plan = _plan(tmp_path / "p.plan", f)
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # mtime (and ctime) move: the plan no longer matches
    make_cold([f])  # cached by the tests before, run would say so too (test_cached_outside.py)
    r, rep, _ = _pagecast_run(["--memory", str(LIMIT), "--plan", str(plan), "--backend", "pager", "--",
                               str(prog), str(f), "1"])  # fmt: skip
    assert r.returncode == 0 == rep["exit_status"]
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "changed since the plan" in warnings[0], r.stderr
    assert "pager" not in rep  # nothing left to page: the kernel alone under the limit


def test_a_plan_measured_for_the_pager_runs_there_unless_told(setup, tmp_path):
    prog, f = setup
    plan = _plan(tmp_path / "p.plan", f, backend="pager")
    argv = ["--", str(prog), str(f), "2"]
    make_cold([f])
    r, rep, _ = _pagecast_run(["--memory", str(LIMIT), "--plan", str(plan), *argv])
    assert r.returncode == 0 == rep["exit_status"], r.stderr
    assert rep["pager"]["regions"] and "controller" not in rep
    make_cold([f])
    r, rep, _ = _pagecast_run(["--memory", str(LIMIT), "--plan", str(plan), "--backend", "kernel", *argv])
    assert r.returncode == 0 == rep["exit_status"], r.stderr
    assert "pager" not in rep and rep["controller"]["pinned_bytes"] > 0


def _keep_only_plan(path: Path, f: Path, keep: int) -> Path:
    """What ``plan --measure``'s keep variant runs: the keep set and nothing streamed, no chain
    and no read-ahead window of its own."""
    fp = FileMemoryPlan(path=str(f), identity=FileIdentity.of(f), keep=[(0, keep)])
    write_memory_plan(MemoryPlan(LIMIT, CHUNK, RESERVE, 0, "pager", [fp]), path)
    return path


def test_a_keep_set_alone_reads_a_scan_ahead_and_a_lookup_in_small_batches(setup, tmp_path):
    """Outside the keep set the plan names nothing: the pager reads a scan ahead in file order
    (each chunk entered right after the one before it, kept chunks passed without a miss), and
    serves a miss out of order, a lookup, with a few pages instead of half a chunk. Victims
    of a batch leave in one MADV_DONTNEED per run of neighbouring pages."""
    from pagecast.bench.workloads import build_workload

    prog, f = setup
    plan = _keep_only_plan(tmp_path / "keep.plan", f, KEEP)
    make_cold([f])
    r, rep, _ = _pagecast_run(["--memory", str(LIMIT), "--plan", str(plan), "--", str(prog), str(f), "3"])
    assert r.returncode == 0 == rep["exit_status"], r.stderr
    (scan,) = rep["pager"]["regions"]
    chunks = FILE_MIB * MIB // CHUNK
    assert scan["errors"] == 0 and scan["plan_scan_ahead"] >= 2 * (chunks - KEEP)
    assert scan["prefetched"] >= 64 * scan["faults"]
    assert scan["evictions"] > 0 and scan["unmap_calls"] * 16 <= scan["evictions"]

    # one page in each chunk outside the keep set, the chunks in decreasing order: never in order
    pages = [c * CHUNK // PAGE + 17 for c in range(chunks - 1, KEEP - 1, -1)]
    touch = build_workload("touchpages")
    bare = subprocess.run([str(touch), str(f), ",".join(map(str, pages))], capture_output=True, text=True)
    make_cold([f])
    r, rep, _ = _pagecast_run(["--memory", str(LIMIT), "--plan", str(plan), "--",
                               str(touch), str(f), ",".join(map(str, pages))])  # fmt: skip
    assert r.returncode == bare.returncode == 0 == rep["exit_status"], r.stderr
    (look,) = rep["pager"]["regions"]
    assert look["faults"] == len(pages) and look["plan_scan_ahead"] == 0
    assert look["prefetched"] <= 7 * look["faults"]  # half a chunk would be 128 pages each


def test_the_pager_backend_starts_without_the_policy_registry(setup, tmp_path):
    # the plan drives the pager: parsing a policy name loaded every policy (numba with them),
    # 0.4 s of start-up before each run, which plan --measure counted against the pager
    _, f = setup
    plan = _plan(tmp_path / "p.plan", f, backend="pager")
    code = (
        "import sys\nfrom pagecast.cli import main\n"
        f"rc = main(['run', '--memory', '{LIMIT}', '--plan', r'{plan}', '--', 'true'])\n"
        "print('numba' in sys.modules, rc)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-2:] == ["False", "0"], r.stdout + r.stderr
