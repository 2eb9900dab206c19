"""Descriptors are the program's: the shims pagecast puts inside a program (page-set shim
of `record`, pager shim) keep their own descriptors out of the numbers the program's
open() calls get, whatever RLIMIT_NOFILE is, and the launcher's detached prefetcher holds
none of the caller's descriptors (a pipe the program closed reaches EOF at once)."""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pagecast.collect.faultmon import pageset_shim
from pagecast.launch.binary import launcher_path
from pagecast.pager import runtime as pg
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan
from pagecast.util.native import build
from uffd_support import needs_uffd

ROOT = Path(__file__).resolve().parents[1]
TWO_OPENS = "import os; a = os.open('/dev/null', 0); b = os.open('/dev/null', 0); print(a, b)"


def _limit(n: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


@pytest.mark.parametrize("nofile", [1024, 512, 64])
def test_record_shim_leaves_the_programs_descriptor_numbers_alone(nofile: int) -> None:
    prog = [sys.executable, "-S", "-c", TWO_OPENS]
    bare = subprocess.run(prog, capture_output=True, text=True, preexec_fn=_limit(nofile), timeout=60)
    env = dict(os.environ, LD_PRELOAD=str(pageset_shim()))
    shimmed = subprocess.run(prog, capture_output=True, text=True, preexec_fn=_limit(nofile), env=env, timeout=60)
    assert bare.returncode == shimmed.returncode == 0, shimmed.stderr
    assert shimmed.stdout == bare.stdout and shimmed.stderr == ""


@needs_uffd
@pytest.mark.parametrize("nofile", [1024, 512])
def test_pager_shim_leaves_the_programs_descriptor_numbers_alone(tmp_path: Path, nofile: int) -> None:
    cases = str(build("pager_cases", [ROOT / "workloads/pager_stress/cases.c"], shared=False))
    f = tmp_path / "w.bin"
    f.write_bytes(np.zeros(8 * 4096, np.uint8).tobytes())
    cmd = [cases, "fds", str(f), "8"]
    bare = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_limit(nofile), timeout=60)
    env = pg.pager_env([(str(f), 4 * 4096)], "nextline:4", base_env=dict(os.environ), stats_dir=tmp_path)
    paged = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_limit(nofile), env=env, timeout=60)
    assert bare.returncode == paged.returncode == 0, paged.stderr
    assert paged.stdout == bare.stdout, (bare.stdout, paged.stdout)
    assert json.loads(next(tmp_path.glob("pager.*.json")).read_text())["faults"] > 0  # it was paged


def test_prefetcher_holds_no_descriptor_of_the_caller(tmp_path: Path) -> None:
    # a plan the prefetcher outlives its work for: live feedback on a file larger than the
    # first batch makes it wait for the program's exit to report the final counts
    base = ROOT / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    data = base / f"fdnum-{os.getpid()}-{tmp_path.name}.bin"
    data.write_bytes(np.ones(2048 * 4096, np.uint8).tobytes())
    plan = tmp_path / "p.plan"
    write_plan(plan, PlanDoc([FilePlan(str(data), FileIdentity.of(data), "warm", [(0, 2048)])]))
    r, w = os.pipe()
    try:
        # the program closes its copy of the pipe's write end, then lives on
        prog = [
            sys.executable,
            "-S",
            "-c",
            f"import os, time; os.close({w}); print('closed', flush=True); time.sleep(30)",
        ]
        env = dict(os.environ, PAGECAST_PLAN_FEEDBACK="1:0.5:16")
        p = subprocess.Popen([launcher_path(), str(plan), "--", *prog], pass_fds=(w,), stdout=subprocess.PIPE,
                             env=env, start_new_session=True)  # fmt: skip
        os.close(w)
        try:
            assert p.stdout.readline() == b"closed\n"
            ready, _, _ = select.select([r], [], [], 20)
            # EOF while the program still runs: nobody else (no prefetcher) held the write end
            assert ready and os.read(r, 1) == b"" and p.poll() is None
        finally:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    finally:
        os.close(r)
        data.unlink(missing_ok=True)


def test_record_shim_without_a_free_high_descriptor_says_so_and_keeps_the_numbers() -> None:
    # every number in the 64 below the limit (70) is taken when the program starts
    wrapper = (
        "import os, resource, sys\n"
        "src = os.open('/dev/null', os.O_RDONLY)\n"  # 3, close-on-exec; its copies 6..69 are inherited
        "for n in range(6, 70):\n"
        "    os.dup2(src, n)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (70, 70))\n"
        "env = dict(os.environ)\n"
        "if sys.argv[1]: env['LD_PRELOAD'] = sys.argv[1]\n"
        "os.execve(sys.executable, [sys.executable, '-S', '-c', sys.argv[2]], env)\n"
    )
    prog = "import os; print(os.open('/dev/null', 0))"
    runs = [
        subprocess.run([sys.executable, "-S", "-c", wrapper, shim, prog], capture_output=True, text=True, timeout=60)
        for shim in ("", str(pageset_shim()))
    ]
    bare, shimmed = runs
    assert bare.returncode == shimmed.returncode == 0 and shimmed.stdout == bare.stdout, shimmed.stderr
    assert bare.stderr == "" and shimmed.stderr.count("\n") == 1 and "no free descriptor" in shimmed.stderr
