"""Whether this machine lets the tests record page faults with perf_event_open."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from pagecast.collect.faultmon import faultmon_binary, read_all
from pagecast.errors import PagecastError


def perf_unavailable_reason() -> str | None:
    try:
        read_all(["true"])
    except PagecastError as e:
        return str(e)
    return None


_why = perf_unavailable_reason()
needs_perf = pytest.mark.skipif(_why is not None, reason=f"perf not usable: {_why}")


def pagesets_unavailable_reason() -> str | None:
    """Why `pagecast record` would refuse page-set mode here (no read tracepoint), if it would."""
    from pagecast.collect.faultmon import FaultMonitor

    if _why is not None:
        return f"perf not usable: {_why}"
    try:
        FaultMonitor(["true"], pageset=True, require_reads=True)._pageset_args()
    except PagecastError as e:
        return str(e)
    return None


_pagesets_why = pagesets_unavailable_reason()
# recording page sets (`pagecast record`'s default) needs the read tracepoint as well as perf
needs_pagesets = pytest.mark.skipif(_pagesets_why is not None, reason=f"page sets not recordable: {_pagesets_why}")


class PredictorKiller:
    """An ``on_started`` hook for run_live that SIGKILLs the helper process it is given
    (``procs.worker_pid``: the predictor, or the collector on the fast path) as soon as
    the program has exec'd, and records whether the program was still running then.

    The moment is a condition, not a delay: the program is forked by the collector and is
    a copy of it until its exec, so a kill before that is a kill before the program ran
    (on a loaded machine a fixed 30 ms could fall on either side of it)."""

    def __init__(self, timeout_s: float = 120.0):
        self.timeout_s = timeout_s
        self.killed = threading.Event()
        self.program_was_running: list[bool] = []

    def __call__(self, procs) -> None:
        threading.Thread(target=self._kill, args=(procs,), daemon=True).start()

    def _kill(self, procs) -> None:
        collector = str(faultmon_binary())
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                if os.readlink(f"/proc/{procs.program_pid}/exe") != collector:
                    break
            except OSError:
                return  # the program is gone: nothing was killed, the test fails on killed
            time.sleep(0.001)
        os.kill(procs.worker_pid, signal.SIGKILL)
        try:  # mid-run: the traced program has not exited (not even as a zombie) yet
            state = Path(f"/proc/{procs.program_pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            state = "X"
        self.program_was_running.append(state not in ("Z", "X"))
        self.killed.set()
