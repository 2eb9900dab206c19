"""Write output files under a temporary name and rename them into place.

A reader never sees a half-written file: either the old content or the new one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


def temp_path_for(path: str | Path) -> Path:
    """A fresh temporary path in the same directory (so rename stays atomic)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
