"""Every binary layout shared between C and Python agrees on both sides.

A small C program includes the real headers of native/ and prints sizeof, offsetof, the
size and signedness of every field of each shared struct, and the formats' magics,
versions and frame/record numbers; the test compares them with the Python mirrors
(numpy dtypes, ctypes structures, struct formats). A field added, moved, resized or
re-signed on one side only fails here, as does a magic or version changed on one side.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pagecast.collect import cupti_records, faultmon, frames
from pagecast.errors import PagecastError
from pagecast.live import anon, fastpath
from pagecast.pager import pack
from pagecast.pager import runtime as pager
from pagecast.trace.schema import Kind
from pagecast.util.native import build, native_dir
from perf_support import needs_perf

HEADERS = [
    "faultmon.h",
    "live/fastpath.h",
    "live/anon_wire.h",
    "pager/pager.h",
    "pager/pack.h",
    "cuda/pc_cupti_format.h",
]


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    size: int
    signed: bool | None  # None: not an integer (bytes, pointer)


@dataclass(frozen=True)
class Layout:
    size: int
    fields: tuple[Field, ...]


def layout_of_dtype(dt: np.dtype) -> Layout:
    fields = []
    for name in dt.names:
        sub, off = dt.fields[name][:2]
        signed = None if sub.kind not in "iu" or sub.shape else sub.kind == "i"
        fields.append(Field(name, off, sub.itemsize, signed))
    return Layout(dt.itemsize, tuple(fields))


def layout_of_ctypes(cls: type[ctypes.Structure]) -> Layout:
    fields = []
    for name, ctype in cls._fields_:
        desc = getattr(cls, name)
        signed = None
        if isinstance(getattr(ctype, "_type_", None), str) and ctype._type_ in "bBhHiIlLqQ":
            signed = ctype._type_.islower()
        fields.append(Field(name, desc.offset, desc.size, signed))
    return Layout(ctypes.sizeof(cls), tuple(fields))


def layout_of_struct(fmt: struct.Struct, names: tuple[str, ...], total: int | None = None) -> Layout:
    """Field offsets of a ``struct`` format with an explicit byte order (no padding)."""
    order, codes = fmt.format[0], fmt.format[1:]
    assert order in "<>=!", "layouts compared here use an explicit byte order"
    items = []
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", codes):
        n = int(count or 1)
        items += [(n, code)] if code in "sp" else [(1, code)] * n
    assert len(items) == len(names), (fmt.format, names)
    fields, off = [], 0
    for (n, code), name in zip(items, names):
        size = struct.calcsize(order + (f"{n}{code}" if code in "sp" else code))
        signed = None if code in "sp?" else code.islower()
        fields.append(Field(name, off, size, signed))
        off += size
    return Layout(total if total is not None else fmt.size, tuple(fields))


# (C type, its Python mirror)
MIRRORS: list[tuple[str, Layout]] = [
    ("struct fm_hello", layout_of_dtype(frames.HELLO_DTYPE)),
    ("struct fm_sample", layout_of_dtype(frames.SAMPLE_DTYPE)),
    ("struct fm_read", layout_of_dtype(frames.FILE_USE_DTYPE)),
    ("struct fm_mmap", layout_of_dtype(frames.MMAP_DTYPE)),
    ("struct fm_fork", layout_of_dtype(frames.FORK_DTYPE)),
    ("struct fm_exec", layout_of_dtype(frames.EXEC_DTYPE)),
    ("struct fm_lost", layout_of_dtype(frames.LOST_DTYPE)),
    ("struct fm_exit", layout_of_dtype(frames.EXIT_DTYPE)),
    ("struct fp_issued", layout_of_dtype(frames.ISSUED_DTYPE)),
    ("struct fp_file_frame", layout_of_dtype(frames.FILE_FRAME_DTYPE)),
    ("struct fp_config_head", layout_of_struct(fastpath.CONFIG_HEAD, fastpath.CONFIG_HEAD_FIELDS)),
    ("struct pc_anon_hello", layout_of_dtype(anon.HELLO_DTYPE)),
    ("struct pc_anon_request", layout_of_dtype(anon.REQUEST_DTYPE)),
    ("struct pc_anon_ack", layout_of_dtype(anon.ACK_DTYPE)),
    ("pgr_log_header", layout_of_dtype(pager.LOG_HEADER_DTYPE)),
    ("pgr_log_rec", layout_of_dtype(pager.LOG_RECORD)),
    ("pgr_table_header", layout_of_dtype(pager.TABLE_HEADER_DTYPE)),
    ("pgr_config", layout_of_ctypes(pager._Config)),
    ("pgr_stats", layout_of_ctypes(pager._Stats)),
    ("struct pack_header", layout_of_struct(pack.HEADER_FIXED, pack.HEADER_FIELDS, pack.HEADER)),
    ("struct pc_rec", layout_of_dtype(cupti_records.REC_DTYPE)),
]

# (C expression, Python value): magics, versions, sizes and the numbers naming frames and records
CONSTANTS: list[tuple[str, Any]] = [
    ("FM_STREAM_MAGIC", frames.STREAM_MAGIC),
    ("FM_STREAM_VERSION", frames.STREAM_VERSION),
    *[
        (f"FR_{n}", getattr(frames, f"FR_{n}"))
        for n in (
            "HELLO",
            "SAMPLES",
            "MMAP",
            "FORK",
            "EXEC",
            "LOST",
            "WATERMARK",
            "EXIT",
            "ERROR",
            "READS",
            "NOTE",
            "ISSUED",
            "FILE",
            "FASTSTAT",
        )
    ],
    ("FP_NSTATS", len(frames.FASTSTAT_FIELDS)),
    ("FP_CONFIG_MAGIC", fastpath.MAGIC[:6]),
    ("FP_CONFIG_VERSION", fastpath.CONFIG_VERSION),
    ("PC_ANON_MAGIC", anon.MAGIC),
    ("PGR_LOG_MAGIC", pager.LOG_MAGIC.rstrip(b"\0")),
    ("PGR_LOG_VERSION", pager.LOG_VERSION),
    ("PGR_LOG_HEADER", pager.LOG_HEADER),
    *[(f"PGR_REC_{k.name}", int(k)) for k in (Kind.FAULT, Kind.PREFETCH, Kind.EVICT)],
    ("PGR_TABLE_MAGIC", pager.TABLE_MAGIC[:6]),
    ("PGR_TABLE_VERSION", pager.TABLE_VERSION),
    ("PGR_PACK_MAGIC", pack.MAGIC),
    ("PGR_PACK_VERSION", pack.VERSION),
    ("PGR_PACK_HEADER", pack.HEADER),
    ("PC_CUPTI_MAGIC", cupti_records.MAGIC),
    ("PC_CUPTI_FORMAT_VERSION", cupti_records.FORMAT_VERSION),
    *[(f"PC_REC_{n}", getattr(cupti_records, f"REC_{n}")) for n in ("HEADER", "UM", "KERNEL", "MEMORY", "DROPPED")],
]


def c_program(mirrors: list[tuple[str, Layout]], constants: list[tuple[str, Any]]) -> str:
    """C source printing, per struct, ``S index sizeof`` and per field ``F index name
    offset size signed`` (signed -1 for non-integers), then ``C index value``."""
    out = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        *[f'#include "{h}"' for h in HEADERS],
        "#define SIGNED(T, f) ((__typeof__(((T *)0)->f))-1 < 0)",
        "int main(void) {",
    ]
    for i, (ctype, lay) in enumerate(mirrors):
        out.append(f'    printf("S {i} %zu\\n", sizeof({ctype}));')
        for f in lay.fields:
            sgn = f"SIGNED({ctype}, {f.name})" if f.signed is not None else "-1"
            out.append(
                f'    printf("F {i} {f.name} %zu %zu %d\\n", offsetof({ctype}, {f.name}), '
                f"sizeof((({ctype} *)0)->{f.name}), (int)({sgn}));"
            )
    for i, (expr, value) in enumerate(constants):
        if isinstance(value, bytes):
            out.append(f'    printf("C {i} %s\\n", {expr});')
        else:
            out.append(f'    printf("C {i} %llu\\n", (unsigned long long)({expr}));')
    out += ["    return 0;", "}"]
    return "\n".join(out) + "\n"


def c_layouts(tmp_path: Path, mirrors=MIRRORS, constants=CONSTANTS) -> tuple[dict, dict, dict]:
    src = tmp_path / "layouts.c"
    src.write_text(c_program(mirrors, constants))
    exe = build("binary-layouts", [src], shared=False, cflags=("-O0", "-Wall", "-Werror"))
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    sizes: dict[int, int] = {}
    fields: dict[tuple[int, str], Field] = {}
    consts: dict[int, str] = {}
    for line in out.splitlines():
        tag, rest = line.split(" ", 1)
        if tag == "S":
            i, size = rest.split()
            sizes[int(i)] = int(size)
        elif tag == "F":
            i, name, off, size, sgn = rest.split()
            fields[int(i), name] = Field(name, int(off), int(size), None if sgn == "-1" else sgn == "1")
        else:
            i, value = rest.split(" ", 1)
            consts[int(i)] = value
    return sizes, fields, consts


def mismatches(mirrors, constants, sizes, fields, consts) -> list[str]:
    bad = []
    for i, (ctype, lay) in enumerate(mirrors):
        if sizes[i] != lay.size:
            bad.append(f"{ctype}: sizeof {sizes[i]} in C, {lay.size} in Python")
        for f in lay.fields:
            c = fields[i, f.name]
            if c != f:
                bad.append(
                    f"{ctype}.{f.name}: C offset {c.offset} size {c.size} signed {c.signed}, "
                    f"Python offset {f.offset} size {f.size} signed {f.signed}"
                )
        covered = sum(f.size for f in lay.fields)
        if covered != sizes[i] and ctype not in GAPS_ALLOWED:
            bad.append(f"{ctype}: Python's fields cover {covered} of {sizes[i]} bytes (a C field it lacks?)")
    for i, (expr, value) in enumerate(constants):
        py = value.decode() if isinstance(value, bytes) else str(int(value))
        if consts[i] != py:
            bad.append(f"{expr}: {consts[i]!r} in C, {py!r} in Python")
    return bad


# structs whose Python mirror leaves C padding unnamed (ctypes mirrors of the in-memory
# config: C pads after the last int, as ctypes does)
GAPS_ALLOWED = {"pgr_config", "struct pack_header"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    return c_layouts(tmp_path_factory.mktemp("layouts"))


def test_every_shared_struct_and_constant_matches(compiled):
    sizes, fields, consts = compiled
    assert len(sizes) == len(MIRRORS) and len(consts) == len(CONSTANTS)
    assert mismatches(MIRRORS, CONSTANTS, sizes, fields, consts) == []


def test_a_python_only_change_is_caught(compiled):
    sizes, fields, consts = compiled
    changed = [(c, lay) for c, lay in MIRRORS]
    i = next(k for k, (c, _) in enumerate(MIRRORS) if c == "struct fm_sample")
    dt = frames.SAMPLE_DTYPE.descr
    dt[5] = ("kind", "<i4")  # unsigned → signed
    changed[i] = ("struct fm_sample", layout_of_dtype(np.dtype(dt)))
    j = next(k for k, (c, _) in enumerate(MIRRORS) if c == "struct pc_rec")
    rec = cupti_records.REC_DTYPE.descr
    rec[3] = ("stream", "<u8")  # wider: every later offset moves
    changed[j] = ("struct pc_rec", layout_of_dtype(np.dtype(rec)))
    consts2 = list(CONSTANTS)
    consts2[0] = ("FM_STREAM_MAGIC", frames.STREAM_MAGIC + 1)
    bad = mismatches(changed, consts2, sizes, fields, consts)
    assert any(b.startswith("struct fm_sample.kind:") for b in bad)
    assert any(b.startswith("struct pc_rec: sizeof 48 in C, 52 in Python") for b in bad)
    assert any(b.startswith("struct pc_rec.start:") for b in bad)
    assert any(b.startswith("FM_STREAM_MAGIC:") for b in bad)
    # fm_sample.kind; pc_rec: sizeof, stream, the six fields after it, coverage; the magic
    assert len(bad) == 1 + 1 + 1 + 6 + 1 + 1, bad


def test_a_c_only_change_is_caught(tmp_path, monkeypatch):
    """A copy of native/ whose pager.h gained a field in pgr_log_rec and whose faultmon.h
    bumped the stream version: the program built against it disagrees with Python."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    copy = tmp_path / "native"
    shutil.copytree(native_dir(), copy, ignore=shutil.ignore_patterns("build"))
    h = copy / "pager" / "pager.h"
    h.write_text(h.read_text().replace("    uint16_t pad;\n    int32_t tid;", "    uint16_t pad;\n    int64_t tid;"))
    f = copy / "faultmon.h"
    f.write_text(f.read_text().replace("#define FM_STREAM_VERSION 1u", "#define FM_STREAM_VERSION 2u"))
    monkeypatch.setenv("PAGECAST_NATIVE_DIR", str(copy))
    sizes, fields, consts = c_layouts(tmp_path)
    bad = mismatches(MIRRORS, CONSTANTS, sizes, fields, consts)
    assert sorted(bad) == sorted(
        [
            "pgr_log_rec: sizeof 32 in C, 24 in Python",
            "pgr_log_rec.tid: C offset 24 size 8 signed True, Python offset 20 size 4 signed True",
            "pgr_log_rec: Python's fields cover 24 of 32 bytes (a C field it lacks?)",
            "FM_STREAM_VERSION: '2' in C, '1' in Python",
        ]
    )


