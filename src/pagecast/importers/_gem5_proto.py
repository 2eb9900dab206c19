"""gem5's packet trace messages (``src/proto/packet.proto``), built at run time.

The message classes come from a ``FileDescriptorProto`` assembled here with
``descriptor_pb2`` and turned into classes by ``message_factory``, so installing
pagecast needs no ``protoc``. Field numbers and types follow gem5's published schema:

    message PacketHeader { required string obj_id = 1; optional uint32 ver = 2;
                           required uint64 tick_freq = 3;
                           message IdStringEntry { optional uint32 key = 1; optional string value = 2; }
                           repeated IdStringEntry id_strings = 4; }
    message Packet { required uint64 tick = 1; required uint32 cmd = 2; required uint64 addr = 3;
                     required uint32 size = 4; optional uint32 flags = 5; optional uint64 pkt_id = 6;
                     optional uint64 pc = 7; }

Two helper messages are pagecast's own, for decoding many packets in one call of the
C decoder: ``PacketBatch`` (``repeated Packet packet = 1``: one length-delimited
packet per element, so each keeps its own boundaries and required fields) and
``PacketColumns``, whose fields have the numbers and wire types of ``Packet`` but are
``repeated``: parsing the concatenated bodies of canonically re-serialised packets
appends every packet's value of a field to one list (a column).
"""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
PACKET_FIELDS = (  # name, number, type, label in Packet
    ("tick", 1, _F.TYPE_UINT64, _F.LABEL_REQUIRED),
    ("cmd", 2, _F.TYPE_UINT32, _F.LABEL_REQUIRED),
    ("addr", 3, _F.TYPE_UINT64, _F.LABEL_REQUIRED),
    ("size", 4, _F.TYPE_UINT32, _F.LABEL_REQUIRED),
    ("flags", 5, _F.TYPE_UINT32, _F.LABEL_OPTIONAL),
    ("pkt_id", 6, _F.TYPE_UINT64, _F.LABEL_OPTIONAL),
    ("pc", 7, _F.TYPE_UINT64, _F.LABEL_OPTIONAL),
)


def _field(msg, name: str, number: int, ftype: int, label: int, type_name: str | None = None) -> None:
    f = msg.field.add()
    f.name, f.number, f.type, f.label = name, number, ftype, label
    if type_name:
        f.type_name = type_name


@lru_cache(maxsize=1)
def messages() -> SimpleNamespace:
    """The message classes: PacketHeader, Packet, PacketBatch, PacketColumns."""
    fd = descriptor_pb2.FileDescriptorProto(name="pagecast_gem5_packet.proto", package="pagecast_gem5", syntax="proto2")
    hdr = fd.message_type.add(name="PacketHeader")
    _field(hdr, "obj_id", 1, _F.TYPE_STRING, _F.LABEL_REQUIRED)
    _field(hdr, "ver", 2, _F.TYPE_UINT32, _F.LABEL_OPTIONAL)
    _field(hdr, "tick_freq", 3, _F.TYPE_UINT64, _F.LABEL_REQUIRED)
    ent = hdr.nested_type.add(name="IdStringEntry")
    _field(ent, "key", 1, _F.TYPE_UINT32, _F.LABEL_OPTIONAL)
    _field(ent, "value", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL)
    _field(hdr, "id_strings", 4, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".pagecast_gem5.PacketHeader.IdStringEntry")
    pkt = fd.message_type.add(name="Packet")
    for name, num, ftype, label in PACKET_FIELDS:
        _field(pkt, name, num, ftype, label)
    batch = fd.message_type.add(name="PacketBatch")
    _field(batch, "packet", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".pagecast_gem5.Packet")
    cols = fd.message_type.add(name="PacketColumns")
    for name, num, ftype, _ in PACKET_FIELDS:
        f = cols.field.add(name=name, number=num, type=ftype, label=_F.LABEL_REPEATED)
        f.options.packed = False  # the bodies carry one unpacked value per field
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return SimpleNamespace(
        **{
            n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"pagecast_gem5.{n}"))
            for n in ("PacketHeader", "Packet", "PacketBatch", "PacketColumns")
        }
    )
