"""Memory cgroups for --memory: real cgroups beneath this process's own, removed whatever
happens to pagecast (success, failure, SIGTERM, SIGKILL), one line where none can be made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pagecast.errors import PagecastError
from pagecast.util.memcg import ROOT_ENV, MemoryCgroup, find_hierarchy, remove_stale


def _hierarchy():
    try:
        return find_hierarchy()
    except PagecastError as e:
        pytest.skip(f"no memory cgroup here: {e}")


@pytest.fixture
def parent() -> Path:
    if os.geteuid() != 0:
        pytest.skip("creating cgroups needs root (or a delegated cgroup)")
    return _hierarchy().parent


def _ours(parent: Path, pid: int) -> list[Path]:
    return [d for d in parent.iterdir() if d.name.startswith(f"pagecast-{pid}-")]


def _wait_gone(parent: Path, pid: int, timeout: float = 10.0) -> list[Path]:
    end = time.monotonic() + timeout
    while _ours(parent, pid) and time.monotonic() < end:
        time.sleep(0.05)
    return _ours(parent, pid)


def test_program_runs_inside_with_the_limit_and_the_cgroup_goes(parent):
    with MemoryCgroup("64M") as cg:
        out = subprocess.run(cg.wrap(["cat", "/proc/self/cgroup"]), capture_output=True, text=True, check=True)
        assert cg.path.name in out.stdout
        limit_file = "memory.max" if cg.version == 2 else "memory.limit_in_bytes"
        assert int((cg.path / limit_file).read_text()) == 64 << 20
        # a program writing more anonymous memory than the limit is killed inside, not beside
        r = subprocess.run(
            cg.wrap([sys.executable, "-c", "b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096])"])
        )
        assert r.returncode != 0
        assert cg.stats().oom_kills >= 1 or r.returncode == -signal.SIGKILL
    assert not cg.path.exists()


def test_removed_after_failure_inside_the_block(parent):
    with pytest.raises(RuntimeError):
        with MemoryCgroup("32M") as cg:
            subprocess.Popen(cg.wrap(["sleep", "30"]))
            raise RuntimeError("boom")
    assert not cg.path.exists()


def _pagecast(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pagecast", *args], **kw)


def test_run_memory_success_and_failure_statuses_pass_through(parent, tmp_path):
    for code in (0, 3):
        p = _pagecast(["run", "--json", "--memory", "64M", "--", "sh", "-c", f"echo hi; exit {code}"],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        out, err = p.communicate(timeout=60)
        assert p.returncode == code, err
        rep = json.loads(out)
        assert rep["exit_status"] == code and rep["memory"]["limit_bytes"] == 64 << 20
        assert set(rep["memory"]) >= {"refaults", "major_faults", "read_bytes", "peak_bytes", "wall_s"}
        assert b"hi" in err  # with --json the program's stdout goes to stderr
        assert not _ours(parent, p.pid)


def _keep_plan(tmp_path: Path) -> Path:
    """A memory plan keeping a small file: ``run --plan`` forks the live controller for it."""
    from pagecast.plan.format import FileIdentity
    from pagecast.plan.memory_format import FileMemoryPlan, MemoryPlan, write_memory_plan

    data = tmp_path / "kept.bin"
    data.write_bytes(os.urandom(1 << 20))
    fp = FileMemoryPlan(str(data), FileIdentity.of(data), [(0, 1)], [], {})
    write_memory_plan(MemoryPlan(64 << 20, 1 << 20, 8 << 20, 0, "kernel-advice", [fp]), tmp_path / "keep.plan")
    return tmp_path / "keep.plan"


@pytest.mark.parametrize("plan", [False, True], ids=["alone", "controller"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_removed_after_pagecast_is_killed(parent, tmp_path, sig, plan):
    # the program would run a minute: killing pagecast ends it too (SIGTERM passed on, SIGKILL
    # by the reaper), and nothing of the run is left: its cgroup, its scratch directory; with
    # a plan, the controller forked into the cgroup holds nothing that keeps the reaper waiting
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    opts = ["--plan", str(_keep_plan(tmp_path))] if plan else []
    p = _pagecast(["run", "--memory", "64M", *opts, "--", "sleep", "60"], stderr=subprocess.DEVNULL, env=env)
    end = time.monotonic() + 20
    while not (_ours(parent, p.pid) and (_ours(parent, p.pid)[0] / "cgroup.procs").read_text().strip()):
        assert time.monotonic() < end, "the program never appeared in its cgroup"
        time.sleep(0.02)
    program = int((_ours(parent, p.pid)[0] / "cgroup.procs").read_text().split()[0])
    assert list(tmp_path.glob("pagecast-mem-*")), "no scratch directory to watch"
    p.send_signal(sig)
    p.wait(timeout=30)
    t0 = time.monotonic()
    assert _wait_gone(parent, p.pid, timeout=20) == []
    assert time.monotonic() - t0 < 20
    end = time.monotonic() + 10
    while _alive(program) and time.monotonic() < end:
        time.sleep(0.02)
    assert not _alive(program), "the program ran on after pagecast was killed"
    end = time.monotonic() + 10
    while list(tmp_path.glob("pagecast-mem-*")) and time.monotonic() < end:
        time.sleep(0.02)
    assert not list(tmp_path.glob("pagecast-mem-*"))


def _alive(pid: int) -> bool:
    """Running (a zombie whose parent is gone is reaped by init in a moment: not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_read_counter_removes_the_blkio_cgroups_of_killed_benchmarks(tmp_path):
    # a benchmark killed by a signal never closes its counter: the next one removes its cgroup
    from pagecast.bench.oversub import READS_PREFIX, ReadCounter, _v1_dir

    base = _v1_dir("blkio")
    if os.geteuid() != 0 or base is None or not (base / "blkio.throttle.io_service_bytes").exists():
        pytest.skip("needs root and a cgroup v1 blkio hierarchy")
    data = tmp_path / "d.bin"
    data.write_bytes(bytes(4096))
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale, live = base / f"{READS_PREFIX}{dead.pid}-abc123", base / f"{READS_PREFIX}{os.getpid()}-abc123"
    stale.mkdir()
    live.mkdir()
    counter = ReadCounter(data)
    try:
        assert not stale.exists() and live.exists()  # a living owner's cgroup stays
        assert counter.dir is not None and counter.dir.is_dir()
    finally:
        counter.close()
        for d in (stale, live):
            if d.exists():
                d.rmdir()
    assert counter.dir is None


def test_stale_cgroup_of_a_dead_pagecast_removed_at_next_start(parent):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = parent / f"pagecast-{dead.pid}-deadbeef"
    stale.mkdir()
    try:
        assert stale in remove_stale(parent)
        assert not stale.exists()
    finally:
        if stale.exists():
            stale.rmdir()


def test_no_usable_controller_is_one_line(tmp_path):
    env = {**os.environ, ROOT_ENV: str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "pagecast", "run", "--memory", "64M", "--", "true"],
                       capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "memory" in lines[0] and ROOT_ENV in lines[0]
    assert "Traceback" not in p.stderr


def test_bad_limit_is_one_line():
    p = subprocess.run([sys.executable, "-m", "pagecast", "run", "--memory", "lots", "--", "true"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


def test_memory_with_options_it_does_not_go_with_is_one_line(tmp_path):
    for argv in (["record", "--cuda", "--memory", "64M", "-o", str(tmp_path / "t.parquet"), "--", "true"],
                 ["run", "--memory", "64M", "--policy", "nextline", "--", "true"],
                 ["run", "--memory", "64M", "--backend", "pager", "--", "true"]):  # fmt: skip
        p = subprocess.run([sys.executable, "-m", "pagecast", *argv], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (argv, p.stderr)


def test_a_command_that_cannot_start_is_one_line_before_any_cgroup(parent, tmp_path):
    # the sh that enters the cgroup used to report it in its own words (naming the cgroup's
    # procs file) and exit 127, and record wrote a trace of that sh
    script = tmp_path / "not-executable.sh"
    script.write_text("echo hi\n")
    for exe in ("pagecast-no-such-command", str(tmp_path / "missing"), str(script), str(tmp_path)):
        for argv in (["run", "--memory", "64M", "--", exe],
                     ["record", "--memory", "64M", "-o", str(tmp_path / "t.parquet"), "--", exe]):  # fmt: skip
            p = _pagecast(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = p.communicate(timeout=60)
            assert p.returncode == 2, (argv, err)
            assert err.strip().splitlines() == [f"pagecast {argv[0]}: error: " + err.split("error: ", 1)[1].strip()]
            assert exe in err and "cgroup" not in err, err
            assert not _ours(parent, p.pid)
    assert not (tmp_path / "t.parquet").exists()
