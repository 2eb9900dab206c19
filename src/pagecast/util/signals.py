"""The signal state a program would have started bare, and passing signals on to it.

A program pagecast starts must see the signal dispositions and mask it would have seen
without pagecast: an ignored signal stays ignored across ``exec``, so a ``SIG_IGN`` that
pagecast sets for itself would otherwise reach the program. Python ignores SIGPIPE and
SIGXFSZ at start-up whatever it inherited; like ``subprocess`` (``restore_signals``),
those two count as default.

Stopping pagecast stops the program: while a program runs, the termination signals
pagecast receives are passed on to it and pagecast keeps recording until it exits.
SIGINT and SIGQUIT come from the terminal to the whole foreground process group, the
program included, so they are passed on only when pagecast is not the terminal's
foreground (``kill -INT`` from a script, no terminal): never twice.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

_PYTHON_IGNORES = {signal.SIGPIPE, signal.SIGXFSZ}
PASSED_ON = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
FROM_TERMINAL = (signal.SIGINT, signal.SIGQUIT)


@dataclass(frozen=True)
class SignalState:
    """Ignored signals and blocked signals, as bit masks (bit N-1 for signal N, as /proc shows them)."""

    ignored: int
    blocked: int

    def faultmon_args(self) -> list[str]:
        return ["--sig-ign", f"{self.ignored:x}", "--sig-mask", f"{self.blocked:x}"]


def _bit(sig: int) -> int:
    return 1 << (int(sig) - 1)


def current_state() -> SignalState:
    """The state this thread would hand a program it starts now, Python's own SIG_IGNs aside."""
    ignored = 0
    for sig in signal.valid_signals():
        if sig in _PYTHON_IGNORES or sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(sig) is signal.SIG_IGN:
                ignored |= _bit(sig)
    blocked = 0
    for sig in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        blocked |= _bit(sig)
    return SignalState(ignored, blocked)


def _terminal_foreground() -> bool:
    """Whether this process group is the foreground of its controlling terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


class SignalRelay:
    """While active, passes the termination signals this process receives on to the
    program (a signal that arrives before the program exists is passed on once
    ``attach`` names it). Python runs signal handlers in the main thread only: from any
    other thread the relay does nothing.

    >>> with SignalRelay() as relay:
    ...     relay.attach(pid)
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self._pid: int | None = None
        self._pending: list[int] = []
        self._done = False
        self._old: dict[int, object] = {}

    def __enter__(self) -> "SignalRelay":
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (*PASSED_ON, *FROM_TERMINAL):
                # an ignored signal (nohup) stays ignored, here and in the program
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._old[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, h in self._old.items():
            signal.signal(sig, h)  # type: ignore[arg-type]
        self._old = {}

    def attach(self, pid: int | None) -> None:
        self._pid = pid
        pending, self._pending = self._pending, []
        for sig in pending:
            self._deliver(sig)

    def detach(self) -> None:
        """The program has exited: its pid may be reused, so nothing more is sent to it
        (pagecast is only finishing its output; a signal now is not passed on)."""
        self._pid, self._pending, self._done = None, [], True

    def _deliver(self, sig: int) -> None:
        if self._done:
            return
        if self._pid is None:
            self._pending.append(sig)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self._pid, sig)

    def _handler(self, sig: int, _frame: object) -> None:
        self.received.append(sig)
        if sig in FROM_TERMINAL and _terminal_foreground():
            return  # the terminal sent it to the program's process group too
        self._deliver(sig)
