"""Open an input that must be a regular file without ever blocking.

A name checked a moment ago can be a FIFO by the time it is opened, and ``open()`` of a
FIFO waits for a writer: forever, in the middle of a run. So the file is opened
``O_NONBLOCK`` (a FIFO or device opens at once), its type is checked on the descriptor
(not on the name, which can change in between), and it is then read normally. The native
parts do the same (``native/infile.h``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO


class NotRegularFile(OSError):
    """The path names something other than a regular file (a FIFO, device, socket, directory)."""


def open_regular(path: str | Path) -> BinaryIO:
    """``open(path, "rb")`` that raises NotRegularFile instead of opening anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(0, "not a regular file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
