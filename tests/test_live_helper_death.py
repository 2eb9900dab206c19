"""`pagecast run` when one of its helper processes dies: the program must not notice.

The helpers are the fault collector (native faultmon, the program's parent) and the
predictor process (forked by the daemon, named ``pagecast-pred``). Each test starts the
real CLI in a subprocess on the sparse-weights workload (wrapped in ``sh -c '...; exit
5'`` so a non-zero status must come through), finds the helper in the process tree and
SIGKILLs it at a moment fixed by the process tree itself (the workload is running, or the
program has not been started yet), never by a sleep.

Truths used: the workload's JSON result line from a run without pagecast (checksum and
token count must be identical), the shell's exit status 5, and the state of the program's
process at the moment of the kill read from /proc.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from perf_support import needs_perf

from pagecast.collect.faultmon import faultmon_binary
from pagecast.online import workload as wl

SMALL = ["--hot", "96", "--pool", "128", "--tail", "2", "--ctx", "8"]
TOKENS = 40  # the program runs for a few hundred ms after the kill (a whole run is ~0.5-1 s here)
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


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


@dataclass
class Killer:
    """Watches the tree under the pagecast process; SIGKILLs ``helper`` once ``when`` holds."""

    helper: str  # "collector" | "predictor"
    when: str  # "running": the workload is running | "loading": the program was not started yet
    victim: int | None = None
    program_running: bool | None = None  # the workload existed and was not a zombie at the kill
    program_started: bool | None = None  # the collector (which starts the program) existed at the kill
    done: threading.Event = field(default_factory=threading.Event)

    def watch(self, daemon_pid: int) -> None:
        threading.Thread(target=self._run, args=(daemon_pid,), daemon=True).start()

    def _run(self, daemon_pid: int) -> None:
        collector = faultmon_binary().name[:15]  # /proc/PID/comm keeps 15 characters
        program = wl.binary().name[:15]
        deadline = time.monotonic() + FIND_TIMEOUT_S
        try:
            while time.monotonic() < deadline and self.victim is None:
                kids = _children(daemon_pid)
                colls = [k for k in kids if _comm(k) == collector]
                preds = [k for k in kids if _comm(k) == "pagecast-pred"]
                progs = [d for c in colls for d in _descendants(c) if _comm(d) == program]
                target = colls if self.helper == "collector" else preds
                ready = bool(progs) if self.when == "running" else not colls
                if target and ready:
                    self.program_started = bool(colls)
                    self.program_running = any(_state(p) not in ("Z", "X") for p in progs)
                    os.kill(target[0], signal.SIGKILL)
                    self.victim = target[0]
                    return
                time.sleep(0.002)
        finally:
            self.done.set()


def _run_and_kill(args: list[str], weights: Path, killer: Killer) -> subprocess.CompletedProcess:
    wl.drop_cache(weights)
    cmd = [sys.executable, "-m", "pagecast", "run", *args, "--", "sh", "-c", f'"$@"; exit {STATUS}', "sh",
           *_argv(weights)]
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
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _check(p: subprocess.CompletedProcess, want: dict, helper_words: str) -> str:
    """Same output, status 5, and exactly one line about the dead helper; returns it."""
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == STATUS, p.stderr[-2000:]
    got = wl.parse_result(p.stdout)
    assert got.get("checksum") == want["checksum"] and got["tokens"] == TOKENS
    # the summary table names the error too; pagecast's own message lines start with its name
    died = [ln for ln in p.stderr.splitlines() if ln.startswith("pagecast run:") and "died" in ln]
    assert len(died) == 1, p.stderr[-2000:]
    assert not [ln for ln in p.stderr.splitlines() if ln.startswith("pagecast run: error")]
    line = died[0]
    assert line.startswith("pagecast run: warning: ") and helper_words in line and "unprefetched" in line
    return line


# -- the tests --------------------------------------------------------------------------

@needs_perf
@pytest.mark.parametrize("args", [["--policy", "markov"], ["--policy", "nextline", "--no-fast"]],
                         ids=["markov", "nextline-python"])
def test_collector_killed_midrun_python_path(weights, want, args):
    killer = Killer("collector", "running")
    p = _run_and_kill(args, weights, killer)
    assert killer.victim is not None and killer.program_running is True
    line = _check(p, want, f"the fault collector (pid {killer.victim}) died mid-run")
    assert "SIGKILL" in line and "prefetching and recording stopped" in line


@needs_perf
def test_collector_killed_midrun_fast_path(weights, want):
    killer = Killer("collector", "running")
    p = _run_and_kill(["--policy", "nextline"], weights, killer)
    assert killer.victim is not None and killer.program_running is True
    line = _check(p, want, f"the fault collector (pid {killer.victim}) died mid-run")
    assert "native fast path" in line and "state=died" in p.stderr


@needs_perf
def test_predictor_killed_midrun(weights, want):
    killer = Killer("predictor", "running")
    p = _run_and_kill(["--policy", "markov"], weights, killer)
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
def test_predictor_killed_while_model_loads(weights, want, model):
    killer = Killer("predictor", "loading")
    p = _run_and_kill(["--model", str(model)], weights, killer)
    assert killer.victim is not None and killer.program_started is False  # killed before the program existed
    line = _check(p, want, f"the predictor process (pid {killer.victim}) died while loading model:m.pt")
    assert "SIGKILL" in line

