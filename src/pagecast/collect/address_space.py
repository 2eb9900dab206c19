"""The address spaces of a traced process tree, rebuilt from the collector's mmap, fork and
exec records, and fault addresses translated through them into region-relative pages.

Regions (see ``pagecast.trace.regions``):
- a file mapping → one region per file path (``FileRegions``); page = file offset // 4096,
  wherever the file was mapped and however often;
- ``[heap]`` → one region per process image, page relative to the start of the heap;
- ``[stack]`` → one region, page relative to the mapping reported;
- any other mapping without a file (anonymous mmap, thread stacks, ...) → a new "anon"
  region per mmap record, numbered by creation order among anon regions (``order``),
  which with its length identifies it in the next run of a deterministic program.
The kernel reports mmap (and mprotect changes) but not munmap: a newer mapping replaces
any older one at the same addresses, which is exact for every fault that can happen
(a fault only hits mapped memory). A fork copies its parent's map, an exec empties it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pagecast.collect.file_regions import FileRegions, kernel_dev
from pagecast.collect.region_table import RegionTable
from pagecast.constants import PAGE_SIZE
from pagecast.trace.regions import RegionMap


@dataclass
class _Proc:
    rmap: RegionMap = field(default_factory=lambda: RegionMap(PAGE_SIZE))
    heap: int = -1  # region id of this image's [heap]
    stack: int = -1


def _is_file_mapping(name: str, ino: int) -> bool:
    if name.startswith("/SYSV") or name.startswith("/memfd:") or name.startswith("/dev/shm/"):
        return name.startswith("/dev/shm/")
    return name.startswith("/") and ino != 0 and not name.startswith("/dev/zero")


class AddressSpaces:
    def __init__(self, table: RegionTable, files: FileRegions):
        self.table = table
        self.files = files
        self._procs: dict[int, _Proc] = {}
        self._anon_order = 0
        self.comm: dict[int, str] = {}  # pid -> name at its last exec
        self.no_shim: dict[int, str] = {}  # exec'd processes that have not mapped the page-set shim (yet)

    def new_process(self, pid: int) -> None:
        self._procs[pid] = _Proc()

    def fork(self, pid: int, ppid: int) -> None:
        parent = self._procs.get(ppid)
        child = _Proc()
        if parent is not None:
            child = _Proc(rmap=parent.rmap.copy(), heap=parent.heap, stack=parent.stack)
        self._procs[pid] = child

    def exec(self, pid: int) -> None:
        self._procs[pid] = _Proc()
        if self.files.shim_path:
            self.no_shim[pid] = self.comm.get(pid, "?")

    def translate(self, s: np.ndarray, region_out: np.ndarray, page_out: np.ndarray) -> None:
        """Region and page of each sample of ``s`` (SAMPLE_DTYPE) under the maps as they are now."""
        pids = s["pid"]
        for pid in np.unique(pids):
            proc = self._procs.get(int(pid))
            if proc is None or not len(proc.rmap):
                continue
            sel = pids == pid
            r, p = proc.rmap.translate(s["addr"][sel])
            region_out[sel] = r
            page_out[sel] = np.where(r >= 0, p, page_out[sel])

    def mmap(self, m: np.void, name: str, t_rel: int) -> None:
        """Apply one mmap record (MMAP_DTYPE) of file or mapping ``name``."""
        pid = int(m["pid"])
        if pid not in self._procs:
            self._procs[pid] = _Proc()
        proc = self._procs[pid]
        start, length = int(m["addr"]), int(m["len"])
        if _is_file_mapping(name, int(m["ino"])):
            self._map_file(proc, m, name, t_rel)
        elif name == "[heap]":
            self._map_heap(proc, start, length, t_rel)
        elif name == "[stack]":
            self._map_stack(proc, start, length, t_rel)
        else:
            self._map_anon(proc, m, name, t_rel)

    def _map_file(self, proc: _Proc, m: np.void, name: str, t_rel: int) -> None:
        start, length, pgoff = int(m["addr"]), int(m["len"]), int(m["pgoff"])
        if name == self.files.shim_path:
            self.no_shim.pop(int(m["pid"]), None)
        dev = kernel_dev(int(m["maj"]), int(m["min"]))
        if int(m["prot"]) == 0:
            # PROT_NONE: the page-set shim naming an opened file or saying how far it
            # reached before it was cut short (one page at its last page), or the
            # loader's guard gap in a library; either way nothing there can be touched
            rid = self.files.region(name, dev, int(m["ino"]), 0, 0, 0, t_rel)
            if length == PAGE_SIZE:
                self.files.note_extent(rid, pgoff + length)
            return
        rid = self.files.region(name, dev, int(m["ino"]), start, length, pgoff, t_rel)
        proc.rmap.add(start, start + length, rid, pgoff // PAGE_SIZE)

    def _new_numbered(self, kind: str, start: int, length: int, t_rel: int) -> int:
        """A new [heap] or [stack] region, numbered among those of its kind."""
        order = self.table.count(kind)
        return self.table.new(name=f"[{kind}]", kind=kind, base=start, length=length, created_ns=t_rel, order=order).id

    def _map_heap(self, proc: _Proc, start: int, length: int, t_rel: int) -> None:
        end = start + length
        if proc.heap < 0:
            proc.heap = self._new_numbered("heap", start, length, t_rel)
        r = self.table.regions[proc.heap]
        if end - r.base > r.length:
            r.length = end - r.base
            self.table.changed.add(r.id)
        proc.rmap.add(start, end, r.id, (start - r.base) // PAGE_SIZE)

    def _map_stack(self, proc: _Proc, start: int, length: int, t_rel: int) -> None:
        if proc.stack < 0:
            proc.stack = self._new_numbered("stack", start, length, t_rel)
        r = self.table.regions[proc.stack]
        proc.rmap.add(start, start + length, r.id, max(start - r.base, 0) // PAGE_SIZE)

    def _map_anon(self, proc: _Proc, m: np.void, name: str, t_rel: int) -> None:
        start, length = int(m["addr"]), int(m["len"])
        anon = name in ("", "//anon") or name.startswith("[anon") or name.startswith("/dev/zero")
        kind = "anon" if anon else "other"
        r = self.table.new(
            name=name or "//anon",
            kind=kind,
            base=start,
            length=length,
            created_ns=t_rel,
            order=self._anon_order if anon else -1,
            extra={"prot": int(m["prot"]), "flags": int(m["flags"])},
        )
        if anon:
            self._anon_order += 1
        proc.rmap.add(start, start + length, r.id, 0)
