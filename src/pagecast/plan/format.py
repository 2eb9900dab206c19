"""The plan file: per file, what to prefetch before a program runs, and how.

A plan is written by ``pagecast plan`` (from recordings) and read twice: by the native
launcher (``native/launch/launch.c``, which must parse it in microseconds without any
library) and by Python (``--json``, the hand-over to the live machinery, tests). So the
encoding is line-based ASCII text, one record per line, fields separated by one space:

    PAGECAST-PLAN 3
    opt KEY VALUE                  (version 3: plan-level options, before the first file record)
    file PATH SIZE MTIME_NS CTIME_NS INO DEV STRATEGY DEPTH CHUNK_KIB GAIN_MS ARG REASON ADVICE NRANGES
    r FIRST_PAGE NPAGES            (NRANGES lines: page ranges, in file order, not overlapping)
    ...
    end NFILES CHECKSUM

- Text fields (PATH, ARG, REASON) are percent-encoded: every byte outside ``!``..``~``
  and ``%`` itself becomes ``%XX``; the empty string is ``-`` (and a literal ``-`` is
  ``%2D``), so a field never contains a space or a newline.
- STRATEGY is one of ``STRATEGIES``. DEPTH is the number of reader threads (each keeps one
  read or readahead request in flight, so it is the queue depth the plan asks of the
  device); CHUNK_KIB the size of one request. ARG: the page pack file (``pack``) or the
  policy spec (``per-fault``). GAIN_MS: the predicted saving, informative.
- ADVICE (version 2) is the kernel read-ahead advice the program's own accesses to the
  file get, one of ``ADVICES``: ``default`` leaves the kernel's read-around, ``random``
  turns it off (a fault or read() brings in only what it asks for), ``sequential`` doubles
  it. The launcher applies it through the advice shim (``native/advice/advice_shim.c``)
  restricted to the plan's files, identified by (device, inode). Version 1 plans (14
  fields, no ADVICE) are still read, with ``default`` advice.
- Ranges are in pages of ``PAGE_SIZE`` bytes (file offset // 4096). ``stream`` without
  ranges reads the whole file.
- Options (version 3, ``OPTIONS``): ``opt issue beside|before`` — when the launcher
  issues the plan's ``warm`` requests: ``beside`` the program (default: from a
  low-priority prefetcher process while the program runs) or ``before`` it (the launcher
  itself, synchronously, at the caller's priority, before it execs the program: what the
  kernel strategy "WILLNEED every file before start" does); ``opt note TEXT`` — free text,
  informative (e.g. the measured comparison that chose the plan; VALUE percent-encoded like
  the other text fields). A line is written only for a value that is not the default. An
  unknown key refuses the plan as a whole in both readers: a plan written by a newer
  pagecast must not be half-applied by an older launcher (the program still runs, without
  it, after one warning line naming the key). Versions 1 and 2 have no options.
- CHECKSUM is the CRC-32 (zlib's) of every byte before the ``end`` line, 8 hex digits:
  a truncated, edited or garbled plan is refused as a whole (one line) instead of being
  half-applied.

Lexical rules, the same in both readers (``native/launch/plan.c`` applies them with the
same definitions, and ``tests/test_fuzz_plan.py`` checks on mutated plans that the two
accept exactly the same ones): every byte is printable ASCII (0x20..0x7E) or a newline;
an integer is ``-?[0-9]+`` within 64 bits (signed; NFILES unsigned, at most 19 digits);
GAIN_MS is a decimal ``-?[0-9]+(.[0-9]+)?`` (no exponent, no ``nan``/``inf``); CHECKSUM
is exactly 8 lower-case hex digits; a ``%`` is followed by two hex digits; the end line is
the last line. What the format allows but pagecast cannot act on (a per-fault policy it
does not know, a pack it cannot read) is not a format error: the plan is used, and that
file costs one warning at run time.

Identity of a file (SIZE MTIME_NS CTIME_NS INO DEV, at recording time): the launcher
compares it with one ``fstat`` of the file it opens anyway, so checking costs no I/O. A
content hash of a few blocks would have to read the (cold) file before the program
starts, which is the cost the plan exists to hide, and would still miss changes elsewhere
in the file. ctime moves on every write, truncate or metadata change and user space
cannot set it back, so a rewritten file whose mtime was restored is still caught; a file
replaced by rename gets a new inode. False alarms (``chmod``, ``touch``) only skip that
file's prefetch with a warning, which is the safe side.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pagecast.constants import PAGE_SIZE
from pagecast.errors import PagecastError

MAGIC = "PAGECAST-PLAN"
VERSION = 3
READS_VERSIONS = (1, 2, 3)
STRATEGIES = ("nothing", "warm", "stream", "pack", "per-fault")
# Strategies the native launcher runs itself; the others need the live machinery in Python.
NATIVE_STRATEGIES = ("nothing", "warm", "stream")
ADVICES = ("default", "random", "sequential")
# Plan-level options (version 3): key -> its default. ``issue``: when warm requests are
# issued (ISSUES); ``note``: free text, informative.
OPTIONS = {"issue": "beside", "note": ""}
ISSUES = ("beside", "before")
DEFAULT_DEPTH = 2
DEFAULT_CHUNK_KIB = 1024


@dataclass(frozen=True)
class FileIdentity:
    """What a file looked like when it was recorded (``os.stat`` fields)."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    dev: int

    @classmethod
    def of(cls, path: str | Path) -> "FileIdentity":
        st = os.stat(path)
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)

    def differences(self, other: "FileIdentity") -> list[str]:
        names = ("size", "mtime_ns", "ctime_ns", "ino", "dev")
        return [n for n in names if getattr(self, n) != getattr(other, n)]


