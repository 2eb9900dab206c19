"""A memory cgroup for one program: a limit on its memory, page cache included.

``MemoryCgroup(limit)`` creates a child of the caller's own memory cgroup (cgroup v2
where the memory controller is usable there, else v1), limits it, and removes it when
the ``with`` block ends, whatever ended it. Programs are put in it by ``wrap(argv)``: a
``/bin/sh`` that writes its own pid into the cgroup and ``exec``s the program, so the
program keeps that pid, its stdio and its exit status, and everything it faults in,
page cache included, is charged to the cgroup from its first instruction (the kernel
charges a page to the cgroup of the task that brings it in).

Removal: ``rmdir`` once no task is left in it. The exit of the ``with`` block kills what is
left in it and removes it; a reaper process forked at creation does the same if pagecast
itself is killed (SIGKILL included: the reaper sees its pipe close), so the program never
runs on without the pagecast that limits and reports it (a ``plan --measure`` that stops a
slow variant, a ``timeout -s KILL``), and removes the run's scratch directory
(``scratch``) with it; and every creation first removes empty leftovers of pagecast
processes that no longer exist (a reaper killed too).

Where no memory cgroup can be made, ``MemoryCgroup`` raises one ``PagecastError`` line
that says why and what to do. ``PAGECAST_CGROUP_ROOT`` names the parent directory to use
instead of the caller's own cgroup (tests point it at a directory without a controller).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from pagecast.errors import PagecastError
from pagecast.util.atomic import pid_alive
from pagecast.util.sizes import parse_size

ROOT_ENV = "PAGECAST_CGROUP_ROOT"
PREFIX = "pagecast-"
SH = "/bin/sh"
# the sh that enters the cgroup: $0 is the procs file, "$@" the program
_ENTER = 'echo 0 > "$0" || exit 125; exec "$@"'
# the kernel rounds a v1 limit down to pages; anything below this is certainly a mistake
MIN_LIMIT = 4 << 20


def parse_limit(text: str | int) -> int:
    """``--memory LIMIT`` in bytes (``384M``, ``1G``, ``402653184``)."""
    n = parse_size(text, "memory limit")
    if n < MIN_LIMIT:
        raise PagecastError(f"memory limit {text!r} is below {MIN_LIMIT >> 20} MiB: no program runs in that")
    return n


@dataclass
class Hierarchy:
    """Where a cgroup of ours goes: the parent directory and its version (1 or 2)."""

    parent: Path
    version: int


def _own_paths() -> tuple[str | None, str | None]:
    """(v1 memory path, v2 path) of this process from /proc/self/cgroup."""
    v1 = v2 = None
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None, None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "memory" in parts[1].split(","):
            v1 = parts[2]
    return v1, v2


def _mounts() -> tuple[Path | None, Path | None]:
    """(v1 memory mount, v2 mount) from /proc/self/mountinfo."""
    v1 = v2 = None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        pre, _, post = line.partition(" - ")
        fields, tail = pre.split(), post.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype, opts = tail[0], tail[2].split(",")
        if fstype == "cgroup2" and v2 is None:
            v2 = Path(fields[4])
        elif fstype == "cgroup" and "memory" in opts and v1 is None:
            v1 = Path(fields[4])
    return v1, v2


def _v2_usable(parent: Path) -> bool:
    try:
        if "memory" not in (parent / "cgroup.controllers").read_text().split():
            return False
        if "memory" in (parent / "cgroup.subtree_control").read_text().split():
            return True
        (parent / "cgroup.subtree_control").write_text("+memory")
        return True
    except OSError:
        return False


def find_hierarchy() -> Hierarchy:
    """The parent directory for our cgroups, or one line saying why there is none."""
    forced = os.environ.get(ROOT_ENV)
    if forced:
        p = Path(forced)
        if (p / "cgroup.subtree_control").exists() and _v2_usable(p):
            return Hierarchy(p, 2)
        if (p / "memory.limit_in_bytes").exists():
            return Hierarchy(p, 1)
        raise PagecastError(
            f"--memory: {p} ({ROOT_ENV}) is not a memory cgroup directory (no memory.limit_in_bytes, no memory "
            "controller in cgroup.controllers); point it at one, or unset it to use this process's own cgroup"
        )
    v1_path, v2_path = _own_paths()
    v1_mount, v2_mount = _mounts()
    if v2_mount is not None and v2_path is not None:
        p = v2_mount / v2_path.lstrip("/")
        if _v2_usable(p):
            return Hierarchy(p, 2)
    if v1_mount is not None and v1_path is not None:
        p = v1_mount / v1_path.lstrip("/")
        if (p / "memory.limit_in_bytes").exists():
            return Hierarchy(p, 1)
    raise PagecastError(
        "--memory: no usable memory cgroup controller (neither cgroup v2 with the memory controller enabled "
        "for this process's cgroup nor a cgroup v1 memory hierarchy is mounted); mount one (e.g. "
        "`mount -t cgroup -o memory none /sys/fs/cgroup/memory`), run as root or in a delegated cgroup, "
        f"or set {ROOT_ENV} to a memory cgroup directory you may create children in"
    )


@dataclass
class MemoryStats:
    """What the cgroup saw, at the end of a run (counters since its creation)."""

    limit_bytes: int
    refaults: int = 0  # workingset_refault: pages read again soon after their eviction
    major_faults: int = 0
    peak_bytes: int = 0
    pgpgin: int = 0  # pages charged in (page cache and anonymous)
    read_bytes: int | None = None  # from the device, when the hierarchy says (v2 io.stat)
    failcnt: int = 0  # times the limit was hit (v1)
    oom_kills: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def limit_reached(self) -> bool:
        return limit_reached(self.limit_bytes, self.peak_bytes, self.failcnt)

    def to_dict(self) -> dict[str, int | bool | None]:
        d: dict[str, int | bool | None] = {
            k: getattr(self, k) for k in ("limit_bytes", "refaults", "major_faults", "read_bytes", "peak_bytes")
        }
        d.update(pgpgin=self.pgpgin, failcnt=self.failcnt, oom_kills=self.oom_kills, limit_reached=self.limit_reached)
        return d


def near_limit_bytes(limit: int) -> int:
    """A sixteenth of a limit, at least 4 MiB: usage within it of the limit is at the limit
    (reclaim keeps it a little below), and that much data outside it is not a rounding."""
    return max(4 << 20, limit // 16)


def limit_reached(limit: int, peak: int, failcnt: int) -> bool:
    """Whether a cgroup's usage came to its limit: a failure counted (v1), or a peak within
    ``near_limit_bytes`` of it (v2 counts none). A run that never did was not limited: it
    fits, or its data was cached before and charged elsewhere (``util.cached_outside``)."""
    return failcnt > 0 or peak + near_limit_bytes(limit) >= limit


def _read_kv(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if v.strip().lstrip("-").isdigit():
                out[k] = int(v)
    except OSError:
        pass
    return out


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _procs(path: Path) -> list[int]:
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def remove_stale(parent: Path, prefix: str = PREFIX) -> list[Path]:
    """Remove empty cgroups of pagecast processes that are gone (named ``PREFIX<pid>-<hex>``);
    the ones removed."""
    name = re.compile(rf"^{re.escape(prefix)}(\d+)-[0-9a-f]+$")
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for d in entries:
        m = name.match(d.name)
        if not m or pid_alive(int(m.group(1))) or _procs(d):
            continue
        try:
            d.rmdir()
            removed.append(d)
        except OSError:
            pass
    return removed


def _kill_all(path: Path, patience_s: float = 10.0) -> None:
    """SIGKILL every task in the cgroup until it is empty (a task forked meanwhile is
    caught on the next look), then remove it."""
    end = time.monotonic() + patience_s
    while path.exists() and time.monotonic() < end:
        pids = _procs(path)
        if not pids:
            try:
                path.rmdir()
            except OSError:
                time.sleep(0.02)  # an exited task can linger in cgroup.procs for a moment
                continue
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


def _reaper(path: Path, fd: int, scratch: Path | None) -> None:
    """In a forked child: wait for the parent's end (its pipe closes), then do what its
    ``close`` does if it could not: kill what is left in the cgroup, remove it and the
    scratch directory. Never returns."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a Ctrl-C or kill of the group must not stop it
        while os.read(fd, 1):
            pass
        _kill_all(path)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    finally:
        os._exit(0)


