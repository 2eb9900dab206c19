"""Name a file known only by (device, inode): the last resort of the page-set recorder.

A read-family tracepoint names the file it read by device and inode. Files the recorded
program opened through libc's own internal calls (locale and time-zone files) are not
named by the page-set shim and are usually closed before the recorder sees the read. On
file systems whose NFS-export handle is (32-bit inode, generation) — ext2/3/4, xfs — a
generation of 0 skips the generation check, so ``open_by_handle_at`` opens the inode from
its number alone, and ``/proc/self/fd`` gives its path. Needs CAP_DAC_READ_SEARCH (root);
without it, or on another file system, the file stays unnamed.
"""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache

FILEID_INO32_GEN = 1
_libc = ctypes.CDLL(None, use_errno=True)


class _Handle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_uint32 * 2)]


@lru_cache(maxsize=None)
def _mount_point(dev: int) -> str | None:
    """Mount point of the file system with kernel dev_t ``dev`` (major << 20 | minor)."""
    want = f"{dev >> 20}:{dev & 0xFFFFF}"
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 4 and parts[2] == want:
                    return parts[4].replace("\\040", " ")
    except OSError:
        pass
    return None


def path_of_inode(dev: int, ino: int) -> str | None:
    """Path of inode ``ino`` on kernel device ``dev``, or None if it cannot be found."""
    if ino <= 0 or ino >= 1 << 32 or not hasattr(_libc, "open_by_handle_at"):
        return None
    mnt = _mount_point(dev)
    if mnt is None:
        return None
    try:
        mfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        h = _Handle(8, FILEID_INO32_GEN, (ctypes.c_uint32 * 2)(ino, 0))
        fd = _libc.open_by_handle_at(mfd, ctypes.byref(h), os.O_PATH | os.O_CLOEXEC)
        if fd < 0:
            return None
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
            st = os.stat(path)
        except OSError:
            return None
        finally:
            os.close(fd)
    finally:
        os.close(mfd)
    # a disconnected dentry reads as "/" or a stale name: accept only the file itself
    if st.st_ino != ino or ((os.major(st.st_dev) << 20) | os.minor(st.st_dev)) != dev:
        return None
    return path
