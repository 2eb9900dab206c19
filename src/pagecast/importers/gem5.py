"""gem5 memory packet traces (CommMonitor / MemTraceProbe, ``*.trc.gz``) → trace of ACCESS rows.

File layout (gem5's ``ProtoOutputStream``): optionally gzip'd; the 4 bytes ``gem5``;
then length-delimited protobuf messages (varint32 length, message): one
``PacketHeader`` (object id, tick frequency, id→name strings) and ``Packet`` records
(tick, cmd, addr, size, flags, pkt_id, pc), schema in ``_gem5_proto.py``.

Mapping: one ACCESS row per packet; ``t_ns`` = (tick − first tick) converted with the
header's ``tick_freq`` (``meta["t0_tick"]`` keeps the origin); ``ip`` = pc; ``bytes`` =
size; flags bit 0 = the command writes (``MemCmd`` attribute IsWrite), sub-kind (bits
4-7) = 1 prefetch, 2 writeback/clean/evict, 3 other cache maintenance or sync, 0 demand
read/write; ``tid`` = -1 (a packet names no thread). Regions: runs of touched 2 MiB
granules (``_cluster.py``), two passes over the file.

Decoding: the frames are found by ``_varint_frames`` (jitted); each batch of up to a
Mi packets is parsed by protobuf's C decoder as one ``PacketBatch`` (every packet
inside its own boundary), re-serialised canonically (each field at most once, unknown
fields dropped) and parsed again as ``PacketColumns``, which yields each field as one
list: a required field must have one value per packet. For a field that only some
packets carry (``pc``), which packets hold it is read from the canonical bytes (a
jitted walk over protobuf's own output, ``varint_fields_present``).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np
from google.protobuf.descriptor_pb2 import FieldDescriptorProto
from google.protobuf.message import DecodeError

from pagecast.errors import PagecastError
from pagecast.importers import _varint_frames as vf
from pagecast.importers._cluster import AddressClusters
from pagecast.importers._gem5_proto import PACKET_FIELDS, messages
from pagecast.trace.schema import FLAG_SUBKIND_SHIFT, FLAG_WRITE, Kind
from pagecast.trace.writer import TraceWriter

MAGIC = b"gem5"
BLOCK = 16 << 20
BATCH = 1 << 20
MAX_MESSAGE = 1 << 24  # a header with many id strings is the largest message gem5 writes

# gem5's MemCmd::Command numbering (src/mem/packet.hh, unchanged since 2020)
MEM_CMDS = (
    "InvalidCmd ReadReq ReadResp ReadRespWithInvalidate WriteReq WriteResp WriteCompleteResp WritebackDirty "
    "WritebackClean WriteClean CleanEvict SoftPFReq SoftPFExReq HardPFReq SoftPFResp HardPFResp WriteLineReq "
    "UpgradeReq SCUpgradeReq UpgradeResp SCUpgradeFailReq UpgradeFailResp ReadExReq ReadExResp ReadCleanReq "
    "ReadSharedReq LoadLockedReq StoreCondReq StoreCondFailReq StoreCondResp LockedRMWReadReq LockedRMWReadResp "
    "LockedRMWWriteReq LockedRMWWriteResp SwapReq SwapResp _ _ MemFenceReq MemSyncReq MemSyncResp MemFenceResp "
    "CleanSharedReq CleanSharedResp CleanInvalidReq CleanInvalidResp InvalidDestError BadAddressError ReadError "
    "WriteError FunctionalReadError FunctionalWriteError PrintReq FlushReq InvalidateReq InvalidateResp HTMReq "
    "HTMReqResp HTMAbort TlbiExtSync"
).split()
_WRITES = {
    "WriteReq",
    "WritebackDirty",
    "WritebackClean",
    "WriteClean",
    "WriteLineReq",
    "StoreCondReq",
    "StoreCondFailReq",
    "LockedRMWWriteReq",
    "SwapReq",
}
_SUB_PREFETCH = {"SoftPFReq", "SoftPFExReq", "HardPFReq", "SoftPFResp", "HardPFResp"}
_SUB_WRITEBACK = {"WritebackDirty", "WritebackClean", "WriteClean", "CleanEvict"}
_SUB_OTHER = {
    "CleanSharedReq",
    "CleanSharedResp",
    "CleanInvalidReq",
    "CleanInvalidResp",
    "MemFenceReq",
    "MemSyncReq",
    "MemSyncResp",
    "MemFenceResp",
    "FlushReq",
    "InvalidateReq",
    "InvalidateResp",
    "PrintReq",
    "TlbiExtSync",
}


def _cmd_flags() -> np.ndarray:
    """flags byte per command number (commands beyond the table: 0)."""
    out = np.zeros(256, np.uint8)
    for i, name in enumerate(MEM_CMDS):
        f = FLAG_WRITE if name in _WRITES else 0
        sub = 1 if name in _SUB_PREFETCH else 2 if name in _SUB_WRITEBACK else 3 if name in _SUB_OTHER else 0
        out[i] = f | (sub << FLAG_SUBKIND_SHIFT)
    return out


CMD_FLAGS = _cmd_flags()


@dataclass
class Header:
    obj_id: str
    ver: int
    tick_freq: int
    id_strings: dict[int, str]


class _Counted:
    """A binary file that reports how many raw bytes were read (progress on the gzip'd size)."""

    def __init__(self, f: BinaryIO, on_bytes: Callable[[int], None] | None):
        self.f, self.on_bytes = f, on_bytes

    def read(self, n: int = -1) -> bytes:
        b = self.f.read(n)
        if self.on_bytes and b:
            self.on_bytes(len(b))
        return b

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.f.close()


def _open(path: Path, on_bytes: Callable[[int], None] | None) -> tuple[Any, bool]:
    try:
        f = open(path, "rb")
    except OSError as e:
        raise PagecastError(f"cannot read: {e.strerror}", path=path) from None
    head = f.read(2)
    f.seek(0)
    raw = _Counted(f, on_bytes)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), True
    return raw, False


