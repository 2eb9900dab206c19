"""Files the native parts create as root never follow a link another user planted.

An unprivileged user (``nobody``, switched to in a forked child) fills a world-writable
sticky directory with symlinks to a root-owned file under every name the old code could
have used (``NAME.<pid>.tmp`` for the pids the run gets: the run is started in a new pid
namespace, so its pids are the first few); the run then writes its outputs there as root.
The victim must be untouched and the outputs real files. ``fs.protected_symlinks`` is 0
on this machine kind, so the kernel does not stop root following those links.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from pagecast.launch.binary import launcher_path
from pagecast.pager import runtime as pg
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan
from pagecast.util.native import build
from uffd_support import needs_uffd

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
PIDS = range(1, 48)  # the pids a short run gets in a fresh pid namespace
PRECIOUS = b"root's own file: must never change\n"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare (pid namespaces)"
)


@pytest.fixture()
def shared_dir():
    """A world-writable sticky directory, like /tmp, that ``nobody`` can reach."""
    d = Path(tempfile.mkdtemp(prefix="pagecast-shared-"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture()
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.write_bytes(PRECIOUS)
    return v


def as_nobody(fn: Callable[[], None]) -> None:
    """Run fn in a forked child that has become ``nobody`` (no capabilities, no groups)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            fn()
            code = 0
        finally:
            os._exit(code)
    _, st = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(st) == 0, "planting as nobody failed"


def plant(d: Path, names: list[str], target: Path) -> None:
    def go() -> None:
        for n in names:
            os.symlink(target, d / n)

    as_nobody(go)
    assert all((d / n).is_symlink() and (d / n).lstat().st_uid == NOBODY for n in names)


def in_new_pid_ns(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "--pid", "--fork", "--kill-child", *argv], capture_output=True, timeout=120, **kw)


def untouched(victim: Path) -> bool:
    return victim.read_bytes() == PRECIOUS


@pytest.fixture()
def plan(tmp_path: Path) -> Path:
    base = ROOT / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    data = base / f"rootwrites-{os.getpid()}-{tmp_path.name}.bin"
    data.write_bytes(np.random.default_rng(3).integers(0, 256, 16 * 4096, dtype=np.uint8).tobytes())
    p = tmp_path / "p.plan"
    write_plan(p, PlanDoc([FilePlan(str(data), FileIdentity.of(data), "warm", [(0, 16)])]))
    yield p
    data.unlink(missing_ok=True)


def test_launcher_report_in_tmpdir_never_follows_planted_links(shared_dir: Path, victim: Path, plan: Path) -> None:
    # `run --plan P --json` used $TMPDIR/pagecast-plan-status.<pid>.json, written through <that>.<pid>.tmp
    names = [f"pagecast-plan-status.{a}.json" for a in PIDS]
    names += [f"pagecast-plan-status.{a}.json.{b}.tmp" for a in PIDS for b in PIDS]
    plant(shared_dir, names, victim)
    env = dict(os.environ, TMPDIR=str(shared_dir))
    r = in_new_pid_ns([launcher_path(), "--wait", str(plan), "--", "true"], env=env)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["files"][0]["status"] in ("warmed", "stopped") and rep["prefetch"] is not None
    assert untouched(victim)
    # the report lived in a private directory, removed afterwards; the planted links are all that is left
    assert sorted(p.name for p in shared_dir.iterdir()) == sorted(names)


def test_plan_status_file_never_written_through_planted_links(shared_dir: Path, victim: Path, plan: Path) -> None:
    # `--plan-status FILE` was written through FILE.<pid>.tmp; a link at FILE itself must be replaced, not followed
    status = shared_dir / "status.json"
    names = [status.name] + [f"{status.name}.{b}.tmp" for b in PIDS]
    plant(shared_dir, names, victim)
    r = in_new_pid_ns([launcher_path(), "--wait", "--status", str(status), str(plan), "--", "true"])
    assert r.returncode == 0, r.stderr
    assert untouched(victim)
    assert not status.is_symlink() and status.stat().st_uid == 0
    assert json.loads(status.read_text())["files"][0]["status"] in ("warmed", "stopped")
    assert not [p for p in shared_dir.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]


@needs_uffd
def test_pager_learned_sets_stats_and_logs_never_follow_planted_links(shared_dir: Path, victim: Path) -> None:
    cases = str(build("pager_cases", [ROOT / "workloads/pager_stress/cases.c"], shared=False))
    n = 32
    f = shared_dir / "w.bin"
    f.write_bytes(np.random.default_rng(1).integers(0, 256, n * 4096, dtype=np.uint8).tobytes())
    f.chmod(0o644)
    learn, stats, logs = (shared_dir / d for d in ("learn", "stats", "logs"))
    for d in (learn, stats, logs):
        d.mkdir()
        d.chmod(0o1777)
    bits = str(f.resolve()).replace("/", "%") + ".bits"
    # the old names: <set>.bits.<pid>.tmp, pager.<pid>.<n>.json.tmp and the log pager.<pid>.<n>.pglog itself
    plant(learn, [f"{bits}.{p}.tmp" for p in PIDS], victim)
    plant(stats, [f"pager.{p}.0.json.tmp" for p in PIDS], victim)
    plant(logs, [f"pager.{p}.0.pglog" for p in PIDS], victim)
    env = pg.pager_env([(str(f), 8 * 4096)], "sparse:4", learn_dir=learn, stats_dir=stats, log_dir=logs,
                       base_env=dict(os.environ))  # fmt: skip
    r = in_new_pid_ns([cases, "read", str(f), str(n), "3"], env=env, text=True)
    assert r.returncode == 0, r.stderr
    assert untouched(victim)
    saved = learn / bits
    assert not saved.is_symlink() and saved.read_bytes()[:8] == b"PGCBITS1"
    (st,) = [p for p in stats.iterdir() if not p.is_symlink()]
    assert json.loads(st.read_text())["faults"] > 0
    # the log's name was taken by a planted link: refused in one line, never opened
    assert "cannot write fault log" in r.stderr and all(p.is_symlink() for p in logs.iterdir())
