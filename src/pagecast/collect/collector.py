"""The native fault collector as a process: checked command, started with the read end of
a pipe as its stream, stopped (the traced program first) and reaped."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pagecast.collect.frames import FrameReader
from pagecast.errors import PagecastError
from pagecast.util.native import build


def faultmon_binary() -> Path:
    # one collector binary: the live loop's native fast path is linked in, off unless --fast
    return build("faultmon", ["faultmon.c", "live/fastpath.c"], shared=False, ldflags=("-lpthread",))


@dataclass
class CollectorOptions:
    ring_pages: int = 4096
    poll_ms: int = 20
    fast: str | Path | None = None  # the native fast path's config file (pagecast.live.fastpath)
    fast_poll_ms: int = 1
    fast_wake_minor: int = 0
    pageset: bool = False  # page-set mode: the shim and the filemap tracepoints
    require_reads: bool = False

    def args(self) -> list[str]:
        """The collector's options but page-set mode's (``filemap_tp.pageset_setup``)."""
        out = ["--ring-pages", str(self.ring_pages), "--poll-ms", str(self.poll_ms)]
        if self.fast:
            out += ["--fast", str(self.fast), "--fast-poll-ms", str(self.fast_poll_ms)]
            if self.fast_wake_minor:
                out += ["--fast-wake-minor", str(int(self.fast_wake_minor))]
        return out


class CollectorProcess:
    """``binary options --fd W ... -- cmd``, its stream read through ``reader``."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None, stdout: Any, stderr: Any):
        r, w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [argv[0], "--fd", str(w), *argv[1:]], pass_fds=(w,), env=env, stdout=stdout, stderr=stderr
            )
        except OSError as e:
            os.close(r)
            raise PagecastError(f"cannot start the fault collector: {e}") from None
        finally:
            os.close(w)
        self.reader = FrameReader(r)

    def stop(self, traced_pid: int | None, exited: bool) -> None:
        """End the traced program if it still runs (``exited``: its exit was reported), close
        the stream and reap the collector."""
        if self.proc.poll() is None and not exited and not self.reader.eof:
            # Stopping early: end the traced program, then the collector. Not after the
            # collector closed its end (it died): the program is not ours to end then, and
            # a collector that is exiting but not yet reaped still looks alive to poll().
            if traced_pid:
                try:
                    os.kill(traced_pid, 15)
                except ProcessLookupError:
                    pass
        self.reader.close()
        self.wait()

    def wait(self) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
