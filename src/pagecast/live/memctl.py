"""The memory controller: a memory plan applied to an unmodified program from outside.

It runs as a process inside the program's memory cgroup (so whatever it reads is charged
where the program's pages are) and acts through the kernel's page cache:

- **keep**: the plan's keep chunks are mapped and ``mlock``ed by the controller, piece by
  piece, and only while the locked total leaves the limit room for the program's own
  memory, the prefetch window and the plan's room for each of the program's threads:
  a locked page is never reclaimed, so the kernel's LRU cannot push the kept part out, and
  pinning can never drive the cgroup to the OOM killer. A file's keep set of
  ``UNUSED_WORTH`` or more is locked only once the file is in use: named on the program's
  command line, or open or mapped by a process of the cgroup; a plan made for another input (another
  database, another model) would otherwise lock memory the program needs for its own data;
  such files are reported (``files_unused``);
- **where the program is**: the program's page table (``/proc/PID/pagemap``) of its
  mappings of the plan's files, read each poll for the streamed chunks around its
  position and all of them every ``FULL_SCAN_EVERY`` polls: a chunk whose pages became
  present was entered (a fault, or the kernel's fault-around after one);
- **evict after use**: every streamed chunk still present once the program has entered
  ``RECENT`` later ones is paged out of the program with ``process_madvise(MADV_PAGEOUT)``
  on a pidfd (its clean file pages are reclaimed at once, mapped by nobody else);
- **prefetch**: on entering a streamed chunk, the next ``prefetch_chunks`` along the
  plan's ``next`` chain are read ahead with ``posix_fadvise(WILLNEED)``, each only while
  the cgroup's committed memory (its usage less its inactive file pages, which reclaim
  takes first: the kept pages are locked, so never among them) leaves room for it beside
  ``SLACK_CHUNKS``: a prefetch deferred is retried next poll, after the chunks behind the
  program were paged out. A successor that follows its chunk in the file, in a mapping the
  kernel reads ahead in (not advised random, on a device whose read-ahead window holds a
  chunk), is left to the kernel: its read-ahead of an in-order reader keeps larger requests
  under way, in larger folios, than a forced read of each chunk from outside, which also
  waits for room (docs/oversubscription.md); only the jumps are fetched from outside.

Files read with ``read()`` (no mapping) are not acted on: the page table shows nothing of
them (docs/oversubscription.md).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import select
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pagecast.constants import PAGE_SIZE
from pagecast.plan.format import FileIdentity
from pagecast.plan.memory_format import RECENT_CHUNKS, MemoryPlan
from pagecast.util.device_model import read_ahead_bytes_of

SYS_PROCESS_MADVISE = 440  # x86_64 and the generic table
MADV_COLD = 20
MADV_PAGEOUT = 21
RECENT = RECENT_CHUNKS
FULL_SCAN_EVERY = 10
# chunks past the prefetch window looked at each poll: a program streaming from the cache
# crosses several chunks between two polls, and one lost between full scans is not evicted
LOOK_AHEAD = 8
SLACK_CHUNKS = 2
POLL_S = 0.003
# polls between two looks at which plan files the program's processes have open or mapped:
# often while it starts (OPENED_SOON polls), then seldom (a look reads every process's maps)
OPENED_EVERY = 2
OPENED_SOON = 300
OPENED_LATER = 30
# a keep set this large waits until its file is in use, and is reported if it never is;
# smaller ones are the libraries and caches a program opens for a moment between two looks
UNUSED_WORTH = 4 << 20
MIN_REGRETS = 8
SMAPS_EVERY_S = 0.5
# keep ranges are locked in pieces of this size at most (whole chunks): one mapping and one
# mlock each, few enough that a large keep set is locked within the program's first pass,
# small enough to let go of a part when the program's own memory grows
PIN_PIECE = 4 << 20


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]


def process_madvise(pidfd: int, addr: int, length: int, advice: int) -> int:
    """Bytes advised, or -errno."""
    iov = _Iovec(addr, length)
    r = _libc.syscall(SYS_PROCESS_MADVISE, pidfd, ctypes.byref(iov), 1, advice, 0)
    return r if r >= 0 else -ctypes.get_errno()


@dataclass
class ControllerStats:
    pinned_bytes: int = 0
    pin_refused_bytes: int = 0  # keep chunks left unpinned: the limit had no room for them
    pageouts: int = 0
    pageout_bytes: int = 0
    prefetches: int = 0
    prefetch_bytes: int = 0
    left_to_read_ahead: int = 0  # in-order successors the kernel's read-ahead brings itself
    deferred: int = 0  # prefetches postponed because the cgroup had no room
    unpinned_bytes: int = 0  # keep pieces let go: the program's own memory grew into their room
    regrets: int = 0  # streamed chunks entered again soon after being paged out
    stream_off: bool = False  # evict-after-use and prefetch stopped: they cost more than they saved
    entered: int = 0
    files_changed: list[str] = field(default_factory=list)
    files_unused: list[str] = field(default_factory=list)  # keep sets of UNUSED_WORTH+ never opened
    files_mapped: int = 0
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return dict(vars(self))


@dataclass
class _File:
    idx: int
    path: str
    fd: int
    size: int
    dev: int
    ino: int
    keep: list[tuple[int, int]]
    stream: set[int]
    next: dict[int, int]
    maps: list[tuple[int, int, int]] = field(default_factory=list)  # (start, end, file offset)
    random_maps: set[int] = field(default_factory=set)  # starts of the mappings advised random
    reads_ahead: bool = True  # the device's read-ahead window holds a chunk


def _maps_of(pid: int) -> list[tuple[int, int, int, int, int]]:
    """(start, end, offset, dev, inode) of the file mappings of ``pid``."""
    out = []
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        f = line.split(None, 5)
        if len(f) < 5 or f[4] == "0":
            continue
        a, b = (int(x, 16) for x in f[0].split("-"))
        maj, mi = (int(x, 16) for x in f[3].split(":"))
        out.append((a, b, int(f[2], 16), os.makedev(maj, mi), int(f[4])))
    return out


def _random_maps(pid: int) -> set[int]:
    """Starts of ``pid``'s mappings advised random (``rr`` among their VmFlags): the kernel
    reads nothing ahead of a fault there."""
    out: set[int] = set()
    start = 0
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("VmFlags:"):
            if " rr" in line:
                out.add(start)
        else:
            head = line.split(None, 1)[0] if line else ""
            if "-" in head and not head.endswith(":"):  # a mapping's first line: START-END PERMS ...
                start = int(head.split("-", 1)[0], 16)
    return out


def _files_open(pid: int) -> set[tuple[int, int]]:
    """(dev, inode) of the files ``pid`` maps or has open."""
    out = {(dev, ino) for _, _, _, dev, ino in _maps_of(pid)}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for name in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return out


def _threads_of(pid: int) -> int:
    """The program's threads now (1 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Threads:"):
                    return max(1, int(line.split()[1]))
    except (OSError, ValueError):
        pass
    return 1


