"""Every file a recorded command may read, so that ``plan --measure`` starts each run cold.

Making cold only the files the recordings used leaves warm everything a run on another
input reads that they did not (``grep -r WORD DIR`` over a tree of thousands of files it
never saw): its "cold" runs were then 3-4x faster than a cold run. So besides those files
the cold set takes, per recording:

- every file the recording opened or mapped (its file regions, used pages or not);
- the program: ``argv[0]`` found on ``PATH`` from the recorded working directory, a
  script's ``#!`` interpreter, and the shared libraries the dynamic loader would map for
  an ELF program (``LOADER --list``, what ``ldd`` runs);
- every argument that names an existing path (``--opt=PATH`` too), relative to the
  recorded working directory: a file, or every regular file under a directory (symbolic
  links not followed; /proc, /sys and /dev never).

What the command reads without naming it in its arguments (a shell's ``-c`` script, a
configuration file found at run time) is made cold only if a recording opened it: the
result says so (``unknown``) instead of passing warm runs off as cold.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pagecast.trace import open_trace

MAX_FILES = 200_000  # a walk past this many files stops (and says so): DONTNEED per run costs per file
_NEVER = ("/proc", "/sys", "/dev")
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "fish", "env", "xargs", "make", "nice", "time", "timeout", "sudo"}


@dataclass
class ColdSet:
    files: list[str] = field(default_factory=list)
    recorded: int = 0  # files the recordings used, opened or mapped
    program: int = 0  # binaries, interpreters and libraries
    walked: dict[str, int] = field(default_factory=dict)  # argv path -> files under it
    unknown: list[str] = field(default_factory=list)  # why reads may have been left warm

    def note(self) -> str:
        walked = ", ".join(f"{p} ({n} files)" for p, n in self.walked.items()) or "none"
        line = (
            f"made cold before every run: {len(self.files)} files ({self.recorded} the recordings used or opened, "
            f"{self.program} of the programs, argv paths: {walked})"
        )
        return line + "".join(f"; not known: {u}" for u in self.unknown)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["files"] = len(self.files)
        return d


def cold_set(recordings: Sequence[Any], used: Sequence[str], max_files: int = MAX_FILES) -> ColdSet:
    """The cold set of ``recordings`` (``pagecast.plan.measure.Recording``s: trace, argv, cwd)
    given ``used``, the files their page sets name."""
    out = ColdSet()
    seen: set[str] = set()
    walked: set[str] = set()  # argv paths already taken (the same command recorded several times)

    def add(path: str) -> bool:
        if path in seen or path.startswith(_NEVER) or len(seen) >= max_files or not os.path.isfile(path):
            return False
        seen.add(path)
        out.files.append(path)
        return True

    for p in used:
        out.recorded += add(p)
    for rec in recordings:
        for r in open_trace(rec.trace).regions:
            if r.kind == "file" and r.path:
                out.recorded += add(r.path)
    for rec in recordings:
        for p in program_files(rec.argv, rec.cwd):
            out.program += add(p)
        out.unknown += unknown_of(rec.argv)
        for arg in rec.argv[1:]:
            for a in {arg, arg.partition("=")[2]} - {""}:
                path = os.path.normpath(os.path.join(rec.cwd, a))
                if path in walked or path.startswith(_NEVER):
                    continue
                walked.add(path)
                if os.path.isdir(path):
                    out.walked[a] = out.walked.get(a, 0) + _walk(path, add)
                elif os.path.isfile(path):
                    add(path)
                    out.walked[a] = out.walked.get(a, 0) + 1
    if len(seen) >= max_files:
        out.unknown.append(f"files past the first {max_files} (the walk stopped there)")
    out.unknown = list(dict.fromkeys(out.unknown))
    return out


def unknown_of(argv: Sequence[str]) -> list[str]:
    """What a command may read that its arguments do not name: a shell's script, the
    command a wrapper runs."""
    name = os.path.basename(argv[0])
    return [f"files `{name}` runs or reads that its arguments do not name"] if name in _SHELLS else []


def _walk(top: str, add) -> int:
    n = 0
    for root, dirs, names in os.walk(top, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            p = os.path.join(root, name)
            if not os.path.islink(p) and os.path.isfile(p):
                add(p)
                n += 1
    return n


def program_files(argv: Sequence[str], cwd: str) -> list[str]:
    """The program ``argv`` runs, its ``#!`` interpreter, and their shared libraries."""
    exe = _which(argv[0], cwd)
    if exe is None:
        return []
    out = [exe]
    head = _read_head(exe)
    if head.startswith(b"#!"):
        words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
        if words:
            interp = words[0]
            if os.path.basename(interp) == "env" and len(words) > 1:
                out.append(interp)
                interp = _which(words[1], cwd) or words[1]
            out.append(interp)
            out += _libraries(interp)
    else:
        out += _libraries(exe)
    return out


def _which(cmd: str, cwd: str) -> str | None:
    if os.sep in cmd:
        p = os.path.normpath(os.path.join(cwd, cmd))
        return p if os.path.isfile(p) else None
    found = shutil.which(cmd)
    return os.path.realpath(found) if found else None


def _read_head(path: str, n: int = 4096) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def _interpreter(path: str) -> str | None:
    """An ELF file's PT_INTERP (its dynamic loader), None for a static or non-ELF file."""
    head = _read_head(path, 1 << 16)
    if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
        return None
    end = "<" if head[5] == 1 else ">"
    phoff, phentsize, phnum = struct.unpack_from(end + "Q", head, 32)[0], *struct.unpack_from(end + "HH", head, 54)
    for i in range(phnum):
        off = phoff + i * phentsize
        if off + 56 > len(head):
            return None
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(end + "IIQQQQ", head, off)
        if p_type == 3:  # PT_INTERP
            return head[p_offset : p_offset + p_filesz].split(b"\0")[0].decode(errors="replace") or None
    return None


def _libraries(path: str) -> list[str]:
    """What the dynamic loader maps for ``path`` (``LOADER --list PATH``, as ``ldd`` does:
    the loader resolves the libraries and exits without running the program)."""
    loader = _interpreter(path)
    if loader is None or not os.path.isfile(loader):
        return []
    try:
        p = subprocess.run([loader, "--list", path], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return [loader]
    libs = [loader]
    for line in p.stdout.splitlines():
        words = line.replace("=>", " ").split()
        libs += [w for w in words if w.startswith("/") and os.path.isfile(w)]
    return [str(Path(p).resolve()) for p in dict.fromkeys(libs)]
