"""Whether a file is an ELF object: the dynamic loader (or the kernel) maps those with its
own calls, before any interposer of pagecast's is in place, so neither the pager nor the
advice shim sees their mappings."""

from __future__ import annotations

import os


def is_elf(path: str | os.PathLike[str]) -> bool:
    """The file's first four bytes are ELF's magic (False if it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # the header's page only, no read-ahead
        return os.pread(fd, 4, 0) == b"\x7fELF"
    except OSError:
        return False
    finally:
        os.close(fd)
