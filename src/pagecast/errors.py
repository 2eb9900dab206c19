"""One exception type for every user-facing failure.

The CLI prints a PagecastError as a single line and exits with status 2; anything else
is a bug and keeps its traceback. An OSError (permission denied, disk full, a directory
where a file was expected) is the environment, not a bug: the CLI prints it as one line
naming the file too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# Control characters (a newline in a file name) would break the one-line contract.
_ESCAPES = {i: f"\\x{i:02x}" for i in range(32)} | {10: "\\n", 13: "\\r", 9: "\\t", 127: "\\x7f"}


def one_line(text: object) -> str:
    """``text`` with control characters escaped, so it prints as exactly one line."""
    return str(text).translate(_ESCAPES)


class PagecastError(Exception):
    """A problem with the user's input or environment, reported as one line."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = one_line(os.fspath(path))
            if line is not None:
                where += f":{line}"
            where += ": "
        super().__init__(where + one_line(message))
        self.path = path
        self.line = line


def os_error_text(e: OSError) -> str:
    """``permission denied``, ``is a directory``, ...: strerror in lower case, as the CLI words it."""
    text = e.strerror or (errno.errorcode.get(e.errno or 0) if e.errno else None) or str(e) or type(e).__name__
    return text[:1].lower() + text[1:]


def from_os_error(e: OSError, what: str = "", path: str | Path | None = None) -> PagecastError:
    """A one-line PagecastError for an OSError: ``FILE: cannot read: permission denied``."""
    where = path if path is not None else e.filename
    return PagecastError((f"{what}: " if what else "") + os_error_text(e), path=where)


def check_readable(path: str | Path, what: str = "file") -> Path:
    """Refuse a missing path, a directory, a pipe or device, or an unreadable file, with one line naming it."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO must not block the check
    except FileNotFoundError:
        raise PagecastError(f"no such {what}", path=path) from None
    except IsADirectoryError:
        raise PagecastError(f"is a directory, not a {what}", path=path) from None
    except OSError as e:
        raise from_os_error(e, f"cannot read {what}", path) from None
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if stat.S_ISDIR(mode):
        raise PagecastError(f"is a directory, not a {what}", path=path)
    if not stat.S_ISREG(mode):
        # a FIFO or device would block or never end; importers also read files twice
        raise PagecastError("not a regular file (a pipe, device or socket)", path=path)
    return path


def check_output(path: str | Path) -> Path:
    """Refuse, before any work is done, an output file that cannot be written: its directory
    missing (never created: a typo must not make directories), a directory given for the
    file, or a directory that refuses new files (read-only, permissions, no space for an
    inode), found by creating and removing a private file there, as the real write will."""
    import tempfile

    path = Path(path)
    parent = path.parent
    if path.is_dir():
        raise PagecastError("is a directory, not a file to write", path=path)
    if not parent.is_dir():
        why = "does not exist" if not parent.exists() else "is not a directory"
        raise PagecastError(f"cannot write: directory {one_line(parent)} {why}", path=path)
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise PagecastError(f"cannot write: {os_error_text(e)}", path=path) from None
    os.close(fd)
    os.unlink(probe)
    return path
