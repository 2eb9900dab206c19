"""Fuzz of plan files through both readers: Python's ``decode_plan`` and the native launcher.

A plan ends with a CRC-32 of its body, so a plain mutation is refused at the checksum
and never reaches the field parsers. Half of the cases here are therefore *re-sealed*:
the body is mutated and the end line rewritten with the right count and checksum, so
the line and field parsers (in C too) see hostile numbers, missing fields, bad escapes
and overlong lines. Contract: Python raises a one-line PagecastError or returns a plan
that re-encodes cleanly; the launcher never crashes, hangs or changes the program's
output and exit status, and prints at most one line per file plus one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from _fuzz import cases, watchdog
from pagecast.errors import PagecastError
from pagecast.launch.binary import build_launcher
from pagecast.plan.format import FileIdentity, FilePlan, PlanDoc, checksum, decode_plan, encode_plan

PAGE = 4096
N_CASES = 240


def _reseal(data: bytes) -> bytes:
    """``data`` with its end line replaced by a valid one (count of 'file' lines, CRC)."""
    end = data.rfind(b"\nend ")
    body = data[: end + 1] if end >= 0 else (data if data.endswith(b"\n") else data + b"\n")
    nfiles = sum(1 for line in body.split(b"\n") if line.startswith(b"file "))
    return body + f"end {nfiles} {checksum(body):08x}\n".encode()


@pytest.fixture(scope="module")
def seed_plan(tmp_path_factory) -> tuple[bytes, Path]:
    # on the repository's disk (not tmpfs), like a user's data file
    base = Path(__file__).resolve().parents[1] / "native" / "build" / "testdata"
    base.mkdir(parents=True, exist_ok=True)
    f = base / f"fuzzplan-{os.getpid()}.bin"
    f.write_bytes(b"\x5a" * (64 * PAGE))
    other = tmp_path_factory.mktemp("plan") / "other file %.bin"
    other.write_bytes(b"x" * PAGE)
    doc = PlanDoc([
        FilePlan(str(f), FileIdentity.of(f), "warm", [(0, 3), (8, 4), (40, 24)], depth=2, chunk_kib=256,
                 gain_ms=1.5, reason="shared by 3 of 3 runs"),
        FilePlan(str(other), FileIdentity.of(other), "stream", [], depth=1),
        FilePlan(str(f), FileIdentity.of(f), "nothing", [], reason="no page shared"),
    ], note="a plan option (version 3): mutated too")  # fmt: skip
    yield encode_plan(doc), f
    f.unlink(missing_ok=True)


def _mutants(good: bytes):
    for i, what, data in cases(good, seed=20261123, count=N_CASES, text=True):
        yield i, what, (_reseal(data) if i % 2 else data)


def test_python_reader_fuzz(seed_plan, tmp_path):
    good, _ = seed_plan
    accepted = 0
    with watchdog():
        for i, what, data in _mutants(good):
            try:
                doc = decode_plan(data, tmp_path / "m.plan")
            except PagecastError as e:
                assert "\n" not in str(e), (i, what)
                continue
            accepted += 1
            decode_plan(encode_plan(doc))  # what was accepted is a valid plan
    assert accepted < N_CASES  # the mutations do reach refusals


def test_native_launcher_fuzz(seed_plan, tmp_path):
    good, _ = seed_plan
    launcher = build_launcher()
    plan = tmp_path / "m.plan"
    for i, what, data in _mutants(good):
        plan.write_bytes(data)
        r = subprocess.run([launcher, str(plan), "--", "sh", "-c", "echo ran; exit 3"], capture_output=True,
                           timeout=30)  # fmt: skip
        ctx = (i, what, r.stderr[-300:])
        assert r.returncode == 3 and r.stdout == b"ran\n", (
            ctx
        )  # never a crash of ours, never the program's status changed
        assert r.stderr.count(b"\n") <= 4, ctx


def test_both_readers_accept_exactly_the_same_plans(seed_plan, tmp_path):
    """One format, one decision: a plan the launcher uses is one Python uses, and the
    reverse (a plan handed over to Python must not be refused there after the launcher
    started on it). The launcher's ``--prefetch-only`` exit status says whether it read
    the plan (0) or refused it (2)."""
    good, _ = seed_plan
    launcher = build_launcher()
    plan = tmp_path / "m.plan"
    extra = [  # the lexical edges, each re-sealed so the field parsers see it
        good.replace(b" 1.500 ", b" 1e3 "), good.replace(b" 1.500 ", b" nan "), good.replace(b" 1.500 ", b" +1.5 "),
        good.replace(b" 1.500 ", b" abc "), good.replace(b"\nr 0 3\n", b"\nr +0 3\n"), good.replace(b"\nr 0 3\n", b"\nr 0 3\r\n"),
        good.replace(b"\nr 0 3\n", b"\nr 0_0 3\n"), good.replace(b"\nr 0 3\n", b"\nr 00 3\n"),
        good.replace(b"\nr 0 3\n", b"\nr 0 9223372036854775807\n"), good.replace(b"warm 2", b"warm 02"),
        good.replace(b"%20", b"%2"), good.replace(b"%20", b"%+1"), good.replace(b"shared", b"sh\xc3\xa4red"),
        good.replace(b"shared", b"sh\tred"), good.replace(b" stream 1 ", b" pack 1 ").replace(b" - - ", b" - x "),
    ]  # fmt: skip
    extra = [_reseal(e) for e in extra if e != good]
    extra += [
        good.replace(b"\nend ", b"\nend  "),
        good[:-1] + b" \n",
        good + b"\n",
        good.upper()[:0] + good.replace(b"end 3", b"end 03"),
    ]
    disagree = []
    for i, what, data in [*_mutants(good), *((1000 + k, "edge", e) for k, e in enumerate(extra))]:
        try:
            decode_plan(data, plan)
            py = True
        except PagecastError:
            py = False
        plan.write_bytes(data)
        r = subprocess.run([launcher, "--prefetch-only", str(plan)], capture_output=True, timeout=30)
        assert r.returncode in (0, 2), (i, what, r.stderr[-300:])
        if py != (r.returncode == 0):
            disagree.append((i, what, py, r.stderr[-200:]))
    assert not disagree, disagree[:5]
