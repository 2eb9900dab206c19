"""A program started by pagecast sees the signal dispositions and mask it would see bare,
and stopping pagecast (SIGTERM, SIGINT) stops the program and leaves a readable trace,
never an orphan or a stray journal.

The program reads its own SigIgn and SigBlk from /proc/self/status; every path that
starts a program is compared with the same program started bare by the same parent,
which ignores SIGHUP and blocks SIGUSR1 first (so inheritance is checked too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pagecast.trace import open_trace
from pagecast.util.process import run_blocking, run_program
from perf_support import needs_perf
from plan_support import pagecast_env

SHOW = ["grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"]


def _as_a_shell_would(*_: object) -> None:
    """The parent's state both runs inherit: SIGHUP ignored (nohup), SIGUSR1 blocked, every
    other signal at its default, whatever the suite itself inherited (a suite started in the
    background by a script inherits SIGINT and SIGQUIT ignored)."""
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})


def _as_a_terminal_job() -> None:
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=cwd, env=pagecast_env(), capture_output=True, text=True, preexec_fn=_as_a_shell_would, timeout=300
    )


def _sig_lines(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith(("SigIgn:", "SigBlk:")))


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> list[str]:
    lines = _sig_lines(_run(SHOW, tmp_path_factory.mktemp("bare")).stdout)
    assert lines == ["SigBlk:\t0000000000000200", "SigIgn:\t0000000000000001"]  # USR1 blocked, HUP ignored
    return lines


def _pagecast(*args: str) -> list[str]:
    return [sys.executable, "-m", "pagecast", *args]


@needs_perf
def test_record_gives_the_program_its_bare_signals(tmp_path, bare):
    r = _run(_pagecast("record", "-o", "t.parquet", "--", *SHOW), tmp_path)
    assert r.returncode == 0, r.stderr
    assert _sig_lines(r.stdout) == bare  # SIGINT was ignored (bit 2) before


@needs_perf
@pytest.mark.parametrize("fast", [False, True], ids=["python-loop", "fast-path"])
def test_run_policy_gives_the_program_its_bare_signals(tmp_path, bare, fast):
    args = ["run", "--policy", "nextline", *([] if fast else ["--no-fast"]), "--", *SHOW]
    r = _run(_pagecast(*args), tmp_path)
    assert r.returncode == 0, r.stderr
    assert _sig_lines(r.stdout) == bare


@needs_perf
@pytest.mark.parametrize("strategy,json", [("per-fault", False), ("per-fault", True), ("warm", False), ("warm", True)])
def test_planned_runs_give_the_program_its_bare_signals(tmp_path, bare, strategy, json):
    """`run --plan`: the native launcher's exec and --json modes, and the hand-over of a
    per-fault file to the Python live loop."""
    from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, write_plan

    data = tmp_path / "d.bin"
    data.write_bytes(b"\1" * 8 * 4096)
    plan = tmp_path / "p.plan"
    fp = (
        FilePlan(str(data), FileIdentity.of(data), "per-fault", arg="markov")
        if strategy == "per-fault"
        else FilePlan(str(data), FileIdentity.of(data), "warm", [(0, 8)])
    )
    write_plan(plan, PlanDoc([fp]))
    r = _run(_pagecast("run", "--plan", str(plan), *(["--json"] if json else []), "--", *SHOW), tmp_path)
    if json:
        r.stdout = r.stderr  # --json: the program's output goes to stderr
    assert r.returncode == 0, r.stderr
    assert _sig_lines(r.stdout) == bare


def test_pager_run_gives_the_program_its_bare_signals(tmp_path, bare):
    data = tmp_path / "d.bin"
    data.write_bytes(b"\1" * 8 * 4096)
    r = _run(_pagecast("pager", "run", f"{data}:16K", "--no-strict", "--", *SHOW), tmp_path)
    assert r.returncode == 0, r.stderr
    assert _sig_lines(r.stdout) == bare


def test_bench_and_measure_runners_give_bare_signals(tmp_path, bare):
    """The runners bench, demo and `plan --measure` start their timed programs with."""
    out = tmp_path / "o.txt"
    code = (
        "import signal, sys\n"
        "from pagecast.util.process import run_blocking, run_program\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"  # pagecast's own SIG_IGN must not leak
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        f"with open({str(out)!r}, 'wb') as f:\n"
        f"    run_program({SHOW!r}, stdout=f)\n"
        f"    run_blocking({SHOW!r}, None, None, None, 60)\n"
    )
    r = _run([sys.executable, "-c", code], tmp_path)
    assert r.returncode == 0, r.stderr
    lines = _sig_lines(out.read_text())
    assert lines == bare  # run_blocking's stdout is /dev/null: one program's lines
    assert run_program(["true"]) == 0 and run_blocking(["true"], None, None, None, 60).returncode == 0


# ---- stopping pagecast --------------------------------------------------------------------


def _start_record(tmp_path: Path, marker: Path, *front: str) -> subprocess.Popen:
    prog = f"import time, pathlib; pathlib.Path({str(marker)!r}).write_text('up'); time.sleep(60)"
    return subprocess.Popen(
        _pagecast(*(front or ("record", "-o", "t.parquet")), "--", sys.executable, "-c", prog),
        cwd=tmp_path,
        env=pagecast_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        # a suite started under nohup ignores SIGHUP, one started in the background by a
        # script SIGINT and SIGQUIT, and pagecast rightly keeps an ignored signal ignored for
        # itself and the program: start it as a terminal's job would be
        preexec_fn=_as_a_terminal_job,
    )


def _program_pids(marker_text: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker_text.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


@needs_perf
@pytest.mark.parametrize(
    "how",
    ["term-pagecast", "int-pagecast", "int-process-group", "hup-pagecast"],
)
def test_stopping_record_stops_the_program_and_writes_the_trace(tmp_path, how):
    marker = tmp_path / f"up-{how}"
    p = _start_record(tmp_path, marker)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() is not None else "slow"
        time.sleep(0.05)
    sig = {"term": signal.SIGTERM, "int": signal.SIGINT, "hup": signal.SIGHUP}[how.split("-")[0]]
    if how.endswith("process-group"):
        os.killpg(p.pid, sig)  # Ctrl-C at a terminal: every process of the job
    else:
        os.kill(p.pid, sig)
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    assert p.returncode == 128 + sig, err  # the program's status: it was stopped by the same signal
    assert _program_pids(str(marker)) == []  # no orphan left running
    t = open_trace(tmp_path / "t.parquet")
    assert t.meta["exit_status"] == 128 + sig and len(t.read(["t_ns"])["t_ns"]) > 0
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(["t.parquet", marker.name])


def test_a_killed_recorder_leaves_a_recoverable_journal(tmp_path):
    """A journal is readable from the moment it exists: a recorder killed before its first
    row leaves one `recover` turns into an empty trace, not a 0-byte file it refuses."""
    from pagecast.trace import recover_partial

    code = (
        "import os\nfrom pagecast.trace.writer import TraceWriter\n"
        "TraceWriter('t.parquet', journal=True, meta={'command': ['x']})\nos.kill(os.getpid(), 9)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=pagecast_env())
    assert r.returncode == -9
    rec = recover_partial(tmp_path / "t.parquet.partial")
    t = open_trace(rec.trace)
    assert rec.rows == 0 and t.meta["command"] == ["x"] and np.asarray(t.read(["t_ns"])["t_ns"]).size == 0


def _wait_up(p: subprocess.Popen, marker: Path) -> None:
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() is not None else "slow"
        time.sleep(0.05)


@needs_perf
@pytest.mark.parametrize("front", [["run", "--policy", "nextline", "--no-fast"], ["run", "--policy", "nextline"]])
def test_sigterm_of_run_stops_the_program(tmp_path, front):
    marker = tmp_path / "up-run"
    p = _start_record(tmp_path, marker, *front)
    _wait_up(p, marker)
    os.kill(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert _program_pids(str(marker)) == []


def test_sigterm_of_pager_run_stops_the_program(tmp_path):
    data = tmp_path / "d.bin"
    data.write_bytes(b"\1" * 16 * 4096)
    marker = tmp_path / "up-pager"
    p = _start_record(tmp_path, marker, "pager", "run", f"{data}:64K", "--no-strict")
    _wait_up(p, marker)
    os.kill(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert _program_pids(str(marker)) == []
