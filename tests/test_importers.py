"""Importers: small files written here with known contents, malformed input, real samples."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from pagecast.cli import main as cli_main
from pagecast.errors import PagecastError
from pagecast.importers import ai4mem, champsim, lackey, memai
from pagecast.importers.ai4mem_predictions import attach_triggers, read_predictions_csv, write_predictions_csv
from pagecast.trace import Kind, Region, open_trace
from pagecast.trace.schema import FLAG_WRITE

SHARED = Path(os.environ.get("PAGECAST_SHARED_DIR", Path(__file__).resolve().parents[1].parent / "shared"))
AI4MEM = SHARED / "data" / "ai4mem"

MB2 = 2 << 20
A, B = 0x7FFF_A000_0000, 0x7FFF_B000_0000  # two 2 MiB-aligned allocations

AI4MEM_CSV = f"""\
# ---- snapshot @ 2025-12-14 20:59:03 ----
Category,EventName,Address,StartTime_ns,EndTime_ns,Duration_ns,Host_Phys_Info,Mapped_File
KERNEL,k(float*, int, float),7,0x100000,1000,1500,500,1024,1,1,1024,1,1,0,0,16,127401984,0
UVM,GPU_PAGE_FAULT,{A + 0x3000:#x},1100,,,NOT_RESIDENT,
UVM,MIGRATE_HtoD,{A + 0x3000:#x},1200,,,NOT_RESIDENT,UNKNOWN_REGION
UVM,MIGRATE_HtoD,{A + MB2 + 0x1000:#x},1150,,,NOT_RESIDENT,
# ---- snapshot @ 2025-12-14 20:59:13 ----
Category,EventName,Address,StartTime_ns,EndTime_ns,Duration_ns,Host_Phys_Info,Mapped_File
UVM,MIGRATE_HtoD,{A + 0x3000:#x},1200,,,NOT_RESIDENT,UNKNOWN_REGION
UVM,GPU_PAGE_FAULT,{B + 0x5000:#x},1300,,,NOT_RESIDENT,
UVM,MIGRATE_DtoH,{B + 0x5000:#x},1400,,,NOT_RESIDENT,
"""


def test_ai4mem_small(tmp_path):
    src = tmp_path / "u.csv"
    src.write_text(AI4MEM_CSV)
    info = ai4mem.import_trace(src, tmp_path / "u.parquet")
    assert info["duplicates_dropped"] == 1 and info["snapshots"] == 2
    t = open_trace(tmp_path / "u.parquet")
    c = t.read()
    assert [Kind(k).name for k in c["kind"]] == [
        "KERNEL",
        "FAULT_GPU",
        "MIGRATE_HTOD",
        "MIGRATE_HTOD",
        "FAULT_GPU",
        "MIGRATE_DTOH",
    ]
    assert c["t_ns"].tolist() == [0, 100, 150, 200, 300, 400]
    assert [(r.base, r.length) for r in t.regions] == [(A, 2 * MB2), (B, MB2)]
    assert c["region"].tolist() == [-1, 0, 0, 0, 1, 1]
    assert c["page"].tolist()[1:] == [3, 512 + 1, 3, 5, 5]
    assert t.kernels[0]["name"] == "k(float*, int, float)" and t.kernels[0]["end_ns"] == 500
    assert c["bytes"].tolist() == [0, 0, 4096, 4096, 0, 4096]


@pytest.mark.parametrize(
    "bad,line,what",
    [
        ("UVM,GPU_PAGE_FAULT,0x1000,12,,,X\n", 2, "8 fields"),
        ("UVM,GPU_PAGE_FAULT,1000,12,,,X,\n", 2, "Address"),
        ("UVM,GPU_PAGE_FAULT,0x1000,1x2,,,X,\n", 2, "StartTime_ns"),
        ("UVM,BOGUS,0x1000,12,,,X,\n", 2, "unknown UVM event"),
        ("hello\n", 2, "not an AI4Mem"),
        ("KERNEL,k(int),1,2\n", 2, "start,end,duration"),
    ],
)
def test_ai4mem_malformed(tmp_path, bad, line, what):
    src = tmp_path / "bad.csv"
    src.write_text("Category,EventName,Address,StartTime_ns,EndTime_ns,Duration_ns,Host_Phys_Info,Mapped_File\n" + bad)
    with pytest.raises(PagecastError) as e:
        ai4mem.import_trace(src, tmp_path / "o.parquet")
    assert f"bad.csv:{line}:" in str(e.value) and what in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.skipif(not (AI4MEM / "uvm_monitor_result.csv").exists(), reason="shared AI4Mem samples absent")
def test_ai4mem_real_sample(tmp_path, capsys):
    out = tmp_path / "uvm.parquet"
    assert cli_main(["import", "ai4mem", str(AI4MEM / "uvm_monitor_result.csv"), "-o", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kinds"] == {"FAULT_GPU": 115, "MIGRATE_HTOD": 7140, "KERNEL": 20}
    t = open_trace(out)
    c = t.read()
    uvm = c["kind"] != Kind.KERNEL
    assert (c["region"][uvm] >= 0).all()
    lengths = np.array([t.regions[r].pages for r in c["region"][uvm]])
    assert (c["page"][uvm] < lengths).all() and (c["page"][uvm] >= 0).all()
    assert len(t.regions) == 3 and all(r.kind == "managed" for r in t.regions)
    assert np.all(np.diff(c["t_ns"]) >= 0)


@pytest.mark.skipif(not (AI4MEM / "total_data.csv").exists(), reason="shared AI4Mem samples absent")
def test_ai4mem_accumulated_sample(tmp_path):
    info = ai4mem.import_trace(AI4MEM / "total_data.csv", tmp_path / "t.parquet")
    assert info["snapshots"] == 5 and info["kernels"] == 20
    assert info["duplicates_dropped"] > 0


def test_predictions_both_headers_round_trip(tmp_path):
    regions = [
        Region(id=0, name="a", kind="managed", base=A, length=4 * MB2),
        Region(id=1, name="b", kind="managed", base=B, length=MB2),
    ]
    (tmp_path / "p1.csv").write_text(
        f"trigger_time_ns,page_addr,page_idx,score\n10,{A + 0x5000:#x},5,0.5\n20,{B:#x},0,0.25\n"
    )
    (tmp_path / "p2.csv").write_text(
        f"Timestamp_ns,Prefetch_Address,Confidence\n10,{A + 0x5000:#x},0.5\n20,{B:#x},0.25\n30,0x10,1\n"
    )
    s1 = read_predictions_csv(tmp_path / "p1.csv", regions)
    s2 = read_predictions_csv(tmp_path / "p2.csv", regions)
    assert s1.region.tolist() == [0, 1] and s1.page.tolist() == [5, 0] and s1.score.tolist() == [0.5, 0.25]
    assert s2.region.tolist() == [0, 1, -1] and s2.t_ns.tolist() == [10, 20, 30]
    out = write_predictions_csv(s1, tmp_path / "w.csv", regions)
    assert out.read_text().splitlines()[1] == f"10,{A + 0x5000:#x},5,0.5"
    back = read_predictions_csv(out, regions)
    assert back.page.tolist() == s1.page.tolist() and back.region.tolist() == s1.region.tolist()


def test_predictions_triggers_and_errors(tmp_path):
    src = tmp_path / "u.csv"
    src.write_text(AI4MEM_CSV)
    ai4mem.import_trace(src, tmp_path / "u.parquet")
    t = open_trace(tmp_path / "u.parquet")
    (tmp_path / "p.csv").write_text(
        f"Timestamp_ns,Prefetch_Address,Confidence\n1160,{B + 0x7000:#x},0.9\n1350,{A:#x},0.1\n"
    )
    s = attach_triggers(read_predictions_csv(tmp_path / "p.csv", t.regions), t)
    # demand stream: faults at 100 and 300 (t0 = 1000); 1160 -> after demand 0, 1350 -> after demand 1
    assert s.trigger.tolist() == [0, 1] and s.page.tolist() == [7, 0] and s.region.tolist() == [1, 0]
    (tmp_path / "bad.csv").write_text("Timestamp_ns,Prefetch_Address,Confidence\n1,0x10,0.5\n2,zz,0.5\n")
    with pytest.raises(PagecastError, match=r"bad.csv:3: bad address"):
        read_predictions_csv(tmp_path / "bad.csv")
    (tmp_path / "sc.csv").write_text("trigger_time_ns,page_addr,page_idx,score\n1,0x10,0,0.5\n2,0x20,1,high\n")
    with pytest.raises(PagecastError, match=r"sc.csv:3: bad score"):
        read_predictions_csv(tmp_path / "sc.csv")
    (tmp_path / "hdr.csv").write_text("a,b\n")
    with pytest.raises(PagecastError, match=r"hdr.csv:1: unknown predictions header"):
        read_predictions_csv(tmp_path / "hdr.csv")


def test_lackey(tmp_path):
    base = 0x1FFE_FFF0_00
    text = (
        "==123== Lackey, an example Valgrind tool\n"
        + "\n".join(
            [
                "I  04010ec0,3",
                f" S {base + 8:x},8",
                "I  04010ec3,5",
                f" L {base + 0x2000:x},4",
                f" M {base + 0x1000:x},8",
                "I  04010ec8,2",
                f" L {0x4000_0000 + 0x10:08x},1",
            ]
        )
        + "\n==123== done\n"
    )
    src = tmp_path / "l.txt"
    src.write_text(text)
    info = lackey.import_trace(src, tmp_path / "l.parquet")
    assert info["instructions"] == 3 and info["rows"] == 4 and info["loads"] == 3 and info["stores"] == 2
    t = open_trace(tmp_path / "l.parquet")
    c = t.read()
    assert c["t_ns"].tolist() == [1, 2, 2, 3]
    assert c["flags"].tolist() == [FLAG_WRITE, 0, FLAG_WRITE, 0]
    assert c["bytes"].tolist() == [8, 4, 8, 1]
    r0 = t.regions[c["region"][0]]
    assert c["page"].tolist()[:3] == [
        (base + 8 - r0.base) >> 12,
        (base + 0x2000 - r0.base) >> 12,
        (base + 0x1000 - r0.base) >> 12,
    ]
    assert c["region"][3] != c["region"][0]
    src.write_text("I  04010ec0,3\n X 1234,8\n")
    with pytest.raises(PagecastError, match=r"l.txt:2: not a lackey"):
        lackey.import_trace(src, tmp_path / "x.parquet")
    src.write_text("I  04010ec0,3\n L 12g4,8\n")
    with pytest.raises(PagecastError, match=r"l.txt:2: bad address"):
        lackey.import_trace(src, tmp_path / "x.parquet")


def test_champsim_loads_and_prefetches(tmp_path):
    loads = tmp_path / "loads.txt"
    loads.write_text(
        "\n".join(
            f"{10 * i}, {100 + 7 * i}, {0x7F00_0000_0000 + 4096 * (i % 5) + 64:x}, 401a{i:02x}, {i % 2}"
            for i in range(20)
        )
        + "\n"
    )
    assert champsim.import_trace(loads, tmp_path / "c.parquet", cpu_ghz=3.5)["rows"] == 20
    t = open_trace(tmp_path / "c.parquet")
    c = t.read()
    assert c["page"].tolist() == [i % 5 for i in range(20)]
    assert c["ip"].tolist() == [0x401A00 + i for i in range(20)]
    assert c["t_ns"].tolist() == [int(7 * i / 3.5) for i in range(20)]
    assert ((c["flags"] >> 4) == np.arange(20) % 2).all()
    pf = tmp_path / "pf.txt"
    pf.write_text(f"5 {0x7F00_0000_0000 + 4096 * 3:x}\n30 {0x7F00_0000_0000 + 4096 * 4:x}\n")
    s = champsim.read_prefetch_file(pf, t, loads)
    # load instr_ids 0, 10, 20, 30, ...: instr 5 follows load 0, instr 30 is load 3
    assert s.trigger.tolist() == [0, 3] and s.page.tolist() == [3, 4] and s.t_ns.tolist() == [0, 6]
    loads.write_text("1, 2, 3, 4\n")
    with pytest.raises(PagecastError, match=r"loads.txt:1: .*5 fields"):
        champsim.import_trace(loads, tmp_path / "x.parquet")


def test_memai_feather(tmp_path):
    n = 1000
    ts = 5_000 + np.arange(n, dtype=np.int64) * 30
    vaddr = (0x5555_0000_0000 + (np.arange(n) % 64) * 4096 + 8).astype(np.uint64)
    phase = np.repeat([0, 1, 0], [300, 300, 400]).astype(np.int32)
    feather.write_feather(
        pa.table({"Timestamp": ts, "Vaddr": vaddr, "Phase": phase, "Instrs": np.arange(n) * 3}),
        tmp_path / "m.feather",
        chunksize=256,
    )
    info = memai.import_trace(tmp_path / "m.feather", tmp_path / "m.parquet")
    assert info["rows"] == n and info["phases"] == 3
    t = open_trace(tmp_path / "m.parquet")
    c = t.read()
    assert c["t_ns"].tolist() == (ts - 5000).tolist()
    assert c["page"].tolist() == (np.arange(n) % 64).tolist()
    assert [k["name"] for k in t.kernels] == ["phase 0", "phase 1", "phase 0"]
    assert t.kernels[1]["start_ns"] == 300 * 30
    feather.write_feather(pa.table({"Timestamp": ts, "Vaddr": vaddr}), tmp_path / "bad.feather")
    with pytest.raises(PagecastError, match=r"bad.feather: MemAI trace lacks columns \['Phase', 'Instrs'\]"):
        memai.import_trace(tmp_path / "bad.feather", tmp_path / "x.parquet")
    (tmp_path / "junk.feather").write_text("nope")
    with pytest.raises(PagecastError, match="not a feather"):
        memai.import_trace(tmp_path / "junk.feather", tmp_path / "x.parquet")


def test_import_cli_missing_file(tmp_path, capsys):
    assert cli_main(["import", "lackey", str(tmp_path / "none.txt"), "-o", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none.txt: no such file" in err[0]