def _read_blocks(path: Path, on_bytes: Callable[[int], None] | None) -> Iterator[bytes]:
    stream, gz = _open(path, on_bytes)
    try:
        while True:
            try:
                b = stream.read(BLOCK)
            except EOFError:
                raise PagecastError(
                    "truncated gzip stream (the file ends before the gzip end marker)", path=path
                ) from None
            except (gzip.BadGzipFile, zlib.error, OSError) as e:
                raise PagecastError(f"corrupt gzip stream: {e}", path=path) from None
            if not b:
                return
            yield b
    finally:
        stream.close()


def _header(path: Path, data: bytes) -> Header:
    M = messages()
    try:
        h = M.PacketHeader.FromString(data)
    except DecodeError as e:
        raise PagecastError(f"header: not a gem5 PacketHeader ({e})", path=path) from None
    if not h.IsInitialized():
        raise PagecastError(f"header: missing {', '.join(h.FindInitializationErrors())}", path=path)
    if h.tick_freq == 0:
        raise PagecastError("header: tick_freq is 0", path=path)
    ids = {e.key: e.value for e in h.id_strings}
    for k, v in ids.items():
        if not isinstance(v, str):  # protobuf hands a string field that is not UTF-8 over as bytes
            raise PagecastError(f"header: id string {k} is not UTF-8 text", path=path)
    if not isinstance(h.obj_id, str):
        raise PagecastError("header: obj_id is not UTF-8 text", path=path)
    return Header(h.obj_id, h.ver, h.tick_freq, ids)


