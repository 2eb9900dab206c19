"""Whether this machine lets the tests record page faults with perf_event_open."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from pagecast.collect.faultmon import read_all
from pagecast.errors import PagecastError


def perf_unavailable_reason() -> str | None:
    try:
        read_all(["true"])
    except PagecastError as e:
        return str(e)
    return None


_why = perf_unavailable_reason()
needs_perf = pytest.mark.skipif(_why is not None, reason=f"perf not usable: {_why}")


class PredictorKiller:
    """An ``on_started`` hook for run_live that SIGKILLs the predictor process shortly after
    the program starts, and records whether the program was still running at that moment."""

    def __init__(self, delay_s: float = 0.03):
        self.delay_s = delay_s
        self.killed = threading.Event()
        self.program_was_running: list[bool] = []

    def __call__(self, session) -> None:
        threading.Timer(self.delay_s, self._kill, args=(session,)).start()

    def _kill(self, session) -> None:
        os.kill(session.worker_pid, signal.SIGKILL)
        try:  # mid-run: the traced program has not exited (not even as a zombie) yet
            state = Path(f"/proc/{session.program_pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            state = "X"
        self.program_was_running.append(state not in ("Z", "X"))
        self.killed.set()