@dataclass
class FilePlan:
    """One file's strategy. ``ranges``: (first page, page count), file order, disjoint."""

    path: str
    identity: FileIdentity
    strategy: str = "nothing"
    ranges: list[tuple[int, int]] = field(default_factory=list)
    depth: int = DEFAULT_DEPTH
    chunk_kib: int = DEFAULT_CHUNK_KIB
    gain_ms: float = 0.0
    arg: str = ""  # pack file (pack) or policy spec (per-fault)
    reason: str = ""
    advice: str = "default"  # read-ahead advice for the program's own accesses (ADVICES)

    @property
    def pages(self) -> int:
        return sum(n for _, n in self.ranges)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "identity": vars(self.identity),
            "strategy": self.strategy,
            "depth": self.depth,
            "chunk_kib": self.chunk_kib,
            "gain_ms": self.gain_ms,
            "arg": self.arg,
            "reason": self.reason,
            "advice": self.advice,
            "pages": self.pages,
            "ranges": [list(r) for r in self.ranges],
        }


@dataclass
class PlanDoc:
    files: list[FilePlan] = field(default_factory=list)
    issue: str = "beside"  # warm requests issued beside the program, or before it starts (ISSUES)
    note: str = ""  # free text, informative (shown by `pagecast plan --show`)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": MAGIC,
            "version": VERSION,
            "page_size": PAGE_SIZE,
            "issue": self.issue,
            "note": self.note,
            "files": [f.to_dict() for f in self.files],
        }


_INT = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_COUNT = re.compile(r"[0-9]{1,19}")
_CRC = re.compile(r"[0-9a-f]{8}")
_HEX2 = re.compile(r"[0-9A-Fa-f]{2}")
_BAD_BYTE = re.compile(rb"[^\n\x20-\x7e]")


def parse_int(s: str) -> int:
    """An integer field: ``-?[0-9]+`` within 64 bits (ValueError otherwise), as the launcher reads it."""
    if not _INT.fullmatch(s):
        raise ValueError(f"not an integer: {s[:40]!r}")
    v = int(s)
    if not -(1 << 63) <= v < 1 << 63:
        raise ValueError(f"out of 64-bit range: {s[:40]!r}")
    return v


def parse_decimal(s: str) -> float:
    """GAIN_MS: ``-?[0-9]+(.[0-9]+)?`` (ValueError otherwise)."""
    if not _DECIMAL.fullmatch(s):
        raise ValueError(f"not a decimal number: {s[:40]!r}")
    return float(s)


def checksum(data: bytes) -> int:
    """CRC-32 as zlib computes it (the launcher has the same table-driven loop in C)."""
    return zlib.crc32(data) & 0xFFFFFFFF


