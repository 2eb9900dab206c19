"""Run a child to completion and know exactly when it exited (timed cold runs)."""

from __future__ import annotations

import subprocess
import threading
from typing import IO, Any, Sequence


def run_blocking(
    argv: Sequence[str], env: dict[str, str] | None, cwd: Any, err: IO[bytes] | int | None, timeout: float
) -> subprocess.Popen:
    """Run ``argv`` (stdin and stdout on /dev/null) to completion with a blocking wait.

    ``subprocess.run(timeout=...)`` polls the child with sleeps of up to 50 ms, which
    rounds every wall time up to that grain; here a timer kills the child on timeout and
    ``wait()`` returns the moment it exits. Raises ``subprocess.TimeoutExpired``."""
    proc = subprocess.Popen(
        list(argv), env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
    )
    expired = threading.Event()

    def kill() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        proc.wait()
    finally:
        timer.cancel()
    if expired.is_set():
        raise subprocess.TimeoutExpired(list(argv), timeout)
    return proc