# ---- magics and versions checked on read ------------------------------------------------


def test_faultmon_stream_hello_checked():
    """A collector of another build: wrong magic and wrong version each one line."""
    mon = faultmon.FaultMonitor(["true"])
    hello = np.zeros(1, frames.HELLO_DTYPE)
    hello["magic"], hello["version"], hello["pid"] = frames.STREAM_MAGIC, frames.STREAM_VERSION, 42
    assert int(mon._check_hello(hello.tobytes())["pid"]) == 42
    with pytest.raises(PagecastError, match=r"fault collector: not a pagecast fault collector stream \(bad magic"):
        mon._check_hello(b"\0" * frames.HELLO_DTYPE.itemsize)
    with pytest.raises(
        PagecastError, match=r"malformed fault collector stream \(first frame of 40 bytes, expected 32\)"
    ):
        mon._check_hello(hello.tobytes() + bytes(8))
    hello["version"] = frames.STREAM_VERSION + 1
    want = r"fault collector stream version 2 not supported \(this pagecast reads 1\)"
    with pytest.raises(PagecastError, match=want):
        mon._check_hello(hello.tobytes())


@needs_perf
def test_fast_path_config_version_checked_by_the_collector(tmp_path):
    for magic, msg in (
        (b"PCFAST2\0", "unsupported fast-path config version 2 (this collector reads 1)"),
        (b"NOTFAST\0", "not a pagecast fast-path config (bad magic)"),
    ):
        cfg = tmp_path / "fast.cfg"
        cfg.write_bytes(fastpath.CONFIG_HEAD.pack(magic, 2, 0, 0, 0, 0, 8, 0))
        mon = faultmon.FaultMonitor(["true"], fast=cfg, stderr=subprocess.DEVNULL)
        with pytest.raises(PagecastError) as e:
            list(mon.batches())  # the config is read after the HELLO frame, before the program runs
        mon.close()
        assert str(e.value) == f"{cfg}: {msg}"


