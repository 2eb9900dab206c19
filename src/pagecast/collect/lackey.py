"""Full memory-access traces: run a program under valgrind lackey, import its output.

lackey writes one line per load/store/instruction, far more than the page faults perf
sees; the log goes to a temporary file beside the output (streamed by valgrind, then
imported in blocks), so memory stays bounded. That file lives in a private directory
(mode 0700, random name), never at a predictable path where a planted symlink could
redirect valgrind's writes; ``%`` in its path is escaped because valgrind expands
``%p`` and ``%q{VAR}`` in ``--log-file``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from pagecast.errors import PagecastError, check_output
from pagecast.importers.lackey import import_trace
from pagecast.util.process import run_program


@dataclass
class LackeyResult:
    trace: str
    command: list[str]
    exit_status: int
    rows: int
    instructions: int
    loads: int
    stores: int
    regions: int
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def valgrind_escape(path: Path) -> str:
    """A path as valgrind's --log-file takes it: it expands %p, %n and %q{VAR}, and %% is a literal %."""
    return str(path).replace("%", "%%")


def record_lackey(
    cmd: Sequence[str], out: str | Path, *, stdout: Any = None, instructions: bool = False
) -> LackeyResult:
    cmd = [str(c) for c in cmd]
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise PagecastError("valgrind not found (apt-get install valgrind) — needed for --lackey")
    if shutil.which(cmd[0]) is None:
        raise PagecastError(f"command not found: {cmd[0]}")
    out = check_output(Path(out))  # never creates the directory
    start = time.monotonic()
    private = Path(tempfile.mkdtemp(prefix=".pagecast-lackey-", dir=out.parent))
    log = private / "lackey.log"
    try:
        returncode = run_program(
            [valgrind, "--tool=lackey", "--trace-mem=yes", f"--log-file={valgrind_escape(log)}", *cmd], stdout=stdout
        )
        if not log.exists():
            raise PagecastError(f"valgrind exited with status {returncode} and wrote no lackey log", path=out)
        stats = import_trace(
            log, out, instructions=instructions, source="lackey", meta={"command": cmd, "cwd": os.getcwd()}
        )
    finally:
        shutil.rmtree(private, ignore_errors=True)
    code = returncode if returncode >= 0 else 128 - returncode
    return LackeyResult(
        trace=str(out),
        command=cmd,
        exit_status=code,
        rows=stats["rows"],
        instructions=stats["instructions"],
        loads=stats["loads"],
        stores=stats["stores"],
        regions=stats["regions"],
        duration_s=round(time.monotonic() - start, 3),
    )
