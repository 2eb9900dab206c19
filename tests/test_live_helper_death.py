"""`pagecast run` when one of its helper processes dies: the program must not notice.

The helpers are the fault collector (native faultmon, the program's parent) and the
predictor process (forked by the daemon, named ``pagecast-pred``). Each test starts the
real CLI in a subprocess; the program is a shell that runs the sparse-weights workload,
blocks reading a FIFO, runs the workload again and exits 5. The test finds the helper in
the process tree and SIGKILLs it while the shell is blocked on the FIFO (mid-run, certainly
alive) or, for a model, while the predictor loads and the program does not exist yet;
then it releases the FIFO. No sleep decides when.

Truths used: the workload's JSON result line from a run without pagecast (checksum and
token count must be identical), the shell's exit status 5, and the state of the program's
process at the moment of the kill read from /proc.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pagecast.bench import sparse_weights as wl
from pagecast.collect.faultmon import faultmon_binary
from perf_support import needs_perf

SMALL = ["--hot", "96", "--pool", "128", "--tail", "2", "--ctx", "8"]
TOKENS = 8
STATUS = 5
FIND_TIMEOUT_S = 120.0  # generous: the daemon imports torch and loads a model on a shared machine
RUN_TIMEOUT_S = 300.0


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("death")
    if subprocess.run(["stat", "-f", "-c", "%T", str(d)], capture_output=True, text=True).stdout.strip() == "tmpfs":
        pytest.skip("tmp dir is tmpfs: files cannot be made cold")
    return wl.ensure_weights(d / "w.bin", size_mib=32)


def _argv(weights: Path) -> list[str]:
    return wl.WorkloadConfig(weights, prompt=1, tokens=TOKENS, advice="random", extra=SMALL).argv()


@pytest.fixture(scope="module")
def want(weights) -> dict:
    """The workload's result line, run without pagecast."""
    wl.drop_cache(weights)
    p = subprocess.run(_argv(weights), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert p.returncode == 0
    out = wl.parse_result(p.stdout)
    assert out["tokens"] == TOKENS
    return out


# -- the process tree -------------------------------------------------------------------


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _children(pid: int) -> list[int]:
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                kids.append(int(d))
    return kids


@dataclass
class Killer:
    """SIGKILLs ``helper`` under the pagecast process at a moment fixed by the processes
    themselves. The program runs the workload, then blocks reading a FIFO, then runs it
    again: "running" kills while it is blocked there (mid-run, certainly alive), "loading"
    as soon as the predictor exists while the collector (which starts the program) does not
    yet. Then it releases the FIFO."""

    helper: str  # "collector" | "predictor"
    when: str  # "running" | "loading"
    fifo: Path
    victim: int | None = None
    program_running: bool | None = None  # the program (sh) existed and was not a zombie at the kill
    program_started: bool | None = None  # the collector existed at the kill
    done: threading.Event = field(default_factory=threading.Event)

    def watch(self, daemon_pid: int) -> None:
        threading.Thread(target=self._run, args=(daemon_pid,), daemon=True).start()

    def _target(self, daemon_pid: int) -> tuple[int | None, list[int]]:
        """(the helper's pid or None, the collectors' pids)."""
        collector = faultmon_binary().name[:15]  # /proc/PID/comm keeps 15 characters
        kids = _children(daemon_pid)
        colls = [k for k in kids if _comm(k) == collector]
        preds = [k for k in kids if _comm(k) == "pagecast-pred"]
        target = colls if self.helper == "collector" else preds
        return (target[0] if target else None), colls

    def _kill(self, pid: int, colls: list[int]) -> None:
        self.program_started = bool(colls)
        progs = [d for c in colls for d in _children(c)]
        self.program_running = any(_state(p) not in ("Z", "X") for p in progs)
        os.kill(pid, signal.SIGKILL)
        self.victim = pid

    def _open_fifo(self, deadline: float) -> int | None:
        """The FIFO's write end once the program has opened it to read (it is blocked there)."""
        while time.monotonic() < deadline:
            try:
                return os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader yet
                time.sleep(0.002)
        return None

    def _run(self, daemon_pid: int) -> None:
        deadline = time.monotonic() + FIND_TIMEOUT_S
        fd = None
        try:
            if self.when == "loading":
                while time.monotonic() < deadline and self.victim is None:
                    pid, colls = self._target(daemon_pid)
                    if pid is not None and not colls:
                        self._kill(pid, colls)
                    time.sleep(0.002)
                fd = self._open_fifo(deadline)
            else:
                fd = self._open_fifo(deadline)
                pid, colls = self._target(daemon_pid)
                if fd is not None and pid is not None:
                    self._kill(pid, colls)
            if fd is not None:
                os.write(fd, b"go\n")
        finally:
            if fd is not None:
                os.close(fd)
            self.done.set()


def _run_and_kill(
    args: list[str], weights: Path, tmp_path: Path, helper: str, when: str
) -> tuple[subprocess.CompletedProcess, Killer]:
    wl.drop_cache(weights)
    killer = Killer(helper, when, tmp_path / "gate")
    os.mkfifo(killer.fifo)
    script = f'"$@"; read _ < "$0"; "$@"; exit {STATUS}'
    cmd = [sys.executable, "-m", "pagecast", "run", *args, "--", "sh", "-c", script, str(killer.fifo), *_argv(weights)]
    src = str(Path(__file__).resolve().parents[1] / "src")  # this tree's pagecast, from any working directory
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    killer.watch(proc.pid)
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert killer.done.wait(FIND_TIMEOUT_S)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), killer


