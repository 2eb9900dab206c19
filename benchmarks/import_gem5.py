"""gem5 packet trace decoding: pagecast's batched protobuf decode vs one protobuf call per packet.

Builds an N-packet gzip'd trace (pc on 2 packets of 3, like a CommMonitor below a CPU
whose writebacks carry no pc), then times, interleaved, REPEATS times each:
  batched  — ``gem5.iter_packets`` (frames found by the jitted scan, every batch parsed
             by protobuf as one message, fields taken as whole columns);
  baseline — the same frames, ``Packet.FromString`` and attribute reads per packet.
Prints the medians, rows/s and the ratio. Usage: python benchmarks/import_gem5.py [N]
"""

from __future__ import annotations

import gzip
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pagecast.importers import _varint_frames as vf
from pagecast.importers import gem5
from pagecast.importers._gem5_proto import messages

REPEATS = 3


def build(n: int) -> bytes:
    M = messages()
    rng = np.random.default_rng(0)
    addr = (0x7F00_0000_0000 + rng.integers(0, 1 << 30, n)).tolist()
    batch = M.PacketBatch()
    for i in range(n):
        p = batch.packet.add(tick=1000 * i, cmd=1 + 3 * (i % 2), addr=addr[i], size=64, flags=0, pkt_id=i)
        if i % 3:
            p.pc = 0x400000 + 4 * (i % 4096)
    wire = np.frombuffer(batch.SerializeToString(), np.uint8)
    st, ln, _, status, _ = vf.frames(wire, tag=0x0A, max_frames=n + 1)
    assert status == vf.OK and len(st) == n
    keep = np.ones(len(wire), bool)
    keep[np.r_[0, (st + ln)[:-1]]] = False  # the repeated field's key byte before each length
    hdr = M.PacketHeader(obj_id="system.monitor", tick_freq=10**12).SerializeToString()
    return gzip.compress(b"gem5" + bytes([len(hdr)]) + hdr + wire[keep].tobytes(), compresslevel=1)


def batched(path: Path) -> int:
    _, it = gem5.iter_packets(path)
    return sum(len(b["tick"]) for b in it)


def baseline(path: Path) -> int:
    M = messages()
    buf = np.frombuffer(gzip.decompress(path.read_bytes()), np.uint8)
    hs, hl, _, _, _ = vf.frames(buf, 4, max_frames=1)
    st, ln, _, _, _ = vf.frames(buf, int(hs[0] + hl[0]), max_frames=len(buf))
    raw = buf.tobytes()
    cols = {k: [] for k in ("tick", "cmd", "addr", "size", "flags", "pkt_id", "pc")}
    for s, n in zip(st.tolist(), ln.tolist()):
        p = M.Packet.FromString(raw[s : s + n])
        for k, v in cols.items():
            v.append(getattr(p, k))
    out = {k: np.array(v, np.uint64) for k, v in cols.items()}
    return len(out["tick"])


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "mem.trc.gz"
        t = time.perf_counter()
        path.write_bytes(build(n))
        print(f"built {n:,} packets ({path.stat().st_size / 1e6:.1f} MB gzip'd) in {time.perf_counter() - t:.1f} s")
        batched(path)  # jit compile and warm the page cache
        times: dict[str, list[float]] = {"batched": [], "baseline": []}
        for _ in range(REPEATS):
            for name, fn in (("batched", batched), ("baseline", baseline)):
                t = time.perf_counter()
                assert fn(path) == n
                times[name].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in med.items():
            print(f"{k:9s} median {v:.3f} s  ({n / v / 1e6:.2f} M packets/s)  runs {[round(x, 3) for x in times[k]]}")
        print(f"baseline / batched = {med['baseline'] / med['batched']:.2f}x")


if __name__ == "__main__":
    main()
