"""gem5 importers: real packet traces and stats.txt from gem5's repository, traces written
here from the published schema (checked against an independent plain-Python decode),
GPU debug traces, malformed input, a bounded fuzz, and the imported traces through
simulate / heatmap / train."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from _fuzz import break_utf8
from gem5_wire import Hdr, Pkt, decode_trace, encode_trace, varint
from pagecast.cli import main as cli_main
from pagecast.errors import PagecastError
from pagecast.importers import gem5, gem5_gpu_debug, gem5_run, gem5_stats
from pagecast.importers._gem5_proto import messages
from pagecast.trace import open_trace
from pagecast.trace.schema import FLAG_WRITE
from train_support import TINY_TRAIN

DATA = Path(__file__).parent / "data" / "gem5"
MB2 = 2 << 20


def _expected(header: dict, packets: list[dict]) -> dict[str, np.ndarray]:
    """What the importer must write for a decoded trace (numpy, from the reference decode)."""
    tick = np.array([p["tick"] for p in packets], np.uint64)
    addr = np.array([p["addr"] for p in packets], np.uint64)
    t0 = int(tick.min())
    freq = header["tick_freq"]
    if freq % 10**9 == 0:
        t = np.array([(p["tick"] - t0) // (freq // 10**9) for p in packets], np.int64)
    else:
        t = np.array([float(p["tick"] - t0) * (1e9 / freq) for p in packets]).astype(np.int64)
    g = np.unique(addr >> np.uint64(21)).astype(np.int64)
    run_start = g[np.r_[0, np.flatnonzero(np.diff(g) > 1) + 1]]
    gran = (addr >> np.uint64(21)).astype(np.int64)
    region = np.searchsorted(run_start, gran, side="right") - 1
    page = ((addr - (run_start[region].astype(np.uint64) << np.uint64(21))) >> np.uint64(12)).astype(np.int64)
    cmd = np.array([p["cmd"] for p in packets])
    return {
        "t_ns": t,
        "region": region,
        "page": page,
        "ip": np.array([p["pc"] for p in packets], np.uint64),
        "bytes": np.array([min(p["size"], 2**32 - 1) for p in packets], np.uint32),
        "flags": gem5.CMD_FLAGS[np.minimum(cmd, 255)],
        "t0": t0,
    }


def _check(out: Path, data: bytes) -> None:
    header, packets = decode_trace(data)
    exp = _expected(header, packets)
    t = open_trace(out)
    c = t.read()
    assert len(c["t_ns"]) == len(packets)
    for k in ("t_ns", "region", "page", "ip", "bytes", "flags"):
        assert np.array_equal(c[k], exp[k]), k
    assert t.meta["tick_freq"] == header["tick_freq"] and t.meta["t0_tick"] == exp["t0"]


@pytest.mark.parametrize("name,freq", [("tgen-simple-mem.trc", 10**12), ("tgen-simple-mem-2013.trc", 10**9)])
def test_real_gem5_traffic_gen_traces(tmp_path, name, freq):
    """gem5's own regression inputs (tests/gem5/memory, and its 2013 version): two packets each."""
    src = DATA / name
    info = gem5.import_trace(src, tmp_path / "t.parquet")
    assert info["rows"] == 2 and info["commands"] == {"ReadReq": 1, "WriteReq": 1} and info["tick_freq"] == freq
    c = open_trace(tmp_path / "t.parquet").read()
    assert c["t_ns"].tolist() == [0, 3000 * 10**9 // freq]  # ticks 1000 and 4000
    assert c["flags"].tolist() == [0, FLAG_WRITE] and c["bytes"].tolist() == [64, 64]
    _check(tmp_path / "t.parquet", src.read_bytes())
    # protobuf on the same bytes: the header message after the magic
    raw = src.read_bytes()
    n = raw[4]
    assert messages().PacketHeader.FromString(raw[5 : 5 + n]).tick_freq == freq


def _packets(n: int, seed: int = 0) -> list[Pkt]:
    rng = random.Random(seed)
    bases = [0x7F00_0000_0000, 0x7F00_0000_0000 + 3 * MB2, 0x5555_0000_0000]
    cmds = [1, 4, 13, 7, 10, 16]  # ReadReq WriteReq HardPFReq WritebackDirty CleanEvict WriteLineReq
    out = []
    tick = 5_000_000
    for i in range(n):
        tick += rng.choice([500, 1000, 1500, 0])
        pc = 0x400000 + 4 * rng.randrange(1 << 16) if rng.random() < 0.6 else None  # writebacks carry no pc
        out.append(
            Pkt(
                tick=tick,
                cmd=rng.choice(cmds),
                addr=rng.choice(bases) + rng.randrange(MB2 + MB2 // 2),
                size=rng.choice([64, 4, 8]),
                flags=rng.randrange(1 << 20),
                pkt_id=i,
                pc=pc,
            )
        )
    return out


@pytest.mark.parametrize("block", [1000, 7])
def test_commmonitor_gzip_trace_from_schema(tmp_path, monkeypatch, block):
    hdr = Hdr(obj_id="system.monitor", tick_freq=10**12, id_strings={0: "system.cpu.dcache", 1: "writebacks"})
    data = encode_trace(hdr, _packets(5000))
    src = tmp_path / "mem.trc.gz"
    src.write_bytes(data)
    # small blocks and batches: frames straddle blocks (block 7: shorter than one packet), several
    # batches, pc present on some packets
    monkeypatch.setattr(gem5, "BLOCK", block)
    monkeypatch.setattr(gem5, "BATCH", 700)
    batches = [len(b["tick"]) for b in gem5.iter_packets(src)[1]]
    assert sum(batches) == 5000 and len(batches) >= 8
    seen = []
    info = gem5.import_trace(src, tmp_path / "t.parquet", on_bytes=seen.append)
    assert info["rows"] == 5000 and sum(seen) == 2 * len(data)
    _check(tmp_path / "t.parquet", data)
    t = open_trace(tmp_path / "t.parquet")
    assert t.meta["gem5_id_strings"] == {"0": "system.cpu.dcache", "1": "writebacks"}
    assert set(t.meta["gem5_commands"]) == {
        "ReadReq",
        "WriteReq",
        "HardPFReq",
        "WritebackDirty",
        "CleanEvict",
        "WriteLineReq",
    }
    # the same stream without gzip reads the same
    raw = tmp_path / "mem.trc"
    raw.write_bytes(gzip.decompress(data))
    gem5.import_trace(raw, tmp_path / "r.parquet")
    assert np.array_equal(open_trace(tmp_path / "r.parquet").read()["page"], t.read()["page"])


def test_ticks_beyond_int64(tmp_path):
    big = (1 << 63) + 5000
    data = encode_trace(Hdr(), [Pkt(tick=big + t, cmd=1, addr=0x1000, size=8) for t in (0, 2000, 7000)])
    (tmp_path / "b.trc").write_bytes(data)
    gem5.import_trace(tmp_path / "b.trc", tmp_path / "t.parquet")
    assert open_trace(tmp_path / "t.parquet").read()["t_ns"].tolist() == [0, 2, 7]
    _check(tmp_path / "t.parquet", data)


def test_non_ghz_tick_frequency(tmp_path):
    data = encode_trace(Hdr(tick_freq=3 * 10**8), [Pkt(tick=t, cmd=1, addr=0x1000 * t, size=8) for t in (3, 6, 300)])
    (tmp_path / "f.trc.gz").write_bytes(data)
    gem5.import_trace(tmp_path / "f.trc.gz", tmp_path / "t.parquet")
    assert open_trace(tmp_path / "t.parquet").read()["t_ns"].tolist() == [0, 10, 990]


def _malformed_cases() -> list[tuple[str, bytes, str]]:
    hdr = Hdr()
    pk = [Pkt(tick=10 * i, cmd=1, addr=0x1000 * i, size=64) for i in range(1, 6)]
    good = encode_trace(hdr, pk, gz=False)
    head = b"gem5" + varint(len(hdr.encode())) + hdr.encode()
    no_addr = Pkt(tick=1, cmd=1, addr=0, size=4).encode().replace(b"\x18\x00", b"")
    return [
        ("wrong magic", b"gem6" + good[4:], "not a gem5 packet trace"),
        ("truncated gzip", gzip.compress(good)[:-12], "truncated gzip"),
        ("bad varint", head + varint(len(pk[0].encode())) + pk[0].encode() + b"\xff" * 6 + b"\x01", "packet 2 (byte"),
        ("truncated record", good[:-3], "packet 5 (byte"),
        ("missing field", head + varint(len(no_addr)) + no_addr, "packet 1: missing addr"),
        ("bad header", b"gem5" + varint(3) + b"\x0a\x01a", "header: missing tick_freq"),
        ("not protobuf", head + varint(2) + b"\x0f\xff", "packet 1: not a gem5 Packet"),
    ]


@pytest.mark.parametrize("case", _malformed_cases(), ids=lambda c: c[0])
def test_malformed_packet_traces(tmp_path, capsys, case):
    _, data, what = case
    src = tmp_path / "bad.trc.gz"
    src.write_bytes(data)
    assert cli_main(["import", "gem5", str(src), "-o", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.trc.gz" in err and what in err, err
    assert not (tmp_path / "o.parquet").exists() and not list(tmp_path.glob(".*tmp*"))


def test_fuzz_packet_traces(tmp_path):
    """Seeded mutations of a valid trace: a one-line error or exactly the reference decode's numbers."""
    base = gzip.decompress(encode_trace(Hdr(id_strings={3: "cpu"}), _packets(60, seed=1)))
    rng = random.Random(1234)
    outcomes = {"error": 0, "ok": 0}
    for i in range(250):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            pos = rng.randrange(len(b))
            if op < 0.5:
                b[pos] = rng.randrange(256)
            elif op < 0.7:
                del b[pos : pos + rng.randint(1, 8)]
            elif op < 0.85:
                b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
            else:
                del b[pos:]
        data = gzip.compress(bytes(b), mtime=0) if i % 2 else bytes(b)
        src, out = tmp_path / f"f{i}.trc", tmp_path / f"f{i}.parquet"
        src.write_bytes(data)
        try:
            gem5.import_trace(src, out)
        except PagecastError as e:
            assert "\n" not in str(e) and str(src) in str(e)
            assert not out.exists()
            outcomes["error"] += 1
            continue
        _check(out, data)  # the reference must decode it and agree on every number
        outcomes["ok"] += 1
    assert outcomes["error"] > 50 and outcomes["ok"] > 5, outcomes


def test_fuzz_header_strings_not_utf8(tmp_path):
    """Header strings (the object id, the id strings) that are not UTF-8: a one-line error
    naming the file, and no output or temporary file left behind."""
    rng = np.random.default_rng(26)
    base = gzip.decompress(encode_trace(Hdr(id_strings={3: "cpu", 7: "system.l2"}), _packets(20, seed=2)))
    for i in range(60):
        what, data = break_utf8(base, [b"system.monitor", b"cpu", b"system.l2"][i % 3], rng)
        src, out = tmp_path / f"u{i}.trc", tmp_path / f"u{i}.parquet"
        src.write_bytes(gzip.compress(data, mtime=0) if i % 2 else data)
        with pytest.raises(PagecastError) as e:
            gem5.import_trace(src, out)
        assert "\n" not in str(e.value) and str(src) in str(e.value) and "header" in str(e.value), what
        assert not out.exists() and not list(tmp_path.glob(".*.tmp")), what


# --- stats.txt ---------------------------------------------------------------------------

VIPER = DATA / "gpu-ruby-GPU_VIPER.stats.txt"

TWO_DUMPS = """
---------- Begin Simulation Statistics ----------
simSeconds                                   0.000100                       # Number of seconds simulated (Second)
simTicks                                    100000000                       # Number of ticks simulated (Tick)
system.cpu3.CUs0.vALUUtilization             41.250000                       # Percentage of active vector ALU threads in a wave (Ratio)
system.cpu3.CUs0.ldsBankConflictDist::samples          12                       # Number of bank conflicts per LDS memory packet (Count)
system.cpu3.CUs0.ldsBankConflictDist::mean     3.500000                       # Number of bank conflicts per LDS memory packet (Count)
system.cpu3.CUs0.ldsBankConflictDist::0-1            4     33.33%     33.33% # Number of bank conflicts per LDS memory packet (Count)
system.cpu3.CUs0.ldsBankAccesses                   96                       # Total number of LDS bank accesses (Count)
system.ruby.tcp_cntrl0.L1cache.m_demand_hits       1500                       # Number of cache demand hits (Unspecified)
system.ruby.tcp_cntrl0.L1cache.m_demand_misses      250                       # Number of cache demand misses (Unspecified)
system.l1_coalescer0.coalescedAccesses             800                       # Number of coalesced TLB accesses (Count)
system.l1_coalescer0.uncoalescedAccesses          3200                       # Number of uncoalesced TLB accesses (Count)
system.cpu3.CUs0.numALUInstsExecuted            nan                       # Number of dynamic non-GM memory insts executed (Count)
---------- End Simulation Statistics   ----------

---------- Begin Simulation Statistics ----------
simSeconds                                   0.000300                       # Number of seconds simulated (Second)
system.cpu3.CUs0.vALUUtilization             52.000000                       # Percentage of active vector ALU threads in a wave (Ratio)
system.ruby.tcp_cntrl0.L1cache.m_demand_hits       4100                       # Number of cache demand hits (Unspecified)
---------- End Simulation Statistics   ----------
"""


def test_real_gpu_stats_txt():
    """gem5's GPU regression reference stats (VIPER protocol, two compute units)."""
    dumps = gem5_stats.parse_stats(VIPER)
    assert len(dumps) == 1 and len(dumps[0]) > 3000
    s = gem5_stats.summarize(VIPER)["dumps"][0]
    assert s["sim_seconds"] == 0.000314 and s["sim_ticks"] == 314399500
    assert s["lds_bank_conflicts"]["system.cpu1.CUs0.lds_bank_access_cnt"] == 54
    assert s["lds_bank_conflicts"]["system.cpu1.CUs1.lds_bank_conflicts::mean"] == 7.833333
    assert s["coalescing"]["system.l1_coalescer0.uncoalesced_accesses"] == 778
    assert s["coalescing"]["system.sqc_coalescer.coalesced_accesses"] == 48
    assert s["alu_utilization"]["system.cpu1.CUs0.num_alu_insts_executed"] == 118
    assert s["l1_hits"]["system.ruby.tcp_cntrl1.L1cache.demand_hits"] == 0


def test_stats_several_dumps_and_info(tmp_path, capsys):
    st = tmp_path / "stats.txt"
    st.write_text(TWO_DUMPS)
    out = tmp_path / "s.parquet"
    assert cli_main(["import", "gem5", str(st), "--stats-only", "-o", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["rows"] == 0 and info["stats_dumps"] == 2
    meta = open_trace(out).meta["gem5_stats"]["dumps"]
    assert meta[0]["alu_utilization"] == {
        "system.cpu3.CUs0.vALUUtilization": 41.25,
        "system.cpu3.CUs0.numALUInstsExecuted": None,
    }
    assert meta[0]["l1_hits"]["system.ruby.tcp_cntrl0.L1cache.m_demand_hits"] == 1500
    assert meta[0]["coalescing"] == {
        "system.l1_coalescer0.coalescedAccesses": 800,
        "system.l1_coalescer0.uncoalescedAccesses": 3200,
    }
    assert meta[0]["lds_bank_conflicts"]["system.cpu3.CUs0.ldsBankConflictDist::samples"] == 12
    assert meta[1]["simSeconds"] == 0.0003 and meta[1]["l1_hits"] == {
        "system.ruby.tcp_cntrl0.L1cache.m_demand_hits": 4100
    }
    assert cli_main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    for needle in (
        "gem5 stats:",
        "dump 1",
        "system.ruby.tcp_cntrl0.L1cache.m_demand_hits = 4100",
        "system.l1_coalescer0.coalescedAccesses = 800",
        "ldsBankAccesses = 96",
        "vALUUtilization = 52.0",
    ):
        assert needle in text, needle


def test_info_on_imported_run_shows_real_stats(tmp_path, capsys):
    out = tmp_path / "t.parquet"
    assert cli_main(["import", "gem5", str(DATA / "tgen-simple-mem.trc"), "--stats", str(VIPER), "-o", str(out)]) == 0
    capsys.readouterr()
    assert cli_main(["info", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (
        d["rows"] == 2
        and d["meta"]["gem5_stats"]["dumps"][0]["lds_bank_conflicts"]["system.cpu1.CUs0.lds_bank_access_cnt"] == 54
    )
    assert cli_main(["info", str(out)]) == 0
    assert "system.l1_coalescer1.uncoalesced_accesses = 769" in capsys.readouterr().out


@pytest.mark.parametrize(
    "text,line,what",
    [
        (
            "---------- Begin Simulation Statistics ----------\nsimSeconds 0.1 # s\nsimTicks 12x # t\n",
            3,
            "non-numeric value '12x'",
        ),
        ("simSeconds 0.1 # s\n", 1, "outside a Begin/End"),
        ("---------- Begin Simulation Statistics ----------\nsimSeconds\n", 2, "without a value"),
    ],
)
def test_malformed_stats(tmp_path, capsys, text, line, what):
    st = tmp_path / "stats.txt"
    st.write_text(text)
    assert cli_main(["import", "gem5", str(st), "--stats-only", "-o", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"stats.txt:{line}:" in err and what in err, err


def test_fuzz_stats(tmp_path):
    base = VIPER.read_text().splitlines()[:400]
    rng = random.Random(7)
    for i in range(60):
        lines = list(base)
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(lines))
            s = lines[k]
            j = rng.randrange(len(s) + 1)
            lines[k] = s[:j] + rng.choice(["x", "", " ", "#", "-", "1e", "|"]) + s[j + rng.randint(0, 3) :]
        st = tmp_path / f"s{i}.txt"
        st.write_text("\n".join(lines) + "\n")
        try:
            dumps = gem5_stats.parse_stats(st)
        except PagecastError as e:
            assert "\n" not in str(e) and str(st) in str(e)
            continue
        # accepted: every value is the number written on its line
        ref = {}
        for ln in lines[1:]:
            f = ln.split("#", 1)[0].split()
            if len(f) >= 2 and f[1] != "|" and not ln.startswith("-"):
                v = float(f[1])
                ref[f[0]] = v if np.isfinite(v) else None
        assert {k: (None if v is None else float(v)) for k, v in dumps[0].items()} == ref


# --- GPU debug traces ----------------------------------------------------------------------

DEBUG = """\
gem5 Simulator System.  https://www.gem5.org
      0: system.cpu3.CUs0: CU0: WF[0][0]: wave[0] Executing inst: s_load_dwordx2 s[4:5], s[0:1], 0x0
   5000: system.cpu3.CUs0: CU0: WF[0][1]: Translation for addr 0x7fff80001000 from instruction flat_load_dword v1, v[2:3] sent!
   5000: system.cpu3.CUs0: CU0: WF[0][1]: Translation for addr 0x7fff80001040 from instruction flat_load_dword v1, v[2:3] sent!
   6000: system.cpu3.CUs1: CU1: WF[3][7]: Translation for addr 0x7fff80203000 from instruction global_store_dword v[2:3], v4, off sent!
   6500: system.cpu3.CUs1: CU1: WF[3][7]: gpuDynInst: 55, index 0, addr 0x12340 data req sent!
   7000: system.cpu3.CUs1: CU1: WF[3][7]: gpuDynInst: 56, addr 0x12380 data req sent!
   8000: system.l1_tlb1: TLB Lookup for vaddr 0x7fff80203000.
   9000: system.cpu3.CUs0: CU0: WF[1][2]: Translation for addr 0x7fff80002000 from instruction flat_atomic_add v1, v[2:3], v4 sent!
"""


def test_gpu_debug_trace_virtual_and_physical(tmp_path, capsys):
    src = tmp_path / "debug.txt"
    src.write_text(DEBUG)
    out = tmp_path / "v.parquet"
    assert cli_main(["import", "gem5", str(src), "-o", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["rows"] == 4 and info["writes"] == 2 and info["compute_units"] == 2
    c = open_trace(out).read()
    assert c["t_ns"].tolist() == [0, 0, 1, 4]
    assert c["tid"].tolist() == [1, 1, (1 << 16) | (3 << 8) | 7, 1 << 8 | 2]
    assert c["flags"].tolist() == [0, 0, FLAG_WRITE, FLAG_WRITE]
    assert c["page"].tolist() == [1, 1, 512 + 3, 2] and (c["region"] == 0).all()
    out2 = tmp_path / "p.parquet"
    assert (
        cli_main(
            ["import", "gem5", str(src), "-o", str(out2), "--gpu-addresses", "physical", "--tick-freq", str(10**9)]
        )
        == 0
    )
    c = open_trace(out2).read()
    assert c["t_ns"].tolist() == [0, 500] and c["page"].tolist() == [0x12, 0x12]


@pytest.mark.parametrize(
    "bad,what",
    [
        (
            "   10: system.cpu3.CUs0: CU0: WF[0][1]: Translation for addr 0x7fzz from instruction v_x sent!",
            "bad address",
        ),
        ("   1x: system.cpu3.CUs0: CU0: WF[0][1]: Translation for addr 0x7f from instruction v_x sent!", "bad tick"),
        (
            "   10: system.cpu3.CUs0: CUq: WF[0][1]: Translation for addr 0x7f from instruction v_x sent!",
            "bad CU number",
        ),
    ],
)
def test_gpu_debug_malformed(tmp_path, capsys, bad, what):
    src = tmp_path / "debug.txt"
    src.write_text(DEBUG + bad + "\n")
    assert cli_main(["import", "gem5", str(src), "-o", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "debug.txt:10:" in err and what in err, err
    (tmp_path / "none.txt").write_text("hello\n")
    assert cli_main(["import", "gem5", str(tmp_path / "none.txt"), "-o", str(tmp_path / "o.parquet")]) == 2
    assert "--debug-flags=GPUTLB" in capsys.readouterr().err


def test_detect():
    assert gem5_run.detect(DATA / "tgen-simple-mem.trc") == "packets"
    assert gem5_run.detect(VIPER) == "stats"


# --- the imported trace in the rest of the pipeline ------------------------------------------


def test_gem5_trace_simulates_heatmaps_and_trains(tmp_path, capsys):
    rng = random.Random(5)
    pk = []
    for i in range(6000):  # a strided sweep over two arrays, as a CommMonitor below the L1 would see
        base = 0x7F00_0000_0000 if i % 2 else 0x7F00_0040_0000
        pk.append(
            Pkt(
                tick=1000 * i,
                cmd=1 if rng.random() < 0.8 else 4,
                addr=base + 4096 * ((i // 2) % 300) + 64,
                size=64,
                pc=0x401000 + (i % 7),
            )
        )
    src = tmp_path / "mem.trc.gz"
    src.write_bytes(encode_trace(Hdr(), pk))
    tr = tmp_path / "t.parquet"
    assert cli_main(["import", "gem5", str(src), "-o", str(tr)]) == 0
    capsys.readouterr()
    assert cli_main(["simulate", str(tr), "--capacity", "100", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["faults"] >= 600  # 600 distinct pages, each missed at least once
    assert cli_main(["heatmap", str(tr), "-o", str(tmp_path / "h.png"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["events"] == 6000
    m = tmp_path / "m.pt"
    assert cli_main(["train", str(tr), "-o", str(m), *TINY_TRAIN]) == 0
    assert m.exists()


def _debug_reference(text: str) -> list[tuple[int, int, int, bool]]:
    """(tick, tid, vaddr, write) per GPUTLB translation line, by splitting strings (no regex)."""
    rows = []
    for ln in text.splitlines():
        body = ln.strip()
        if " Translation for addr " not in body or not body.endswith(" sent!"):
            continue
        parts = body.split(": ", 4)
        if len(parts) != 5 or not parts[2].startswith("CU") or not parts[3].startswith("WF["):
            continue
        if not parts[4].startswith("Translation for addr ") or " from instruction " not in parts[4]:
            continue
        ids = parts[3][3:-1].split("][")
        addr_txt, instr = parts[4][len("Translation for addr ") :].split(" from instruction ", 1)
        if (
            not all(x.isdigit() for x in [parts[0], parts[2][2:], *ids])
            or len(ids) != 2
            or " " in addr_txt
            or not parts[1]
            or any(ch.isspace() for ch in parts[1])
        ):
            continue  # gem5 prints bare numbers (%d), a hex address and an object name without spaces
        try:
            addr = int(addr_txt, 16)
        except ValueError:
            continue
        tick, cu, (simd, slot) = int(parts[0]), int(parts[2][2:]), (int(x) for x in ids)
        words = instr[: -len(" sent!")].split()
        mnem = words[0].lower() if words else ""
        write = any(w in mnem for w in ("store", "atomic", "_st_", "write")) or mnem.startswith("st")
        rows.append((tick, cu << 16 | simd << 8 | slot, addr, write))
    return rows


def test_fuzz_gpu_debug_traces(tmp_path):
    rng = random.Random(11)
    lines = [
        f"{1000 * i:7d}: system.cpu3.CUs{i % 4}: CU{i % 4}: WF[{i % 3}][{i % 5}]: Translation for addr "
        f"{0x7FFF_8000_0000 + 4096 * (i % 50) + 4 * i:#x} from instruction "
        f"{'flat_store_dword' if i % 4 == 0 else 'flat_load_dword'} v1, v[2:3] sent!"
        for i in range(120)
    ]
    base = "gem5 Simulator System.\n" + "\n".join(lines) + "\n"
    outcomes = {"error": 0, "ok": 0}
    for i in range(120):
        s = list(base)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(s))
            s[pos : pos + rng.randint(0, 3)] = rng.choice(["", "x", "0", "9", " ", "]", ":", "f", "\n"])
        text = "".join(s)
        src, out = tmp_path / f"d{i}.txt", tmp_path / f"d{i}.parquet"
        src.write_text(text)
        try:
            gem5_gpu_debug.import_trace(src, out)
        except PagecastError as e:
            assert "\n" not in str(e) and str(src) in str(e)
            assert not out.exists()
            outcomes["error"] += 1
            continue
        ref = _debug_reference(text)
        c = open_trace(out).read()
        assert len(c["t_ns"]) == len(ref)
        t0 = min(r[0] for r in ref)
        assert c["t_ns"].tolist() == [(r[0] - t0) // 1000 for r in ref]
        assert c["tid"].tolist() == [r[1] for r in ref]
        assert ((c["flags"] & FLAG_WRITE) > 0).tolist() == [r[3] for r in ref]
        t = open_trace(out)
        base_addr = np.array([r.base for r in t.regions], np.uint64)[c["region"]]
        assert (base_addr + (c["page"].astype(np.uint64) << np.uint64(12))).tolist() == [r[2] & ~0xFFF for r in ref]
        outcomes["ok"] += 1
    assert outcomes["ok"] > 20, outcomes


def test_m5out_directory(tmp_path, capsys):
    m5 = tmp_path / "m5out"
    m5.mkdir()
    (m5 / "stats.txt").write_text(TWO_DUMPS)
    out = tmp_path / "s.parquet"
    assert cli_main(["import", "gem5", str(m5), "-o", str(out), "--json"]) == 0  # no trace: the stats alone
    assert json.loads(capsys.readouterr().out)["stats_dumps"] == 2 and open_trace(out).num_rows == 0
    (m5 / "mem.trc.gz").write_bytes(encode_trace(Hdr(), _packets(50)))
    assert cli_main(["import", "gem5", str(m5), "-o", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["rows"] == 50 and info["stats_dumps"] == 2
    assert len(open_trace(out).meta["gem5_stats"]["dumps"]) == 2
    (m5 / "l2.ptrc.gz").write_bytes(b"")
    assert cli_main(["import", "gem5", str(m5), "-o", str(out)]) == 2
    assert "several packet traces (l2.ptrc.gz, mem.trc.gz)" in capsys.readouterr().err
