"""``pagecast run --memory --plan`` on a real program, a real cold file and a real cgroup:
the program's output and status unchanged, fewer bytes read than the kernel alone, and a
plan asking for more than fits paced instead of killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cold_support import cyclic_scan_and_file
from conftest import require_memcg
from pagecast.plan.format import FileIdentity
from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan, write_memory_plan
from pagecast.util.device_model import read_ahead_bytes_of
from pagecast.util.memcg import find_hierarchy
from pagecast.util.pagecache import make_cold

MIB = 1 << 20
FILE_MIB = 32
LIMIT = 24 * MIB
PASSES = 4
CHUNK = MIB


@pytest.fixture(scope="module")
def setup():
    require_memcg("memory cgroups and process_madvise on another process need root")
    with cyclic_scan_and_file("memrun", FILE_MIB) as made:
        yield made


def _plan(path: Path, f: Path, keep: int, prefetch: int, reserve: int = 4 * MIB) -> Path:
    n = FILE_MIB * MIB // CHUNK
    nxt = {c: c + 1 for c in range(keep, n - 1)}  # prefetch the next chunk in file order
    fp = FileMemoryPlan(str(f), FileIdentity.of(f), [(0, keep)] if keep else [], [(keep, n - keep)], nxt)
    # one read-around window of room beside the keep set (a plan without a room is given two:
    # the 24 MiB limit would then lock nothing)
    room = read_ahead_bytes_of(f)
    write_memory_plan(MemoryPlan(LIMIT, CHUNK, reserve, prefetch, "kernel-advice", [fp], room_bytes=room), path)
    return path


def _run(args: list[str], prog: Path, f: Path) -> tuple[subprocess.CompletedProcess, dict]:
    make_cold([f])
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--json", *args, "--", str(prog), str(f), str(PASSES)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    return r, json.loads(r.stdout)


def test_output_and_status_unchanged_and_the_plan_applied(setup, tmp_path):
    prog, f = setup
    make_cold([f])
    direct = subprocess.run([str(prog), str(f), str(PASSES)], capture_output=True, text=True, timeout=60)
    plan = _plan(tmp_path / "p.plan", f, keep=8, prefetch=2, reserve=8 * MIB)
    kernel, krep = _run(["--memory", str(LIMIT)], prog, f)
    planned, prep = _run(["--memory", str(LIMIT), "--plan", str(plan)], prog, f)
    for r, rep in ((kernel, krep), (planned, prep)):
        assert r.returncode == direct.returncode == 0 == rep["exit_status"]
        # with --json the program's stdout goes to stderr: its first line is the same sum
        assert direct.stdout.strip() in r.stderr.splitlines()
    ctl = prep["controller"]
    assert "error" not in ctl, ctl
    assert not ctl["errors"] and ctl["files_mapped"] >= 1
    assert 0 < ctl["pinned_bytes"] <= 8 * CHUNK  # pinned while the cgroup had room, the program running
    assert ctl["pageouts"] > 0  # chunks behind the program were evicted from it
    # the kernel re-reads the whole file each pass under the limit (how much less the plan reads
    # depends on how soon the controller sees the program move on: benchmarks/memlimit_cyclic.py)
    assert krep["memory"]["read_bytes"] >= PASSES * FILE_MIB * MIB * 0.9
    assert krep["memory"]["peak_bytes"] <= LIMIT and prep["memory"]["peak_bytes"] <= LIMIT


def test_a_plan_that_wants_more_than_fits_is_paced_not_killed(setup, tmp_path):
    prog, f = setup
    # keep 24 MiB (all of the limit) and prefetch 64 MiB ahead
    plan = _plan(tmp_path / "greedy.plan", f, keep=24, prefetch=64, reserve=2 * MIB)
    r, rep = _run(["--memory", str(LIMIT), "--plan", str(plan)], prog, f)
    assert r.returncode == 0 and rep["exit_status"] == 0, r.stderr
    assert rep["memory"]["oom_kills"] == 0
    ctl = rep["controller"]
    assert "error" not in ctl, ctl
    assert ctl["pin_refused_bytes"] > 0  # pinning stopped where the limit had no room left
    assert ctl["pinned_bytes"] <= LIMIT - 2 * MIB - (64 + 2) * CHUNK or ctl["pinned_bytes"] == 0


def test_changed_file_is_one_warning_and_the_program_runs(setup, tmp_path):
    prog, f = setup
    plan = _plan(tmp_path / "p.plan", f, keep=8, prefetch=2)
    os.utime(f, ns=(1, 1))  # mtime (and ctime) move: the plan's identity no longer matches
    r, rep = _run(["--memory", str(LIMIT), "--plan", str(plan)], prog, f)
    assert r.returncode == 0
    assert sum("changed since the plan" in line for line in r.stderr.splitlines()) == 1


def test_cold_start_plan_with_memory_is_one_line(setup, tmp_path):
    prog, f = setup
    bad = tmp_path / "cold.plan"
    bad.write_text("PAGECAST-PLAN 3\n")
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--memory", "64M", "--plan", str(bad), "--", "true"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_sigterm_reaches_the_program_and_the_cgroup_goes(setup, tmp_path):
    import signal
    import time

    prog, f = setup
    plan = _plan(tmp_path / "p.plan", f, keep=8, prefetch=2, reserve=8 * MIB)
    make_cold([f])
    p = subprocess.Popen([sys.executable, "-m", "pagecast", "run", "--memory", str(LIMIT), "--plan", str(plan), "--",
                          str(prog), str(f), "100000"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    parent = find_hierarchy().parent
    mine = lambda: [d for d in parent.iterdir() if d.name.startswith(f"pagecast-{p.pid}-")]  # noqa: E731
    end = time.monotonic() + 30
    while time.monotonic() < end and not any(len((d / "cgroup.procs").read_text().split()) >= 2 for d in mine()):
        time.sleep(0.05)  # the program and the controller both inside
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert mine() == []


def test_a_controller_that_ended_without_a_report_is_named_by_how_it_ended():
    from pagecast.launch.memlimit import _controller_report

    def ended(body, oom_kills: int = 0) -> tuple[dict, list[str]]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(r)
            body(w)
            os._exit(0)
        os.close(w)
        warnings: list[str] = []
        return _controller_report((pid, r), warnings, oom_kills), warnings

    killed, warnings = ended(lambda w: os.kill(os.getpid(), 9))
    assert "killed by SIGKILL" in killed["error"] and "the program ran on" in killed["error"]
    assert warnings == [f"the memory controller stopped: {killed['error']}"]
    assert "exit status 3" in ended(lambda w: os._exit(3))[0]["error"]
    # a SIGKILL while the cgroup counted an OOM kill: the OOM killer's, named so
    oom = ended(lambda w: os.kill(os.getpid(), 9), oom_kills=1)[0]["error"]
    assert "killed by the cgroup's OOM killer" in oom
    assert "killed by SIGTERM" in ended(lambda w: os.kill(os.getpid(), 15), oom_kills=1)[0]["error"]
    assert ended(lambda w: os.write(w, b'{"entered": 5}')) == ({"entered": 5}, [])


UNMAPPER = r"""
import mmap, sys
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print(sum(m[i] for i in range(0, len(m), 4096)), flush=True)
sys.stdin.readline()
m.close()
print("unmapped", flush=True)
sys.stdin.readline()
"""


def test_a_range_the_program_unmapped_is_not_an_error(tmp_path):
    """A program unmaps its file (as one does on its way out) between the controller's read of
    its maps and a page-out: the range is gone from its page table with the pages, which is not
    an error of the run's report nor a page-out; the maps are read again before the next step."""
    if os.geteuid() != 0:
        pytest.skip("process_madvise on another process needs root")
    from pagecast.live.memctl import Controller

    f = tmp_path / "data"
    f.write_bytes(os.urandom(4 * MIB))
    child = subprocess.Popen([sys.executable, "-c", UNMAPPER, str(f)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    try:
        assert child.stdout.readline()  # mapped and read
        fp = FileMemoryPlan(str(f), FileIdentity.of(f), [], [(0, 4)], {0: 1, 1: 2, 2: 3})
        ctl = Controller(MemoryPlan(64 * MIB, MIB, 8 * MIB, 1, files=[fp]), child.pid, usage=lambda: 0)
        ctl.refresh_maps()
        assert ctl.stats.files_mapped == 1 and not ctl.maps_stale
        ctl.pageout((ctl.files[0].idx, 0))
        assert ctl.stats.pageouts == 1 and not ctl.stats.errors
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "unmapped"
        ctl.pageout((ctl.files[0].idx, 1))  # the maps read before the unmap still name the range
        assert not ctl.stats.errors, ctl.stats.errors
        assert ctl.stats.pageouts == 1 and ctl.maps_stale
        ctl.refresh_maps()
        assert ctl.stats.files_mapped == 0 and not ctl.maps_stale
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def test_a_program_that_ends_at_once_leaves_a_clean_report(setup, tmp_path):
    """A program done before the controller is under way (``true``) is no controller error:
    its parent opened the pidfd before it could reap the program."""
    _, f = setup
    plan = _plan(tmp_path / "p.plan", f, keep=8, prefetch=2, reserve=8 * MIB)
    for _ in range(5):
        make_cold([f])  # else the earlier tests' reads leave it cached, and run says so (test_cached_outside.py)
        r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--json", "--memory", str(LIMIT), "--plan",
                            str(plan), "--", "true"], capture_output=True, text=True, timeout=60)  # fmt: skip
        rep = json.loads(r.stdout)
        assert r.returncode == 0 == rep["exit_status"]
        assert "error" not in rep["controller"] and not rep["controller"]["errors"], rep["controller"]
        assert "warning" not in r.stderr, r.stderr


