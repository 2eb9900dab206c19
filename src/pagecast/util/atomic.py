"""Write output files under a temporary name and rename them into place.

A reader never sees a half-written file: either the old content or the new one. Every
file pagecast creates beside an output is created exclusively (``O_EXCL``: an existing
file or a planted symlink is never opened, so a run as root cannot be steered into
overwriting another file), and gets the permissions the umask allows, like a file a
shell redirection creates. Temporary names carry the writer's pid, so a run that finds
the temporary file of a process that no longer exists (killed by SIGKILL, power loss)
removes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Iterator

from pagecast.errors import PagecastError, check_output, os_error_text

_TEMP_TAIL = re.compile(r"(\d+)\.[A-Za-z0-9_]{8}\.tmp")  # <pid>.<mkstemp's 8 random characters>.tmp


def current_umask() -> int:
    """The process umask, read without changing it (os.umask would race with other threads)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def create_exclusive(path: str | Path, mode: int = 0o666) -> int:
    """Open a new file for writing; FileExistsError if anything (a file, a symlink) is there."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def pid_alive(pid: int) -> bool:
    """Whether a process of that pid exists (ours counts; another user's too)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(path: str | Path) -> int:
    """Delete temporary files of ``path`` left by processes that died before renaming them."""
    path = Path(path)
    prefix = f".{path.name}."
    removed = 0
    with contextlib.suppress(OSError):
        with os.scandir(path.parent) as it:
            for entry in it:
                if not entry.name.startswith(prefix):
                    continue
                m = _TEMP_TAIL.fullmatch(entry.name[len(prefix) :])
                if m and not pid_alive(int(m.group(1))) and entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
                        removed += 1
    return removed


def temp_path_for(path: str | Path) -> Path:
    """A fresh temporary path in the same directory (so rename stays atomic)."""
    path = Path(path)
    check_output(path)
    remove_stale_temps(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    except OSError as e:  # name the output, not a temporary the user never asked for
        raise PagecastError(f"cannot write: {os_error_text(e)}", path=path) from None
    try:
        # mkstemp creates 0600; the renamed output should look like any other new file.
        os.fchmod(fd, 0o666 & ~current_umask())
    finally:
        os.close(fd)
    return Path(tmp)


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path; rename it to ``path`` if the block succeeds, else delete it."""
    path = Path(path)
    tmp = temp_path_for(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(text)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)
