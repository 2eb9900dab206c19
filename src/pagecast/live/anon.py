"""Prefetch anonymous memory inside the program: the predictor's side of the LD_PRELOAD shim.

Anonymous pages belong to one address space, so they cannot be read ahead from another
process the way file pages can (the page cache is shared). ``pagecast run`` therefore
preloads ``native/live/anon_shim.c`` into the program; its helper thread connects to a
unix socket served here and applies ``madvise(MADV_POPULATE_WRITE)`` to the address
ranges sent (fallback ``MADV_WILLNEED`` before Linux 5.14, reported as ``mode``).

Predicted (region, page) pairs of ``anon``/``heap`` regions become addresses of *this*
run: the live region map (from the fault monitor's mmap events; regions were matched to
the earlier run by kind + creation order + length) gives each region's base address.
Wire format, native endianness: shim → here ``{magic, pid, mode}`` once, then one
``{t_done_ns, errno}`` per range; here → shim ``{address, length}`` per range.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from pagecast.live.injector import PAGE, Issued, merge_ranges
from pagecast.trace.regions import Region
from pagecast.util.native import build
from pagecast.util.preload import preload_list

ANON_KINDS = ("anon", "heap")
# The socket protocol, mirrored from native/live/anon_wire.h (tests/test_binary_layouts.py
# compares the two); native endianness, both ends on this machine.
MAGIC = 0x70636173686D3031  # "pcashm" + protocol version "01"
HELLO_DTYPE = np.dtype([("magic", "=u8"), ("pid", "=u8"), ("mode", "=u8")])
REQUEST_DTYPE = np.dtype([("addr", "=u8"), ("len", "=u8")])
ACK_DTYPE = np.dtype([("done_ns", "=i8"), ("err", "=i8")])
MODES = {23: "MADV_POPULATE_WRITE", 22: "MADV_POPULATE_READ", 3: "MADV_WILLNEED"}
ACCEPT_TIMEOUT_S = 0.05


def shim_path() -> Path:
    return build("pc_anon_shim", ["live/anon_shim.c"], ldflags=["-pthread"])


def preload_blocker(cmd: Sequence[str], env: dict[str, str]) -> str | None:
    """Why LD_PRELOAD cannot work for ``cmd`` (None if it can): static or set-id binaries."""
    exe = cmd[0] if os.sep in cmd[0] else shutil.which(cmd[0], path=env.get("PATH"))
    if not exe:
        return "command not found"
    try:
        st = os.stat(exe)
        with open(exe, "rb") as f:
            head = f.read(64)
            if head[:2] == b"#!":
                return None  # a script: the shim loads into its (dynamic) interpreter
            if head[:4] != b"\x7fELF":
                return "not an ELF executable"
            is64, little = head[4] == 2, head[5] == 1
            e = "<" if little else ">"
            if is64:
                (phoff,) = struct.unpack_from(e + "Q", head, 32)
                phentsize, phnum = struct.unpack_from(e + "HH", head, 54)
            else:
                (phoff,) = struct.unpack_from(e + "I", head, 28)
                phentsize, phnum = struct.unpack_from(e + "HH", head, 42)
            f.seek(phoff)
            ph = f.read(phentsize * phnum)
    except (OSError, struct.error):
        return "cannot read the executable"
    if st.st_mode & 0o6000 and os.geteuid() != st.st_uid:
        return "set-id executable (the loader ignores LD_PRELOAD)"
    PT_INTERP = 3
    for i in range(phnum):
        if struct.unpack_from(e + "I", ph, i * phentsize)[0] == PT_INTERP:
            return None
    return "statically linked (no dynamic loader: LD_PRELOAD does not apply)"


@dataclass
class AnonChannel:
    """The daemon's half: a listening unix socket, inherited by the forked predictor."""

    sock: socket.socket
    path: str
    dir: str

    @classmethod
    def open(cls) -> "AnonChannel":
        d = tempfile.mkdtemp(prefix="pagecast-anon-")
        path = os.path.join(d, "sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen(1)
        return cls(s, path, d)

    def env(self, base: dict[str, str], shim: Path) -> dict[str, str]:
        env = dict(base)
        env["LD_PRELOAD"] = preload_list(env.get("LD_PRELOAD", "").strip(), shim, first=False)
        env["PAGECAST_ANON_SOCK"] = self.path
        env["PAGECAST_ANON_SHIM"] = str(shim)
        from pagecast.collect.faultmon import faultmon_binary

        # the collector runs the program: the shim must skip it and activate in the program
        env["PAGECAST_ANON_SKIP"] = os.path.realpath(faultmon_binary())
        return env

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class AnonInjector:
    """Sends predicted anonymous pages, as address ranges of this run, to the shim."""

    def __init__(self, listener: socket.socket, t0_mono_ns: int, *, gap: int = 4):
        self.t0 = int(t0_mono_ns)
        self.gap = int(gap)
        self._listener = listener
        self._regions: dict[int, Region] = {}
        self._q: queue.Queue = queue.Queue()
        self._inflight: queue.Queue = queue.Queue()  # per range sent, in order: what its ack is for
        self._lock = threading.Lock()
        self._done: list[Issued] = []
        self._conn: socket.socket | None = None
        self.mode: str | None = None
        self.pid: int | None = None
        self.ranges = 0
        self.pages = 0
        self.errors = 0
        self.unmapped = 0  # predicted pages outside the live mapping (region not seen yet / too short)
        self._closing = False
        self._sender = threading.Thread(target=self._send_loop, name="pagecast-anon-send", daemon=True)
        self._acker = threading.Thread(target=self._ack_loop, name="pagecast-anon-ack", daemon=True)
        self._sender.start()

    def set_regions(self, regions: Sequence[Region]) -> None:
        for r in regions:
            if r.kind in ANON_KINDS:
                self._regions[r.id] = r

    def wants(self, region: np.ndarray) -> np.ndarray:
        return np.isin(region, np.fromiter(self._regions, np.int64, len(self._regions)))

    def submit(self, region: np.ndarray, page: np.ndarray, t_fault: np.ndarray, t_seen: np.ndarray) -> None:
        base = (
            np.asarray([self._regions[int(r)].base for r in region], np.int64) if len(region) else np.empty(0, np.int64)
        )
        npg = (
            np.asarray([self._regions[int(r)].pages for r in region], np.int64)
            if len(region)
            else np.empty(0, np.int64)
        )
        ok = (page >= 0) & (page < npg) & (base > 0)
        self.unmapped += int((~ok).sum())
        region, page, t_fault, t_seen, base = region[ok], page[ok], t_fault[ok], t_seen[ok], base[ok]
        if len(page):
            self._q.put((region, page, t_fault, t_seen, base, time.monotonic_ns() - self.t0))

    def _connect(self) -> bool:
        """Wait for the shim (it connects from its constructor, before main)."""
        self._listener.settimeout(ACCEPT_TIMEOUT_S)
        while not self._closing:
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return False
            conn.settimeout(None)
            try:
                hello = _recv_exact(conn, HELLO_DTYPE.itemsize)
            except OSError:
                hello = None
            h = None if hello is None else np.frombuffer(hello, HELLO_DTYPE)[0]
            if h is None or int(h["magic"]) != MAGIC:
                conn.close()
                continue
            self.pid, mode = int(h["pid"]), int(h["mode"])
            self.mode = MODES.get(int(mode), str(mode))
            self._conn = conn
            self._acker.start()
            return True
        return False

    def _send_loop(self) -> None:
        if not self._connect():
            return
        while True:
            item = self._q.get()
            if item is None:
                break
            region, page, t_fault, t_seen, base, t_sub = item
            starts, rreg, first, npages = merge_ranges(region, page, self.gap)
            rbase = base[starts]
            recs = np.empty(len(starts), REQUEST_DTYPE)
            recs["addr"] = (rbase + first * PAGE).astype(np.uint64)
            recs["len"] = (npages * PAGE).astype(np.uint64)
            # one in-flight entry per batch: acks are handled in bulk, not per range in Python
            self._inflight.put((region, page, t_fault, t_seen, t_sub, np.diff(np.append(starts, len(page))), npages))
            try:
                self._conn.sendall(recs.tobytes())
            except OSError:
                break  # the program exited or the shim stopped: nothing more to do
        if self._conn is not None:
            try:
                self._conn.shutdown(socket.SHUT_WR)  # the shim finishes what it has, then acks
            except OSError:
                pass

    def _ack_loop(self) -> None:
        conn = self._conn
        buf = b""
        acks = np.empty((0, 2), np.int64)
        while True:
            try:
                chunk = conn.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                return
            buf += chunk
            whole = len(buf) // ACK_DTYPE.itemsize * ACK_DTYPE.itemsize
            if whole:
                acks = np.concatenate([acks, np.frombuffer(buf[:whole], np.int64).reshape(-1, 2)])  # ACK_DTYPE rows
                buf = buf[whole:]
            while len(acks):
                try:
                    region, page, t_fault, t_seen, t_sub, counts, npages = self._inflight.queue[0]
                except IndexError:
                    return  # acks nobody asked for: stop listening
                if len(acks) < len(counts):
                    break
                self._inflight.get_nowait()
                mine, acks = acks[: len(counts)], acks[len(counts) :]
                ok = mine[:, 1] == 0
                keep = np.repeat(ok, counts)
                with self._lock:
                    self.ranges += len(counts)
                    self.errors += int((~ok).sum())
                    self.pages += int(npages[ok].sum())
                    if keep.any():
                        self._done.append(
                            Issued(
                                np.repeat(mine[:, 0] - self.t0, counts)[keep],
                                region[keep].astype(np.int32),
                                page[keep].astype(np.int64),
                                t_fault[keep],
                                t_seen[keep],
                                np.full(int(keep.sum()), t_sub, np.int64),
                            )
                        )

    def take(self) -> list[Issued]:
        with self._lock:
            out, self._done = self._done, []
        return out

    def close(self, timeout: float = 5.0) -> None:
        self._closing = True
        self._q.put(None)
        self._sender.join(timeout)
        if self._acker.is_alive():
            self._acker.join(timeout)
        if self._conn is not None:
            self._conn.close()
        self._listener.close()

    def stats(self) -> dict:
        return {
            "state": "on" if self._conn is not None else "off",
            "reason": None
            if self._conn is not None
            else "the shim did not connect (it could not load, or the program exited first)",
            "mode": self.mode,
            "pid": self.pid,
            "ranges": self.ranges,
            "pages_populated": self.pages,
            "errors": self.errors,
            "unmapped": self.unmapped,
        }


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf
