"""CUPTI record stream → pagecast trace.

CUPTI cannot run without a GPU. ``cupti_harness`` runs the collector's own conversion
code (``cupti_collector.c``, included whole) on hand-built CUPTI activity records and
writes the stream the collector writes in a real run; these tests check every record's
fate in the trace, and the converter's error paths on hand-made streams.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from pagecast.collect.cupti_records import REC_DTYPE, convert_dir, read_stream
from pagecast.errors import PagecastError
from pagecast.trace import Kind, open_trace
from pagecast.trace.schema import FLAG_WRITE, subkind

pytestmark = pytest.mark.cuda_double

BASE, DEV_BASE = 0x7F0000000000, 0x7F1000000000


@pytest.fixture(scope="module")
def harness_dir(tmp_path_factory):
    from _cuda_double import build_cupti_harness

    try:
        exe = build_cupti_harness()
    except PagecastError as e:
        pytest.skip(str(e))
    d = tmp_path_factory.mktemp("cupti")
    subprocess.run([str(exe)], env={**os.environ, "PAGECAST_CUDA_OUT": str(d)}, check=True, timeout=60)
    return d


def test_collector_records_become_the_right_trace_rows(harness_dir, tmp_path):
    out = tmp_path / "t.parquet"
    s = convert_dir(harness_dir, out, command=["./vector_add"])
    assert s["dropped_records"] == 3 and s["kernels"] == 3 and s["regions"] == 3 and s["unmatched_addresses"] == 1
    t = open_trace(out)
    assert t.source == "cuda" and t.meta["command"] == ["./vector_add"] and t.meta["skipped_dtod_records"] == 1
    # regions: pinned host memory is not a region; the managed base freed and reused is a new region
    assert [(r.kind, r.order, r.base, r.length, r.created_ns, r.freed_ns) for r in t.regions] == [
        ("managed", 0, BASE, 8 << 20, 0, 3000),
        ("device", 0, DEV_BASE, 1 << 20, 100, -1),
        ("managed", 1, BASE, 4 << 20, 3100, -1),
    ]
    d = t.read()
    rows = list(
        zip(
            d["t_ns"].tolist(),
            d["kind"].tolist(),
            d["region"].tolist(),
            d["page"].tolist(),
            d["flags"].tolist(),
            d["bytes"].tolist(),
            d["tid"].tolist(),
            d["ip"].tolist(),
        )
    )
    K = Kind
    assert rows == [
        (900, K.KERNEL, -1, 0, 0, 0, 7, 0),
        (1000, K.FAULT_GPU, 0, 5, (2 << 4) | FLAG_WRITE, 0, 7, 0),  # write
        (1050, K.MIGRATE_HTOD, 0, 5, 2 << 4, 65536, 7, 0),  # coherence (demand)
        (1100, K.FAULT_GPU, 0, 9, 1 << 4, 0, 7, 0),  # read
        (1200, K.MIGRATE_HTOD, 0, 16, 3 << 4, 1 << 20, 7, 0),  # driver prefetch
        (1300, K.FAULT_GPU, 0, 20, (3 << 4) | FLAG_WRITE, 0, 7, 0),  # atomic counts as a write
        (1600, K.KERNEL, -1, 0, 0, 0, 7, 1),
        (2000, K.MIGRATE_DTOH, 0, 512, 4 << 4, 2 << 20, 0, 0),  # eviction
        (2100, K.THRASHING, 0, 1, 0, 0, 0, 0),
        (2200, K.THROTTLING, 0, 2, 0, 0, 0, 0),
        (2300, K.CPU_FAULT, 0, 3, 0, 0, 0, 0),
        (2400, K.REMOTE_MAP, 1, 1, 2 << 4, 0, 0, 0),
        (2600, K.KERNEL, -1, 0, 0, 0, 8, 2),
        (3200, K.FAULT_GPU, 2, 1, 1 << 4, 0, 9, 0),  # after the reuse: the new allocation
        (3300, K.FAULT_GPU, -1, 1, 1 << 4, 0, 9, 0),  # no allocation: raw page
    ]
    assert subkind(d["flags"][2]) == 2
    assert [k["name"] for k in t.kernels] == ["vector_add_uvm(float*, float*, float*, int)"] * 2 + [
        "weird name with breaks"
    ]
    assert [(k["start_ns"], k["end_ns"], k["correlation"], k["grid_x"]) for k in t.kernels] == [
        (900, 1500, 42, 1024),
        (1600, 1900, 43, 1024),
        (2600, 2700, 44, 1024),
    ]


def test_the_demand_stream_feeds_schedule_and_injector_naming(harness_dir, tmp_path):
    """GPU faults are demand rows; their regions' (kind, order) is what the injector file names."""
    from pagecast.cuda.injector import schedule_to_lines
    from pagecast.trace.schedule import Schedule
    from pagecast.trace.schema import DEMAND_KINDS

    out = tmp_path / "t.parquet"
    convert_dir(harness_dir, out)
    t = open_trace(out)
    d = t.read(["kind", "region", "page"])
    demand = np.isin(d["kind"], [int(k) for k in DEMAND_KINDS])
    assert int(demand.sum()) == 5
    reg, page = d["region"][demand], d["page"][demand]
    ok = reg >= 0
    sched = Schedule(np.arange(ok.sum()), np.zeros(ok.sum()), reg[ok], page[ok], np.ones(ok.sum()), regions=t.regions)
    lines, stats = schedule_to_lines(sched)
    assert lines == ["managed 0 5 1", "managed 0 9 1", "managed 0 20 1", "managed 1 1 1"]