def _decode_batch(
    path: Path, buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, first: int
) -> dict[str, np.ndarray]:
    """Packets framed by (starts, lengths) in ``buf`` → columns. ``first``: number of the first packet (1-based)."""
    M = messages()
    n = len(starts)
    # the prefix of frame i starts where frame i-1 ends; gem5's stream is those frames back to back
    prefix = np.empty(n, np.int64)
    prefix[1:] = (starts + lengths)[:-1]
    prefix[0] = 0  # callers frame ``buf`` from its first byte
    end = int(starts[-1] + lengths[-1])
    seg = buf[prefix[0] : end]
    tagged = np.insert(seg, prefix - prefix[0], 0x0A)  # key of `repeated Packet packet = 1`
    try:
        batch = M.PacketBatch.FromString(tagged.tobytes())
    except DecodeError:
        _raise_first_bad(path, buf, starts, lengths, first)
    # canonical form: each field at most once, in field order; unknown fields dropped
    batch.DiscardUnknownFields()
    canon = np.frombuffer(batch.SerializePartialToString(), np.uint8)
    cs, cl, _, status, _ = vf.frames(canon, tag=0x0A, max_frames=n + 1, max_len=MAX_MESSAGE)
    assert status == vf.OK and len(cs) == n, "protobuf re-serialisation is not framed as expected"
    cols = M.PacketColumns.FromString(vf.strip_prefixes(canon, cs, cl))
    present = None
    out = {}
    for name, num, _t, label in PACKET_FIELDS:
        values = getattr(cols, name)
        if len(values) == n:
            out[name] = np.array(values, np.uint64)
        elif label == FieldDescriptorProto.LABEL_REQUIRED:  # some packet lacks it
            _raise_first_bad(path, buf, starts, lengths, first)
        elif len(values) == 0:
            out[name] = np.zeros(n, np.uint64)
        else:  # some packets carry the field (gem5 sets pc only when the request has one)
            if present is None:
                present = np.zeros((n, 8), np.bool_)
                vf.varint_fields_present(canon, cs, cl, 7, present)
            col = np.zeros(n, np.uint64)
            col[present[:, num]] = np.array(values, np.uint64)
            out[name] = col
    return out


def _raise_first_bad(path: Path, buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, first: int) -> None:
    """Error path: find the first packet protobuf rejects, one by one."""
    M = messages()
    for i, (s, n) in enumerate(zip(starts.tolist(), lengths.tolist())):
        try:
            p = M.Packet.FromString(buf[s : s + n].tobytes())
        except DecodeError as e:
            raise PagecastError(f"packet {first + i}: not a gem5 Packet message ({e})", path=path) from None
        if not p.IsInitialized():
            raise PagecastError(f"packet {first + i}: missing {', '.join(p.FindInitializationErrors())}", path=path)
    raise PagecastError(f"packets {first}..{first + len(starts) - 1}: undecodable batch", path=path)


def iter_packets(
    path: str | Path, on_bytes: Callable[[int], None] | None = None, batch: int | None = None
) -> tuple[Header, Iterator[dict[str, np.ndarray]]]:
    """(header, iterator of column batches of up to ``batch`` packets). The header is read before returning."""
    path = Path(path)
    batch = batch or BATCH
    blocks = _read_blocks(path, on_bytes)
    carry = b""
    for b in blocks:
        carry += b
        if len(carry) >= 4 + 10:
            break
    if carry[:4] != MAGIC:
        raise PagecastError(f"not a gem5 packet trace (magic {carry[:4]!r}, want {MAGIC!r})", path=path)
    buf = np.frombuffer(carry, np.uint8)
    hs, hl, _, status, _ = vf.frames(buf, 4, max_frames=1, max_len=MAX_MESSAGE)
    while not len(hs) and status == vf.TRUNCATED:
        more = next(blocks, None)
        if more is None:
            raise PagecastError("truncated header", path=path)
        carry += more
        buf = np.frombuffer(carry, np.uint8)
        hs, hl, _, status, _ = vf.frames(buf, 4, max_frames=1, max_len=MAX_MESSAGE)
    if not len(hs):
        raise PagecastError("header: bad varint length", path=path)
    header = _header(path, carry[hs[0] : hs[0] + hl[0]])
    rest = carry[int(hs[0] + hl[0]) :]

    def gen() -> Iterator[dict[str, np.ndarray]]:
        done = 0
        offset = int(hs[0] + hl[0])  # decompressed stream offset of rest[0]
        pending = rest
        exhausted = need_more = False
        while True:
            if not exhausted and (len(pending) < BLOCK or need_more):
                need_more = False
                more = next(blocks, None)
                if more is None:
                    exhausted = True
                else:
                    pending += more
                    continue
            if not pending:
                return
            buf = np.frombuffer(pending, np.uint8)
            st, ln, nxt, status, where = vf.frames(buf, 0, max_frames=batch, max_len=MAX_MESSAGE)
            if status == vf.BAD_VARINT:
                raise PagecastError(
                    f"packet {done + len(st) + 1} (byte {offset + where} of the stream): bad varint length", path=path
                )
            if status == vf.TRUNCATED and exhausted:
                raise PagecastError(
                    f"packet {done + len(st) + 1} (byte {offset + where} of the stream): truncated record", path=path
                )
            if len(st):
                yield _decode_batch(path, buf, st, ln, done + 1)
                done += len(st)
            else:
                need_more = True  # one message longer than what is buffered
            pending = pending[nxt:]
            offset += nxt
            if exhausted and not pending:
                return

    return header, gen()


