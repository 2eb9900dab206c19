"""Run a user's program to completion: signals pagecast receives are passed on to it
(``util/signals.py``), and for timed cold runs, know exactly when it exited."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import threading
from typing import IO, Any, Sequence

from pagecast.errors import PagecastError
from pagecast.util.signals import SignalRelay


def children_read_bytes() -> int:
    """Bytes this process's waited-for children (and their waited-for children) have read from
    block devices so far: their block input, which counts every read a child submitted, its
    page-cache read-ahead included, and no other process's."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock * 512


def check_command(exe: str, env: dict[str, str] | None = None) -> None:
    """One line, before anything is set up for the program, where ``exe`` cannot be started
    (a wrapper such as the ``sh`` that enters a memory cgroup would otherwise report it in
    its own words and exit 127 as if the program had run)."""
    if os.sep not in exe and shutil.which(exe, path=(env or os.environ).get("PATH")) is None:
        raise PagecastError(f"command not found: {exe}")
    if os.sep in exe and not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise PagecastError(f"command not found or not executable: {exe}")


def run_program(argv: Sequence[str], **popen_kw: Any) -> int:
    """Run ``argv`` to its end and return its returncode (``-N``: killed by signal N).
    A SIGTERM (or a SIGINT not from the terminal) sent to pagecast meanwhile goes to the
    program, and pagecast waits for it: stopping pagecast never orphans the program."""
    with SignalRelay() as relay:
        proc = subprocess.Popen(list(argv), **popen_kw)
        relay.attach(proc.pid)
        try:
            return proc.wait()
        finally:
            relay.detach()


def run_blocking(
    argv: Sequence[str], env: dict[str, str] | None, cwd: Any, err: IO[bytes] | int | None, timeout: float
) -> subprocess.Popen:
    """Run ``argv`` (stdin and stdout on /dev/null) to completion with a blocking wait.

    ``subprocess.run(timeout=...)`` polls the child with sleeps of up to 50 ms, which
    rounds every wall time up to that grain; here a timer kills the child on timeout and
    ``wait()`` returns the moment it exits. Raises ``subprocess.TimeoutExpired``."""
    relay = SignalRelay().__enter__()
    try:
        proc = subprocess.Popen(
            list(argv), env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
        )
    except BaseException:
        relay.__exit__(None, None, None)
        raise
    relay.attach(proc.pid)
    expired = threading.Event()

    def kill() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        proc.wait()
    finally:
        relay.detach()
        timer.cancel()
        relay.__exit__(None, None, None)
    if expired.is_set():
        raise subprocess.TimeoutExpired(list(argv), timeout)
    return proc