def _stream(records: list[tuple], tmp_path, name="cupti.1.bin"):
    arr = np.zeros(len(records), REC_DTYPE)
    for i, r in enumerate(records):
        arr[i] = r
    p = tmp_path / name
    arr.tofile(p)
    return p


def test_interposer_allocations_used_when_cupti_has_none(tmp_path):
    # header: CUPTI clock 10_000 taken together with CLOCK_MONOTONIC 500
    _stream([(0, 0, 0, 0, 10_000, 500, 0, 1, 1, 0), (1, 4, 2, 3, 10_600, 10_640, 0x5000_2000, 1, 0, 0)], tmp_path)
    (tmp_path / "allocs.1.csv").write_text(
        "id,kind,order,base,size,created_ns,freed_ns\n0,device,0,0x4000000,4096,510,-1\n"
        "1,managed,0,0x50000000,65536,550,1200\n"
    )
    s = convert_dir(tmp_path, tmp_path / "t.parquet")
    assert s["allocations_from"] == "interposer"
    t = open_trace(tmp_path / "t.parquet")
    assert [(r.kind, r.order, r.created_ns, r.freed_ns) for r in t.regions] == [
        ("device", 0, 10, -1),
        ("managed", 0, 50, 700),
    ]
    d = t.read()
    assert (d["region"].tolist(), d["page"].tolist(), d["t_ns"].tolist()) == ([1], [2], [600])
    assert d["flags"][0] == (2 << 4) | FLAG_WRITE


@pytest.mark.parametrize(
    "records, message",
    [
        ([(1, 4, 0, 0, 1, 1, 0, 1, 0, 0)], "bad or missing header"),
        ([(0, 0, 0, 0, 1, 1, 0, 7, 0, 0)], "CUPTI record stream version 7 not supported (this pagecast reads 1..2)"),
        ([(0, 0, 0, 0, 1, 1, 0, 2, 0, 0)], "not a pagecast CUPTI record stream (bad magic in the header record)"),
        ([(0, 0, 0, 0, 1, 1, 0, 1, 0, 0), (9, 0, 0, 0, 1, 1, 0, 1, 0, 0)], "record 1 (byte 48) has unknown type 9"),
    ],
)
def test_bad_streams_are_reported(tmp_path, records, message):
    p = _stream(records, tmp_path)
    with pytest.raises(PagecastError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        read_stream(p)
    assert str(p) in str(e.value)


def test_truncated_stream_keeps_whole_records(tmp_path):
    p = _stream([(0, 0, 0, 0, 100, 1, 0, 1, 0, 0), (1, 4, 1, 0, 150, 160, 0x9000, 1, 0, 0)], tmp_path)
    with open(p, "ab") as f:
        f.write(b"\x01" * 20)  # a crash mid-record
    s = read_stream(p)
    assert len(s.records) == 2 and s.truncated_bytes == 20


def test_no_stream_and_bad_names_file(tmp_path):
    with pytest.raises(PagecastError, match="no CUPTI record stream"):
        convert_dir(tmp_path, tmp_path / "t.parquet")
    p = _stream([(0, 0, 0, 0, 100, 1, 0, 1, 0, 0)], tmp_path)
    (tmp_path / "kernels.1.tsv").write_text("0\tok\nnot-a-number name\n")
    with pytest.raises(PagecastError, match=r"kernels\.1\.tsv:2: expected"):
        read_stream(p)


def test_cli_convert_json(harness_dir, tmp_path, capsys):
    from pagecast.cli import main

    assert main(["cuda", "convert", str(harness_dir), "-o", str(tmp_path / "t.parquet"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["rows_by_kind"]["fault_gpu"] == 5 and s["rows"] == 15
    assert main(["cuda", "convert", str(tmp_path / "nope"), "-o", str(tmp_path / "x.parquet")]) == 2


def test_replay_schedule_lists_demanded_gpu_pages_once_in_order(harness_dir, tmp_path):
    from pagecast.cuda.injector import replay_schedule, schedule_to_lines

    out = tmp_path / "t.parquet"
    convert_dir(harness_dir, out)
    s = replay_schedule(out)
    assert list(zip(s.region.tolist(), s.page.tolist(), s.t_ns.tolist())) == [
        (0, 5, 1000),
        (0, 9, 1100),
        (0, 20, 1300),
        (2, 1, 3200),
    ]
    assert schedule_to_lines(s)[0] == ["managed 0 5 1", "managed 0 9 1", "managed 0 20 1", "managed 1 1 1"]


def test_version_1_and_2_streams_read_the_same(tmp_path):
    """Version 2 adds the magic to the header record; version 1 streams (no magic) still read."""
    from pagecast.collect.cupti_records import MAGIC

    um = (1, 4, 2, 3, 10_600, 10_640, 0x5000_2000, 1, 0, 0)
    got = []
    for version, magic in ((1, 0), (2, MAGIC)):
        d = tmp_path / f"v{version}"
        d.mkdir()
        _stream([(0, 0, 0, 0, 10_000, 500, 0, version, 1, magic), um], d)
        (d / "allocs.1.csv").write_text(
            "id,kind,order,base,size,created_ns,freed_ns\n0,managed,0,0x50000000,65536,550,1200\n"
        )
        convert_dir(d, d / "t.parquet")
        got.append({k: v.tolist() for k, v in open_trace(d / "t.parquet").read().items()})
    assert got[0] == got[1] and got[0]["page"] == [2]