class Controller:
    def __init__(
        self,
        plan: MemoryPlan,
        pid: int,
        usage: Callable[[], int],
        warn: Callable[[str], None] = lambda s: None,
        unreclaimable: Callable[[], int] | None = None,
        pidfd: int | None = None,
        procs: Callable[[], list[int]] | None = None,
        named: Sequence[str] = (),
    ):
        """``pidfd``: the program's, opened by its parent before it could be reaped (a program
        that ends at once is otherwise gone before the controller gets to it); else opened here.
        ``procs``: the processes whose open files say which plan files are in use (the
        cgroup's: a shell's children), else the program alone. ``named``: files named on the
        program's command line, in use from the start (their keep sets are locked while the
        program starts, before it opens them)."""
        self.plan = plan
        self.pid = pid
        self.procs = procs or (lambda: [pid])
        self.opened: set[int] = set()  # plan files some process of the program opened or mapped
        self.usage = usage
        self.unreclaimable = unreclaimable
        self.paged_at: dict[tuple[int, int], int] = {}  # chunk -> chunks entered when it was paged out
        self.warn = warn
        self.cb = plan.chunk_bytes
        self.stats = ControllerStats()
        self.pidfd = os.pidfd_open(pid) if pidfd is None else pidfd
        try:
            self.pagemap = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
        except (FileNotFoundError, ProcessLookupError):
            self.pagemap = -1  # the program has ended and was reaped: nothing to act on
        self.files: list[_File] = []
        self.by_key: dict[tuple[int, int], _File] = {}
        for i, fp in enumerate(plan.files):
            if not fp.keep and not fp.stream:
                # listed for its predicted bytes only (a library, or a file pagecast's own
                # recording shim was loaded from): nothing to open, and gone is no error
                continue
            try:
                fd = os.open(fp.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                self.stats.files_changed.append(fp.path)  # removed since the plan was made
                continue
            except OSError as e:
                self.stats.errors.append(f"{fp.path}: {e.strerror}")
                continue
            st = os.fstat(fd)
            now = FileIdentity(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
            if fp.identity.differences(now):
                self.stats.files_changed.append(fp.path)
                os.close(fd)
                continue
            stream = {a + k for a, n in fp.stream for k in range(n)}
            f = _File(i, fp.path, fd, st.st_size, st.st_dev, st.st_ino, fp.keep, stream, fp.next)
            self.files.append(f)
            self.by_key[(st.st_dev, st.st_ino)] = f
        for path in named:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in self.by_key:
                self.opened.add(self.by_key[(st.st_dev, st.st_ino)].idx)
        # a small keep set is locked at once: it takes little from the program even if it is
        # not used, and a file the loader opens for a moment would keep the look going all run
        self.opened.update(f.idx for f in self.files if sum(n for _, n in f.keep) * self.cb < UNUSED_WORTH)
        self.present: set[tuple[int, int]] = set()
        self.recent: deque[tuple[int, int]] = deque(maxlen=RECENT)
        self.issued: set[tuple[int, int]] = set()
        self.pending: deque[tuple[int, int]] = deque()
        self._pins: list[tuple[int, int]] = []  # (address, length) locked
        self.threads = 1
        self.maps_stale = True  # read the program's mappings before acting on them
        windows = {f.idx: read_ahead_bytes_of(f.path) for f in self.files}
        self.read_around = max(windows.values(), default=0)
        for f in self.files:
            f.reads_ahead = windows[f.idx] >= self.cb
        self._seen_maps: list[tuple[int, int, int]] = []
        self._smaps_at = 0.0
        self._pin_queue = [(f, a * self.cb, n * self.cb) for f in self.files for a, n in f.keep]
        for f in self.files:
            if not plan.files[f.idx].followed():
                f.stream = set()  # no order to follow: the kernel streams this file
        if not any(f.stream for f in self.files):
            self.stats.stream_off = True

    # -- where the program's mappings are --------------------------------------------
    def refresh_maps(self) -> None:
        self.maps_stale = False
        for f in self.files:
            f.maps = []
        for a, b, off, dev, ino in _maps_of(self.pid):
            f = self.by_key.get((dev, ino))
            if f is not None:
                f.maps.append((a, b, off))
        seen = sorted(m for f in self.files for m in f.maps)
        now = time.monotonic()
        # smaps walks the page tables: read when the mappings change, and seldom besides (a
        # program may advise a mapping after the look that found it)
        if seen != self._seen_maps or now - self._smaps_at > SMAPS_EVERY_S:
            self._seen_maps, self._smaps_at = seen, now
            rand = _random_maps(self.pid) if seen else set()
            for f in self.files:
                f.random_maps = {a for a, _, _ in f.maps if a in rand}
        self.stats.files_mapped = sum(1 for f in self.files if f.maps)
        self.threads = _threads_of(self.pid)

    def note_opened(self) -> None:
        """Which plan files with a keep set the program's processes have open or mapped now."""
        me = os.getpid()
        waiting = {(f.dev, f.ino): f.idx for f in self.files if f.keep and f.idx not in self.opened}
        if not waiting:
            return
        for pid in self.procs():
            if pid != me:
                self.opened.update(waiting[k] for k in _files_open(pid) & waiting.keys())

    def stream_room(self) -> int:
        """The room the streamed part needs beside the locked keep set, for each thread of the
        program: the plan's room (two reads around a miss; a plan without one: two of the
        device's read-ahead windows), never less than one window. Each thread that misses has
        the kernel's read-around of it charged and locked until the device returns it, and a
        sequential reader's next window already under way: three threads reading 8 MiB
        windows beside a keep set locked for a 1 MiB room left a 40 MiB limit no page reclaim
        could take, and its OOM killer took the controller."""
        per_thread = max(self.plan.room_bytes or 2 * self.read_around, self.read_around)
        return self.threads * per_thread

    def _addr(self, f: _File, chunk: int) -> list[tuple[int, int]]:
        """The program's address ranges of ``chunk`` of ``f``."""
        lo, hi = chunk * self.cb, min((chunk + 1) * self.cb, f.size)
        out = []
        for a, b, off in f.maps:
            s, e = max(lo, off), min(hi, off + (b - a))
            if s < e:
                out.append((a + s - off, e - s))
        return out

    def _is_present(self, f: _File, chunk: int) -> bool:
        for addr, n in self._addr(f, chunk):
            try:
                buf = os.pread(self.pagemap, n // PAGE_SIZE * 8, addr // PAGE_SIZE * 8)
            except OSError:
                continue
            seg = buf[7::8]
            if seg and max(seg) & 0x80:
                return True
        return False

    # -- acting ---------------------------------------------------------------------
    def pin_some(self, budget_s: float = 0.002, only: set[int] | None = None) -> bool:
        """Lock keep pieces while the limit has room for them, ``budget_s`` of work per call;
        whether any was locked. ``only``: the files whose pieces may be locked now (the
        others' pieces wait in the queue)."""
        t0 = time.monotonic()
        before = self.stats.pinned_bytes
        room = self.plan.limit_bytes - self.plan.reserve_bytes - (self.plan.prefetch_chunks + SLACK_CHUNKS) * self.cb
        waiting: list[tuple[_File, int, int]] = []
        while self._pin_queue and time.monotonic() - t0 < budget_s:
            f, off, n = self._pin_queue.pop(0)
            if only is not None and f.idx not in only:
                waiting.append((f, off, n))
                continue
            n = min(n, f.size - off)
            if n <= 0:
                continue
            piece = min(n, max(self.cb, PIN_PIECE // self.cb * self.cb))
            if self.stats.pinned_bytes + piece > room:  # beyond the plan's room: never
                self.stats.pin_refused_bytes += n
                continue
            if not self._room(piece) or self._free_room() - piece < self.stream_room():
                # the cgroup is full right now, or the piece would take the streamed part's room:
                # again at a later poll
                self._pin_queue.insert(0, (f, off, n))
                break
            addr = _libc.mmap(None, piece, mmap.PROT_READ, mmap.MAP_SHARED, f.fd, off)
            if addr in (None, ctypes.c_void_p(-1).value):
                self.stats.errors.append(f"pin {f.path}: mmap: {os.strerror(ctypes.get_errno())}")
                continue
            # the piece and nothing around it: mlock faults the pages in, and a fault in a
            # mapping left to the kernel's read-around reads its whole window (8 MiB on a disk
            # set so) for every scattered piece; one request for the piece instead
            _libc.madvise(addr, piece, mmap.MADV_RANDOM)
            os.posix_fadvise(f.fd, off, piece, os.POSIX_FADV_WILLNEED)
            if _libc.mlock(addr, piece) != 0:
                self.stats.errors.append(f"mlock {f.path}: {os.strerror(ctypes.get_errno())}")
                _libc.munmap(addr, piece)
                self._pin_queue.clear()
                return self.stats.pinned_bytes > before  # nothing more can be locked
            self._pins.append((addr, piece))
            self.stats.pinned_bytes += piece
            if n > piece:
                self._pin_queue.insert(0, (f, off + piece, n - piece))
        self._pin_queue.extend(waiting)
        return self.stats.pinned_bytes > before

    def _free_room(self) -> int:
        """What the limit leaves for page cache to cycle in (unbounded without a reading)."""
        if self.unreclaimable is None:
            return 1 << 62
        return self.plan.limit_bytes - self.unreclaimable()

    def unpin_to_room(self) -> None:
        """Let go of the last keep pieces while the room left for the streamed part is below
        ``stream_room``: the program's own memory (or its threads) grew (its heap, a cache), and a locked page it
        cannot reclaim would otherwise make every read-ahead window evict the one before."""
        if not self._pins:
            return
        short = self.stream_room() - self._free_room()
        while short > 0 and self._pins:
            addr, n = self._pins.pop()
            _libc.munlock(addr, n)
            _libc.munmap(addr, n)
            self.stats.pinned_bytes -= n
            self.stats.unpinned_bytes += n
            short -= n
            self._pin_queue.clear()  # what was let go is not taken again

    def _room(self, n: int) -> bool:
        """Whether ``n`` more bytes fit: what reclaim cannot take first, plus every chunk
        prefetched and not yet paged out (its pages may still be under read, and a page
        under read cannot be reclaimed either), below the limit less the slack."""
        inflight = len(self.issued) * self.cb
        return self.usage() + inflight + n <= self.plan.limit_bytes - SLACK_CHUNKS * self.cb

    def _kernel_reads_ahead(self, f: _File, chunk: int) -> bool:
        """Whether a fault just before ``chunk`` makes the kernel read it ahead itself: a
        mapping of it not advised random, on a device whose window holds a chunk."""
        if not f.reads_ahead:
            return False
        off = chunk * self.cb
        return any(o <= off < o + (b - a) and a not in f.random_maps for a, b, o in f.maps)

    def prefetch_from(self, key: tuple[int, int]) -> None:
        f = self.files_by_idx(key[0])
        c = key[1]
        for _ in range(self.plan.prefetch_chunks):
            prev, c = c, f.next.get(c, -1)  # no confident successor: no prefetch
            if c not in f.stream or c * self.cb >= f.size:
                break
            k = (f.idx, c)
            if k in self.issued or k in self.present:
                continue
            if c == prev + 1 and self._kernel_reads_ahead(f, c):
                self.stats.left_to_read_ahead += 1
                continue
            self.pending.append(k)

    def issue_pending(self) -> None:
        while self.pending:
            k = self.pending[0]
            if k in self.issued or k in self.present:
                self.pending.popleft()
                continue
            f = self.files_by_idx(k[0])
            n = min(self.cb, f.size - k[1] * self.cb)
            if not self._room(n):
                self.stats.deferred += 1
                return
            self.pending.popleft()
            os.posix_fadvise(f.fd, k[1] * self.cb, n, os.POSIX_FADV_WILLNEED)
            self.issued.add(k)
            self.stats.prefetches += 1
            self.stats.prefetch_bytes += n

    def pageout(self, key: tuple[int, int]) -> None:
        f = self.files_by_idx(key[0])
        done = False
        for addr, n in self._addr(f, key[1]):
            r = process_madvise(self.pidfd, addr, n, MADV_PAGEOUT)
            if r == -errno.ESRCH:  # the program has exited (its mm is gone): nothing left to page out
                return
            if r >= 0:
                done = True
            elif r == -errno.ENOMEM:
                # the range is no longer mapped: the program unmapped the file since the last
                # read of its maps (most often as it exits), so its pages left the page table too
                self.maps_stale = True
            elif len(self.stats.errors) < 5:
                self.stats.errors.append(f"process_madvise(PAGEOUT): {os.strerror(-r)}")
        if done:
            self.stats.pageouts += 1
            self.stats.pageout_bytes += min(self.cb, f.size - key[1] * self.cb)
        self.paged_at[key] = self.stats.entered
        self.present.discard(key)
        self.issued.discard(key)

    def files_by_idx(self, idx: int) -> _File:
        return next(f for f in self.files if f.idx == idx)

    # -- the loop -------------------------------------------------------------------
    def _candidates(self, full: bool) -> list[tuple[int, int]]:
        if full:
            return [(f.idx, c) for f in self.files if f.maps for c in sorted(f.stream)]
        out = list(self.recent) + list(self.issued) + list(self.pending)
        for k in list(self.recent):
            f = self.files_by_idx(k[0])
            c = k[1]
            for _ in range(self.plan.prefetch_chunks + LOOK_AHEAD):
                c = f.next.get(c, c + 1)
                out.append((f.idx, c))
        return out

    def _present_all(self, f: _File) -> set[int]:
        """The streamed chunks of ``f`` with a page in the program's page table: one read of
        the page table per mapping (a full scan of thousands of small chunks one read each
        would cost the program a core)."""
        out: set[int] = set()
        for a, b, off in f.maps:
            try:
                buf = os.pread(self.pagemap, (b - a) // PAGE_SIZE * 8, a // PAGE_SIZE * 8)
            except OSError:
                continue
            first, last = off // self.cb, (off + (b - a) - 1) // self.cb
            for c in range(first, last + 1):
                if c not in f.stream:
                    continue
                lo = max(0, c * self.cb - off) // PAGE_SIZE
                hi = min(b - a, (c + 1) * self.cb - off) // PAGE_SIZE
                seg = buf[lo * 8 + 7 : hi * 8 : 8]  # short when the mapping went away meanwhile
                if seg and max(seg) & 0x80:
                    out.add(c)
        return out

    def step(self, full: bool) -> None:
        if self.stats.stream_off:
            return  # the keep set alone: nothing to follow
        seen = set()
        scanned = {f.idx: self._present_all(f) for f in self.files if f.maps} if full else {}
        for k in self._candidates(full):
            if k in seen:
                continue
            seen.add(k)
            f = self.files_by_idx(k[0])
            if k[1] not in f.stream or not f.maps:
                continue
            now = k[1] in scanned[f.idx] if full else self._is_present(f, k[1])
            if now and k not in self.present:
                self.present.add(k)
                if k not in self.recent:
                    self._note_regret(k)
                    self.recent.append(k)
                    self.stats.entered += 1
                    if not self.stats.stream_off:
                        self.prefetch_from(k)
            elif not now and full:
                self.present.discard(k)
        if self.stats.stream_off:
            return
        for k in list(self.present):
            if k not in self.recent:
                self.pageout(k)
        self.issue_pending()

    def _note_regret(self, k: tuple[int, int]) -> None:
        """A streamed chunk entered again before the program went through the room the plan
        keeps for streaming was still in use when it was paged out (threads working on
        neighbouring chunks, a program not as sequential as its recordings): past a tenth of
        the page-outs, evicting and prefetching from outside stop and the kernel streams."""
        at = self.paged_at.pop(k, None)
        window = max(RECENT, self.plan.room_bytes // self.cb)
        if at is None or self.stats.entered - at > window:
            return
        self.stats.regrets += 1
        if self.stats.regrets >= MIN_REGRETS and self.stats.regrets * 10 >= self.stats.pageouts:
            self.stats.stream_off = True
            self.pending.clear()

    def run(self, stop: Callable[[], bool] = lambda: False) -> ControllerStats:
        if not self.files or self.pagemap < 0:
            return self.stats
        n = 0
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        last_maps = 0.0
        while not stop():
            now = time.monotonic()
            if self.maps_stale or now - last_maps > (0.5 if all(f.maps for f in self.files) else 0.02):
                self.refresh_maps()
                last_maps = now
            if n % (OPENED_EVERY if n < OPENED_SOON else OPENED_LATER) == 0:
                self.note_opened()
            self.unpin_to_room()
            pinned = self.pin_some(only=self.opened)
            self.step(full=n % FULL_SCAN_EVERY == 0)
            n += 1
            if poller.poll(0 if pinned else int(POLL_S * 1000)):
                break  # the program exited
        self.stats.files_unused = [f.path for f in self.files if f.keep and f.idx not in self.opened]
        return self.stats