def encode_text(s: str) -> str:
    b = s.encode("utf-8", "surrogateescape")
    if not b:
        return "-"
    if b == b"-":
        return "%2D"
    return "".join(chr(c) if 0x21 <= c <= 0x7E and c != 0x25 else f"%{c:02X}" for c in b)


def decode_text(s: str) -> str:
    if s == "-":
        return ""
    out = bytearray()
    i = 0
    while i < len(s):
        if s[i] == "%":
            if not _HEX2.fullmatch(s[i + 1 : i + 3]):
                raise ValueError(f"bad %-escape {s[i : i + 3]!r}")  # caller reports
            out.append(int(s[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(s[i]))
            i += 1
    return out.decode("utf-8", "surrogateescape")


def _check(fp: FilePlan) -> None:
    if fp.strategy not in STRATEGIES:
        raise PagecastError(f"unknown strategy {fp.strategy!r} for {fp.path} (valid: {', '.join(STRATEGIES)})")
    if not (1 <= fp.depth <= 64) or not (4 <= fp.chunk_kib <= 1 << 20):
        raise PagecastError(f"{fp.path}: depth must be 1..64 and chunk_kib 4..1048576 (as the launcher reads them)")
    if fp.advice not in ADVICES:
        raise PagecastError(f"unknown advice {fp.advice!r} for {fp.path} (valid: {', '.join(ADVICES)})")
    prev_end = -1
    for first, n in fp.ranges:
        if first < 0 or n < 1 or first < prev_end or first + n >= 1 << 63:
            raise PagecastError(f"{fp.path}: ranges must be disjoint, in file order, with positive lengths")
        prev_end = first + n
    if not math.isfinite(fp.gain_ms):
        raise PagecastError(f"{fp.path}: gain_ms must be a finite number, not {fp.gain_ms}")
    if fp.strategy in ("pack", "per-fault") and not fp.arg:
        raise PagecastError(f"{fp.path}: strategy {fp.strategy} needs an argument (pack file or policy)")


def _check_issue(issue: str) -> None:
    if issue not in ISSUES:
        raise PagecastError(f"unknown issue option {issue!r} (valid: {', '.join(ISSUES)})")


def encode_plan(doc: PlanDoc) -> bytes:
    _check_issue(doc.issue)
    lines = [f"{MAGIC} {VERSION}"]
    if doc.issue != OPTIONS["issue"]:
        lines.append(f"opt issue {doc.issue}")
    if doc.note:
        lines.append(f"opt note {encode_text(doc.note)}")
    for fp in doc.files:
        _check(fp)
        i = fp.identity
        lines.append(
            " ".join(
                map(
                    str,
                    [
                        "file",
                        encode_text(fp.path),
                        i.size,
                        i.mtime_ns,
                        i.ctime_ns,
                        i.ino,
                        i.dev,
                        fp.strategy,
                        fp.depth,
                        fp.chunk_kib,
                        f"{fp.gain_ms:.3f}",
                        encode_text(fp.arg),
                        encode_text(fp.reason),
                        fp.advice,
                        len(fp.ranges),
                    ],
                )
            )
        )
        lines.extend(f"r {a} {n}" for a, n in fp.ranges)
    body = ("\n".join(lines) + "\n").encode("ascii")
    return body + f"end {len(doc.files)} {checksum(body):08x}\n".encode("ascii")


def write_plan(path: str | Path, doc: PlanDoc) -> None:
    """Write ``doc`` to ``path`` atomically (temporary name, then rename)."""
    from pagecast.util.atomic import atomic_write_bytes

    atomic_write_bytes(path, encode_plan(doc))


def decode_plan(data: bytes, path: str | Path = "<plan>") -> PlanDoc:
    """Parse a plan; any defect → PagecastError naming the file and the line."""

    def bad(msg: str, line: int | None = None) -> PagecastError:
        return PagecastError(f"not a usable plan: {msg}", path=path, line=line)

    if not data.startswith(MAGIC.encode() + b" "):
        raise bad(f"bad magic (expected {MAGIC!r} on the first line)")
    first_nl = data.find(b"\n")
    if first_nl < 0:
        raise bad("truncated (no end line)")
    try:
        version = parse_int(data[len(MAGIC) + 1 : first_nl].decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        raise bad("bad version field", 1) from None
    if version not in READS_VERSIONS:
        raise bad(f"plan format version {version}, this pagecast reads versions {READS_VERSIONS[0]}..{VERSION}", 1)
    nfields = 14 if version == 1 else 15
    bad_byte = _BAD_BYTE.search(data)
    if bad_byte:
        raise bad(f"byte {bad_byte.start()} is a control or non-ASCII byte (0x{data[bad_byte.start()]:02x})")
    end = data.rfind(b"\n", 0, len(data) - 1)  # the end line is the last line
    if end < 0 or not data.endswith(b"\n") or not data.startswith(b"end ", end + 1):
        raise bad("truncated (no end line)")
    body, tail = data[: end + 1], data[end + 1 : -1].decode("ascii").split(" ")
    if len(tail) != 3 or not _COUNT.fullmatch(tail[1]) or not _CRC.fullmatch(tail[2]):
        raise bad("malformed end line (expected 'end NFILES CRC32')")
    nfiles, want = int(tail[1]), int(tail[2], 16)
    if checksum(body) != want:
        raise bad("checksum mismatch (truncated or corrupted)")
    text = body.decode("ascii")
    lines = text.split("\n")[1:-1]
    doc = PlanDoc()
    i = _read_options(doc, lines, bad) if version >= 3 else 0
    while i < len(lines):
        lineno = i + 2
        f = lines[i].split(" ")
        if len(f) != nfields or f[0] != "file":
            raise bad(f"expected a 'file' record with {nfields} fields", lineno)
        try:
            ident = FileIdentity(*(parse_int(x) for x in f[2:7]))
            fp = FilePlan(
                decode_text(f[1]),
                ident,
                f[7],
                [],
                parse_int(f[8]),
                parse_int(f[9]),
                parse_decimal(f[10]),
                decode_text(f[11]),
                decode_text(f[12]),
                "default" if version == 1 else f[13],
            )
            nr = parse_int(f[-1])
        except ValueError as e:
            raise bad(f"bad field ({e})", lineno) from None
        if nr < 0 or i + 1 + nr > len(lines):
            raise bad(f"range count {nr} runs past the end", lineno)
        for j in range(i + 1, i + 1 + nr):
            r = lines[j].split(" ")
            if len(r) != 3 or r[0] != "r":
                raise bad("expected a range line 'r FIRST NPAGES'", j + 2)
            try:
                fp.ranges.append((parse_int(r[1]), parse_int(r[2])))
            except ValueError:
                raise bad("bad range numbers", j + 2) from None
        try:
            _check(fp)
        except PagecastError as e:
            raise bad(str(e), lineno) from None
        doc.files.append(fp)
        i += 1 + nr
    if nfiles != len(doc.files):
        raise bad(f"end line says {nfiles} files, found {len(doc.files)}")
    return doc


def _read_options(doc: PlanDoc, lines: list[str], bad: Any) -> int:
    """Apply the ``opt`` lines at the top of ``lines`` to ``doc``; returns the first other line's index."""
    seen: set[str] = set()
    i = 0
    while i < len(lines) and lines[i].startswith("opt "):
        f = lines[i].split(" ")
        if len(f) != 3:
            raise bad("expected an option 'opt KEY VALUE'", i + 2)
        key = f[1]
        if key not in OPTIONS:
            raise bad(
                f"unknown option {key!r} (this pagecast knows {', '.join(OPTIONS)}; written by a newer one?)", i + 2
            )
        if key in seen:
            raise bad(f"option {key!r} given twice", i + 2)
        seen.add(key)
        try:
            value = decode_text(f[2])
        except (ValueError, UnicodeDecodeError):
            raise bad(f"bad %-escape in option {key!r}", i + 2) from None
        if key == "issue":
            try:
                _check_issue(value)
            except PagecastError as e:
                raise bad(str(e), i + 2) from None
        setattr(doc, key, value)
        i += 1
    return i


def read_plan(path: str | Path) -> PlanDoc:
    from pagecast.util.regular import NotRegularFile, open_regular

    try:  # a FIFO in the plan's place must not block (the launcher opens it the same way)
        with open_regular(path) as f:
            data = f.read()
    except NotRegularFile:
        raise PagecastError("not a regular file", path=path) from None
    except OSError as e:
        raise PagecastError(f"cannot read plan ({e.strerror})", path=path) from None
    return decode_plan(data, path)
