"""Framing of length-delimited protobuf streams (``varint length, message`` repeated).

gem5 writes its traces with protobuf's ``CodedOutputStream::WriteVarint32`` before
each message; the Python protobuf package parses messages but has no public reader
for such a stream, so the frames are found here: a sequential scan (each length
decides where the next one starts), jitted. Decoding the messages themselves is left
to protobuf.
"""

from __future__ import annotations

import numba
import numpy as np

OK, TRUNCATED, BAD_VARINT, BAD_TAG = 0, 1, 2, 3


@numba.njit(cache=True, nogil=True)
def find_frames(buf, pos, tag, max_len, starts, lengths):  # pragma: no cover - jitted
    """Frames of ``buf[pos:]``: fills ``starts``/``lengths`` (body offset and size).

    ``tag`` > 0: every frame begins with that byte (a repeated-field key) before the
    length. Returns (frames found, offset after the last whole frame, status, offset
    of the problem). Status TRUNCATED means the buffer ends inside a frame (the caller
    may append more bytes and resume from the returned offset).
    """
    n = len(buf)
    k = 0
    cap = len(starts)
    while pos < n and k < cap:
        p = pos
        if tag > 0:
            if buf[p] != tag:
                return k, pos, BAD_TAG, p
            p += 1
        length = 0
        shift = 0
        done = False
        while p < n:
            b = buf[p]
            p += 1
            if shift >= 35 or (shift == 28 and b > 15):
                return k, pos, BAD_VARINT, pos
            length |= (np.int64(b) & 0x7F) << shift
            shift += 7
            if b < 0x80:
                done = True
                break
        if not done:
            return k, pos, TRUNCATED, pos
        if length > max_len:
            return k, pos, BAD_VARINT, pos
        if p + length > n:
            return k, pos, TRUNCATED, pos
        starts[k] = p
        lengths[k] = length
        k += 1
        pos = p + length
    return k, pos, OK, pos


def frames(
    buf: np.ndarray, pos: int = 0, *, tag: int = 0, max_frames: int = 1 << 20, max_len: int = 1 << 20
) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """Python wrapper: (starts, lengths, next offset, status, problem offset)."""
    starts = np.empty(max_frames, np.int64)
    lengths = np.empty(max_frames, np.int64)
    k, nxt, status, where = find_frames(buf, pos, tag, max_len, starts, lengths)
    return starts[:k], lengths[:k], int(nxt), int(status), int(where)


@numba.njit(cache=True, nogil=True)
def _gather(buf, starts, lengths, out):  # pragma: no cover - jitted
    k = 0
    for i in range(len(starts)):
        s = starts[i]
        for j in range(lengths[i]):
            out[k + j] = buf[s + j]
        k += lengths[i]


def strip_prefixes(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The frames' bodies concatenated (the length prefixes removed)."""
    out = np.empty(int(lengths.sum()), np.uint8)
    _gather(buf, starts, lengths, out)
    return out.tobytes()


@numba.njit(cache=True, nogil=True)
def varint_fields_present(buf, starts, lengths, max_field, present):  # pragma: no cover - jitted
    """Which fields each frame holds, for frames that protobuf itself serialised with
    only varint fields numbered below 16 (one-byte keys): ``present[i, f]``."""
    for i in range(len(starts)):
        p = starts[i]
        end = p + lengths[i]
        while p < end:
            f = buf[p] >> 3
            p += 1
            while buf[p] & 0x80:
                p += 1
            p += 1
            if f <= max_field:
                present[i, f] = True
