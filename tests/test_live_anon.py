"""In-process anonymous prefetch of `pagecast run` (LD_PRELOAD shim + MADV_POPULATE_WRITE).

Truths used: the kernel's own minor-fault events on the program's 64 MiB anonymous
buffer (the fault monitor's trace), the program's output line (checksum) and exit status,
which must be the same with and without the shim, and the environment a child of the
program sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pagecast.bench.workloads import build_workload, workloads_dir
from pagecast.live.anon import AnonChannel, preload_blocker, shim_path
from pagecast.live.loop import LiveConfig, run_live
from pagecast.live.worker import SourceSpec
from pagecast.trace import Kind, open_trace
from pagecast.util.native import build
from perf_support import PredictorKiller, needs_perf

BUF = 64 << 20


@pytest.fixture(scope="module")
def prog() -> Path:
    return build_workload("anon_touch")


@pytest.fixture(scope="module")
def run1(prog, tmp_path_factory) -> Path:
    """Run 1 recorded with `pagecast record` (the CLI, as a user would)."""
    out = tmp_path_factory.mktemp("anon") / "run1.parquet"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    subprocess.run(
        [sys.executable, "-m", "pagecast", "record", "-o", str(out), "--", str(prog)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return out


def _live(prog: Path, schedule: Path, tmp: Path, *, anon: bool, args=(), on_started=None, name="r"):
    trace = tmp / f"{name}.parquet"
    outp = tmp / f"{name}.out"
    with open(outp, "w") as f:
        # nice=0: the program is CPU-bound; a niced daemon would see its faults too late
        res = run_live(
            LiveConfig(
                [str(prog), *args],
                SourceSpec("schedule", "replay", str(schedule)),
                trace_out=trace,
                stdout=f,
                nice=0,
                anon=anon,
            ),
            on_started=on_started,
        )
    return res, outp.read_text(), trace


def _buffer_faults(trace: Path) -> int:
    """Demand faults the kernel reported on the program's 64 MiB anonymous buffer."""
    tr = open_trace(trace)
    ids = [r.id for r in tr.regions if r.kind == "anon" and r.length == BUF]
    assert len(ids) == 1
    c = tr.read(["region", "kind"])
    demand = np.isin(c["kind"], [int(Kind.FAULT_MINOR), int(Kind.FAULT_MAJOR)])
    return int(np.count_nonzero(demand & (c["region"] == ids[0])))


def _line(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith("anon_touch "))


@needs_perf
def test_anon_prefetch_cuts_buffer_faults(prog, run1, tmp_path):
    # 3x the default arithmetic between touches: the in-process prefetcher keeps its lead
    # even when other jobs take a core (at the default it once fell to 2,098 of 4,096)
    slow = ["--work", "60000"]
    base, out0, tr0 = _live(prog, run1, tmp_path, anon=False, args=slow, name="off")
    res, out1, tr1 = _live(prog, run1, tmp_path, anon=True, args=slow, name="on")
    f0, f1 = _buffer_faults(tr0), _buffer_faults(tr1)
    assert base.anon_prefetch["state"] == "off"
    assert f0 == 4096  # every page of the pattern is a first touch without prefetch
    assert res.anon_prefetch["state"] == "on" and res.anon_prefetch["mode"] == "MADV_POPULATE_WRITE"
    assert res.anon_prefetch["pid"] == res.worker.get("anon", {}).get("pid")
    assert res.anon_prefetch["pages_populated"] >= 3000 and res.anon_prefetch["errors"] == 0
    assert f1 < f0 / 2, (f0, f1)
    assert _line(out1) == _line(out0) and res.returncode == base.returncode == 0


@needs_perf
def test_predictor_killed_with_shim_loaded(prog, run1, tmp_path):
    killer = PredictorKiller()
    _, want, _ = _live(prog, run1, tmp_path, anon=False, args=["--exit", "5"], name="ref")
    res, got, _ = _live(prog, run1, tmp_path, anon=True, args=["--exit", "5"], on_started=killer, name="killed")
    assert killer.killed.wait(120) and killer.program_was_running == [True]
    assert res.predictor_alive is False
    assert res.returncode == 5
    assert _line(got) == _line(want)


@needs_perf
def test_children_run_without_the_shim(prog, run1, tmp_path):
    # all 4096 pages: a run long enough for the shim to be connected before the program exits,
    # whatever the machine's load (with 600 pages it sometimes exited first)
    res, out, _ = _live(prog, run1, tmp_path, anon=True, args=["--spawn"], name="spawn")
    assert res.returncode == 0 and res.anon_prefetch["state"] == "on"
    child_env = [ln for ln in out.splitlines() if "=" in ln and not ln.startswith("anon_touch ")]
    assert any(ln.startswith("PATH=") for ln in child_env)  # the child did run and print
    assert not any("PAGECAST_ANON" in ln or str(shim_path()) in ln for ln in child_env)


@needs_perf
def test_static_program_reports_anon_off(run1, tmp_path):
    try:
        static = build("wl-anon_touch-static", [workloads_dir() / "anon_touch.c"], shared=False, ldflags=["-static"])
    except Exception as e:  # no static libc installed
        pytest.skip(f"cannot link statically here: {e}")
    assert preload_blocker([str(static)], dict(os.environ)).startswith("statically linked")
    res, out, _ = _live(static, run1, tmp_path, anon=True, name="static")
    assert res.returncode == 0 and _line(out).startswith("anon_touch pages=4096")
    assert res.anon_prefetch["state"] == "off" and "statically linked" in res.anon_prefetch["reason"]


def test_preload_blocker_and_env(prog, tmp_path):
    assert preload_blocker([str(prog)], dict(os.environ)) is None
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    assert preload_blocker([str(script)], dict(os.environ)) is None
    ch = AnonChannel.open()
    try:
        env = ch.env({"LD_PRELOAD": "/lib/a.so", "PATH": "/bin"}, Path("/x/shim.so"))
        assert env["LD_PRELOAD"] == "/lib/a.so:/x/shim.so"  # appended, the user's preload kept first
        assert env["PAGECAST_ANON_SOCK"] == ch.path and Path(ch.path).exists()
        assert ch.env({}, Path("/x/shim.so"))["LD_PRELOAD"] == "/x/shim.so"
    finally:
        ch.close()
    assert not Path(ch.path).exists()


def test_shim_is_inert_without_the_channel(prog):
    """Preloaded without PAGECAST_ANON_SOCK (e.g. a grandchild): same output, no thread."""
    env = dict(os.environ, LD_PRELOAD=str(shim_path()))
    env.pop("PAGECAST_ANON_SOCK", None)
    plain = subprocess.run([str(prog), "--pages", "200"], capture_output=True, text=True)
    pre = subprocess.run([str(prog), "--pages", "200"], capture_output=True, text=True, env=env)
    assert pre.returncode == plain.returncode == 0 and pre.stdout == plain.stdout and pre.stderr == ""


def test_shim_survives_a_dead_socket(prog, tmp_path):
    """The channel names a socket nobody serves: the helper thread gives up, the program is unaffected."""
    env = dict(
        os.environ,
        LD_PRELOAD=str(shim_path()),
        PAGECAST_ANON_SOCK=str(tmp_path / "nobody"),
        PAGECAST_ANON_SHIM=str(shim_path()),
    )
    plain = subprocess.run([str(prog), "--pages", "200", "--exit", "3"], capture_output=True, text=True)
    pre = subprocess.run([str(prog), "--pages", "200", "--exit", "3"], capture_output=True, text=True, env=env)
    assert pre.returncode == plain.returncode == 3 and pre.stdout == plain.stdout and pre.stderr == ""