def test_the_controller_of_a_program_already_reaped_has_nothing_to_do(tmp_path):
    from pagecast.live.memctl import Controller

    f = tmp_path / "data"
    f.write_bytes(b"\0" * MIB)
    fp = FileMemoryPlan(str(f), FileIdentity.of(f), [(0, 1)], [], {})
    child = subprocess.Popen(["true"])
    pidfd = os.pidfd_open(child.pid)
    child.wait()
    try:
        stats = Controller(MemoryPlan(64 * MIB, MIB, 8 * MIB, 1, files=[fp]), child.pid, lambda: 0, pidfd=pidfd).run()
    finally:
        os.close(pidfd)
    assert stats.pinned_bytes == 0 and not stats.errors


def test_a_listed_file_gone_since_is_no_error(tmp_path):
    """A recording lists every file the program mapped, pagecast's own recording shim among
    them: one gone since the plan was made is skipped where the plan does nothing with it,
    and named as changed (a warning of ``run``), not an error, where it does."""
    from pagecast.live.memctl import Controller

    kept, listed = tmp_path / "kept", tmp_path / "listed"
    for f in (kept, listed):
        f.write_bytes(b"\0" * MIB)
    plan_files = [
        FileMemoryPlan(str(kept), FileIdentity.of(kept), [(0, 1)], [], {}),
        FileMemoryPlan(str(listed), FileIdentity.of(listed), [], [], {}),
    ]
    kept.unlink()
    listed.unlink()
    child = subprocess.Popen(["sleep", "30"])
    try:
        ctl = Controller(MemoryPlan(64 * MIB, MIB, 8 * MIB, 1, files=plan_files), child.pid, usage=lambda: 0)
        assert not ctl.stats.errors, ctl.stats.errors
        assert ctl.stats.files_changed == [str(kept)] and ctl.files == []
    finally:
        child.kill()
        child.wait()


