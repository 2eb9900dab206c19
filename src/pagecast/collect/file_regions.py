"""File regions of a recording, one per path, reached by path (a mapping) or by (device,
inode) (the filemap tracepoints of page-set mode), and the file pages those tracepoints
name, translated into region page ranges cut at the file's end."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pagecast.collect.batches import FileUseBatch
from pagecast.collect.inode_path import path_of_inode
from pagecast.collect.region_table import RegionTable
from pagecast.constants import PAGE_SIZE


def kernel_dev(major: int, minor: int) -> int:
    """The kernel's internal dev_t (tracepoints): major << 20 | minor."""
    return (major << 20) | minor


class FileRegions:
    def __init__(self, table: RegionTable):
        self.table = table
        self.shim_path: str | None = None  # the page-set shim: its region belongs to the recorder
        self.by_path: dict[str, int] = {}
        self._by_inode: dict[tuple[int, int], int] = {}  # (kernel dev, ino) -> file region
        self._size: dict[int, int] = {}  # file region -> size in bytes last seen
        self._extent: dict[int, int] = {}  # file region -> bytes it had before the program shortened it
        self._dev: dict[int, int] = {}  # file region -> kernel dev
        self._mapped: set[int] = set()  # file regions with a real mapping (their base is known)
        self._ps_cache: np.ndarray | None = None
        self._pending: list[np.ndarray] = []  # FILE_USE_DTYPE samples not yet released

    def region(self, path: str, dev: int, ino: int, start: int, length: int, pgoff: int = 0, t_rel: int = 0) -> int:
        """The region of file ``path`` (one per path; an inode seen before its name joins it)."""
        regions = self.table.regions
        rid = self.by_path.get(path)
        by_inode = self._by_inode.get((dev, ino)) if ino else None
        if rid is None and by_inode is not None and regions[by_inode].path is None:
            r = regions[by_inode]  # read before it was named: name it now
            r.path, r.name = path, os.path.basename(path)
            self.table.changed.add(r.id)
            rid = r.id
            self.by_path[path] = rid
        if rid is None:
            rid = self._new_path_region(path, start, length, pgoff, t_rel)
        else:
            r = regions[rid]
            if pgoff + length > r.length:
                r.length = pgoff + length
                self.table.changed.add(rid)
            if length and rid not in self._mapped:
                r.base = start - pgoff  # first mapping of a file that was opened or read before
                self.table.changed.add(rid)
        if length:
            self._mapped.add(rid)
        if ino and (dev, ino) not in self._by_inode:
            self._by_inode[(dev, ino)] = rid
        if rid not in self._dev:
            self._dev[rid] = dev
            self._ps_cache = None
        return rid

    def _new_path_region(self, path: str, start: int, length: int, pgoff: int, t_rel: int) -> int:
        try:
            size = os.stat(path).st_size
        except OSError:
            size = 0
        r = self.table.new(
            name=os.path.basename(path),
            kind="file",
            path=path,
            file_offset=0,
            base=start - pgoff,
            length=max(size, pgoff + length),
            created_ns=t_rel,
            order=len(self.by_path),
        )
        if path == self.shim_path:
            r.extra["recorder"] = True  # the shim itself: part of the recorder, not of the run
        self.by_path[path] = r.id
        return r.id

    def note_extent(self, rid: int, end: int) -> None:
        """The page-set shim's word that the file reached ``end`` bytes before it was cut short."""
        self._extent[rid] = max(self._extent.get(rid, 0), end)

    def of_inode(self, dev: int, ino: int, pid: int) -> int:
        """The file region of (kernel dev, inode): known from a mapping or an announced open,
        else found among the process's open files, else opened by its inode number
        (``inode_path``), else a region named by the inode that a later mapping of the
        file will name."""
        rid = self._by_inode.get((dev, ino))
        if rid is not None:
            return rid
        path = _open_file_path(pid, dev, ino) or path_of_inode(dev, ino)
        if path is not None:
            return self.region(path, dev, ino, 0, 0)
        r = self.table.new(
            name=f"inode {dev >> 20}:{dev & 0xFFFFF}:{ino}",
            kind="file",
            path=None,
            file_offset=0,
            base=0,
            length=0,
            created_ns=0,
            order=len(self.by_path) + len(self._by_inode),
        )
        self._by_inode[(dev, ino)] = r.id
        self._dev[r.id] = dev
        return r.id

    def last_page(self, rid: int, wanted: int) -> int:
        """Last page the file had: the largest size seen (re-read when a call reaches past
        it) or announced by the shim before the program truncated it. A file that only
        shrinks later keeps the pages read while they existed."""
        size = self._size.get(rid)
        if size is None or wanted * PAGE_SIZE >= size:
            r = self.table.regions[rid]
            now = None
            try:
                now = os.stat(r.path).st_size if r.path else None
            except OSError:
                pass
            if now is None and size is None:  # no name (yet) or gone: the call's range is all there is to go by
                return wanted
            size = max(size or 0, now or 0, self._extent.get(rid, 0))
            self._size[rid] = size
            if size > r.length:
                r.length = size
                self.table.changed.add(rid)
        return -(-size // PAGE_SIZE) - 1

    def fault_regions(self, fault_tp_on: bool) -> np.ndarray:
        """Per region id: whether its fault samples give its mapped page set. With
        filemap:mm_filemap_fault on, only files whose faults it does not see (tmpfs and
        shared memory: device major 0, no filemap_fault) need the address-translated
        samples, which a mapping moved by mremap (perf reports no record of it) misplaces."""
        regions = self.table.regions
        if self._ps_cache is not None and len(self._ps_cache) == len(regions):
            return self._ps_cache
        out = np.zeros(len(regions), bool)
        for r in regions:
            if r.kind == "file" and not r.extra.get("recorder"):
                out[r.id] = not fault_tp_on or (self._dev.get(r.id, 0) >> 20) == 0
        self._ps_cache = out
        return out

    def add_uses(self, samples: np.ndarray) -> None:
        self._pending.append(samples)

    def release_uses(self, watermark: int | None, t0_ns: int) -> FileUseBatch | None:
        """File tracepoint samples older than the watermark, as file-region page ranges
        (call it after this release's mmap records were applied: they may name the inodes)."""
        if not self._pending:
            return None
        s = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        s = s[np.argsort(s["time"], kind="stable")]
        cut = len(s) if watermark is None else int(np.searchsorted(s["time"], np.uint64(watermark), side="left"))
        ready, rest = s[:cut], s[cut:]
        self._pending = [rest] if len(rest) else []
        if not len(ready):
            return None
        keys = (ready["dev"].astype(np.uint64) << np.uint64(32)) ^ ready["ino"]
        _, first_at, inv = np.unique(keys, return_index=True, return_inverse=True)
        rids = np.array(
            [self.of_inode(int(ready["dev"][i]), int(ready["ino"][i]), int(ready["pid"][i])) for i in first_at],
            np.int32,
        )
        region = rids[inv]
        first = ready["first"].astype(np.int64)
        last = ready["last"].astype(np.int64)
        # the call asked for its whole length; pages past the end of the file were not read
        limit = np.array([self.last_page(int(r), int(last[inv == k].max())) for k, r in enumerate(rids)], np.int64)
        last = np.minimum(last, limit[inv])
        keep = last >= first
        t = ready["time"].astype(np.int64) - np.int64(t0_ns)
        return FileUseBatch(
            t_ns=np.maximum(t, 0)[keep],
            tid=ready["tid"].astype(np.int32)[keep],
            pid=ready["pid"].astype(np.int32)[keep],
            region=region[keep],
            first=first[keep],
            last=last[keep],
            mapped=(ready["what"] == 1)[keep],
        )


def _open_file_path(pid: int, dev: int, ino: int) -> str | None:
    """Path of the file (kernel dev, ino) among the open files of ``pid``, if it is still open."""
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return None
    for fd in fds:
        try:
            st = os.stat(fd)
            if st.st_ino == ino and kernel_dev(os.major(st.st_dev), os.minor(st.st_dev)) == dev:
                return os.readlink(fd)
        except OSError:
            continue
    return None