def _check(p: subprocess.CompletedProcess, want: dict, helper_words: str) -> str:
    """Same output, status 5, and exactly one line about the dead helper; returns it."""
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == STATUS, p.stderr[-2000:]
    results = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert len(results) == 2  # the workload before and after the kill
    assert all(r["checksum"] == want["checksum"] and r["tokens"] == TOKENS for r in results)
    # the summary table names the error too; pagecast's own message lines start with its name
    died = [ln for ln in p.stderr.splitlines() if ln.startswith("pagecast run:") and "died" in ln]
    assert len(died) == 1, p.stderr[-2000:]
    assert not [ln for ln in p.stderr.splitlines() if ln.startswith("pagecast run: error")]
    line = died[0]
    assert line.startswith("pagecast run: warning: ") and helper_words in line and "unprefetched" in line
    return line


# -- the tests --------------------------------------------------------------------------


@needs_perf
@pytest.mark.parametrize(
    "args", [["--policy", "markov"], ["--policy", "nextline", "--no-fast"]], ids=["markov", "nextline-python"]
)
def test_collector_killed_midrun_python_path(weights, want, args, tmp_path):
    p, killer = _run_and_kill(args, weights, tmp_path, "collector", "running")
    assert killer.victim is not None and killer.program_running is True
    line = _check(p, want, f"the fault collector (pid {killer.victim}) died mid-run")
    assert "SIGKILL" in line and "prefetching and recording stopped" in line


@needs_perf
def test_collector_killed_midrun_fast_path(weights, want, tmp_path):
    p, killer = _run_and_kill(["--policy", "nextline"], weights, tmp_path, "collector", "running")
    assert killer.victim is not None and killer.program_running is True
    line = _check(p, want, f"the fault collector (pid {killer.victim}) died mid-run")
    assert "native fast path" in line and "state=died" in p.stderr


@needs_perf
def test_predictor_killed_midrun(weights, want, tmp_path):
    p, killer = _run_and_kill(["--policy", "markov"], weights, tmp_path, "predictor", "running")
    assert killer.victim is not None and killer.program_running is True
    line = _check(p, want, f"the predictor process (pid {killer.victim}) died mid-run")
    assert "SIGKILL" in line and "prefetching stopped" in line


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A real (tiny, one-epoch) LSTM model file: loading it imports torch in the predictor."""
    import torch

    from pagecast.learn.dataset import DatasetSpec, prepare, read_demand
    from pagecast.learn.models import ModelConfig
    from pagecast.learn.synthetic import write_pattern_trace
    from pagecast.learn.train import TrainConfig, save_model, train_model

    d = tmp_path_factory.mktemp("model")
    trace = write_pattern_trace(d / "pattern.parquet", 2_000)
    torch.set_num_threads(1)
    spec = DatasetSpec(horizon=4, vocab_size=64)
    data = prepare([read_demand(trace)], spec, val_fraction=0.1, test_fraction=0.1)
    mcfg = ModelConfig(kind="lstm", n_classes=len(data.vocab), n_slots=data.table.unknown, seq_len=16, horizon=4)
    tcfg = TrainConfig(epochs=1, batch=32, seed=0, threads=1)
    return save_model(d / "m.pt", train_model(data, mcfg, tcfg), data, spec, tcfg)


@needs_perf
def test_predictor_killed_while_model_loads(weights, want, model, tmp_path):
    p, killer = _run_and_kill(["--model", str(model)], weights, tmp_path, "predictor", "loading")
    assert killer.victim is not None and killer.program_started is False  # killed before the program existed
    line = _check(p, want, f"the predictor process (pid {killer.victim}) died while loading model:m.pt")
    assert "SIGKILL" in line