VMFLAGS = r"""
import mmap, sys
path = sys.argv[1]
with open(path, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
m[0]
lines = open("/proc/self/smaps").read().splitlines()
at = next(i for i, l in enumerate(lines) if l.endswith(" " + path))
flags = next(l for l in lines[at:] if l.startswith("VmFlags:")).split()[1:]
print("sequential" if "sr" in flags else "random" if "rr" in flags else "normal", "hg" in flags)
"""


@pytest.mark.parametrize("advice", ["sequential", None])
def test_a_files_advice_reaches_the_programs_mapping(setup, tmp_path, advice):
    """A plan advising a file sequential: the unmodified program's own mapping of it carries
    the advice (its VmFlags), through the advice shim, with MADV_HUGEPAGE beside it where the
    kernel has transparent huge pages (its fault path then reads large folios); a plan without
    advice leaves it be."""
    _, f = setup
    fp = FileMemoryPlan(str(f), FileIdentity.of(f), [(0, 1)], [], {}, advice=advice)
    plan = tmp_path / "p.plan"
    write_memory_plan(MemoryPlan(LIMIT, CHUNK, 8 * MIB, 0, "kernel-advice", [fp]), plan)
    r = subprocess.run([sys.executable, "-m", "pagecast", "run", "--memory", str(LIMIT), "--plan", str(plan), "--",
                        sys.executable, "-c", VMFLAGS, str(f)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    large = advice is not None and Path("/sys/kernel/mm/transparent_hugepage").exists()
    assert r.stdout.split() == [advice or "normal", str(large)]