class MemoryCgroup:
    """A memory cgroup of ``limit`` bytes beneath the caller's own; a context manager."""

    def __init__(
        self,
        limit: int | str,
        *,
        hierarchy: Hierarchy | None = None,
        reaper: bool = True,
        scratch: Path | str | None = None,
    ):
        """``scratch``: a directory of the run's own that the reaper removes if pagecast is
        killed before it could (the caller removes it otherwise)."""
        self.scratch = Path(scratch) if scratch is not None else None
        self.limit = parse_limit(limit)
        self.hierarchy = hierarchy or find_hierarchy()
        remove_stale(self.hierarchy.parent)
        self.path = self.hierarchy.parent / f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            self.path.mkdir(mode=0o755)
        except OSError as e:
            raise PagecastError(
                f"--memory: cannot create a cgroup in {self.hierarchy.parent}: {e.strerror}; run as root or in a "
                f"delegated cgroup, or set {ROOT_ENV}"
            ) from None
        self._reaper_pid: int | None = None
        self._reaper_fd: int | None = None
        try:
            self._configure()
            if reaper:
                self._start_reaper()
        except BaseException:
            _kill_all(self.path, patience_s=1.0)  # nothing runs in it yet: removed
            raise

    # -- set up and tear down -------------------------------------------------------
    def _configure(self) -> None:
        try:
            if self.version == 2:
                (self.path / "memory.max").write_text(str(self.limit))
                if (self.path / "memory.swap.max").exists():
                    (self.path / "memory.swap.max").write_text("0")
            else:
                (self.path / "memory.limit_in_bytes").write_text(str(self.limit))
                if (self.path / "memory.swappiness").exists():
                    try:
                        (self.path / "memory.swappiness").write_text("0")
                    except OSError:
                        pass  # not allowed beneath some parents; there is no swap to keep it from anyway
        except OSError as e:
            raise PagecastError(f"--memory: cannot set the limit of {self.path}: {e.strerror}") from None

    def _start_reaper(self) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            os.close(w)
            _reaper(self.path, r, self.scratch)
        os.close(r)
        os.set_inheritable(w, False)
        self._reaper_pid, self._reaper_fd = pid, w

    def forget_reaper(self) -> None:
        """In a process forked after the cgroup was made (the live controller): let go of the
        reaper's pipe. The reaper acts when the pipe's last holder ends, and a fork holds it
        too: a controller waiting for the program kept the reaper waiting, so a SIGKILL of
        pagecast left the program running and the cgroup in place."""
        if self._reaper_fd is not None:
            os.close(self._reaper_fd)
            self._reaper_fd = None
        self._reaper_pid = None

    def close(self) -> None:
        """Kill what is left in the cgroup, remove it, and let the reaper go."""
        _kill_all(self.path, patience_s=1.0)
        if self._reaper_fd is not None:
            os.close(self._reaper_fd)
            self._reaper_fd = None
        if self._reaper_pid is not None:
            try:
                os.waitpid(self._reaper_pid, 0)
            except ChildProcessError:
                pass
            self._reaper_pid = None

    def __enter__(self) -> "MemoryCgroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- use -----------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self.hierarchy.version

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the cgroup, same pid (an sh that enters it, then execs)."""
        return [SH, "-c", _ENTER, str(self.procs_file), *argv]

    def enter(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the calling process) into the cgroup."""
        self.procs_file.write_text(str(pid))

    def procs(self) -> list[int]:
        return _procs(self.path)

    def usage(self) -> int:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return _read_int(self.path / name)

    def committed(self) -> int:
        """Usage less the inactive file pages: what reclaim cannot take first. A cgroup's
        page cache fills it to its limit; the inactive part is what the kernel evicts next."""
        st = _read_kv(self.path / "memory.stat")
        inactive = st.get("inactive_file", 0) if self.version == 2 else st.get("total_inactive_file", 0)
        return max(0, self.usage() - inactive)

    def unreclaimable(self) -> int:
        """What reclaim cannot take from the cgroup without swap: anonymous and shared memory,
        locked pages, kernel memory. The limit less this is the room page cache can cycle in."""
        st = _read_kv(self.path / "memory.stat")
        if self.version == 2:
            kernel = st.get("kernel", st.get("slab", 0) + st.get("kernel_stack", 0) + st.get("pagetables", 0))
            return st.get("anon", 0) + st.get("shmem", 0) + st.get("unevictable", 0) + kernel
        kmem = _read_int(self.path / "memory.kmem.usage_in_bytes")
        return st.get("total_rss", 0) + st.get("total_shmem", 0) + st.get("total_unevictable", 0) + kmem

    def stats(self) -> MemoryStats:
        s = MemoryStats(self.limit)
        st = _read_kv(self.path / "memory.stat")
        if self.version == 2:
            s.refaults = st.get("workingset_refault_file", 0) + st.get("workingset_refault_anon", 0)
            s.major_faults = st.get("pgmajfault", 0)
            s.peak_bytes = _read_int(self.path / "memory.peak")
            s.oom_kills = _read_kv(self.path / "memory.events").get("oom_kill", 0)
            s.read_bytes = _io_read_bytes(self.path / "io.stat")
        else:
            s.refaults = st.get("total_workingset_refault_file", 0) + st.get("total_workingset_refault_anon", 0)
            s.major_faults = st.get("total_pgmajfault", 0)
            s.pgpgin = st.get("total_pgpgin", 0)
            s.peak_bytes = _read_int(self.path / "memory.max_usage_in_bytes")
            s.failcnt = _read_int(self.path / "memory.failcnt")
            s.oom_kills = _read_kv(self.path / "memory.oom_control").get("oom_kill", 0)
        return s


def _io_read_bytes(path: Path) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    return sum(int(m.group(1)) for m in re.finditer(r"\brbytes=(\d+)", text))
