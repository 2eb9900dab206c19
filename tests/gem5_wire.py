"""A reference writer and reader of gem5 packet traces for the tests, in plain Python.

Written from the published schema (gem5 ``src/proto/packet.proto`` and
``ProtoOutputStream``: optional gzip, the 4 bytes ``gem5``, then varint32-length-
delimited PacketHeader and Packet messages). It shares no code with pagecast's
importer (which uses protobuf), so the two decode the same bytes independently.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field

HEADER_FIELDS = {1: "obj_id", 2: "ver", 3: "tick_freq", 4: "id_strings"}
PACKET_FIELDS = {1: "tick", 2: "cmd", 3: "addr", 4: "size", 5: "flags", 6: "pkt_id", 7: "pc"}
REQUIRED = ("tick", "cmd", "addr", "size")


def varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(num: int, wire: int) -> bytes:
    return varint(num << 3 | wire)


@dataclass
class Pkt:
    tick: int
    cmd: int
    addr: int
    size: int
    flags: int | None = 0
    pkt_id: int | None = None
    pc: int | None = None

    def encode(self) -> bytes:
        out = b""
        for num, name in PACKET_FIELDS.items():
            v = getattr(self, name)
            if v is not None:
                out += _key(num, 0) + varint(v)
        return out


@dataclass
class Hdr:
    obj_id: str = "system.monitor"
    tick_freq: int = 10**12
    ver: int = 0
    id_strings: dict[int, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        out = _key(1, 2) + varint(len(self.obj_id.encode())) + self.obj_id.encode()
        out += _key(2, 0) + varint(self.ver) + _key(3, 0) + varint(self.tick_freq)
        for k, v in self.id_strings.items():
            ent = _key(1, 0) + varint(k) + _key(2, 2) + varint(len(v.encode())) + v.encode()
            out += _key(4, 2) + varint(len(ent)) + ent
        return out


def encode_trace(header: Hdr, packets: list[Pkt], *, gz: bool = True) -> bytes:
    body = b"gem5" + varint(len(header.encode())) + header.encode()
    body += b"".join(varint(len(e)) + e for e in (p.encode() for p in packets))
    return gzip.compress(body, mtime=0) if gz else body


def _read_varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i
        if shift >= 70:
            raise ValueError("varint too long")


def _fields(msg: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) triples: ints for varint/fixed fields, bytes for length-delimited; groups skipped."""
    out, i, groups = [], 0, []
    while i < len(msg):
        key, i = _read_varint(msg, i)
        num, wire = key >> 3, key & 7
        if num == 0 or key >= 1 << 32:
            raise ValueError("bad field key")
        if wire == 3:
            groups.append(num)
            continue
        if wire == 4:
            if not groups or groups.pop() != num:
                raise ValueError("unmatched end group")
            continue
        if wire == 0:
            v, i = _read_varint(msg, i)
        elif wire == 2:
            n, i = _read_varint(msg, i)
            if i + n > len(msg):
                raise ValueError("truncated field")
            v, i = msg[i : i + n], i + n
        elif wire == 1:
            if i + 8 > len(msg):
                raise ValueError("truncated fixed64")
            v, i = int.from_bytes(msg[i : i + 8], "little"), i + 8
        elif wire == 5:
            if i + 4 > len(msg):
                raise ValueError("truncated fixed32")
            v, i = int.from_bytes(msg[i : i + 4], "little"), i + 4
        else:
            raise ValueError(f"wire type {wire}")
        if not groups:
            out.append((num, wire, v))
    if groups:
        raise ValueError("unterminated group")
    return out


def decode_trace(data: bytes) -> tuple[dict, list[dict]]:
    """(header fields, packets as dicts with absent optional fields = 0). Raises ValueError on any defect."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data[:4] != b"gem5":
        raise ValueError("magic")
    i = 4
    msgs = []
    while i < len(data):
        n, i = _read_varint(data, i)
        if n > 1 << 24 or i + n > len(data):
            raise ValueError("bad length")
        msgs.append(data[i : i + n])
        i += n
    if not msgs:
        raise ValueError("no header")
    header: dict = {"id_strings": {}}
    for num, wire, v in _fields(msgs[0]):
        name = HEADER_FIELDS.get(num)
        if name in ("ver", "tick_freq") and wire != 0:
            continue
        # a known field with another wire type is an unknown field to protobuf: skipped
        if name == "id_strings" and isinstance(v, bytes):
            ent = {k: x for k, w, x in _fields(v) if (k, w) in ((1, 0), (2, 2))}
            key, val = ent.get(1, 0), ent.get(2, b"")
            header["id_strings"][key % (1 << 32)] = val.decode()
        elif name == "obj_id" and isinstance(v, bytes):
            header["obj_id"] = v.decode()
        elif name in ("ver", "tick_freq") and isinstance(v, int):
            header[name] = v % (1 << (32 if name == "ver" else 64))
    if "obj_id" not in header or "tick_freq" not in header or header["tick_freq"] == 0:
        raise ValueError("header required fields")
    packets = []
    for m in msgs[1:]:
        p = {name: 0 for name in PACKET_FIELDS.values()}
        seen = set()
        for num, wire, v in _fields(m):
            name = PACKET_FIELDS.get(num)
            if name is None or wire != 0:
                continue
            limit = 1 << (32 if name in ("cmd", "size", "flags") else 64)
            p[name] = v % limit  # protobuf truncates over-long uint32 varints the same way
            seen.add(name)
        if not all(r in seen for r in REQUIRED):
            raise ValueError("packet required fields")
        packets.append(p)
    return header, packets
