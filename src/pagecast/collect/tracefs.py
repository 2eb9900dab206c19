"""Look up a kernel tracepoint's perf id and field offsets in tracefs.

tracefs is often not mounted on a freshly booted machine. perf's libraries then mount it
themselves (tracefs at /sys/kernel/tracing, else debugfs at /sys/kernel/debug, which holds
it at tracing/). pagecast does the same when it runs as root, but in a private mount
namespace of a short-lived child process: a tracepoint's id and format are all a recorder
needs (perf_event_open takes the id; the kernel needs no mount to sample it), so the
machine's mounts stay as they were. The child reads every event of the system at once.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TRACEFS_ROOTS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
MOUNT_FIX = "mount -t tracefs nodev /sys/kernel/tracing"
_FIELD = re.compile(r"field:[^;]*?(\w+)(\[\d*\])?;\s*offset:(\d+);\s*size:(\d+);")

# Runs with -I -S (nothing but the standard library): unshare the mount namespace, keep every
# mount change private to it, mount as perf does, print {name: [id, format]} of one system.
_PRIVATE_READ = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
def fail(what):
    print(json.dumps({"error": what + ": " + os.strerror(ctypes.get_errno())}))
    sys.exit(0)
if libc.unshare(0x20000) != 0:
    fail("unshare(CLONE_NEWNS)")
if libc.mount(b"none", b"/", None, 0x4000 | (1 << 18), None) != 0:
    fail("making / private")
tried = []
for fstype, target, sub in (("tracefs", "/sys/kernel/tracing", ""), ("debugfs", "/sys/kernel/debug", "tracing")):
    if libc.mount(b"nodev", target.encode(), fstype.encode(), 0, None) == 0:
        root = os.path.join(target, sub, "events", sys.argv[1])
        break
    tried.append(f"mounting {fstype} on {target}: {os.strerror(ctypes.get_errno())}")
else:
    print(json.dumps({"error": "; ".join(tried)}))
    sys.exit(0)
events = {}
for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    try:
        with open(os.path.join(root, name, "id")) as f, open(os.path.join(root, name, "format")) as g:
            events[name] = [f.read(), g.read()]
    except OSError:
        pass
print(json.dumps({"mounted": f"{fstype} on {target}", "events": events}))
"""


@dataclass(frozen=True)
class Tracepoint:
    system: str
    name: str
    id: int
    offsets: dict[str, int]  # field name -> byte offset in the raw record
    sizes: dict[str, int]


def _parse(system: str, name: str, tp_id: str, fmt: str) -> Tracepoint:
    offsets, sizes = {}, {}
    for m in _FIELD.finditer(fmt):
        offsets[m.group(1)] = int(m.group(3))
        sizes[m.group(1)] = int(m.group(4))
    return Tracepoint(system, name, int(tp_id), offsets, sizes)


def mounted_root() -> Path | None:
    """Where tracefs is mounted here, if anywhere (the usual places first). From the mount
    table, as a user who may not read tracefs still sees it mounted."""
    try:
        mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    except OSError:
        return next((r for r in TRACEFS_ROOTS if (r / "events").is_dir()), None)
    found = [Path(m[1].replace("\\040", " ")) for m in mounts if len(m) > 2 and m[2] == "tracefs"]
    return next((r for r in TRACEFS_ROOTS if r in found), found[0] if found else None)


@functools.lru_cache(maxsize=None)
def _read_privately(system: str) -> tuple[dict[str, tuple[str, str]], str]:
    """Every event of ``system`` as (id, format) read from a private mount, and how it was
    mounted; or no events and why it could not be."""
    try:
        p = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _PRIVATE_READ, system],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return {}, f"cannot run the mount helper ({e})"
    try:
        got = json.loads(p.stdout)
    except ValueError:
        return {}, "the mount helper failed: " + ((p.stderr.strip().splitlines() or ["no output"])[-1])
    if "error" in got:
        return {}, str(got["error"])
    return {k: (v[0], v[1]) for k, v in got["events"].items()}, str(got["mounted"])


def private_mount_note(system: str) -> str:
    """One line saying tracefs was mounted privately to read ``system``'s tracepoints, or ""."""
    if mounted_root() is not None or os.geteuid() != 0:
        return ""
    events, how = _read_privately(system)
    if not events:
        return ""
    return (
        f"tracefs was not mounted: mounted {how} in a private mount namespace to read the {system} "
        "tracepoints (the machine's mounts are unchanged)"
    )


def find_tracepoint(system: str, name: str) -> tuple[Tracepoint | None, str]:
    """The tracepoint, or None and why it cannot be used (with the command that fixes it)."""
    root = mounted_root()
    if root is None:
        roots = " or ".join(map(str, TRACEFS_ROOTS))
        if os.geteuid() != 0:
            return None, f"tracefs is not mounted (at {roots}) and only root can mount it (fix: sudo {MOUNT_FIX})"
        events, how = _read_privately(system)
        if not events:
            return None, f"tracefs is not mounted (at {roots}) and mounting it failed: {how} (fix: {MOUNT_FIX})"
        if name not in events:
            return None, f"kernel has no tracepoint {system}:{name}"
        try:
            return _parse(system, name, *events[name]), ""
        except ValueError:
            return None, f"tracepoint {system}:{name} has an unreadable id"
    d = root / "events" / system / name
    try:
        return _parse(system, name, (d / "id").read_text(), (d / "format").read_text()), ""
    except FileNotFoundError:
        return None, f"kernel has no tracepoint {system}:{name}"
    except PermissionError:
        return None, f"{root} is readable by root only (fix: run as root)"
    except (OSError, ValueError) as e:
        return None, f"cannot read {d}: {getattr(e, 'strerror', None) or e}"
