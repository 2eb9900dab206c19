"""Seeded mutations of valid input files, for the fuzz tests (tests/test_fuzz_inputs.py).

Every mutation is derived from a valid file: bit flips, truncation, inserted bytes, a
deleted or duplicated range, and, for text, a number replaced by an edge value (2^63,
20 digits, NaN, a superscript digit, ...). A watchdog (faulthandler) ends the process
with the stack of a case that hangs, so a hang fails the run instead of stalling it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import re
from typing import Iterator

import numpy as np

EDGE_NUMBERS = [
    b"0",
    b"-1",
    b"9223372036854775807",
    b"9223372036854775808",
    b"18446744073709551615",
    b"18446744073709551616",
    b"999999999999999999999",
    b"9999999999999999999",
    b"nan",
    b"inf",
    b"-inf",
    b"1e308",
    b"1e-300",
    b"\xc2\xb2",
    b"",
    b"0x",
    b"0xffffffffffffffff",
    b"-0",
    b"1.5",
    b"\xff\xfe",
]
_NUMBER = re.compile(rb"0x[0-9a-fA-F]+|-?[0-9]+(?:\.[0-9]+)?")
CASE_TIMEOUT_S = 60


def mutate(data: bytes, rng: np.random.Generator, text: bool) -> tuple[str, bytes]:
    """One random mutation of ``data``: (what was done, the mutated bytes)."""
    kinds = ["flip", "flip", "truncate", "insert", "delete", "duplicate", "overwrite"]
    if text:
        kinds += ["number", "number", "number"]
    kind = kinds[int(rng.integers(len(kinds)))]
    b = bytearray(data)
    n = len(b)
    if kind == "flip" or n == 0:
        for _ in range(int(rng.integers(1, 4))):
            if n:
                bit = int(rng.integers(n * 8))
                b[bit // 8] ^= 1 << (bit % 8)
        return "flip", bytes(b)
    pos = int(rng.integers(n))
    if kind == "truncate":
        return f"truncate@{pos}", bytes(b[:pos])
    if kind == "insert":
        junk = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
        if text and rng.random() < 0.5:
            junk = [b",", b"\n", b" ", b"\r\n", b",,", b"#", b"\x00", b"\t"][int(rng.integers(8))]
        return f"insert@{pos}", bytes(b[:pos]) + junk + bytes(b[pos:])
    if kind == "delete":
        end = min(n, pos + int(rng.integers(1, 64)))
        return f"delete@{pos}", bytes(b[:pos] + b[end:])
    if kind == "duplicate":
        end = min(n, pos + int(rng.integers(1, 256)))
        return f"duplicate@{pos}", bytes(b[:end] + b[pos:end] + b[end:])
    if kind == "overwrite":
        end = min(n, pos + int(rng.integers(1, 16)))
        b[pos:end] = bytes([int(rng.choice([0, 0xFF]))]) * (end - pos)
        return f"overwrite@{pos}", bytes(b)
    numbers = list(_NUMBER.finditer(data))
    if not numbers:
        return "flip", mutate(data, rng, False)[1]
    m = numbers[int(rng.integers(len(numbers)))]
    edge = EDGE_NUMBERS[int(rng.integers(len(EDGE_NUMBERS)))]
    return f"number@{m.start()}={edge!r}", data[: m.start()] + edge + data[m.end() :]


def cases(data: bytes, seed: int, count: int, text: bool) -> Iterator[tuple[int, str, bytes]]:
    rng = np.random.default_rng(seed)
    for i in range(count):
        what, mutated = mutate(data, rng, text)
        yield i, what, mutated


def number_edges(data: bytes, line: int) -> Iterator[tuple[int, str, bytes]]:
    """Every number of line ``line`` (0-based) replaced by every edge value, one at a time."""
    lines = data.split(b"\n")
    start = sum(len(x) + 1 for x in lines[:line])
    i = 0
    for m in _NUMBER.finditer(lines[line]):
        for edge in EDGE_NUMBERS:
            a, b = start + m.start(), start + m.end()
            yield i, f"line {line + 1} number@{m.start()}={edge!r}", data[:a] + edge + data[b:]
            i += 1


@contextlib.contextmanager
def watchdog(seconds: float = CASE_TIMEOUT_S) -> Iterator[None]:
    """Kill the test process (printing every thread's stack) if the block runs longer than ``seconds``."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


BAD_UTF8 = [
    b"\xff",
    b"\x80",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xf8",
]  # stray, continuation, cut lead, surrogate, 5-byte lead


def break_utf8(data: bytes, text: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    """One byte of the first ``text`` in ``data`` replaced by bytes that are not UTF-8
    (the byte count of a length-prefixed string changes only by the replacement's extra bytes)."""
    at = data.find(text)
    assert at >= 0, text
    pos = at + int(rng.integers(len(text)))
    bad = BAD_UTF8[int(rng.integers(len(BAD_UTF8)))][:1]  # one byte: the protobuf length stays right
    return f"non-utf8@{pos}={bad!r}", data[:pos] + bad + data[pos + 1 :]


def replace_number(text: str, rng: np.random.Generator, quoted: bool) -> tuple[str, str]:
    """One number of a JSON text replaced by an edge value (``quoted``: as a JSON string,
    the way damo writes some numbers), which may leave the JSON invalid: that is a case too."""
    numbers = list(re.finditer(r"-?[0-9]+(?:\.[0-9]+)?", text))
    m = numbers[int(rng.integers(len(numbers)))]
    edge = EDGE_NUMBERS[int(rng.integers(len(EDGE_NUMBERS)))].decode("utf-8", "surrogateescape")
    value = '"' + edge + '"' if quoted else edge
    return f"number@{m.start()}={value!r}", text[: m.start()] + value + text[m.end() :]