def test_pager_table_version_checked_by_the_c_loader(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"\0" * 4 * 4096)
    t = pager.write_table(tmp_path / "t.tab", pager.PrefetchTable.from_pairs(4, np.array([0]), np.array([1])), data)
    assert pager.check_table(t) == (4, str(data.resolve()))
    raw = bytearray(t.read_bytes())
    raw[6] = ord("2")
    t.write_bytes(bytes(raw))
    with pytest.raises(PagecastError, match=r"t\.tab.*unsupported pager table version 2 \(this pagecast reads 1\)"):
        pager.check_table(t)
    raw[:6] = b"NOTTAB"
    t.write_bytes(bytes(raw))
    with pytest.raises(PagecastError, match=r"t\.tab.*not a pager table file \(bad magic\)"):
        pager.check_table(t)


def test_pager_log_version_checked(tmp_path):
    head = np.zeros(1, pager.LOG_HEADER_DTYPE)
    head["magic"], head["version"], head["page_size"], head["path"] = pager.LOG_MAGIC, 1, 4096, b"/data"
    rec = np.zeros(2, pager.LOG_RECORD)
    rec["page"], rec["kind"] = [3, 5], 8
    log = tmp_path / "p.log"
    log.write_bytes(head.tobytes() + rec.tobytes() + b"\1\2\3")  # a torn last record is dropped
    got = pager.read_fault_log(log)
    assert (got.file, got.page_size, got.records["page"].tolist()) == ("/data", 4096, [3, 5])
    head["version"] = 2
    log.write_bytes(head.tobytes())
    want = r"p\.log: pager fault log version 2 not supported \(this pagecast reads 1\)"
    with pytest.raises(PagecastError, match=want):
        pager.read_fault_log(log)
    log.write_bytes(b"PGCLOG9\0" + head.tobytes()[8:])
    with pytest.raises(PagecastError, match=r"p\.log: not a pager fault log \(bad magic"):
        pager.read_fault_log(log)


def test_page_pack_version_checked(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(np.arange(8 * 512, dtype=np.uint64).tobytes())
    p = pack.build_pack(src, np.array([3, 1], np.int64), tmp_path / "a.pack").path
    assert pack.read_pack(p).npages == 2
    raw = bytearray(p.read_bytes())
    raw[8:12] = (2).to_bytes(4, "little")
    p.write_bytes(bytes(raw))
    with pytest.raises(PagecastError, match=r"a\.pack: page pack version 2 not supported \(this pagecast reads 1\)"):
        pack.read_pack(p)
    raw[:8] = b"PGCPACKX"
    p.write_bytes(bytes(raw))
    with pytest.raises(PagecastError, match=r"a\.pack: not a page pack \(bad or short header\)"):
        pack.read_pack(p)