def tick_to_ns(ticks: np.ndarray, t0: int, freq: int) -> np.ndarray:
    """Ticks since ``t0`` in ns; exact when the tick frequency is a multiple of 1 GHz (gem5's default 1 THz)."""
    d = ticks.astype(np.uint64) - np.uint64(t0)  # t0 is the minimum: no wrap, even for ticks ≥ 2^63
    if freq % 1_000_000_000 == 0:
        return (d // np.uint64(freq // 1_000_000_000)).astype(np.int64)
    return (d.astype(np.float64) * (1e9 / freq)).astype(np.int64)


def import_trace(
    src: str | Path,
    out: str | Path,
    *,
    stats: dict[str, Any] | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Import a packet trace; ``stats``: a ``gem5_stats`` summary to keep in the metadata."""
    src = Path(src)
    clusters = AddressClusters()
    header, it = iter_packets(src, on_bytes)
    n, t0 = 0, None
    for b in it:
        clusters.add(b["addr"])
        n += len(b["addr"])
        m = int(b["tick"].min())
        t0 = m if t0 is None else min(t0, m)
    if n == 0:
        raise PagecastError("no packets after the header", path=src)
    regions = clusters.build(kind="anon", name="range")
    meta: dict[str, Any] = {
        "time_unit": "ns",
        "t0_tick": t0,
        "tick_freq": header.tick_freq,
        "gem5_file": str(src),
        "gem5_obj_id": header.obj_id,
        "gem5_trace_version": header.ver,
        "gem5_id_strings": {str(k): v for k, v in header.id_strings.items()},
    }
    if stats is not None:
        meta["gem5_stats"] = stats
    cmd_counts = np.zeros(256, np.int64)
    _, it = iter_packets(src, on_bytes)
    with TraceWriter(out, regions=regions, source="import:gem5", meta=meta) as w:
        for b in it:
            cmd = np.minimum(b["cmd"], 255).astype(np.int64)
            cmd_counts += np.bincount(cmd, minlength=256)
            region, page = clusters.translate(b["addr"])
            w.write(
                t_ns=tick_to_ns(b["tick"], t0, header.tick_freq),
                region=region,
                page=page,
                kind=int(Kind.ACCESS),
                flags=CMD_FLAGS[cmd],
                ip=b["pc"],
                bytes=np.minimum(b["size"], 0xFFFFFFFF).astype(np.uint32),
            )
        cmds = {(MEM_CMDS[i] if i < len(MEM_CMDS) else f"cmd{i}"): int(c) for i, c in enumerate(cmd_counts) if c}
        w.meta["gem5_commands"] = cmds
    return {
        "trace": str(out),
        "rows": n,
        "regions": len(regions),
        "tick_freq": header.tick_freq,
        "t0_tick": t0,
        "commands": cmds,
        "sorted_by_time": w.sorted,
    }
